"""The commit rows of scripts/bench (issue 12, point 5: reads never wait for writes). While a 1 GiB dense matrix is
committed (a `cp` of 1 GiB into the FilesDaf view, then its close, then `sync` of the file, which for a ZIP source
waits for the append) into a directory source and into a ZIP source, other processes measure, side by side with the
same probes on the idle mount:
  - `open` + `read` + `close` of small files (100 small vectors), p50 and p99 latency (target p99 <= 5 ms);
  - 4 KiB reads at random offsets of another 1 GiB property, p50 and p99 latency (target p99 <= 5 ms);
  - sequential reads of that whole 1 GiB property, throughput against its idle throughput (target >= 0.8).
The probes sleep 1 ms between samples (they sample, they do not load the machine). The sources are made under
$DAF_BENCH_DIR/commit-PID (the other 1 GiB property is a hard link of the bench's matrix) and removed at the end.

    python scripts/bench_commit.py [--rounds R]      (alone: the bench's data sets)
"""
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IDLE_SECONDS = 3.0  # of idle samples per round (about 2,000 small-file samples: enough for a p99)
SMALL = 100  # small vectors on the `item` axis
MATRIX = "matrices/cell/gene"


# ---------------------------------------------------------------- probes (run as separate processes)

def probe(kind, until, paths):
    """Samples until the file `until` exists; prints the samples as JSON: latencies in seconds (`small`,
    `random`), or seconds per whole sequential read (`seq`)."""
    samples = []
    rng = random.Random(7)
    buf = bytearray(1 << 20)
    fd = os.open(paths[0], os.O_RDONLY) if kind in ("random", "seq") else None
    size = os.fstat(fd).st_size if fd is not None else 0
    while not os.path.exists(until):
        if kind == "small":
            path = paths[rng.randrange(len(paths))]
            start = time.perf_counter()
            f = os.open(path, os.O_RDONLY)
            os.read(f, 4096)
            os.close(f)
            samples.append(time.perf_counter() - start)
            time.sleep(0.001)
        elif kind == "random":
            offset = rng.randrange(size // 4096) * 4096
            start = time.perf_counter()
            os.pread(fd, 4096, offset)
            samples.append(time.perf_counter() - start)
            time.sleep(0.001)
        else:
            start = time.perf_counter()
            with open(paths[0], "rb", buffering=0) as f:
                while f.readinto(buf):
                    if os.path.exists(until):
                        break
                else:
                    samples.append(time.perf_counter() - start)
    print(json.dumps(samples))


class Probes:
    """The three probes, each in its own process, until `stop()`."""

    def __init__(self, mnt):
        self.until = tempfile.mktemp(prefix="daf-bench-commit-stop-")
        small = [os.path.join(mnt, f"vectors/item/p{i}.data") for i in range(SMALL)]
        other = [os.path.join(mnt, MATRIX, "other.data")]
        self.procs = {kind: subprocess.Popen([sys.executable, os.path.abspath(__file__), "--probe", kind, self.until,
                                              *paths], stdout=subprocess.PIPE, text=True)
                      for kind, paths in (("small", small), ("random", other), ("seq", other))}

    def stop(self):
        with open(self.until, "w"):
            pass
        out = {kind: json.loads(p.communicate(timeout=300)[0] or "[]") for kind, p in self.procs.items()}
        os.remove(self.until)
        return out


# ---------------------------------------------------------------- sources

def make_sources(bench, work, files_dir):
    """A small FilesDaf directory and a ZarrDaf v2 ZIP, each with the `cell` x `gene` axes, the 1 GiB matrix
    `other` (a hard link of the bench's matrix in the directory) and 100 small vectors."""
    matrix = os.path.join(files_dir, MATRIX, "fraction.data")
    d = os.path.join(work, "dir.daf")
    for sub in ["scalars", "axes", "vectors/item", MATRIX]:
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    with open(os.path.join(d, "daf.json"), "w") as f:
        f.write('{"version":[1,0]}\n')
    for axis, n in (("cell", bench.CELLS), ("gene", bench.GENES), ("item", 100)):
        bench.write_lines(os.path.join(d, f"axes/{axis}.txt"), [f"{axis[0]}{i}" for i in range(n)])
    with open(os.path.join(d, MATRIX, "other.json"), "w") as f:
        f.write('{"format":"dense","eltype":"Float32"}\n')
    os.link(matrix, os.path.join(d, MATRIX, "other.data"))
    small = bytes(range(256)) + bytes(144)  # 100 Float32
    for i in range(SMALL):
        with open(os.path.join(d, f"vectors/item/p{i}.json"), "w") as f:
            f.write('{"format":"dense","eltype":"Float32"}\n')
        with open(os.path.join(d, f"vectors/item/p{i}.data"), "wb") as f:
            f.write(small)
    z = os.path.join(work, "zip.daf.zarr.zip")
    with zipfile.ZipFile(z, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        group, array = bench.zarr_zip_writers(zf)
        bench.zarr_skeleton(group, array, [("cell", bench.CELLS), ("gene", bench.GENES), ("item", 100)])
        array(MATRIX + "/other", "<f4", [bench.GENES, bench.CELLS], source=matrix)
        for i in range(SMALL):
            array(f"vectors/item/p{i}", "<f4", [100], small)
    return d, z


# ---------------------------------------------------------------- rows

def pct(samples, q):
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def measure_source(bench, source, rounds, payload):
    """Idle and during-commit samples of each probe, over `rounds` commits of a new 1 GiB matrix."""
    idle = {"small": [], "random": [], "seq": []}
    busy = {"small": [], "random": [], "seq": []}
    commits = []
    m = bench.Mount(source, "--view", "files")
    try:
        other = os.path.join(m.path, MATRIX, "other.data")
        bench.dd(other)  # warm, like the idle figure
        for r in range(rounds):
            p = Probes(m.path)
            time.sleep(IDLE_SECONDS)
            for kind, samples in p.stop().items():
                idle[kind].extend(samples)
            name = os.path.join(m.path, MATRIX, f"new{r}")
            with open(name + ".json", "w") as f:
                f.write('{"format":"dense","eltype":"Float32"}\n')
            p = Probes(m.path)
            time.sleep(0.5)
            start = time.perf_counter()
            subprocess.run(["sh", "-c", 'cp "$1" "$2" && sync "$2"', "sh", payload, name + ".data"], check=True)
            commits.append(time.perf_counter() - start)
            for kind, samples in p.stop().items():
                busy[kind].extend(samples)
    finally:
        m.close()
    return idle, busy, commits


def commit_rows(bench, rounds, files_dir, rows):
    rounds = max(1, min(rounds, 2))
    payload = os.path.join(files_dir, MATRIX, "fraction.data")
    work = os.path.join(bench.WORK, f"commit-{os.getpid()}")
    os.makedirs(work)
    try:
        sources = make_sources(bench, work, files_dir)
        bench.recache(payload)
        for kind, source in zip(("directory", "ZIP"), sources):
            idle, busy, commits = measure_source(bench, source, rounds, payload)
            what = f"commit of 1 GiB into a {kind} source (cp + close + sync: median {statistics.median(commits):.3g} s)"
            for probe_kind, label in (("small", "open+read of small files"), ("random", "4 KiB random reads of another 1 GiB property")):
                for q, target in ((0.5, "information"), (0.99, "<= 5 ms")):
                    during, before = pct(busy[probe_kind], q) * 1e3, pct(idle[probe_kind], q) * 1e3
                    figure = f"{what}: {label}, p{int(q * 100)} latency during (idle)"
                    bench.log(f"{figure}: {during:.3g} ms ({before:.3g} ms idle; {len(busy[probe_kind])} samples)")
                    rows.append({"figure": figure, "mounted": during, "native": before, "unit": "ms",
                                 "ratio": during / before if before else None, "target": target,
                                 "met": during <= 5 if q == 0.99 else None})
            during = statistics.median(busy["seq"]) if busy["seq"] else float("nan")
            before = statistics.median(idle["seq"]) if idle["seq"] else float("nan")
            figure = f"{what}: sequential read of another 1 GiB property during vs idle (throughput ratio)"
            bench.log(f"{figure}: {during:.3g} s vs {before:.3g} s idle ({len(busy['seq'])} passes during)")
            rows.append({"figure": figure, "mounted": during, "native": before, "unit": "s",
                         "ratio": before / during if busy["seq"] else None, "target": ">= 0.8"})
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    if len(sys.argv) > 3 and sys.argv[1] == "--probe":
        probe(sys.argv[2], sys.argv[3], sys.argv[4:])
        return
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench

    def measure(args, row, rows):
        files_dir = os.path.join(bench.WORK, "big.daf")
        bench.make_filesdaf(files_dir)
        commit_rows(bench, args.rounds, files_dir, rows)

    bench.run_alone(lambda parser: None, measure)


if __name__ == "__main__":
    main()
