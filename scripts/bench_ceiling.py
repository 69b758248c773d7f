"""The FUSE-ceiling rows of scripts/bench (issue 12, point 1): daf-mount's ZIP-source rows against the smallest
FUSE filesystem serving the same member from one map with the same settings (`examples/fuse_ceiling.rs`: same fuser,
same session config and worker threads, FOPEN_KEEP_CACHE, 1 MiB readahead), side by side, interleaved, medians:
  first read (fresh mounts), re-read, four concurrent readers (warm), 4 KiB random re-reads (second pass);
  at most --rounds rounds, fewer once the samples agree (scripts/bench.py's `settled`).

    python scripts/bench_ceiling.py [--rounds R]     (alone: the bench's 1 GiB ZIP data set)
"""
import contextlib
import os
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# DAF_CEILING_BIN: an already built ceiling (then nothing is built), as DAF_MOUNT_BIN is for daf-mount.
CEILING = os.environ.get("DAF_CEILING_BIN", os.path.join(ROOT, "target", "release", "examples", "fuse_ceiling"))
MEMBER = "matrices/cell/gene/fraction/0.0"


class ExampleMount:
    """A FUSE example mounted on a fresh temp dir (`command(mountpoint)`: its command line; it prints READY once
    mounted), until `close()`. The ceilings and the commit rows' floor are such examples."""

    def __init__(self, command, prefix):
        self.path = tempfile.mkdtemp(prefix=prefix)
        argv = command(self.path)
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if self.proc.stdout.readline().strip() != "READY":
            self.proc.kill()
            self.proc.wait()
            os.rmdir(self.path)
            raise RuntimeError(f"{os.path.basename(argv[0])} did not start")

    def close(self):
        subprocess.run(["fusermount3", "-u", self.path], capture_output=True)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.rmdir(self.path)


def build_example(name, binary, variable):
    """Builds examples/NAME.rs in release unless the environment variable `variable` names a built one (`binary`);
    the reason it cannot be used, or None."""
    if variable not in os.environ:
        done = subprocess.run(["cargo", "build", "--release", "--quiet", "--example", name], cwd=ROOT,
                              capture_output=True, text=True)
        if done.returncode != 0:
            return f"cargo build --example {name} failed: {done.stderr.strip()[-300:]}"
    return None if os.access(binary, os.X_OK) else f"{binary} not found"


class Ceiling(ExampleMount):
    """The ceiling filesystem mounted on a fresh temp dir, serving one byte range as `data`."""

    def __init__(self, archive, start, length):
        super().__init__(lambda path: [CEILING, archive, str(start), str(length), path], "daf-ceiling-")
        self.data = os.path.join(self.path, "data")


@contextlib.contextmanager
def ceiling_on(bench, path, start, length):
    """The ceiling serving `length` bytes of `path` from `start`, built first (None, logged, if it cannot be), and
    closed after."""
    missing = build_example("fuse_ceiling", CEILING, "DAF_CEILING_BIN")
    if missing:
        bench.log(f"the FUSE ceiling rows are left out: {missing}")
        yield None
        return
    c = Ceiling(path, start, length)
    try:
        yield c
    finally:
        c.close()


# Pairs of fresh mounts the four-readers row is measured on (see `ceiling_rows`).
PAIRS = 4


def ceiling_rows(bench, rounds, zip_path, row):
    """Measures the rows with scripts/bench.py's helpers (`bench`: Mount, dd, random_reads, entry_range)."""
    missing = build_example("fuse_ceiling", CEILING, "DAF_CEILING_BIN")
    if missing:
        raise RuntimeError(missing)
    start, length = bench.entry_range(zip_path, MEMBER)
    bench.recache(zip_path)
    firsts = {"daf": [], "ceiling": []}
    seconds = {"daf": [], "ceiling": []}
    for _ in range(rounds):  # fresh mounts each round: the first read fills the FUSE page cache
        m = bench.Mount(zip_path, "-o", "ro", "--view", "files")
        c = Ceiling(zip_path, start, length)
        try:
            view = os.path.join(m.path, "matrices/cell/gene/fraction.data")
            if os.path.getsize(view) != os.path.getsize(c.data):
                raise RuntimeError("the two files differ in size")
            # Each round fills the two page caches in the other order than the round before
            # (see the four readers below: where a filling lands changes the re-read's speed).
            order = [("daf", view), ("ceiling", c.data)]
            if len(firsts["daf"]) % 2:
                order.reverse()
            for name, path in order:
                firsts[name].append(bench.dd(path))
            for name, path in order:
                seconds[name].append(bench.dd(path))
        finally:
            m.close()
            c.close()
        if bench.settled(firsts["daf"], firsts["ceiling"], seconds["daf"], seconds["ceiling"]):
            break
    med = statistics.median
    row("ZIP source vs FUSE ceiling: first read of the 1 GiB member (throughput ratio)",
        med(firsts["daf"]), med(firsts["ceiling"]), "s", ">= 0.9")
    row("ZIP source vs FUSE ceiling: re-read (throughput ratio)",
        med(seconds["daf"]), med(seconds["ceiling"]), "s", ">= 0.95")
    # Four readers of a warm file are served by the kernel's page cache alone (daf-mount gets the
    # four opens and releases, and spends no CPU tick meanwhile), and the speed of that cache
    # differs from one filling of it to another by up to 1.5x either way (where its pages landed
    # in this VM's memory): so the row is measured on PAIRS pairs of fresh mounts, each pair
    # filled in the other order than the one before, and the medians of all are compared.
    fours = {"daf": [], "ceiling": []}
    for pair in range(PAIRS):
        m = bench.Mount(zip_path, "-o", "ro", "--view", "files")
        c = Ceiling(zip_path, start, length)
        try:
            view = os.path.join(m.path, "matrices/cell/gene/fraction.data")
            for path in ([view, c.data] if pair % 2 == 0 else [c.data, view]):
                bench.dd(path)
            for _ in range(min(rounds, 3)):
                fours["daf"].append(bench.four(lambda: bench.dd(view)))
                fours["ceiling"].append(bench.four(lambda: bench.dd(c.data)))
        finally:
            m.close()
            c.close()
    row("ZIP source vs FUSE ceiling: four concurrent readers, warm (aggregate throughput ratio)",
        med(fours["daf"]), med(fours["ceiling"]), "s", ">= 0.9")
    m = bench.Mount(zip_path, "-o", "ro", "--view", "files")
    c = Ceiling(zip_path, start, length)
    try:
        view = os.path.join(m.path, "matrices/cell/gene/fraction.data")
        bench.dd(view)
        bench.dd(c.data)
        bench.random_reads(view, 0, length)
        bench.random_reads(c.data, 0, length)
        t_m, t_c = bench.interleave(rounds, lambda: bench.random_reads(view, 0, length),
                                    lambda: bench.random_reads(c.data, 0, length))
        row("ZIP source vs FUSE ceiling: 4 KiB random re-reads (throughput ratio)", t_m, t_c, "s", ">= 0.9")
    finally:
        m.close()
        c.close()


def main():
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench

    def measure(args, row, rows):
        files_dir = os.path.join(bench.WORK, "big.daf")
        bench.make_filesdaf(files_dir)
        zip_path = os.path.join(bench.WORK, "big.daf.zarr.zip")
        bench.make_zarr_zip(files_dir, zip_path)
        ceiling_rows(bench, args.rounds, zip_path, row)

    bench.run_alone(lambda parser: None, measure)


if __name__ == "__main__":
    main()
