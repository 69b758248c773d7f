"""The AnnData rows of scripts/bench: `anndata.read_zarr` of the AnnData view (`--anndata`) against the same
AnnData written by anndata itself (`write_zarr`, its defaults) to a local directory, side by side, for
- a 1 GiB dense X (the bench's 65536 x 4096 Float32 matrix, stored as (cell, gene)): obs = gene shows it as X's
  C-order chunk, obs = cell as the same bytes in F order;
- a sparse X of 100 M non-zeros (Float32 values, Int32 indices; stored as (gene, cell), so a csr X whose `data` is
  the stored nzval and whose `indices`/`indptr` the daemon shifts by range);
- `anndata.experimental.read_lazy` opening each (no values read);
and the daemon's peak anonymous memory (RssAnon, sampled every 20 ms) while X is read.

Every view read is a first read on a fresh mount (the source's files are in the page cache, the mount's are not:
every byte goes through the daemon); every native read is from the page cache (read once before). Each read runs
in a fresh Python process, timed inside it (imports not counted).

    python scripts/bench_anndata.py [--rounds R]     (alone: builds and measures only these rows)
"""
import os
import subprocess
import sys
import threading
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = os.path.join(ROOT, ".venv", "zarr3", "bin", "python")
SPARSE_CELLS, SPARSE_GENES, PER_CELL = 100_000, 20_000, 1_000  # 100 M non-zeros

READ = """
import sys, time, anndata
path, lazy = sys.argv[1], sys.argv[2] == "lazy"
start = time.perf_counter()
if lazy:
    a = anndata.experimental.read_lazy(path)
else:
    a = anndata.read_zarr(path)
    x = a.X
print(time.perf_counter() - start)
"""

WRITE = """
import sys, anndata, numpy as np, pandas as pd, scipy.sparse
source, out, kind, obs, var = sys.argv[1:6]
def names(axis):
    with open(f"{source}/axes/{axis}.txt") as f:
        return f.read().split("\\n")[:-1]
obs_names, var_names = names(obs), names(var)
if kind == "dense":  # stored (cell, gene): its column-major bytes are the C-order gene x cell array
    m = np.fromfile(f"{source}/matrices/cell/gene/fraction.data", np.float32).reshape(len(names("gene")), -1)
    x = m if obs == "gene" else np.ascontiguousarray(m.T)
else:  # stored (gene, cell): CSC over cells = CSR over obs = cell
    base = f"{source}/matrices/gene/cell/umis"
    colptr = np.fromfile(base + ".colptr", np.int32) - 1
    rowval = np.fromfile(base + ".rowval", np.int32) - 1
    nzval = np.fromfile(base + ".nzval", np.float32)
    x = scipy.sparse.csr_matrix((nzval, rowval, colptr), shape=(len(obs_names), len(var_names)))
a = anndata.AnnData(X=x, obs=pd.DataFrame(index=obs_names), var=pd.DataFrame(index=var_names))
a.write_zarr(out)
"""


def make_sparse(path):
    """A FilesDaf 1.0 data set: axes cell (100,000) and gene (20,000), and a sparse Float32 matrix (gene, cell)
    `umis` of 1,000 non-zeros per cell (100 M): about 800 MB."""
    if os.path.exists(os.path.join(path, "daf.json")):
        return
    for d in ["scalars", "axes", "vectors/cell", "vectors/gene"] + \
            [f"matrices/{r}/{c}" for r in ("cell", "gene") for c in ("cell", "gene")]:
        os.makedirs(os.path.join(path, d), exist_ok=True)
    for axis, n in (("cell", SPARSE_CELLS), ("gene", SPARSE_GENES)):
        with open(os.path.join(path, f"axes/{axis}.txt"), "w") as f:
            f.write("".join(f"{axis[0]}{i}\n" for i in range(n)))
    base = os.path.join(path, "matrices/gene/cell/umis")
    with open(base + ".json", "w") as f:
        f.write('{"format":"sparse","eltype":"Float32","indtype":"Int32"}\n')
    (np.arange(SPARSE_CELLS + 1, dtype=np.int64) * PER_CELL + 1).astype(np.int32).tofile(base + ".colptr")
    rng = np.random.default_rng(7)
    step = SPARSE_GENES // PER_CELL
    with open(base + ".rowval", "wb") as rows, open(base + ".nzval", "wb") as values:
        for start in range(0, SPARSE_CELLS, 10_000):
            n = min(10_000, SPARSE_CELLS - start)
            offsets = rng.integers(0, step, (n, PER_CELL), dtype=np.int32)
            genes = np.arange(PER_CELL, dtype=np.int32) * step + offsets + 1  # sorted within each cell
            rows.write(genes.tobytes())
            values.write(rng.poisson(2.0, n * PER_CELL).astype(np.float32).tobytes())
    with open(os.path.join(path, "daf.json"), "w") as f:
        f.write('{"version":[1,0]}\n')


def native_copy(source, out, kind, obs, var):
    if not os.path.exists(os.path.join(out, ".zattrs")) and not os.path.exists(os.path.join(out, "zarr.json")):
        subprocess.run([PYTHON, "-c", WRITE, source, out, kind, obs, var], check=True)


def timed_read(path, lazy=False):
    out = subprocess.run([PYTHON, "-c", READ, path, "lazy" if lazy else "all"], check=True, capture_output=True,
                         text=True)
    return float(out.stdout.strip().splitlines()[-1])


def warm(path):
    for dirpath, _, files in os.walk(path):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                while f.read(1 << 24):
                    pass


def rss_anon_kib(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                total += sum(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))
        except OSError:
            pass
    return total


class Peak:
    """The daemon's peak RssAnon (KiB), sampled every 20 ms while it runs: the processes that name the mount
    point before the reader starts (the daemon and its helper; the reader names it too, and is not counted)."""

    def __init__(self, mount):
        self.pids, self.peak, self.done = mount.pids(), 0, threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()

    def sample(self):
        while not self.done.wait(0.02):
            self.peak = max(self.peak, rss_anon_kib(self.pids))

    def stop(self):
        self.done.set()
        self.thread.join()
        return max(self.peak, rss_anon_kib(self.pids))


def anndata_rows(bench, work, rounds, row, rows):
    files_dir = os.path.join(work, "big.daf")
    bench.make_filesdaf(files_dir)
    sparse_dir = os.path.join(work, "sparse100m.daf")
    make_sparse(sparse_dir)
    cases = [
        ("dense 1 GiB X, C order", files_dir, "dense", "gene", "cell", "fraction", ">= 0.9", "<= 64 MiB"),
        ("dense 1 GiB X, F order", files_dir, "dense", "cell", "gene", "fraction", ">= 0.9", "<= 64 MiB"),
        ("sparse X of 100 M non-zeros", sparse_dir, "sparse", "cell", "gene", "umis", ">= 0.7",
         "<= 256 + 64 MiB (decode cache + 64 MiB)"),
    ]
    for label, source, kind, obs, var, x, target, rss_target in cases:
        native = os.path.join(work, f"native-{kind}-{obs}.anndata.zarr")
        native_copy(source, native, kind, obs, var)
        warm(native)
        warm(source)
        name = os.path.basename(source)[:-len(".daf")]
        options = ("-o", "ro", "--zarr-format", "2", "--anndata", f"{obs}:{var}:{x}")
        views, natives, opens, native_opens, peaks = [], [], [], [], []
        for _ in range(rounds):
            m = bench.Mount(source, *options)
            try:
                view = os.path.join(m.path, f"{name}.anndata.zarr")
                opens.append(timed_read(view, lazy=True))
                peak = Peak(m)
                views.append(timed_read(view))
                peaks.append(peak.stop())
            finally:
                m.close()
            natives.append(timed_read(native))
            native_opens.append(timed_read(native, lazy=True))
        t_m, t_n = min(views), min(natives)
        row(f"anndata.read_zarr, {label}: view (first read) vs anndata's own copy (throughput ratio)", t_m, t_n,
            "s", target)
        row(f"anndata read_lazy opens the {label}: view vs anndata's own copy (time ratio)", min(opens),
            min(native_opens), "s", "<= 1.5", higher_is_better=False)
        peak_mib = max(peaks) / 1024
        rows.append({"figure": f"daemon RssAnon peak while read_zarr reads the {label}", "mounted": peak_mib,
                     "native": None, "unit": "MiB", "ratio": None, "target": rss_target})
        bench.log(f"{label}: RssAnon peak {peak_mib:.1f} MiB ({rss_target})")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench

    def add_options(parser):
        pass

    def measure(args, row, rows):
        anndata_rows(bench, bench.WORK, args.rounds, row, rows)
    bench.run_alone(add_options, measure)
