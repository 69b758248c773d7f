"""The HTTP rows of scripts/bench (issue 11): a ZarrDaf v2 directory (consolidated `.zmetadata`) with a 1 GiB dense
Float32 matrix (one uncompressed chunk) and 10,000 small vectors, served by nginx on 127.0.0.1, mounted by URL:
  (a) first read of the matrix through a fresh mount (FilesDaf view) vs `curl` of the chunk's URL to /dev/null;
  (b) re-read of it through the same mount vs a warm native read of the chunk file (page cache);
  (c) mount time of the remote data set (10,000 properties), until usable.

    python scripts/bench_http.py [--mib N] [--props N] [--rounds R]   (alone: builds and measures only these rows)
"""
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "interop"))
from http_serve import nginx  # noqa: E402  (nginx on 127.0.0.1 with a generated config, as the tests start it)

CELLS = 65536
CHUNK = "matrices/cell/gene/fraction/0.0"


def make_remote_zarr(bench, path, mib, props):
    """A seed ZarrDaf (Zarr v2) directory with a consolidated `.zmetadata`, as a web server would publish it: a
    `mib` MiB Float32 matrix cell x gene in one chunk, and `props` Float32 vectors on a 100-entry axis."""
    if os.path.exists(os.path.join(path, ".zmetadata")):
        return os.path.join(path, CHUNK)
    genes = mib * 2**20 // (4 * CELLS)
    meta = {}

    def write(key, data):
        full = os.path.join(path, key)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(data)

    def doc(key, value):
        meta[key] = value
        write(key, json.dumps(value, separators=(",", ":")).encode())

    def group(p):
        doc((p + "/" if p else "") + ".zgroup", {"zarr_format": 2})
        doc((p + "/" if p else "") + ".zattrs", {})

    def array(p, dtype, shape, data, strings=False):
        doc(p + "/.zarray", json.loads(bench.zarray(dtype, shape, strings)))
        doc(p + "/.zattrs", {})
        write(p + "/" + ".".join("0" * len(shape)), data)

    bench.zarr_skeleton(group, array, [("cell", CELLS), ("gene", genes), ("item", 100)])
    rng = np.random.default_rng(11)
    for i in range(props):
        array(f"vectors/item/p{i}", "<f4", [100], rng.random(100, dtype=np.float32).tobytes())
    doc("matrices/cell/gene/fraction/.zarray", json.loads(bench.zarray("<f4", [genes, CELLS])))
    doc("matrices/cell/gene/fraction/.zattrs", {})
    chunk = os.path.join(path, CHUNK)
    # The bench's FilesDaf matrix has the same layout (cell x gene, column-major): a hard link to it costs no disk.
    matrix = os.path.join(os.path.dirname(os.path.dirname(path)), "big.daf", "matrices/cell/gene/fraction.data")
    if os.path.isfile(matrix) and os.path.getsize(matrix) == genes * CELLS * 4:
        os.link(matrix, chunk)
    else:
        with open(chunk + ".tmp", "wb") as f:
            for _ in range(genes):
                f.write(rng.random(CELLS, dtype=np.float32).tobytes())
        os.rename(chunk + ".tmp", chunk)
    # Last: its presence says the directory is complete.
    write(".zmetadata", json.dumps({"metadata": dict(sorted(meta.items())), "zarr_consolidated_format": 1},
                                   separators=(",", ":")).encode())
    return chunk


def curl(url):
    start = time.perf_counter()
    subprocess.run(["curl", "-sSf", "-o", "/dev/null", url], check=True)
    return time.perf_counter() - start


def http_rows(bench, work, rounds, mib, props, row, rows):
    """Measures the rows with scripts/bench.py's helpers (`bench`: Mount, dd, recache, interleave)."""
    name = f"remote{mib}m{props}.daf.zarr"
    chunk = make_remote_zarr(bench, os.path.join(work, "http", name), mib, props)
    size = os.path.getsize(chunk)
    bench.recache(chunk)  # nginx serves from the page cache, as curl's side does
    with nginx(os.path.join(work, "http")) as base:
        url = f"{base}/{name}"
        curl(f"{url}/{CHUNK}")
        firsts, rereads, curls, natives, mounts = [], [], [], [], []
        for r in range(rounds):  # a fresh mount each round: its first read goes to the network
            m = bench.Mount(url, "-o", "ro", "--view", "files")
            try:
                mounts.append(m.seconds)
                view = os.path.join(m.path, "matrices/cell/gene/fraction.data")
                if os.path.getsize(view) != size:
                    raise RuntimeError(f"{view}: st_size {os.path.getsize(view)}, not {size}")
                firsts.append(bench.dd(view))
                curls.append(curl(f"{url}/{CHUNK}"))
                rereads.append(bench.dd(view))
                natives.append(bench.dd(chunk))
                if r == 0:
                    with open(view, "rb") as a, open(chunk, "rb") as b:
                        for offset in (0, size // 2, size - (1 << 20)):
                            a.seek(offset)
                            b.seek(offset)
                            if a.read(1 << 20) != b.read(1 << 20):
                                raise RuntimeError(f"{view}: other bytes than the served chunk at {offset}")
            finally:
                m.close()
    row(f"first read of a {mib} MiB matrix from nginx on 127.0.0.1 through a mount of the URL vs curl of the chunk's "
        "URL to /dev/null (throughput ratio)", statistics.median(firsts), statistics.median(curls), "s", ">= 0.8")
    row("re-read of it through the same mount vs a warm native read of the chunk file (throughput ratio)",
        statistics.median(rereads), statistics.median(natives), "s", "(not a target)")
    t = statistics.median(mounts)
    rows.append({"figure": f"mount until usable, remote data set with {props:,} properties (nginx on 127.0.0.1)",
                 "mounted": t, "native": None, "unit": "s", "ratio": None, "target": "<= 1 s"})
    bench.log(f"remote mount, {props} properties: {t:.3f} s")


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench

    def options(parser):
        parser.add_argument("--mib", type=int, default=1024)
        parser.add_argument("--props", type=int, default=10_000)

    bench.run_alone(options, lambda args, row, rows: http_rows(bench, bench.WORK, args.rounds, args.mib,
                                                                args.props, row, rows))


if __name__ == "__main__":
    main()
