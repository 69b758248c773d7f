"""The h5ad rows of scripts/bench (`--h5ad`, NAME.h5ad): the bench's 1 GiB dense data set (65536 x 4096 Float32,
stored as (cell, gene); obs = gene makes X the stored bytes) as the mount's h5ad file, against the same AnnData
written by anndata itself (`write_h5ad`, its defaults) to a local file, side by side:
- `cp` of the file to a file on the same disk (warm: read once before; the copy deleted after each);
- `anndata.read_h5ad(path, backed="r")` and reading all of X (`adata.X[:]`), in a fresh Python process each;
and the daemon's peak anonymous memory (RssAnon) while X is read (target: 64 MiB plus the decode cache).

    python scripts/bench_h5ad.py [--rounds R]     (alone: builds and measures only these rows)
"""
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = os.path.join(ROOT, ".venv", "zarr3", "bin", "python")
SELECTION = "gene:cell:fraction"

WRITE = """
import sys, anndata, numpy as np, pandas as pd
source, out = sys.argv[1:3]
def names(axis):
    with open(f"{source}/axes/{axis}.txt") as f:
        return f.read().split("\\n")[:-1]
genes, cells = names("gene"), names("cell")
x = np.fromfile(f"{source}/matrices/cell/gene/fraction.data", np.float32).reshape(len(genes), len(cells))
a = anndata.AnnData(X=x, obs=pd.DataFrame(index=genes), var=pd.DataFrame(index=cells))
a.uns["X_is"] = "fraction"
a.uns["obs_is"] = "gene"
a.uns["var_is"] = "cell"
a.write_h5ad(out + ".tmp")
"""

READ = """
import sys, time, anndata
start = time.perf_counter()
a = anndata.read_h5ad(sys.argv[1], backed="r")
x = a.X[:]
print(time.perf_counter() - start)
"""


def native_h5ad(source, out):
    if not os.path.exists(out):
        subprocess.run([PYTHON, "-c", WRITE, source, out], check=True)
        os.rename(out + ".tmp", out)


def timed_read(path):
    done = subprocess.run([PYTHON, "-c", READ, path], check=True, capture_output=True, text=True)
    return float(done.stdout.strip().splitlines()[-1])


def ceiling_row(bench, rounds, work, mounted, row):
    """What bounds the rows above: `cp` of the same bytes (a copy of the h5ad) served by the smallest FUSE file
    system through the page cache (scripts/bench_ceiling.py's `fuse_ceiling`), against `cp` of the mount's file."""
    from bench_ceiling import ceiling_on
    copy, dst = os.path.join(work, "h5ad-ceiling.tmp"), os.path.join(work, "h5ad-copy.tmp")
    subprocess.run(["cp", mounted, copy], check=True)
    try:
        with ceiling_on(bench, copy, 0, os.path.getsize(copy)) as c:
            if c is None:
                return
            bench.timed_cp(c.data, dst)
            t_m, t_c = bench.interleave(rounds, lambda: bench.timed_cp(mounted, dst),
                                        lambda: bench.timed_cp(c.data, dst))
            row("cp of NAME.h5ad vs cp of the same bytes from the FUSE ceiling, warm (throughput ratio)", t_m, t_c,
                "s", ">= 0.9")
    finally:
        os.remove(copy)


def h5ad_rows(bench, work, rounds, files_dir, row, rows):
    import bench_anndata
    native = os.path.join(work, "native-dense-gene.h5ad")
    native_h5ad(files_dir, native)
    bench.recache(native)
    name = os.path.basename(files_dir)[:-len(".daf")]
    dst = os.path.join(work, "h5ad-copy.tmp")
    m = bench.Mount(files_dir, "-o", "ro", "--anndata", SELECTION, "--h5ad")
    try:
        mounted = os.path.join(m.path, f"{name}.h5ad")
        start = time.perf_counter()
        size = os.path.getsize(mounted)  # the first stat makes the file's structure
        made = time.perf_counter() - start
        bench.log(f"h5ad: {size} bytes (native {os.path.getsize(native)}), made in {made:.3f} s")
        peak = bench_anndata.Peak(m)
        bench.timed_cp(mounted, dst)  # warm: both files in the page cache
        bench.timed_cp(native, dst)
        t_m, t_n = bench.interleave(rounds, lambda: bench.timed_cp(mounted, dst), lambda: bench.timed_cp(native, dst))
        row("cp of NAME.h5ad (--h5ad) of the 1 GiB data set vs cp of anndata's own h5ad, warm (throughput ratio)",
            t_m, t_n, "s", ">= 0.8")
        t_m, t_n = bench.interleave(rounds, lambda: timed_read(mounted), lambda: timed_read(native))
        peak_mib = peak.stop() / 1024
        row("read_h5ad(backed='r') and all of X, NAME.h5ad vs anndata's own h5ad, warm (throughput ratio)",
            t_m, t_n, "s", ">= 0.8")
        ceiling_row(bench, rounds, work, mounted, row)
    finally:
        m.close()
    rows.append({"figure": "daemon RssAnon peak while the h5ad is copied and read", "mounted": peak_mib,
                 "native": None, "unit": "MiB", "ratio": None, "target": "< 64 MiB + decode cache"})
    bench.log(f"h5ad: RssAnon peak {peak_mib:.1f} MiB")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench

    def measure(args, row, rows):
        files_dir = os.path.join(bench.WORK, "big.daf")
        bench.make_filesdaf(files_dir)
        h5ad_rows(bench, bench.WORK, args.rounds, files_dir, row, rows)

    bench.run_alone(lambda parser: None, measure)
