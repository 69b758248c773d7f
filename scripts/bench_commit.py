"""The commit rows of scripts/bench (issue 12, point 5: reads never wait for writes). While a 1 GiB dense matrix is
committed (a copy of 1 GiB into the FilesDaf view in 1 MiB writes, as `cp` does, then its close, then `fsync` of the
file, which for a ZIP source waits for the append) into a directory source and into a ZIP source, other processes
measure, side by side with the same probes on the idle mount just before (every probe file read once before the
first round, so that neither side counts a file's first lookup and decode):
  - `open` + `read` + `close` of small files (100 small vectors), p50, p99 and worst latency (target p99 <= 5 ms);
  - 4 KiB reads at random offsets of another 1 GiB property, p50, p99 and worst latency (target p99 <= 5 ms);
  - sequential reads of that whole 1 GiB property, throughput against its idle throughput (target >= 0.8).
Controls, marked as such: the same probes on the native directory while the same 1 GiB is copied and `fsync`ed
natively ("native control"), and through the FUSE floor ("FUSE floor": `examples/fuse_passthrough.rs`, a minimal
read-write passthrough filesystem with daf-mount's session settings, mounted over a copy of the directory source; the
1 GiB is written, closed and `fsync`ed through it, its I/O done by the kernel on the backing file as daf-mount's
staged files are; "FUSE floor, daemon I/O": the same with every read and write a `pread`/`pwrite` of the daemon).
The probes sleep 1 ms between samples (they sample, they do not load the machine). Each sample carries its start
time, so the slow ones (over 5 ms) during a commit are logged with the phase they fell in (write, close, fsync) and
kept in the JSON with the phases' durations. The sources are made under
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

from bench_ceiling import ExampleMount, build_example

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Which sources to measure (comma-separated words of "native control", "FUSE floor", "daemon I/O", "directory", "ZIP";
# all when unset).
KINDS = [k for k in os.environ.get("DAF_BENCH_COMMIT_KINDS", "").split(",") if k]
IDLE_SECONDS = 3.0  # of idle samples per round (about 2,000 small-file samples: enough for a p99)
SMALL = 100  # small vectors on the `item` axis
MATRIX = "matrices/cell/gene"
# DAF_FLOOR_BIN: an already built FUSE floor (then nothing is built), as DAF_MOUNT_BIN is for daf-mount.
FLOOR = os.environ.get("DAF_FLOOR_BIN", os.path.join(ROOT, "target", "release", "examples", "fuse_passthrough"))


# ---------------------------------------------------------------- probes (run as separate processes)

def probe(kind, until, paths):
    """Samples until the file `until` exists; prints the samples as JSON: [start (perf_counter), seconds] of each
    latency (`small`, `random`) or whole sequential read (`seq`)."""
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
            samples.append((start, time.perf_counter() - start))
            time.sleep(0.001)
        elif kind == "random":
            offset = rng.randrange(size // 4096) * 4096
            start = time.perf_counter()
            os.pread(fd, 4096, offset)
            samples.append((start, time.perf_counter() - start))
            time.sleep(0.001)
        else:
            start = time.perf_counter()
            with open(paths[0], "rb", buffering=0) as f:
                while f.readinto(buf):
                    if os.path.exists(until):
                        break
                else:
                    samples.append((start, time.perf_counter() - start))
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


# ---------------------------------------------------------------- what a commit takes from the readers

def _ticks(path):
    """utime + stime (clock ticks) and the name of the task whose stat file is `path`, or None."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    name = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    return name, int(fields[11]) + int(fields[12])


def _meminfo():
    with open("/proc/meminfo") as f:
        return {line.split(":")[0]: int(line.split()[1]) for line in f}


def _vmstat():
    with open("/proc/vmstat") as f:
        return {k: int(v) for k, v in (line.split() for line in f)}


def _cpu():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v), v[3], v[4]  # total, idle, iowait


class Resources:
    """Samples, every 50 ms while a commit runs, what it takes from the readers on this 2-core machine: the CPU of
    each thread of the daemon (by name: the append's copy and CRC run on `zip-append-io`, the tail write in the
    helper process) and of the probes, the machine's CPU (busy and waiting for I/O), the writeback it starts
    (pages written, dirty and under writeback at the peak), and the page cache it costs the readers (refaults of
    evicted file pages, major faults)."""
    TICK = os.sysconf("SC_CLK_TCK")

    def __init__(self, pids, probe_pids):
        self.pids, self.probe_pids = pids, probe_pids
        self.first, self.last = {}, {}
        self.dirty = self.writeback = 0
        self.cpu0, self.vm0 = _cpu(), _vmstat()
        self.sample()
        self.first = dict(self.last)
        self.stopped = False
        import threading
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def daemon_pids(self):
        """The mount's daf-mount processes (the daemon and its tail-writer helper; not the probes, whose command
        lines name files of the mount too)."""
        def comm(pid):
            try:
                with open(f"/proc/{pid}/comm") as f:
                    return f.read().strip()
            except OSError:
                return ""
        return [p for p in self.pids() if comm(p) == "daf-mount" and p not in self.probe_pids]

    def sample(self):
        for pid, role in [(p, "daemon") for p in self.daemon_pids()] + [(p, "probe") for p in self.probe_pids]:
            try:
                tasks = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tasks:
                got = _ticks(f"/proc/{pid}/task/{tid}/stat")
                if got:
                    self.last[(role, int(tid))] = got
        mem = _meminfo()
        self.dirty = max(self.dirty, mem.get("Dirty", 0))
        self.writeback = max(self.writeback, mem.get("Writeback", 0))

    def run(self):
        while not self.stopped:
            self.sample()
            time.sleep(0.05)

    def stop(self):
        self.stopped = True
        self.thread.join()
        self.sample()
        cpu1, vm1 = _cpu(), _vmstat()
        total = max(cpu1[0] - self.cpu0[0], 1)
        by_name = {}
        for key, (name, ticks) in self.last.items():
            spent = ticks - self.first.get(key, (name, 0))[1]
            label = f"{key[0]} {name}"
            by_name[label] = by_name.get(label, 0) + spent / self.TICK
        vm = lambda k: vm1.get(k, 0) - self.vm0.get(k, 0)
        return {"cpu_busy_cores": round(2 * (total - (cpu1[1] - self.cpu0[1]) - (cpu1[2] - self.cpu0[2])) / total, 2),
                "cpu_iowait_cores": round(2 * (cpu1[2] - self.cpu0[2]) / total, 2),
                "thread_cpu_s": {k: round(v, 2) for k, v in sorted(by_name.items(), key=lambda kv: -kv[1]) if v > 0},
                "written_mib": round(vm("nr_written") * 4096 / 2**20),
                "dirty_peak_mib": round(self.dirty / 1024), "writeback_peak_mib": round(self.writeback / 1024),
                "refaults": vm("workingset_refault_file") or vm("workingset_refault"),
                "major_faults": vm("pgmajfault")}


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


def copy_phases(payload, dst):
    """Copies `payload` to `dst` (1 MiB writes, as `cp` does it), closes it, then `fsync`s it (for a ZIP source that
    waits for the append); returns the perf_counter times (start, written, closed, synced)."""
    buf = bytearray(1 << 20)
    start = time.perf_counter()
    with open(payload, "rb", buffering=0) as src:
        out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            while n := src.readinto(buf):
                os.write(out, memoryview(buf)[:n])
            written = time.perf_counter()
        finally:
            os.close(out)
    closed = time.perf_counter()
    fd = os.open(dst, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return start, written, closed, time.perf_counter()


def split(samples, begin, end):
    """The samples ([start, seconds]) that overlap [begin, end)."""
    return [x for x in samples if x[0] < end and x[0] + x[1] >= begin]


def measure_source(bench, source, rounds, payload):
    """Idle and during-commit samples of each probe, over `rounds` commits of a new 1 GiB matrix, and where the
    slow ones fell: the commit's phases (`copy_phases`) and the probes' slow samples. Each round: the probes start
    (their first 0.5 s dropped: interpreters starting), sample IDLE_SECONDS of the idle mount, then the whole commit;
    every probe file is read once before the first round (its lookup and first decode are not what is measured)."""
    log = os.environ.get("DAF_BENCH_COMMIT_LOG")  # the daemon's log (say with RUST_LOG=daf_mount::lock_wait=debug)
    m = bench.Mount(source, "--view", "files", *(["--log-file", log] if log else []))
    try:
        return measure_at(bench, m.path, m.path, rounds, payload, m.pids)
    finally:
        m.close()


def floor_mount(backing, io):
    """The FUSE floor (`examples/fuse_passthrough.rs`) mounted on a fresh temp dir over the directory `backing`."""
    return ExampleMount(lambda path: [FLOOR, backing, path, "--io", io], "daf-floor-")


def build_floor():
    """Builds the FUSE floor unless DAF_FLOOR_BIN names one; the reason it cannot be used, or None."""
    return build_example("fuse_passthrough", FLOOR, "DAF_FLOOR_BIN")


def measure_floor(bench, directory, rounds, payload, io):
    """The FUSE floor: `measure_source`'s probes and copies through the passthrough mount of a copy of the directory
    source `directory` (large files hard-linked: only read), so the load is a FUSE write of 1 GiB and its fsync."""
    backing = os.path.join(os.path.dirname(directory), "floor.daf")

    def copy(src, dst):
        return os.link(src, dst) if os.path.getsize(src) > 1 << 20 else shutil.copy2(src, dst)
    shutil.copytree(directory, backing, copy_function=copy)
    try:
        floor = floor_mount(backing, io)
        try:
            return measure_at(bench, floor.path, floor.path, rounds, payload)
        finally:
            floor.close()
    finally:
        shutil.rmtree(backing, ignore_errors=True)


def measure_native(bench, directory, rounds, payload):
    """The control: `measure_source`'s probes and copies on the native directory `directory` (the directory
    source, unmounted), the 1 GiB copied into a native directory beside it (same file system as our staging area)."""
    target = os.path.join(os.path.dirname(directory), "native-target")
    os.makedirs(os.path.join(target, MATRIX), exist_ok=True)
    try:
        return measure_at(bench, directory, target, rounds, payload)
    finally:
        shutil.rmtree(target, ignore_errors=True)


def measure_at(bench, probed, into, rounds, payload, pids=lambda: []):
    """`measure_source` for probes of the tree `probed` while the 1 GiB is written under the tree `into` (`pids`: the
    processes of the mount, whose threads' CPU is counted, with the machine's, by `Resources`)."""
    idle = {"small": [], "random": [], "seq": []}
    busy = {"small": [], "random": [], "seq": []}
    commits, phases, slow = [], [], []
    taken = []
    other = os.path.join(probed, MATRIX, "other.data")
    bench.dd(other)  # warm, like the idle figure
    for i in range(SMALL):
        with open(os.path.join(probed, f"vectors/item/p{i}.data"), "rb") as f:
            f.read()
    for r in range(rounds):
        name = os.path.join(into, MATRIX, f"new{r}")
        with open(name + ".json", "w") as f:
            f.write('{"format":"dense","eltype":"Float32"}\n')
        p = Probes(probed)
        time.sleep(0.5)
        idle_begin = time.perf_counter()
        time.sleep(IDLE_SECONDS)
        resources = Resources(pids, [proc.pid for proc in p.procs.values()])
        start, written, closed, synced = copy_phases(payload, name + ".data")
        taken.append(resources.stop())
        time.sleep(0.1)
        samples = p.stop()
        commits.append(synced - start)
        phases.append({"write": written - start, "close": closed - written, "sync": synced - closed})
        for kind, values in samples.items():
            idle[kind].extend(s for _, s in split(values, idle_begin, start))
            busy[kind].extend(s for _, s in split(values, start, synced))
            for t, seconds in split(values, start, synced):
                if kind != "seq" and seconds > 0.005:
                    phase = "write" if t < written else "close" if t < closed else "sync"
                    slow.append({"probe": kind, "at_s": round(t - start, 4), "ms": round(seconds * 1e3, 2),
                                 "phase": phase})
    bench.log(f"what each commit took (machine and threads, {len(taken)} rounds): {json.dumps(taken)}")
    phases[0]["taken"] = taken
    return idle, busy, commits, phases, slow


def commit_rows(bench, rounds, files_dir, rows):
    rounds = max(1, min(rounds, 3))
    payload = os.path.join(files_dir, MATRIX, "fraction.data")
    work = os.path.join(bench.WORK, f"commit-{os.getpid()}")
    os.makedirs(work)
    try:
        sources = make_sources(bench, work, files_dir)
        bench.recache(payload)
        kinds = [("native control", sources[0]), ("FUSE floor", sources[0]), ("FUSE floor, daemon I/O", sources[0]),
                 ("directory", sources[0]), ("ZIP", sources[1])]
        floor_missing = None
        for kind, source in kinds:
            if KINDS and not any(k in kind for k in KINDS):
                continue
            if kind.startswith("FUSE floor") and floor_missing is None:
                floor_missing = build_floor() or ""
            if kind.startswith("FUSE floor") and floor_missing:
                bench.log(f"{kind}: not built ({floor_missing})")
                rows.append({"figure": f"{kind} (control): commit of 1 GiB through a passthrough FUSE mount: not built",
                             "mounted": None, "native": None, "unit": "ms", "ratio": None,
                             "target": "information (control)", "error": f"not built: {floor_missing}"})
                continue
            if kind.startswith("FUSE floor"):
                io = "daemon" if "daemon" in kind else "kernel"
                idle, busy, commits, phases, slow = measure_floor(bench, source, rounds, payload, io)
                what = (f"{kind} (control): 1 GiB copied through a passthrough FUSE mount of a copy of the directory "
                        f"source ({io} I/O) while it is probed through that mount (cp + close + sync: median "
                        f"{statistics.median(commits):.3g} s)")
            elif kind == "native control":
                idle, busy, commits, phases, slow = measure_native(bench, source, rounds, payload)
                what = (f"native control: 1 GiB copied into a native directory while the directory source is probed "
                        f"natively (cp + close + sync: median {statistics.median(commits):.3g} s)")
            else:
                idle, busy, commits, phases, slow = measure_source(bench, source, rounds, payload)
                what = (f"commit of 1 GiB into a {kind} source (cp + close + sync: median "
                        f"{statistics.median(commits):.3g} s)")
            bench.log(f"{kind} source: commit phases (s) {phases}; probe samples over 5 ms during it: "
                      f"{slow if slow else 'none'}")
            samples = {k: len(v) for k, v in busy.items()}
            for probe_kind, label in (("small", "open+read of small files"), ("random", "4 KiB random reads of another 1 GiB property")):
                # The worst sample too: a probe blocked for a while (the swap under the state lock) is one sample,
                # which a p99 of a few thousand does not show.
                for q, target in ((0.5, "information"), (0.99, "<= 5 ms"), (1.0, "information")):
                    during, before = pct(busy[probe_kind], q) * 1e3, pct(idle[probe_kind], q) * 1e3
                    quantile = "worst" if q == 1.0 else f"p{int(q * 100)}"
                    figure = f"{what}: {label}, {quantile} latency during (idle)"
                    bench.log(f"{figure}: {during:.3g} ms ({before:.3g} ms idle; {len(busy[probe_kind])} samples)")
                    control = kind == "native control" or kind.startswith("FUSE floor")
                    rows.append({"figure": figure, "mounted": during, "native": before, "unit": "ms",
                                 "ratio": during / before if before else None,
                                 "target": "information (control)" if control else target,
                                 "met": during <= 5 if q == 0.99 and not control else None,
                                 "commit_phases_s": phases, "samples": samples,
                                 "slow_samples": [x for x in slow if x["probe"] == probe_kind]})
            during = statistics.median(busy["seq"]) if busy["seq"] else float("nan")
            before = statistics.median(idle["seq"]) if idle["seq"] else float("nan")
            figure = f"{what}: sequential read of another 1 GiB property during vs idle (throughput ratio)"
            bench.log(f"{figure}: {during:.3g} s vs {before:.3g} s idle ({len(busy['seq'])} passes during)")
            rows.append({"figure": figure, "mounted": during, "native": before, "unit": "s",
                         "ratio": before / during if busy["seq"] else None, "target": ">= 0.8"})
            taken = phases[0].get("taken", [])
            if taken:
                # What the commit takes from the readers (issue 27, point 6): the median round's.
                for key, label, unit in (("cpu_busy_cores", "machine CPU busy (of 2 cores)", "cores"),
                                         ("cpu_iowait_cores", "machine CPU waiting for I/O (of 2 cores)", "cores"),
                                         ("written_mib", "written to disk", "MiB"),
                                         ("dirty_peak_mib", "dirty page cache at the peak", "MiB"),
                                         ("refaults", "refaults of evicted file pages", "pages")):
                    value = statistics.median(t[key] for t in taken)
                    rows.append({"figure": f"{what}: during it, {label}", "mounted": value, "native": None,
                                 "unit": unit, "ratio": None, "target": "information"})
                threads = {}
                for t in taken:
                    for name, seconds in t["thread_cpu_s"].items():
                        threads.setdefault(name, []).append(seconds)
                for name, values in sorted(threads.items(), key=lambda kv: -statistics.median(kv[1]))[:6]:
                    rows.append({"figure": f"{what}: during it, CPU of {name} (median of {len(values)})",
                                 "mounted": statistics.median(values), "native": None, "unit": "s", "ratio": None,
                                 "target": "information"})
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
