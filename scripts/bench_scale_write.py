"""The write rows of scripts/bench's scale rows (issue 12, points 3 and 5): commits into a 1,000,000-entry archive.

On writable mounts of a copy of the 1M-entry ZarrDaf v2 ZIP (made once per run under $DAF_BENCH_DIR, removed at
the end; the bench's archives stay read-only), ROUNDS commits each, in two settings: new scalars
(`scalars/NAME.json`) through a mount of the FilesDaf view alone, then new vectors (`vectors/item/NAME.json`, then
`NAME.data`, whose close commits the vector to an axis of 333,333) through a mount of both views (the default: the
commit also shows the vector's array in the Zarr view). Each commit's `create` + `write` + `close` calls are timed,
then `fsync` of its directory, which waits for the append to the archive. Meanwhile a reader in another process
loops over `stat` and `open` + `read` + `close` of unrelated small files (the `.json` of 64 vectors) and records
each operation's latency: the row is its worst operation from the first `create` until the `fsync` returned
(target <= 5 ms: reads never wait for writes), beside the reader's worst over as long an idle stretch before it
(the machine's own noise).

    python scripts/bench_scale_write.py [--entries N]      (alone: the bench's 1M v2 archive, or the N-entry one)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROUNDS = 2  # commits of each setting (the first append after a mount reads the archive: one sample of each)
READ_FILES = 64  # small files the reader cycles over
IDLE_SECONDS = 2.0  # idle sampling before the first commit


def reader(until, paths):
    """Until the file `until` exists: `stat` then `open` + `read` + `close` of each of `paths` in turn; prints
    [[end time (perf_counter), seconds], ...] of every operation as JSON."""
    samples = []
    i = 0
    while not os.path.exists(until):
        path = paths[i % len(paths)]
        i += 1
        start = time.perf_counter()
        os.stat(path)
        end = time.perf_counter()
        samples.append((end, end - start))
        start = end
        fd = os.open(path, os.O_RDONLY)
        os.read(fd, 4096)
        os.close(fd)
        end = time.perf_counter()
        samples.append((end, end - start))
        time.sleep(0.0005)
    print(json.dumps(samples))


def worst(samples, begin, end):
    """The longest operation that ended in [begin, end] or was still running at `end` (its end after it)."""
    inside = [seconds for done, seconds in samples if done >= begin and done - seconds <= end]
    return max(inside) if inside else float("nan")


def write_rows(bench, archive, vectors, rows):
    """Adds the rows (module doc) for writable mounts of a copy of `archive` (`vectors` vectors p0, p1, ... in
    `vectors/item`) to `rows`."""
    work = tempfile.mkdtemp(prefix="scale-write-", dir=bench.WORK)
    try:
        source = os.path.join(work, os.path.basename(archive))
        shutil.copyfile(archive, source)
        name = os.path.basename(archive).split(".")[0]
        scalar = json.dumps({"type": "Int64", "value": 7}).encode()
        descriptor = json.dumps({"format": "dense", "eltype": "Float32"}).encode()
        settings = [
            ("a new scalar through a mount of the FilesDaf view", ("--view", "files"), "",
             lambda r: [(f"scalars/bench_write_{r}.json", scalar)]),
            (f"a new vector of an axis of {vectors:,} through a mount of both views", (), f"{name}.daf/",
             lambda r: [(f"vectors/item/bench_write_{r}.json", descriptor),
                        (f"vectors/item/bench_write_{r}.data", bytes(4 * 4))]),
        ]
        for what, options, view, files in settings:
            commit_rows(bench, source, options, view, files, work, f"{what} of a copy of the 1M-entry ZarrDaf v2 "
                        f"ZIP ({os.path.basename(archive)})", vectors, rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def commit_rows(bench, source, options, view, files, work, what, vectors, rows):
    """Mounts `source` with `options` and commits ROUNDS times the `files(round)` (paths below the FilesDaf view at
    `view`, contents), a reader meanwhile (module doc); adds the two rows."""
    m = bench.Mount(source, *options)
    try:
        root = os.path.join(m.path, view)
        paths = [os.path.join(root, f"vectors/item/p{vectors * k // READ_FILES}.json") for k in range(READ_FILES)]
        until = os.path.join(work, "stop")
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--reader", until, *paths],
                                stdout=subprocess.PIPE, text=True)
        time.sleep(0.5)  # the reader's first pass: its files looked up
        idle_begin = time.perf_counter()
        time.sleep(IDLE_SECONDS)
        idle_end = time.perf_counter()
        windows, closes, durables = [], [], []
        for r in range(ROUNDS):
            begin = time.perf_counter()
            for rel, content in files(r):
                fd = os.open(os.path.join(root, rel), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                try:
                    os.write(fd, content)
                finally:
                    os.close(fd)
            closed = time.perf_counter()
            folder = os.open(os.path.dirname(os.path.join(root, rel)), os.O_RDONLY)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)
            end = time.perf_counter()
            windows.append((begin, closed, end))
            closes.append(closed - begin)
            durables.append(end - begin)
            time.sleep(0.5)
        with open(until, "w"):
            pass
        samples = json.loads(proc.communicate(timeout=120)[0] or "[]")
        os.remove(until)
        for rel, _ in files(0):
            if not os.path.exists(os.path.join(root, rel)):
                raise RuntimeError(f"{rel} is not in the mounted data set")
    finally:
        m.close()
    idle = worst(samples, idle_begin, idle_end)
    stalls = [worst(samples, b, e) for b, _, e in windows]
    stalls_close = [worst(samples, b, c) for b, c, _ in windows]
    figure = f"create + write + close of {what} (worst of {ROUNDS})"
    rows.append({"figure": figure, "mounted": max(closes), "native": None, "unit": "s", "ratio": None,
                 "target": "information", "samples": closes, "until_durable_s": durables})
    bench.log(f"{figure}: {', '.join(f'{c:.3g}' for c in closes)} s (until durable: "
              f"{', '.join(f'{d:.3g}' for d in durables)} s)")
    figure = (f"worst stall of a concurrent reader (stat, open+read of other small files) during that commit, "
              f"until durable (idle: worst over {IDLE_SECONDS:.0f} s)")
    rows.append({"figure": figure, "mounted": max(stalls) * 1e3, "native": idle * 1e3, "unit": "ms", "ratio": None,
                 "target": "<= 5 ms", "met": max(stalls) <= 0.005, "samples": [x * 1e3 for x in stalls],
                 "until_close_ms": [x * 1e3 for x in stalls_close]})
    bench.log(f"{figure}: {', '.join(f'{x * 1e3:.3g}' for x in stalls)} ms (until the close: "
              f"{', '.join(f'{x * 1e3:.3g}' for x in stalls_close)} ms; idle {idle * 1e3:.3g} ms; "
              f"{len(samples)} reader operations)")


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--reader":
        reader(sys.argv[2], sys.argv[3:])
        return
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench
    import bench_scale

    def add_options(parser):
        parser.add_argument("--entries", type=int, default=bench_scale.SCALE_ENTRIES)

    bench.run_alone(add_options, lambda args, row, rows: write_rows(
        bench, bench_scale.v2_path(bench, args.entries), args.entries // 3, rows))


if __name__ == "__main__":
    main()
