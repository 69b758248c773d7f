"""The scale rows of scripts/bench (issue 12, point 3): listing and lookup at 100,000 and 1,000,000 entries.

For each archive (Zarr v2 and v3, 100k and 1M entries; built and cached by scripts/bench_scale.py) it mounts
daf-mount with both views and measures:
  - mount time until the daemon is ready, RssAnon after the mount and after `ls -lR` of both views;
  - `ls -l` of the large directory `vectors/item` (a third or half of the entries) of each view;
  - `ls -lR` of each view;
  - lookup + read of small files right after a fresh mount: LOOKUPS distinct `.zarray`/`zarr.json` files spread
    over the large directory, each `open` + `read` + `close` timed in this process (os.open: Python's `open()`
    would add an `ioctl(TCGETS)` round trip for its `isatty` check), the archive's pages cached first (untimed
    `cat`: a member's page read from disk is the disk's time, not the mount's); the row is their median, the
    slowest is logged;
each listing against the same listing of a native copy of the same tree on the bench's file system; and below 1M
entries, the listing ceiling: `ls -lR` of the native copy of the Zarr view served from memory by the smallest FUSE
filesystem with daf-mount's settings (`examples/fuse_tree_ceiling.rs`, mounted afresh each round after mount A),
against daf-mount's listing and against the native one (what any FUSE filesystem pays: the bound of the target);
both these listings may then take twice as long as the others before they are stopped.
The native
copies are made once (cached beside the archives, `scale-native/`) by walking the mount; their files are sparse
files of the same sizes, which `ls` cannot tell from written ones (it reads no content).

Each listing of a view is the first of that view on its mount, so none is served from what an earlier listing
left in the kernel's caches (the two views are separate trees of inodes: listing one does not warm the other's;
what the daemon itself caches, both views share); the native side is warm (an untimed `du -s` of the native copy
first reads back what the kernel evicted since the last run, unless a sample of its entries shows it cached:
`native_is_cached`). Two mounts per round: mount A, `ls -lR` of the Zarr view then of the FilesDaf view (then
RssAnon); mount B, the lookups + reads, then `ls -l vectors/item` of each view. A mounted listing still running at
LIST_FACTOR times its native listing (at least LIST_FLOOR s) is stopped: its row then shows a lower bound (>=),
which already decides the target (<= 1.5), and later rounds skip that listing. At 1M entries a round is done
once; below, rounds go on (at most 3, or --rounds) until they take ROUND_BUDGET s for the archive.

    python scripts/bench_scale_rows.py [--entries 100000|1000000 ...]   (alone: prints the rows)
"""
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from contextlib import nullcontext

from bench_ceiling import ExampleMount, build_example

SIZES = (100_000, 1_000_000)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# DAF_TREE_CEILING_BIN: an already built listing ceiling, as DAF_CEILING_BIN is for the read ceiling.
TREE_CEILING = os.environ.get("DAF_TREE_CEILING_BIN",
                              os.path.join(ROOT, "target", "release", "examples", "fuse_tree_ceiling"))
# The large directory of both archives, in both views.
LARGE_DIR = "vectors/item"


def archives(bench, entries):
    """(layout, path) of the archives of about `entries` entries: scripts/bench_scale.py builds both; without it
    (a branch without it) the v2 one alone, as scripts/bench.py builds its 100k archive."""
    try:
        import bench_scale
    except ImportError:
        name = {100_000: "e100k", 1_000_000: "e1m"}.get(entries, f"e{entries}")
        path = os.path.join(bench.WORK, f"{name}.daf.zarr.zip")
        bench.make_entries_zip(path, 33_300 if entries == 100_000 else entries // 3)
        return [("v2", path)]
    return [("v2", bench_scale.v2_path(bench, entries)), ("v3", bench_scale.v3_path(bench, entries))]


def views(mount_path):
    """The view directories of a `--view both` mount: {"FilesDaf": path, "Zarr": path}."""
    out = {}
    for name in os.listdir(mount_path):
        out["Zarr" if name.endswith(".daf.zarr") else "FilesDaf"] = os.path.join(mount_path, name)
    return out


def native_copy(src, dst):
    """A copy of the tree `src` at `dst`: the same directories, files of the same sizes (sparse)."""
    if os.path.exists(os.path.join(dst, ".complete")):
        return
    shutil.rmtree(dst, ignore_errors=True)
    for root, dirs, files in os.walk(src):
        target = os.path.join(dst, os.path.relpath(root, src))
        os.makedirs(target, exist_ok=True)
        for name in files:
            with open(os.path.join(target, name), "wb") as f:
                f.truncate(os.stat(os.path.join(root, name)).st_size)
    with open(os.path.join(dst, ".complete"), "w"):
        pass


LIST_FACTOR = 1.52  # a mounted listing is stopped once it has taken this many times the native one (over 1.5) ...
LIST_FLOOR = 5  # ... and at least this many seconds
ROUND_BUDGET = 40  # seconds of rounds per archive after which a smaller archive gets no further round
LOOKUPS = 8  # distinct small files looked up and read on each fresh mount B


def listing(bench, command, limit=None):
    """(seconds, stopped) of `command` (an ls) with its output discarded; stopped (killed) after `limit` s."""
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    start = time.perf_counter()
    try:
        code = proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        bench.log(f"stopped after {limit:.0f} s: {' '.join(command)}")
        return time.perf_counter() - start, True
    if code != 0:
        raise subprocess.CalledProcessError(code, command)
    return time.perf_counter() - start, False


def first_reads(view, paths):
    """Seconds of `open` + `read` + `close` of each of `paths` (relative to `view`), in this process."""
    out = []
    for relative in paths:
        path = os.path.join(view, relative)
        start = time.perf_counter()
        fd = os.open(path, os.O_RDONLY)
        try:
            while os.read(fd, 1 << 16):
                pass
        finally:
            os.close(fd)
        out.append(time.perf_counter() - start)
    return out


def lookup_paths(layout, vectors):
    """LOOKUPS small documents of the Zarr view spread over the large directory of `vectors` vectors."""
    doc = ".zarray" if layout == "v2" else "zarr.json"
    return [f"{LARGE_DIR}/p{vectors * (k + 1) // (LOOKUPS + 1) + 7}/{doc}" for k in range(LOOKUPS)]


def native_is_cached(native_root, layout, vectors, probes=300, slow=0.0005):
    """Whether a sample of the native copy's entries is in the kernel's caches: `probes` random vectors, each a stat
    of its FilesDaf file and a listing + stat of its Zarr directory, none slower than `slow` s but 2 (a cold entry
    needs the disk: a cached one takes microseconds; a few slow ones are the scheduler). Stops at the third slow."""
    import random
    rng = random.Random()
    late = 0
    for _ in range(probes):
        i = rng.randrange(vectors)
        start = time.perf_counter()
        try:
            os.lstat(os.path.join(native_root, "FilesDaf", LARGE_DIR, f"p{i}.json"))
            todo = [os.path.join(native_root, "Zarr", LARGE_DIR, f"p{i}")]
            while todo:
                with os.scandir(todo.pop()) as entries:
                    for e in entries:
                        if e.is_dir(follow_symlinks=False):
                            todo.append(e.path)
                        e.stat(follow_symlinks=False)
        except OSError:
            return False
        if time.perf_counter() - start > slow:
            late += 1
            if late > 2:
                return False
    return True


def one_round(bench, source, native_root, lookups, s, with_ceiling):
    """One round of the archive `source`: the native listings, then mount A, the listing ceiling (if
    `with_ceiling`), mount B (module doc); appends each figure to the lists of `s`. A listing of a mount stopped in
    an earlier round is not done again (its row is decided); the native Zarr listing is, for the ceiling."""
    limits = {}
    skip = {(tool, view) for tool in ("ls -lR", "ls -l") for view in ("FilesDaf", "Zarr")
            if any(s[(tool, view, "stopped")])}
    for view in ("FilesDaf", "Zarr"):
        for tool, relative in (("ls -lR", ""), ("ls -l", LARGE_DIR)):
            if (tool, view) in skip and not (with_ceiling and (tool, view) == ("ls -lR", "Zarr")):
                continue
            seconds = bench.timed([*tool.split(), os.path.join(native_root, view, relative)])
            s[(tool, view, "native")].append(seconds)
            limits[(tool, view)] = max(LIST_FLOOR, LIST_FACTOR * seconds)
    if with_ceiling:  # the Zarr view's listing and the ceiling's go to their end (or twice as long)
        limits[("ls -lR", "Zarr")] = 2 * max(LIST_FLOOR, LIST_FACTOR * s[("ls -lR", "Zarr", "native")][-1])

    def timed_listing(m, tool, view):
        if (tool, view) in skip:
            return None
        relative = LARGE_DIR if tool == "ls -l" else ""
        seconds, stopped = listing(bench, [*tool.split(), os.path.join(views(m.path)[view], relative)],
                                   limits[(tool, view)])
        s[(tool, view, "mounted")].append(seconds)
        s[(tool, view, "stopped")].append(stopped)
        return stopped

    m = bench.Mount(source, "-o", "ro")  # A
    try:
        s["mount"].append(m.seconds)
        s["rss_mount"].append(m.rss_anon_kib() / 1024)
        done = [timed_listing(m, "ls -lR", "Zarr"), timed_listing(m, "ls -lR", "FilesDaf")]
        if None not in done:  # RssAnon after both listings (after part of one if it was stopped)
            s["rss_ls"].append(m.rss_anon_kib() / 1024)
            s["rss_ls_partial"].append(any(done))
    finally:
        m.close()
    if with_ceiling:
        c = ExampleMount(lambda path: [TREE_CEILING, os.path.join(native_root, "Zarr"), path], "daf-tree-ceiling-")
        try:
            seconds, stopped = listing(bench, ["ls", "-lR", c.path], limits[("ls -lR", "Zarr")])
            s["ceiling"].append(seconds)
            s["ceiling_stopped"].append(stopped)
        finally:
            c.close()
    m = bench.Mount(source, "-o", "ro")  # B
    try:
        s["mount"].append(m.seconds)
        s["rss_mount"].append(m.rss_anon_kib() / 1024)
        s["lookup"].extend(first_reads(views(m.path)["Zarr"], lookups))
        timed_listing(m, "ls -l", "FilesDaf")
        timed_listing(m, "ls -l", "Zarr")
    finally:
        m.close()


def scale_rows(bench, rounds, sizes, row, rows, sections=None, wanted=None):
    """Adds the rows (see the module doc) for each archive size in `sizes` to `rows` (through `row` for those
    compared with a native listing), each archive in its own section of `sections` (bench_report.Sections) if
    given, and only the sections `wanted(name)` accepts if given; then the commit into a copy of the 1M-entry v2
    archive (scripts/bench_scale_write.py) if 1M is among `sizes`. Returns the mount times of the 100k-entry v2
    archive (scripts/bench's own 100k archive)."""
    mounts_100k = []
    for entries in sizes:
        label = "100k" if entries == 100_000 else f"{entries // 1_000_000}M"
        for layout, source in archives(bench, entries):
            what = f"{label}-entry ZarrDaf {layout} ZIP"
            name = f"scale: {what} (scripts/bench_scale_rows.py)"
            if wanted and not wanted(name):
                continue
            with sections(name, rows) if sections else nullcontext():
                s = scale_archive(bench, rounds, entries, layout, source, what, row, rows)
            if entries == 100_000 and layout == "v2":
                mounts_100k = s["mount"]
    if 1_000_000 in sizes:
        import bench_scale_write
        name = "scale: commit into a copy of the 1M-entry ZarrDaf v2 ZIP (scripts/bench_scale_write.py)"
        if not wanted or wanted(name):
            with sections(name, rows) if sections else nullcontext():
                bench_scale_write.write_rows(bench, archives(bench, 1_000_000)[0][1], 1_000_000 // 3, rows)
    return mounts_100k


def scale_archive(bench, rounds, entries, layout, source, what, row, rows):
    """The rows of one archive; returns its samples."""
    med = statistics.median
    native_root = os.path.join(bench.WORK, "scale-native", os.path.basename(source))
    m = None
    if not all(os.path.exists(os.path.join(native_root, v, ".complete")) for v in ("FilesDaf", "Zarr")):
        m = bench.Mount(source, "-o", "ro")
        try:
            bench.log("copying the tree of", source, "to", native_root, "(once)")
            for view, path in views(m.path).items():
                native_copy(path, os.path.join(native_root, view))
        finally:
            m.close()
    # The native listings are of a warm tree (its inodes cached), as the mounted ones are of the daemon's memory:
    # a tree the kernel evicted since the last run is read back from disk here, untimed (skipped when a sample of
    # its entries is cached: a `du -s` of a cached 1M tree still takes 10-30 s).
    vectors = 33_300 if entries == 100_000 and layout == "v2" else entries // (3 if layout == "v2" else 2)
    if native_is_cached(native_root, layout, vectors):
        bench.log(f"{native_root}: a sample of its entries is cached, not read back")
    else:
        bench.log(f"warming {native_root}: {bench.timed(['du', '-s', '--dereference-args', native_root]):.1f} s")
    # The members the lookups read come from the page cache, as the native side's do.
    bench.log(f"caching {source}: {bench.timed(['cat', source]):.1f} s")
    lookups = lookup_paths(layout, vectors)
    s = defaultdict(list)
    began = time.perf_counter()
    with_ceiling = entries < 1_000_000 and tree_ceiling_built(bench)
    for _ in range(1 if entries >= 1_000_000 else min(rounds, 3)):
        one_round(bench, source, native_root, lookups, s, with_ceiling)
        if time.perf_counter() - began > ROUND_BUDGET:
            break
    n = len(s["mount"]) // 2
    rss_target = "<= 150" if entries >= 1_000_000 else "<= 32"
    partial = " (a listing was stopped: after part of it)" if any(s["rss_ls_partial"]) else ""
    for name, values, unit, target in (
            (f"mount of the {what} until usable", s["mount"], "s", "<= 2"),
            (f"daemon RssAnon after mounting the {what}", s["rss_mount"], "MiB", rss_target),
            (f"daemon RssAnon after mounting the {what} and ls -lR of both views{partial}", s["rss_ls"], "MiB",
             rss_target)):
        rows.append({"figure": name, "mounted": med(values), "native": None, "unit": unit, "ratio": None,
                     "target": target, "samples": len(values)})
        bench.log(f"{name}: {med(values):.4g} {unit} (target {target})")
    for view in ("FilesDaf", "Zarr"):
        for tool in ("ls -l", "ls -lR"):
            where = f"of {LARGE_DIR}" if tool == "ls -l" else "of the view"
            stopped = any(s[(tool, view, "stopped")])
            note = f", stopped after {max(s[(tool, view, 'mounted')]):.0f} s" if stopped else ""
            row(f"{tool} {where}, {view} view of the {what} (time ratio{note})", med(s[(tool, view, "mounted")]),
                med(s[(tool, view, "native")]), "s", "<= 1.5", higher_is_better=False, lower_bound=stopped,
                samples=len(s[(tool, view, "mounted")]), mounted_samples=s[(tool, view, "mounted")],
                native_samples=s[(tool, view, "native")])
    if with_ceiling:
        ceiling_rows(bench, what, s, rows)
    name = f"lookup + read of one small file after mounting the {what} (median of {LOOKUPS} files per mount)"
    t = med(s["lookup"])
    rows.append({"figure": name, "mounted": t * 1000, "native": None, "unit": "ms", "ratio": None,
                 "target": "<= 1", "samples": len(s["lookup"]), "slowest_ms": max(s["lookup"]) * 1000})
    bench.log(f"{name}: {t * 1000:.3g} ms (target <= 1; {len(s['lookup'])} files in {n} mount(s); slowest "
              f"{max(s['lookup']) * 1000:.3g} ms, first of each mount "
              f"{', '.join(f'{x * 1000:.3g}' for x in s['lookup'][::LOOKUPS])} ms)")
    return s


def tree_ceiling_built(bench):
    """Builds examples/fuse_tree_ceiling.rs (unless DAF_TREE_CEILING_BIN names one); False (logged) if it fails."""
    missing = build_example("fuse_tree_ceiling", TREE_CEILING, "DAF_TREE_CEILING_BIN")
    if missing:
        bench.log(f"no listing-ceiling rows: {missing}")
    return not missing


def ceiling_rows(bench, what, s, rows):
    """The Zarr view's `ls -lR` against the listing ceiling, and the ceiling against the native listing (the most
    any FUSE filesystem reaches): information rows, the ratios time ratios."""
    med = statistics.median
    ceiling, stopped = med(s["ceiling"]), any(s["ceiling_stopped"])
    ours, ours_stopped = med(s[("ls -lR", "Zarr", "mounted")]), any(s[("ls -lR", "Zarr", "stopped")])
    native = med(s[("ls -lR", "Zarr", "native")])
    for figure, mounted, reference, lower in (
            (f"ls -lR of the Zarr view of the {what} vs the FUSE tree ceiling serving its native copy from memory",
             ours, ceiling, ours_stopped and not stopped),
            (f"FUSE tree ceiling vs native: ls -lR of the native copy of the Zarr view of the {what} (the bound of "
             f"the <= 1.5 target)", ceiling, native, stopped)):
        ratio = mounted / reference
        rows.append({"figure": figure, "mounted": mounted, "native": reference, "unit": "s", "ratio": ratio,
                     "target": "information", "lower_bound": lower, "samples": len(s["ceiling"])})
        bench.log(f"{figure}: {mounted:.4g} s vs {reference:.4g} s, ratio {'>= ' if lower else ''}{ratio:.3f}"
                  f"{' (both listings stopped: no bound)' if ours_stopped and stopped else ''}")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench as _bench

    def add_options(parser):
        parser.add_argument("--entries", type=int, action="append", help="archive sizes (default: 100k and 1M)")

    _bench.run_alone(add_options, lambda args, row, rows: scale_rows(_bench, args.rounds, args.entries or SIZES,
                                                                      row, rows))
