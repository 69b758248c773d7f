"""The `--h5df` rows of scripts/bench (issue 32): `NAME.h5df` at the root of a `--h5df` mount of the bench's FilesDaf
directory (the 1 GiB Float32 matrix, a sparse matrix of 10^7 non-zeros and 10,000 small vectors: 10,003
properties): the time from mount to the first `stat` of the file answered (libhdf5 makes its structure then, on
first need; target <= 1 s), `cp` of the file against `cp` of a native file of the same size (the first copy itself,
back in the page cache as a first read leaves it; warm, throughput ratio, target >= 0.8), and the daemon's RssAnon
after the copies (target < 64 MiB plus the decode cache). The first copy is checked by `h5dump -H`.

    python scripts/bench_h5file.py [--rounds R]     (alone: builds and measures only these rows)
"""
import os
import statistics
import subprocess
import sys
import time


def build_seconds(bench, files_dir, name):
    """Mount, then time the first `stat` of the H5df file (its build); unmount."""
    m = bench.Mount(files_dir, "-o", "ro", "--h5df")
    try:
        start = time.perf_counter()
        os.stat(os.path.join(m.path, name))
        return time.perf_counter() - start
    finally:
        m.close()


def h5file_rows(bench, work, rounds, files_dir, row, rows):
    """Adds the rows with scripts/bench.py's helpers (`bench`: Mount, timed, recache, interleave, settled, log)."""
    name = os.path.basename(files_dir)[: -len(".daf")] + ".h5df"
    times = []
    while not times or (len(times) < rounds and not bench.settled(times)):
        times.append(build_seconds(bench, files_dir, name))
    t = statistics.median(times)
    rows.append({"figure": "first stat of NAME.h5df (its build) of 10,003 properties", "mounted": t, "native": None,
                 "unit": "s", "ratio": None, "target": "<= 1 s", "load": os.getloadavg()[0]})
    bench.log(f"build of the H5df file of 10,003 properties: {t:.3f} s ({len(times)} mounts)")
    copy = os.path.join(work, "h5file-copy.h5df")
    dst = os.path.join(work, "h5file-cp.h5df")
    m = bench.Mount(files_dir, "-o", "ro", "--h5df")
    try:
        mounted = os.path.join(m.path, name)
        size = os.stat(mounted).st_size
        first = bench.timed(["cp", mounted, copy])
        if os.path.getsize(copy) != size:
            raise RuntimeError(f"{mounted}: st_size {size}, copied {os.path.getsize(copy)}")
        subprocess.run(["h5dump", "-H", copy], check=True, stdout=subprocess.DEVNULL)
        bench.recache(copy)
        t_m, t_n = bench.interleave(rounds, lambda: bench.timed_cp(mounted, dst),
                                    lambda: bench.timed_cp(copy, dst))
        rss = m.rss_anon_kib()
    finally:
        m.close()
        if os.path.exists(copy):
            os.remove(copy)
    gib = size / 2**30
    row(f"cp of NAME.h5df ({gib:.2f} GiB, --h5df) vs cp of a native file of that size, warm (throughput ratio)",
        t_m, t_n, "s", ">= 0.8", load=os.getloadavg()[0])
    row("same, first cp (cold page cache of the mount; not a target)", first, t_n, "s", "-")
    rows.append({"figure": "anonymous memory (RssAnon) of a --h5df daemon after copying NAME.h5df", "mounted": rss / 1024,
                 "native": None, "unit": "MiB", "ratio": None, "target": "< 64 MiB + decode cache"})


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench

    def measure(args, row, rows):
        files_dir = os.path.join(bench.WORK, "big.daf")
        bench.make_filesdaf(files_dir)
        h5file_rows(bench, bench.WORK, args.rounds, files_dir, row, rows)

    bench.run_alone(lambda parser: None, measure)
