"""The HTTP rows of scripts/bench (issue 11): a ZarrDaf v2 directory (consolidated `.zmetadata`) with a 1 GiB dense
Float32 matrix (one uncompressed chunk) and 10,000 small vectors, served by nginx on 127.0.0.1, mounted by URL:
  (a) first read of the matrix through a fresh mount (FilesDaf view) vs `curl` of the chunk's URL to /dev/null;
  (b) the CPU-seconds of that first read (dd, the daemon, nginx) and of curl's (curl, nginx), and the page cache the
  first read takes (/proc/meminfo Cached), without and with a disk cache (-o cache=DIR);
  (c) re-read of it through the same mount vs a warm native read of the chunk file (page cache), and vs the re-read
  of the same matrix as a member of the bench's local ZIP (both from the FUSE page cache);
  (d) mount time of the remote data set (10,000 properties), until usable;
  (e) the first read's ceilings: the smallest FUSE server fed by the same URL (examples/fuse_ceiling.rs: each of the
  kernel's reads one ranged GET, the body received into a buffer and replied from it), and the same server splicing
  each body from the socket into /dev/fuse (the zero-copy path), each against curl and daf-mount against the first.

    python scripts/bench_http.py [--mib N] [--props N] [--rounds R]   (alone: builds and measures only these rows)
"""
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "interop"))
from http_serve import nginx  # noqa: E402  (nginx on 127.0.0.1 with a generated config, as the tests start it)

CELLS = 65536
CHUNK = "matrices/cell/gene/fraction/0.0"
PIPE_MAX = "/proc/sys/fs/pipe-max-size"
# The splicing ceiling's pipes hold a whole reply (1 MiB and its header, a page per slot at worst): 4 MiB each.
PIPE_ROOM = 4 << 20


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


def process_seconds(pids):
    """CPU-seconds (user + system) the running processes `pids` have used."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def server_pids():
    """nginx's processes started by this bench (its master is our child, its workers the master's children)."""
    parents = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                parents[int(pid)] = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            pass
    masters = {p for p, parent in parents.items() if parent == os.getpid()}
    return [p for p, parent in parents.items() if p in masters or parent in masters]


def cpu_seconds(command, pids):
    """(wall seconds, CPU-seconds) of `command` run to its end plus what the running processes `pids` (the daemon,
    the server) used meanwhile: per process, so that other work on the machine is not counted."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    before = process_seconds(pids)
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
    return took, used + process_seconds(pids) - before


def cached_mib():
    """The page cache's size (/proc/meminfo Cached), in MiB."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Cached:"):
                return int(line.split()[1]) / 1024


def load():
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def local_zip(bench, work, size):
    """The bench's ZIP source (scripts/bench.py's data sets, built if missing) and where its matrix member is, if
    that member has `size` bytes (the remote matrix's): its re-read is the local side of the re-read row."""
    files_dir = os.path.join(work, "big.daf")
    if size != bench.CELLS * bench.GENES * 4:
        return None
    bench.make_filesdaf(files_dir)
    zip_path = os.path.join(work, "big.daf.zarr.zip")
    bench.make_zarr_zip(files_dir, zip_path)
    return zip_path


def same_bytes(view, chunk, size):
    """Raises unless `view` reads as the served `chunk` at its start, middle and end."""
    with open(view, "rb") as a, open(chunk, "rb") as b:
        for offset in (0, size // 2, size - (1 << 20)):
            a.seek(offset)
            b.seek(offset)
            if a.read(1 << 20) != b.read(1 << 20):
                raise RuntimeError(f"{view}: other bytes than the served chunk at {offset}")


@contextlib.contextmanager
def pipe_room(bench):
    """Whether pipes of PIPE_ROOM bytes may be made (PIPE_MAX raised for the splicing ceiling, as root, and put back
    after): without CAP_SYS_RESOURCE a pipe is at most PIPE_MAX."""
    try:
        with open(PIPE_MAX) as f:
            before = int(f.read())
        if before < PIPE_ROOM:
            with open(PIPE_MAX, "w") as f:
                f.write(str(PIPE_ROOM))
    except OSError as e:
        bench.log(f"the splicing ceiling's row is left out: {PIPE_MAX}: {e}")
        yield False
        return
    try:
        yield True
    finally:
        if before < PIPE_ROOM:
            with open(PIPE_MAX, "w") as f:
                f.write(str(before))


def ceiling_first_read(source, chunk, size):
    """(wall seconds, CPU-seconds of dd, the ceiling and nginx) of a first read of the ceiling serving `source` (a
    URL, or `splice:` and a URL), on a fresh mount; its bytes are checked against `chunk`."""
    from bench_ceiling import CEILING, ExampleMount
    c = ExampleMount(lambda path: [CEILING, source, "0", str(size), path], "daf-ceiling-")
    try:
        data = os.path.join(c.path, "data")
        took, used = cpu_seconds(["dd", f"if={data}", "of=/dev/null", "bs=1M"], [c.proc.pid] + server_pids())
        same_bytes(data, chunk, size)
        return took, used
    finally:
        c.close()


def http_rows(bench, work, rounds, mib, props, row, rows):
    """Measures the rows with scripts/bench.py's helpers (`bench`: Mount, dd, recache, interleave)."""
    name = f"remote{mib}m{props}.daf.zarr"
    chunk = make_remote_zarr(bench, os.path.join(work, "http", name), mib, props)
    size = os.path.getsize(chunk)
    zip_path = local_zip(bench, work, size)
    bench.recache(chunk)  # nginx serves from the page cache, as curl's side does
    from bench_ceiling import CEILING, build_example
    missing = build_example("fuse_ceiling", CEILING, "DAF_CEILING_BIN")
    if missing:
        bench.log(f"the first read's ceiling rows are left out: {missing}")
    with nginx(os.path.join(work, "http")) as base, pipe_room(bench) as spliceable:
        url = f"{base}/{name}"
        curl(f"{url}/{CHUNK}")
        firsts, rereads, curls, natives, mounts, zip_rereads = [], [], [], [], [], []
        cpu_mount, cpu_curl, daemon, cached, rss, cached_disk = [], [], [], [], [], []
        ceilings = {"copying": ([], []), "splicing": ([], [])}
        for r in range(rounds):  # a fresh mount each round: its first read goes to the network
            # Round 0 also mounts with a disk cache, to see what the first read leaves in the page cache.
            for cache_dir in ([None, tempfile.mkdtemp(prefix="daf-bench-cache-")] if r == 0 else [None]):
                m = bench.Mount(url, "-o", "ro" + (f",cache={cache_dir}" if cache_dir else ""), "--view", "files")
                try:
                    view = os.path.join(m.path, "matrices/cell/gene/fraction.data")
                    if os.path.getsize(view) != size:
                        raise RuntimeError(f"{view}: st_size {os.path.getsize(view)}, not {size}")
                    daemon_before, before = process_seconds(m.pids()), cached_mib()
                    took, used = cpu_seconds(["dd", f"if={view}", "of=/dev/null", "bs=1M"], m.pids() + server_pids())
                    grown = cached_mib() - before
                    if cache_dir:
                        cached_disk.append(grown)
                        bench.log(f"remote first read with -o cache: page cache +{grown:.0f} MiB for {size >> 20} MiB "
                                  f"(load {load()})")
                        continue
                    mounts.append(m.seconds)
                    firsts.append(took)
                    cpu_mount.append(used)
                    daemon.append(process_seconds(m.pids()) - daemon_before)
                    cached.append(grown)
                    rss.append(m.rss_anon_kib() / 1024)
                    took, used = cpu_seconds(["curl", "-sSf", "-o", "/dev/null", f"{url}/{CHUNK}"], server_pids())
                    curls.append(took)
                    cpu_curl.append(used)
                    rereads.append(bench.dd(view))
                    natives.append(bench.dd(chunk))
                    bench.log(f"remote first read {firsts[-1]:.3f} s, curl {curls[-1]:.3f} s; CPU-seconds: dd + daemon + "
                              f"nginx {cpu_mount[-1]:.2f} (daemon {daemon[-1]:.2f}) vs curl + nginx "
                              f"{cpu_curl[-1]:.2f}; page "
                              f"cache +{grown:.0f} MiB, daemon RssAnon {rss[-1]:.0f} MiB; re-read {rereads[-1]:.3f} s "
                              f"(load {load()})")
                    if r == 0:
                        same_bytes(view, chunk, size)
                finally:
                    m.close()
                    if cache_dir:
                        shutil.rmtree(cache_dir, ignore_errors=True)
            for kind, prefix in (("copying", ""), ("splicing", "splice:")):
                if missing or (prefix and not spliceable):
                    continue
                took, used = ceiling_first_read(f"{prefix}{url}/{CHUNK}", chunk, size)
                ceilings[kind][0].append(took)
                ceilings[kind][1].append(used)
                bench.log(f"{kind} ceiling's first read {took:.3f} s, {used:.2f} CPU-seconds (load {load()})")
            if zip_path:  # the same re-read from a local ZIP member's FUSE page cache, on a fresh mount
                zm = bench.Mount(zip_path, "-o", "ro", "--view", "files")
                try:
                    zview = os.path.join(zm.path, "matrices/cell/gene/fraction.data")
                    bench.dd(zview)
                    zip_rereads.append(bench.dd(zview))
                    bench.log(f"local ZIP member re-read {zip_rereads[-1]:.3f} s (load {load()})")
                finally:
                    zm.close()
    row(f"first read of a {mib} MiB matrix from nginx on 127.0.0.1 through a mount of the URL vs curl of the chunk's "
        "URL to /dev/null (throughput ratio)", statistics.median(firsts), statistics.median(curls), "s", ">= 0.6")
    copying, copying_cpu = ceilings["copying"]
    if copying:
        row("first read of it through the smallest FUSE server fed by that URL (examples/fuse_ceiling.rs: a ranged GET "
            "per read, received into a buffer and replied from it) vs curl (throughput ratio; its CPU-seconds: "
            f"{statistics.median(copying_cpu):.2f})", statistics.median(copying), statistics.median(curls), "s",
            "(information: the ceiling)")
        row("daf-mount's first read vs that smallest FUSE server's (throughput ratio)", statistics.median(firsts),
            statistics.median(copying), "s", "(information)")
    splicing, splicing_cpu = ceilings["splicing"]
    if splicing:
        row("first read of it through the same server splicing each body from the socket into /dev/fuse (no copy in "
            f"the daemon) vs curl (throughput ratio; its CPU-seconds: {statistics.median(splicing_cpu):.2f})",
            statistics.median(splicing), statistics.median(curls), "s", "(information: the zero-copy ceiling)")
    row("CPU-seconds of that first read (dd, daemon, nginx) vs of curl's (curl, nginx) (ratio: mount / curl; the "
        "daemon's share: "
        f"{statistics.median(daemon):.2f} s)", statistics.median(cpu_mount), statistics.median(cpu_curl), "CPU-s",
        "(not a target)", higher_is_better=False, daemon_cpu_seconds=statistics.median(daemon))
    row(f"page cache taken by that first read (/proc/meminfo Cached) vs the matrix's {size >> 20} MiB",
        statistics.median(cached), size / 2**20, "MiB", "<= 1.1 (each byte once)", higher_is_better=False,
        rss_anon_mib=statistics.median(rss))
    row(f"the same with a disk cache (-o cache=DIR), first round", statistics.median(cached_disk), size / 2**20, "MiB",
        "<= 1.1 (each byte once)", higher_is_better=False)
    row("re-read of it through the same mount vs a warm native read of the chunk file (throughput ratio)",
        statistics.median(rereads), statistics.median(natives), "s", "(not a target)")
    if zip_rereads:
        row("re-read of it through the same mount vs the re-read of the same matrix as a local ZIP member, both from "
            "the FUSE page cache (throughput ratio)", statistics.median(rereads), statistics.median(zip_rereads), "s",
            ">= 0.9")
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
