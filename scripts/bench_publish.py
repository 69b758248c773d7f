"""The published-ZIP row of scripts/bench (issue 13): `cp` of `NAME.daf.zarr.zip` at the root of a `--zip` mount of
the 1 GiB data set's ZarrDaf ZIP, against `cp` of that native ZIP itself, warm (the first `cp` computes the
members' CRC-32s and fills the page cache; it is reported, not a target). The first copy is checked by `unzip -t`.

    python scripts/bench_publish.py [--mib N] [--rounds R]     (alone: a data set of one N MiB matrix)
"""
import os
import subprocess
import sys
import zipfile

import numpy as np


def publish_row(bench, work, rounds, native_zip, label, row):
    """Measures the row with scripts/bench.py's helpers (`bench`: Mount, timed, recache, interleave)."""
    name = os.path.basename(native_zip)
    dst = os.path.join(work, "published-copy.daf.zarr.zip")
    bench.recache(native_zip)
    m = bench.Mount(native_zip, "-o", "ro", "--zip")
    try:
        published = os.path.join(m.path, name)
        size = os.stat(published).st_size  # exact before any read
        first = bench.timed(["cp", published, dst])
        if os.path.getsize(dst) != size:
            raise RuntimeError(f"{published}: st_size {size}, copied {os.path.getsize(dst)}")
        subprocess.run(["unzip", "-tq", dst], check=True, stdout=subprocess.DEVNULL)
        os.remove(dst)
        t_m, t_n = bench.interleave(rounds, lambda: bench.timed_cp(published, dst),
                                    lambda: bench.timed_cp(native_zip, dst))
    finally:
        m.close()
    row(f"cp of the published ZIP (--zip) of the {label} data set vs cp of its native ZIP, warm (throughput ratio)",
        t_m, t_n, "s", ">= 0.8")
    row("same, first cp (CRC-32s computed, cold page cache of the mount; not a target)", first, t_n, "s", "-")


def make_small_zip(bench, path, mib):
    """A seed ZarrDaf ZIP (stored entries, Python's zipfile) with one Float32 matrix cell x gene of `mib` MiB."""
    if os.path.exists(path):
        return
    cells, genes = 65536, max(1, mib * 2**20 // (65536 * 4))
    with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for g in ["", "scalars", "axes", "vectors", "matrices", "vectors/cell", "vectors/gene", "matrices/cell",
                  "matrices/gene", "matrices/cell/cell", "matrices/cell/gene", "matrices/gene/cell",
                  "matrices/gene/gene"]:
            z.writestr((g + "/" if g else "") + ".zgroup", '{"zarr_format":2}')
            z.writestr((g + "/" if g else "") + ".zattrs", "{}")

        def array(p, dtype, shape, data, strings=False):
            z.writestr(p + "/.zarray", bench.zarray(dtype, shape, strings))
            z.writestr(p + "/.zattrs", "{}")
            z.writestr(p + "/" + ".".join("0" * len(shape)), data)
        array("daf", "|u1", [2], bytes([1, 0]))
        for axis, n in [("cell", cells), ("gene", genes)]:
            array("axes/" + axis, "|O", [n], bench.vlen([(axis[0] + str(i)).encode() for i in range(n)]), True)
        data = np.random.default_rng(1).random(cells * genes, dtype=np.float32).tobytes()
        array("matrices/cell/gene/fraction", "<f4", [genes, cells], data)
    os.rename(path + ".tmp", path)


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench

    def measure(args, row, rows):
        path = os.path.join(bench.WORK, f"publish{args.mib}.daf.zarr.zip")
        make_small_zip(bench, path, args.mib)
        publish_row(bench, bench.WORK, args.rounds, path, f"{args.mib} MiB", row)

    bench.run_alone(lambda parser: parser.add_argument("--mib", type=int, default=1024), measure)


if __name__ == "__main__":
    main()
