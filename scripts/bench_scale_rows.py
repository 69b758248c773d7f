"""The scale rows of scripts/bench (issue 12, point 3): listing and lookup at 100,000 and 1,000,000 entries.

For each archive (Zarr v2 and v3, 100k and 1M entries; built and cached by scripts/bench_scale.py) it mounts
daf-mount with both views and measures:
  - mount time until the daemon is ready, RssAnon after the mount and after `ls -lR` of the whole mount;
  - `ls -l` of the large directory `vectors/item` (a third or half of the entries) of each view;
  - `ls -lR` of each view;
  - a lookup + read of one small file right after a fresh mount (every path component looked up once);
each listing against the same listing of a native copy of the same tree on the bench's file system. The native
copies are made once (cached beside the archives, `scale-native/`) by walking the mount; their files are sparse
files of the same sizes, which `ls` cannot tell from written ones (it reads no content). Listings are medians
of 3 rounds (1 round for `ls -lR` at 1M entries); each listing runs on a fresh mount, so none is served from
what an earlier listing left in the kernel's caches (the native side is warm: its inodes are cached).

    python scripts/bench_scale_rows.py [--entries 100000|1000000 ...]   (alone: prints the rows)
"""
import os
import shutil
import statistics
import sys
import time

SIZES = (100_000, 1_000_000)
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


def first_read(bench, source, relative):
    """Seconds of open + read of `relative` (under the Zarr view) right after a fresh mount."""
    m = bench.Mount(source, "-o", "ro")
    try:
        path = os.path.join(views(m.path)["Zarr"], relative)
        start = time.perf_counter()
        with open(path, "rb") as f:
            f.read()
        return time.perf_counter() - start
    finally:
        m.close()


def scale_rows(bench, rounds, sizes, row, rows):
    """Adds the rows (see the module doc) for each archive size in `sizes` to `rows` (through `row` for those
    compared with a native listing)."""
    med = statistics.median
    rounds = min(rounds, 3)
    for entries in sizes:
        label = "100k" if entries == 100_000 else f"{entries // 1_000_000}M"
        for layout, source in archives(bench, entries):
            what = f"{label}-entry ZarrDaf {layout} ZIP"
            native_root = os.path.join(bench.WORK, "scale-native", os.path.basename(source))
            # Mount time and memory; the native copies of both views.
            mounts, rss_mount, rss_ls = [], [], []
            for i in range(rounds):
                m = bench.Mount(source, "-o", "ro")
                try:
                    mounts.append(m.seconds)
                    rss_mount.append(m.rss_anon_kib() / 1024)
                    if i == 0:  # one listing is enough for the memory it leaves
                        bench.timed(["ls", "-lR", m.path])
                        rss_ls.append(m.rss_anon_kib() / 1024)
                        if not all(os.path.exists(os.path.join(native_root, v, ".complete")) for v in views(m.path)):
                            bench.log("copying the tree of", source, "to", native_root)
                            for view, path in views(m.path).items():
                                native_copy(path, os.path.join(native_root, view))
                finally:
                    m.close()
            rss_target = "<= 150" if entries >= 1_000_000 else "<= 32"
            for name, values, unit, target in (
                    (f"mount of the {what} until usable", mounts, "s", "<= 2"),
                    (f"daemon RssAnon after mounting the {what}", rss_mount, "MiB", rss_target),
                    (f"daemon RssAnon after mounting the {what} and ls -lR of both views", rss_ls, "MiB", rss_target)):
                rows.append({"figure": name, "mounted": med(values), "native": None, "unit": unit, "ratio": None,
                             "target": target})
                bench.log(f"{name}: {med(values):.4g} {unit} (target {target})")
            # Listings, each on a fresh mount, interleaved with the native listing.
            for view in ("FilesDaf", "Zarr"):
                native_view = os.path.join(native_root, view)
                for tool, relative, n in (("ls -l", LARGE_DIR, rounds),
                                          ("ls -lR", "", 1 if entries >= 1_000_000 else rounds)):
                    def mounted():
                        m = bench.Mount(source, "-o", "ro")
                        try:
                            return bench.timed([*tool.split(), os.path.join(views(m.path)[view], relative)])
                        finally:
                            m.close()
                    native = os.path.join(native_view, relative)
                    t_m, t_n = bench.interleave(n, mounted, lambda: bench.timed([*tool.split(), native]))
                    where = f"of {LARGE_DIR}" if relative else "of the view"
                    row(f"{tool} {where}, {view} view of the {what} (time ratio)", t_m, t_n, "s", "<= 1.5",
                        higher_is_better=False)
            # Lookup + read of one small file right after the mount (its `.zarray` or `zarr.json`).
            doc = ".zarray" if layout == "v2" else "zarr.json"
            relative = f"{LARGE_DIR}/p{entries // 7}/{doc}"
            t = med([first_read(bench, source, relative) for _ in range(rounds)])
            name = f"lookup + read of one small file after mounting the {what}"
            rows.append({"figure": name, "mounted": t * 1000, "native": None, "unit": "ms", "ratio": None,
                         "target": "<= 1"})
            bench.log(f"{name}: {t * 1000:.3g} ms (target <= 1)")


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench as _bench

    def add_options(parser):
        parser.add_argument("--entries", type=int, action="append", help="archive sizes (default: 100k and 1M)")

    def measure(args, _row, rows):
        def compared(name, mounted, native, unit, target, higher_is_better=True):
            ratio = mounted / native
            rows.append({"figure": name, "mounted": mounted, "native": native, "unit": unit, "ratio": ratio,
                         "target": target})
            _bench.log(f"{name}: mounted {mounted:.4g} {unit}, native {native:.4g} {unit}, ratio {ratio:.3f}")
        scale_rows(_bench, args.rounds, args.entries or SIZES, compared, rows)
    _bench.run_alone(add_options, measure)
