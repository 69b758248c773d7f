"""The packed row of scripts/bench: a 1 GiB packed FilesDaf 1.1 matrix (zstd, DAF's inner chunks of one 8 KiB
column piece, daf-formats.md §8) read sequentially through the FilesDaf view, against zarr-python 3 decoding the
same shard file from a native Zarr v3 directory; and the daemon's peak anonymous memory during that read. The
view is read on a fresh mount in up to 3 rounds (fewer once they agree), zarr-python once (about 28 s, 5 times
the view's time: more rounds would not move the ratio past its target).

    python scripts/bench_packed.py [--mib N] [--rounds R]     (alone: builds and measures only this row)
"""
import json
import os
import statistics
import struct
import sys
import threading
import time

import numcodecs
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "data"))
import daf_bytes as mp  # noqa: E402  (the §8 shard layout: LFH, CD records, trailer, chunk names, CRC-32C)

ROWS = 65536  # cells; a Float32 column is 256 KiB, DAF packs it in inner chunks of 2048 rows (8 KiB)
INNER = 2048
LEVEL = 5


def crc32c(data):
    try:
        import google_crc32c  # in zarr-python 3's dependencies; the pure-Python one takes seconds per MiB
        return google_crc32c.value(bytes(data))
    except ImportError:
        return mp.crc32c(data)


def make_packed_matrix(path, mib):
    """A FilesDaf 1.1 data set with one packed Float32 matrix cell x gene of `mib` MiB (zstd level 5), written as
    DAF 0.3 streams it: shard index placeholder, per chunk LFH + zstd frame, CD, ZIP64 trailer, then the index."""
    cols = mib * 2**20 // (ROWS * 4)
    shard = os.path.join(path, "matrices/cell/gene/umis.zip")
    if os.path.exists(shard):
        return shard, cols
    for d in ["scalars", "axes", "vectors/cell", "vectors/gene"] + \
            [f"matrices/{r}/{c}" for r in ("cell", "gene") for c in ("cell", "gene")]:
        os.makedirs(os.path.join(path, d), exist_ok=True)
    with open(os.path.join(path, "daf.json"), "w") as f:
        f.write('{"version":[1,1]}\n')
    for axis, n in (("cell", ROWS), ("gene", cols)):
        with open(os.path.join(path, f"axes/{axis}.txt"), "w") as f:
            f.write("".join(f"{axis[0]}{i}\n" for i in range(n)))
    desc = ('{"format":"dense","eltype":"Float32","packed_format":"indexed+zipped","chunk_shape":[%d,1],'
            '"compression":"zstd","compression_level":%d,"index_location":"start"}\n' % (INNER, LEVEL))
    with open(os.path.join(path, "matrices/cell/gene/umis.json"), "w") as f:
        f.write(desc)
    with open(os.path.join(path, "metadata.json"), "w") as f:
        f.write('{"axes/cell":{"format":"axis","n_entries":%d},"axes/gene":{"format":"axis","n_entries":%d},'
                '"matrices/cell/gene/umis":%s}' % (ROWS, cols, desc.rstrip("\n")))
    grid = [ROWS // INNER, cols]
    n = grid[0] * grid[1]
    rng = np.random.default_rng(5)
    zstd = numcodecs.Zstd(level=LEVEL)
    index, cds = [], []
    tmp = shard + ".tmp"
    with open(tmp, "wb") as f:
        f.write(b"\0" * (16 * n + 4))
        for col in range(cols):
            column = rng.poisson(0.7, ROWS).astype(np.float32)  # UMI-like counts: compressible, not trivially
            for piece in range(grid[0]):
                raw = column[piece * INNER:(piece + 1) * INNER].tobytes()
                enc = zstd.encode(raw)
                name = mp.chunk_name(grid, col * grid[0] + piece)
                off = f.tell()
                lfh = mp.lfh_zip64(name, 93, mp.crc32(raw), len(enc), len(raw))
                f.write(lfh)
                index.append(struct.pack("<QQ", off + len(lfh), len(enc)))
                f.write(enc)
                cds.append(mp.cd_record(name, 93, mp.crc32(raw), len(enc), len(raw), off))
        cd = b"".join(cds)
        cd_off = f.tell()
        f.write(cd + mp.zip_trailer(n, len(cd), cd_off))
        idx = b"".join(index)
        f.seek(0)
        f.write(idx + struct.pack("<I", crc32c(idx)))
    os.rename(tmp, shard)
    return shard, cols


def native_v3(work, shard, cols):
    """A native Zarr v3 directory whose one array's shard is the FilesDaf `.zip` (hard link): the same bytes."""
    path = os.path.join(work, "native_packed.zarr")
    chunk = os.path.join(path, "m", "c", "0", "0")
    if not os.path.exists(chunk):
        os.makedirs(os.path.dirname(chunk))
        with open(os.path.join(path, "zarr.json"), "w") as f:
            f.write('{"zarr_format":3,"node_type":"group"}')
        meta = json.loads(mp.zarr_json("Float32", [ROWS, cols], ("zstd", [INNER, 1])))
        with open(os.path.join(path, "m", "zarr.json"), "w") as f:
            json.dump(meta, f)  # ROWS is a multiple of INNER: the declared shard is valid as Julia writes it
        os.link(shard, chunk)
    return os.path.join(path, "m")


class PeakRss:
    """Samples the RssAnon of some processes every 10 ms while active; `peak` in KiB."""

    def __init__(self, pids):
        self.pids, self.peak, self.stop = pids, 0, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            total = 0
            for pid in self.pids:
                try:
                    with open(f"/proc/{pid}/status") as f:
                        total += next(int(x.split()[1]) for x in f if x.startswith("RssAnon:"))
                except (OSError, StopIteration):
                    pass
            self.peak = max(self.peak, total)
            time.sleep(0.01)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def packed_row(bench, work, rounds, mib, row, rows):
    """Measures the row with scripts/bench.py's helpers (`bench`: Mount, dd, recache, interleave)."""
    import zarr

    files = os.path.join(work, f"packed{mib}.daf")
    shard, cols = make_packed_matrix(files, mib)
    native = native_v3(work, shard, cols)
    bench.recache(shard)
    firsts, natives, peaks = [], [], []
    for r in range(rounds):  # a fresh mount each round: the first read decodes (the kernel caches the rest)
        m = bench.Mount(files, "-o", "ro", "--view", "files")
        try:
            view = os.path.join(m.path, "matrices/cell/gene/umis.data")
            size = os.path.getsize(view)
            if size != ROWS * cols * 4:
                raise RuntimeError(f"{view}: st_size {size}, not {ROWS * cols * 4}")
            with PeakRss(m.pids()) as peak:
                firsts.append(bench.dd(view))
            peaks.append(peak.peak)
            if r == 0:
                with open(view, "rb") as f:  # the view's first columns are the native decode's, byte for byte
                    if f.read(2 * ROWS * 4) != zarr.open_array(native, mode="r")[0:2].tobytes():
                        raise RuntimeError(f"{view}: not the values zarr-python decodes from the shard")
        finally:
            m.close()
        if not natives:  # zarr-python's decode (about 28 s, 5 times daf-mount's) once: the ratio is far from 1
            natives.append(read_native(zarr, native))
        if bench.settled(firsts) or len(firsts) >= 3:
            break
    row(f"packed {mib} MiB matrix (zstd, [2048,1] chunks): first sequential read of the FilesDaf view vs zarr-python 3 "
        "decoding the same shard (throughput ratio)", statistics.median(firsts), statistics.median(natives), "s",
        ">= 1.0")
    rows.append({"figure": "daemon peak RssAnon while reading the packed matrix", "mounted": max(peaks) / 1024,
                 "native": None, "unit": "MiB", "ratio": None, "target": "< 64 MiB"})
    bench.log(f"packed: peak RssAnon {max(peaks) / 1024:.1f} MiB")


def read_native(zarr, native):
    start = time.perf_counter()
    zarr.open_array(native, mode="r", zarr_format=3)[...]
    return time.perf_counter() - start


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench

    bench.run_alone(lambda parser: parser.add_argument("--mib", type=int, default=1024),
                    lambda args, row, rows: packed_row(bench, bench.WORK, args.rounds, args.mib, row, rows))


if __name__ == "__main__":
    main()
