"""The H5df rows of scripts/bench (issue 31): the 1 GiB Float32 matrix of the bench's FilesDaf directory, written
flat (contiguous, unfiltered) into an HDF5 file with h5py as DataAxesFormats lays it out (h5df-format.md), read
sequentially through each view of an H5df mount side by side with the same view of a mount of the FilesDaf
directory (throughput ratio, target >= 0.9: both serve ranges of a map); the daemon's RssAnon after those reads; and
the time until a mount of an H5df of 10,000 properties is usable (target <= 1 s).

    python scripts/bench_h5df.py [--rounds R]     (alone: builds and measures only these rows)
"""
import os
import statistics
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_h5df(path, files_dir, cells, genes, small):
    """The bench's data set as an H5df: axes cell, gene and item, the flat Float32 matrix cell x gene (its bytes are
    those of the directory's fraction.data), and `small` Float32 vectors of 100 entries on item."""
    if os.path.exists(path):
        return
    import h5py
    tmp = path + ".tmp"
    strings = h5py.string_dtype("utf-8")
    with h5py.File(tmp, "w") as f:
        f["daf"] = np.array([1, 0], dtype=np.uint8)
        for g in ("scalars", "axes", "vectors", "matrices"):
            f.create_group(g)
        for axis, prefix, n in (("cell", "c", cells), ("gene", "g", genes), ("item", "i", 100)):
            f["axes"].create_dataset(axis, data=[f"{prefix}{i}" for i in range(n)], dtype=strings)
            f.create_group(f"vectors/{axis}")
        matrix = f.create_dataset("matrices/cell/gene/fraction", shape=(genes, cells), dtype="<f4")
        data = np.memmap(os.path.join(files_dir, "matrices/cell/gene/fraction.data"), dtype="<f4", mode="r",
                         shape=(genes, cells))
        for start in range(0, genes, 256):
            matrix[start:start + 256] = data[start:start + 256]
        rng = np.random.default_rng(1)
        for i in range(small):
            f["vectors/item"].create_dataset(f"p{i}", data=rng.random(100, dtype=np.float32))
    os.rename(tmp, path)


def make_many(path, count):
    """An H5df of `count` Float32 vectors of 100 entries (the mount-time row)."""
    if os.path.exists(path):
        return
    import h5py
    tmp = path + ".tmp"
    rng = np.random.default_rng(2)
    with h5py.File(tmp, "w") as f:
        f["daf"] = np.array([1, 0], dtype=np.uint8)
        for g in ("scalars", "axes", "vectors/item", "matrices"):
            f.create_group(g)
        f["axes"].create_dataset("item", data=[f"i{i}" for i in range(100)], dtype=h5py.string_dtype("utf-8"))
        for i in range(count):
            f["vectors/item"].create_dataset(f"p{i}", data=rng.random(100, dtype=np.float32))
    os.rename(tmp, path)


def ceiling_rows(bench, rounds, h5, hm, dm, row):
    """What bounds the rows above: the smallest FUSE file system serving the matrix's range of the HDF5 file from one
    map through the page cache (scripts/bench_ceiling.py's `fuse_ceiling`, daf-mount's settings) against the H5df
    mount's FilesDaf view (daf-mount at the ceiling?) and against the directory mount (passthrough: the ceiling's
    own share of the target)."""
    import h5py
    from bench_ceiling import ceiling_on
    with h5py.File(h5, "r") as f:
        dataset = f["matrices/cell/gene/fraction"]
        start, length = dataset.id.get_offset(), dataset.id.get_storage_size()
    with ceiling_on(bench, h5, start, length) as c:
        if c is None:
            return
        mounted = os.path.join(hm.path, "big.daf/matrices/cell/gene/fraction.data")
        directory = os.path.join(dm.path, "big.daf/matrices/cell/gene/fraction.data")
        bench.dd(c.data)
        t_h, t_c = bench.interleave(rounds, lambda: bench.dd(mounted), lambda: bench.dd(c.data))
        row("seq read 1 GiB, FilesDaf view of an H5df vs the FUSE ceiling on the same range (throughput ratio)",
            t_h, t_c, "s", ">= 0.9")
        t_c, t_d = bench.interleave(rounds, lambda: bench.dd(c.data), lambda: bench.dd(directory))
        row("seq read 1 GiB, the FUSE ceiling on the H5df's range vs a FilesDaf directory (throughput ratio)",
            t_c, t_d, "s", "(the bound)")


def h5df_rows(bench, work, rounds, files_dir, row, rows):
    """Adds the H5df rows; `bench` is scripts/bench.py's module (Mount, dd, interleave, settled, log)."""
    h5 = os.path.join(work, "big.h5df")
    make_h5df(h5, files_dir, bench.CELLS, bench.GENES, bench.SMALL)
    many = os.path.join(work, "many10k.h5df")
    make_many(many, bench.SMALL)
    for path in (h5, os.path.join(files_dir, "matrices/cell/gene/fraction.data")):
        bench.recache(path)
    hm = bench.Mount(h5)
    dm = bench.Mount(files_dir, "-o", "ro")
    rss = []
    try:
        for view, rel in (("FilesDaf", ("{}.daf", "matrices/cell/gene/fraction.data")),
                          ("Zarr", ("{}.daf.zarr", "matrices/cell/gene/fraction/0.0"))):
            mounted = os.path.join(hm.path, rel[0].format("big"), rel[1])
            directory = os.path.join(dm.path, rel[0].format("big"), rel[1])
            bench.dd(mounted)
            bench.dd(directory)
            t_h, t_d = bench.interleave(rounds, lambda: bench.dd(mounted), lambda: bench.dd(directory))
            row(f"seq read 1 GiB, {view} view of an H5df vs of a FilesDaf directory (throughput ratio)", t_h, t_d, "s",
                ">= 0.9")
            rss.append(hm.rss_anon_kib())
        ceiling_rows(bench, rounds, h5, hm, dm, row)
    finally:
        hm.close()
        dm.close()
    rows.append({"figure": "anonymous memory (RssAnon) of an H5df daemon after reading 1 GiB through both views",
                 "mounted": max(rss) / 1024, "native": None, "unit": "MiB", "ratio": None, "target": "< 64 MiB"})
    times = []
    while not times or (len(times) < rounds and not bench.settled(times)):
        mm = bench.Mount(many)
        times.append(mm.seconds)
        mm.close()
    t = statistics.median(times)
    rows.append({"figure": "mount until usable, H5df of 10,000 properties", "mounted": t, "native": None, "unit": "s",
                 "ratio": None, "target": "<= 1 s"})
    bench.log(f"mount H5df 10,000 properties: {t:.3f} s ({len(times)} mounts)")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench

    def measure(args, row, rows):
        files_dir = os.path.join(bench.WORK, "big.daf")
        bench.make_filesdaf(files_dir)
        h5df_rows(bench, bench.WORK, args.rounds, files_dir, row, rows)

    bench.run_alone(lambda parser: None, measure)
