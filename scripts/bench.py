"""Benchmarks for daf-mount (issue 4). See scripts/bench."""
import argparse
import json
import os
import random
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

import numpy as np

import bench_report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("DAF_MOUNT_BIN", os.path.join(ROOT, "target", "release", "daf-mount"))
WORK = os.environ.get("DAF_BENCH_DIR", "/var/tmp/daf-bench")
CELLS, GENES = 65536, 4096          # 65536 x 4096 Float32 = 1 GiB
NNZ = 10_000_000
SMALL = 10_000                      # small properties on a 100-entry axis


def log(*args):
    print(*args, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- data sets

def write_lines(path, names):
    with open(path, "w") as f:
        f.write("".join(n + "\n" for n in names))


def make_filesdaf(path):
    """FilesDaf 1.0: the 1 GiB dense matrix, a 10^7-non-zero sparse matrix, 10,000 small vectors."""
    if os.path.exists(os.path.join(path, "daf.json")):
        return
    log("building", path)
    for d in ["scalars", "axes", "vectors/cell", "vectors/gene", "vectors/item", "matrices/cell/gene",
              "matrices/gene/cell", "matrices/cell/cell", "matrices/gene/gene"]:
        os.makedirs(os.path.join(path, d), exist_ok=True)
    with open(os.path.join(path, "daf.json"), "w") as f:
        f.write('{"version":[1,0]}\n')
    write_lines(os.path.join(path, "axes/cell.txt"), [f"c{i}" for i in range(CELLS)])
    write_lines(os.path.join(path, "axes/gene.txt"), [f"g{i}" for i in range(GENES)])
    write_lines(os.path.join(path, "axes/item.txt"), [f"i{i}" for i in range(100)])
    m = os.path.join(path, "matrices/cell/gene")
    with open(os.path.join(m, "fraction.json"), "w") as f:
        f.write('{"format":"dense","eltype":"Float32"}\n')
    rng = np.random.default_rng(1)
    with open(os.path.join(m, "fraction.data"), "wb") as f:
        for _ in range(GENES // 256):
            f.write(rng.random(CELLS * 256, dtype=np.float32).tobytes())
    per_col = NNZ // GENES
    colptr = (np.arange(GENES + 1, dtype=np.int64) * per_col + 1)
    rowval = np.sort(rng.integers(1, CELLS + 1, (GENES, per_col), dtype=np.int32), axis=1)
    for c in range(GENES):  # strictly increasing rows per column
        rowval[c] = np.arange(1, per_col * 16 + 1, 16, dtype=np.int32)[:per_col]
    with open(os.path.join(m, "umis.json"), "w") as f:
        f.write('{"format":"sparse","eltype":"UInt16","indtype":"Int32"}\n')
    colptr.astype(np.int32).tofile(os.path.join(m, "umis.colptr"))
    rowval.ravel().tofile(os.path.join(m, "umis.rowval"))
    rng.integers(1, 1000, per_col * GENES, dtype=np.uint16).tofile(os.path.join(m, "umis.nzval"))
    v = os.path.join(path, "vectors/item")
    for i in range(SMALL):
        with open(os.path.join(v, f"p{i}.json"), "w") as f:
            f.write('{"format":"dense","eltype":"Float32"}\n')
        rng.random(100, dtype=np.float32).tofile(os.path.join(v, f"p{i}.data"))


def zarray(dtype, shape, strings=False):
    return json.dumps({"dtype": dtype, "filters": [{"id": "vlen-utf8"}] if strings else None, "shape": shape,
                       "order": "C", "zarr_format": 2, "chunks": shape, "fill_value": None, "compressor": None},
                      separators=(",", ":"))


def vlen(items):
    return struct.pack("<I", len(items)) + b"".join(struct.pack("<I", len(x)) + x for x in items)


def zarr_zip_writers(z):
    """`group(path)` and `array(path, dtype, shape, data=None, source=None, strings=False)`, which
    write a Zarr v2 group or one-chunk array (bytes `data`, or the file `source`) into ZipFile `z`."""
    def group(p):
        z.writestr((p + "/" if p else "") + ".zgroup", '{"zarr_format":2}')
        z.writestr((p + "/" if p else "") + ".zattrs", "{}")

    def array(p, dtype, shape, data=None, source=None, strings=False):
        z.writestr(p + "/.zarray", zarray(dtype, shape, strings))
        z.writestr(p + "/.zattrs", "{}")
        key = p + "/" + ".".join("0" * len(shape))
        if source:
            z.write(source, key)
        else:
            z.writestr(key, data)
    return group, array


def zarr_skeleton(group, array, axes):
    """A seed ZarrDaf's root, its groups for the axes cell, gene and item, and `axes`
    (`[(name, length)]`, entries named by the axis's initial and a number)."""
    group("")
    array("daf", "|u1", [2], bytes([1, 0]))
    for g in ["scalars", "axes", "vectors", "matrices", "vectors/cell", "vectors/gene", "vectors/item"]:
        group(g)
    for r in ["cell", "gene", "item"]:
        group("matrices/" + r)
        for c in ["cell", "gene", "item"]:
            group(f"matrices/{r}/{c}")
    for axis, n in axes:
        names = [(axis[0] + str(i)).encode() for i in range(n)]
        array("axes/" + axis, "|O", [n], vlen(names), strings=True)


def make_zarr_zip(files_path, path):
    """The same data as a seed ZarrDaf in a ZIP (stored entries), written by Python's zipfile."""
    if os.path.exists(path):
        return
    log("building", path)
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        group, array = zarr_zip_writers(z)
        zarr_skeleton(group, array, [("cell", CELLS), ("gene", GENES), ("item", 100)])
        m = os.path.join(files_path, "matrices/cell/gene")
        array("matrices/cell/gene/fraction", "<f4", [GENES, CELLS], source=os.path.join(m, "fraction.data"))
        group("matrices/cell/gene/umis")
        array("matrices/cell/gene/umis/colptr", "<i4", [GENES + 1], source=os.path.join(m, "umis.colptr"))
        array("matrices/cell/gene/umis/rowval", "<i4", [NNZ // GENES * GENES], source=os.path.join(m, "umis.rowval"))
        array("matrices/cell/gene/umis/nzval", "<u2", [NNZ // GENES * GENES], source=os.path.join(m, "umis.nzval"))
        v = os.path.join(files_path, "vectors/item")
        for i in range(SMALL):
            array(f"vectors/item/p{i}", "<f4", [100], source=os.path.join(v, f"p{i}.data"))
    os.rename(tmp, path)


def regular(key):
    """The ZipInfo of a regular file `key`, mode -rw-r--r-- as zip(1) writes it (zipfile.writestr with a name
    writes a mode without a file type, and fuse-zip then gives EIO for the entry)."""
    info = zipfile.ZipInfo(key, time.localtime()[:6])
    info.external_attr = 0o100644 << 16
    return info


def make_entries_zip(path, vectors):
    """A ZarrDaf ZIP with about 3 entries per small vector (10,000 or 100,000 entries in all)."""
    if os.path.exists(path):
        return
    log("building", path)
    with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_STORED) as z:
        for key, text in [(".zgroup", '{"zarr_format":2}'), (".zattrs", "{}"), ("daf/.zarray", zarray("|u1", [2])),
                          ("daf/.zattrs", "{}"), ("daf/0", bytes([1, 0]))]:
            z.writestr(regular(key), text)
        for g in ["scalars", "axes", "vectors", "matrices", "vectors/item", "matrices/item", "matrices/item/item"]:
            z.writestr(regular(g + "/.zgroup"), '{"zarr_format":2}')
            z.writestr(regular(g + "/.zattrs"), "{}")
        z.writestr(regular("axes/item/.zarray"), zarray("|O", [4], True))
        z.writestr(regular("axes/item/.zattrs"), "{}")
        z.writestr(regular("axes/item/0"), vlen([b"a", b"b", b"c", b"d"]))
        body = zarray("<f4", [4])
        for i in range(vectors):
            z.writestr(regular(f"vectors/item/p{i}/.zarray"), body)
            z.writestr(regular(f"vectors/item/p{i}/.zattrs"), "{}")
            z.writestr(regular(f"vectors/item/p{i}/0"), struct.pack("<4f", i, i, i, i))
    os.rename(path + ".tmp", path)


def make_axes_zip(path):
    """A ZarrDaf ZIP with just the cell and gene axes (for the copy benchmark)."""
    if os.path.exists(path):
        return
    with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_STORED) as z:
        for key, text in [(".zgroup", '{"zarr_format":2}'), (".zattrs", "{}"), ("daf/.zarray", zarray("|u1", [2])),
                          ("daf/.zattrs", "{}"), ("daf/0", bytes([1, 0]))]:
            z.writestr(key, text)
        for g in ["scalars", "axes", "vectors", "matrices", "matrices/cell", "matrices/cell/gene"]:
            z.writestr(g + "/.zgroup", '{"zarr_format":2}')
            z.writestr(g + "/.zattrs", "{}")
        for axis, n in [("cell", CELLS), ("gene", GENES)]:
            z.writestr(f"axes/{axis}/.zarray", zarray("|O", [n], True))
            z.writestr(f"axes/{axis}/.zattrs", "{}")
            z.writestr(f"axes/{axis}/0", vlen([(axis[0] + str(i)).encode() for i in range(n)]))
    os.rename(path + ".tmp", path)


# ---------------------------------------------------------------- helpers

class Mount:
    def __init__(self, source, *options):
        self.path = tempfile.mkdtemp(prefix="daf-bench-")
        start = time.perf_counter()
        done = subprocess.run([BIN, source, self.path, *options], capture_output=True, text=True)
        self.seconds = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(done.stderr)

    def pids(self):
        out = []
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        if self.path.encode() in f.read():
                            out.append(int(pid))
                except OSError:
                    pass
        return out

    def rss_anon_kib(self):
        total = 0
        for pid in self.pids():
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("RssAnon:"):
                        total += int(line.split()[1])
        return total

    def close(self):
        subprocess.run(["umount", self.path], capture_output=True)
        for _ in range(200):
            if not self.pids():
                break
            time.sleep(0.05)
        os.rmdir(self.path)


def recache(path):
    """Puts `path` in the page cache the way a first read from disk does: evict it, then read it.

    How a file's pages are cached depends on how they got there: small writes leave 4 KiB pages,
    while readahead of a cold file fills large folios (ext4 on Linux 6.16+), which native reads
    copy out about twice as fast. So every file a native figure reads gets the same history."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)


def large_folio_share(path, length=64 << 20):
    """Share of the first `length` bytes of `path` that the page cache holds in large folios
    (compound pages, from /proc/kpageflags), or None where that cannot be read (not root)."""
    import ctypes
    import mmap
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            size = min(os.fstat(fd).st_size, length) // 4096 * 4096
            m = mmap.mmap(fd, size, access=mmap.ACCESS_COPY)
        finally:
            os.close(fd)
        base = ctypes.addressof(ctypes.c_char.from_buffer(m))
        for offset in range(0, size, 4096):  # map every page (they are cached already)
            m[offset]
        large = 0
        with open("/proc/self/pagemap", "rb") as pagemap, open("/proc/kpageflags", "rb") as flags:
            for page in range(size // 4096):
                pagemap.seek((base // 4096 + page) * 8)
                entry = struct.unpack("<Q", pagemap.read(8))[0]
                flags.seek((entry & ((1 << 55) - 1)) * 8)
                large += (struct.unpack("<Q", flags.read(8))[0] >> 15) & 3 != 0  # compound head/tail
        return large / (size // 4096)
    except (OSError, ValueError, struct.error):
        return None


def timed(command):
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def timed_cp(src, dst):
    """Seconds of `cp SRC DST`; the copy is removed after."""
    seconds = timed(["cp", src, dst])
    os.remove(dst)
    return seconds


def dd(path, skip=0, count=None):
    args = ["dd", f"if={path}", "of=/dev/null", "bs=1M", "iflag=skip_bytes,count_bytes", f"skip={skip}"]
    if count is not None:
        args.append(f"count={count}")
    return timed(args)


def random_reads(path, offset, length, n=20000, seed=3):
    rng = random.Random(seed)
    positions = [offset + rng.randrange(0, length // 4096) * 4096 for _ in range(n)]
    fd = os.open(path, os.O_RDONLY)
    try:
        start = time.perf_counter()
        for p in positions:
            os.pread(fd, 4096, p)
        return time.perf_counter() - start
    finally:
        os.close(fd)


def entry_range(archive, name):
    with zipfile.ZipFile(archive) as z:
        info = z.getinfo(name)
    with open(archive, "rb") as f:
        f.seek(info.header_offset)
        header = f.read(30)
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    return info.header_offset + 30 + name_len + extra_len, info.file_size


def four(read):
    """Seconds for four concurrent runs of `read`."""
    threads = [threading.Thread(target=read) for _ in range(4)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


MIN_ROUNDS = 3  # rounds after which a figure whose samples agree within STABLE gets no more
STABLE = 0.10  # (max - min) / median of a figure's samples under which its median is taken as settled


def spread(samples):
    """(max - min) / median of `samples` (0 for fewer than two)."""
    if len(samples) < 2:
        return 0.0
    middle = statistics.median(samples)
    return (max(samples) - min(samples)) / middle if middle else float("inf")


def settled(*samples):
    """Whether each list of samples has MIN_ROUNDS samples within STABLE of each other: the caller's loop of
    rounds stops there (`--rounds` is the most it runs)."""
    return all(len(s) >= MIN_ROUNDS and spread(s) <= STABLE for s in samples)


def interleave(rounds, mounted, native):
    """Medians of `mounted()` and `native()` run alternately, at most `rounds` times (fewer once settled)."""
    a, b = [], []
    for _ in range(rounds):
        a.append(mounted())
        b.append(native())
        if settled(a, b):
            break
    return statistics.median(a), statistics.median(b)


# ---------------------------------------------------------------- main

# The sections that read the 1 GiB payload or its ZIP natively (scripts/bench recaches both before them).
PAYLOAD_READERS = ("directory source: reads and listings", "ZIP source: first read and re-read",
                   "FUSE ceiling (scripts/bench_ceiling.py)", "peers (scripts/bench_peers.py)",
                   "reads during commits (scripts/bench_commit.py)", "published ZIP (scripts/bench_publish.py)",
                   "four readers, zarr-python 3", "mount until usable; cp into a ZIP source")


def section_filter(words):
    """`wanted(name)`: whether the section `name` runs under `--sections words` (comma-separated, any of them
    contained in the name, case-insensitive; all sections when `words` is empty)."""
    chosen = [w.strip().lower() for w in words.split(",") if w.strip()]
    return lambda name: not chosen or any(w in name.lower() for w in chosen)


def run_alone(add_options, measure):
    """Measures only some rows (a row script run by itself, `scripts/bench_*.py`): `add_options(parser)`
    adds the script's options, `measure(args, row, rows)` measures; then prints the rows and the time it took."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    add_options(parser)
    args = parser.parse_args()
    os.makedirs(WORK, exist_ok=True)
    rows = []
    sections = bench_report.Sections()

    def row(name, mounted, native, unit, target, higher_is_better=True, **extra):
        ratio = native / mounted if higher_is_better else mounted / native
        rows.append({"figure": name, "mounted": mounted, "native": native, "unit": unit, "ratio": ratio,
                     "target": target, **extra})
        log(f"{name}: mounted {mounted:.4g} {unit}, native {native:.4g} {unit}, ratio {ratio:.3f} ({target})")
    with sections(os.path.basename(sys.argv[0]), rows):
        measure(args, row, rows)
    bench_report.print_rows(rows)
    bench_report.print_sections(sections)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5,
                        help=f"the most rounds of a figure (it stops at {MIN_ROUNDS} once its samples agree)")
    parser.add_argument("--json", default=os.path.join(ROOT, "bench-results.json"))
    parser.add_argument("--packed-mib", type=int, default=1024, help="size of the packed matrix (scripts/bench_packed.py)")
    parser.add_argument("--http-mib", type=int, default=1024, help="size of the remote matrix (scripts/bench_http.py)")
    parser.add_argument("--sections", default="",
                        help="run only the sections whose names contain one of these comma-separated words "
                             "(case-insensitive; e.g. 'peers,scale: 1M'); the data sets are always checked")
    args = parser.parse_args()
    os.makedirs(WORK, exist_ok=True)
    rows = []
    sections = bench_report.Sections()
    wanted = section_filter(args.sections)
    with sections("data sets (built once, then cached)", rows):
        files_dir = os.path.join(WORK, "big.daf")
        make_filesdaf(files_dir)
        zip_path = os.path.join(WORK, "big.daf.zarr.zip")
        make_zarr_zip(files_dir, zip_path)
        zip10k = os.path.join(WORK, "e10k.daf.zarr.zip")
        make_entries_zip(zip10k, 3300)
        zip100k = os.path.join(WORK, "e100k.daf.zarr.zip")
        make_entries_zip(zip100k, 33300)
        payload = os.path.join(files_dir, "matrices/cell/gene/fraction.data")
        size = os.path.getsize(payload)
        gib = size / 2**30
        start, length = entry_range(zip_path, "matrices/cell/gene/fraction/0.0")
        if any(wanted(name) for name in PAYLOAD_READERS):  # only for the sections whose native side reads them
            for path in (payload, zip_path):
                recache(path)

    def row(name, mounted, native, unit, target, higher_is_better=True, **extra):
        ratio = (native / mounted) if unit == "s" and higher_is_better else (mounted / native if native else float("nan"))
        rows.append({"figure": name, "mounted": mounted, "native": native, "unit": unit, "ratio": ratio, "target": target,
                     **extra})
        log(f"{name}: mounted {mounted:.4g} {unit}, native {native:.4g} {unit}, ratio {ratio:.3f} (target {target})")

    rss = []
    folios = {}
    mounts_100k = []
    if wanted("directory source: reads and listings"):
        with sections("directory source: reads and listings", rows):
            # 1. Sequential read, directory source, warm.
            m = Mount(files_dir, "-o", "ro", "--view", "files")
            view = os.path.join(m.path, "matrices/cell/gene/fraction.data")
            dd(view)
            t_m, t_n = interleave(args.rounds, lambda: dd(view), lambda: dd(payload))
            row("seq read 1 GiB, FilesDaf view of a directory, warm (throughput ratio)", t_m, t_n, "s", ">= 0.9")
            # 4. Random 4 KiB reads, second pass (directory source).
            random_reads(view, 0, size)
            random_reads(payload, 0, size)
            t_m, t_n = interleave(args.rounds, lambda: random_reads(view, 0, size), lambda: random_reads(payload, 0, size))
            row("4 KiB random reads, second pass (throughput ratio)", t_m, t_n, "s", ">= 0.8")
            # 6. ls -lR and find -ls over the 10,000-property data set.
            for name, tool in (("ls -lR", lambda p: ["ls", "-lR", p]), ("find -ls", lambda p: ["find", p, "-ls"])):
                t_m, t_n = interleave(args.rounds, lambda: timed(tool(m.path)), lambda: timed(tool(files_dir)))
                row(f"{name} over 10,000 properties (time ratio)", t_m, t_n, "s", "<= 1.5", higher_is_better=False)
            rss.append(m.rss_anon_kib())
            m.close()
    if wanted("ZIP source: first read and re-read"):
        with sections("ZIP source: first read and re-read", rows):
            # 2, 3. ZIP source: first read (fresh mount each round) and second read.
            firsts, seconds, natives = [], [], []
            for r in range(args.rounds):
                zm = Mount(zip_path, "-o", "ro", "--view", "files")
                zview = os.path.join(zm.path, "matrices/cell/gene/fraction.data")
                firsts.append(dd(zview))
                seconds.append(dd(zview))
                natives.append(dd(zip_path, start, length))
                if r == 0:  # What bounds the ratios of the ZIP rows: the page size of each side's cache.
                    folios = {"archive": large_folio_share(zip_path, start + (64 << 20)), "mounted": large_folio_share(zview)}
                rss.append(zm.rss_anon_kib())
                zm.close()
                if settled(firsts, seconds, natives):
                    break
            native = statistics.median(natives)
            row("seq read 1 GiB, ZIP source, first read (throughput ratio)", statistics.median(firsts), native, "s", ">= 0.4")
            row("seq read 1 GiB, ZIP source, second read (throughput ratio)", statistics.median(seconds), native, "s",
                ">= 0.75")
    # 13. The ZIP rows against the FUSE ceiling (issue 12: examples/fuse_ceiling.rs, scripts/bench_ceiling.py).
    if wanted("FUSE ceiling (scripts/bench_ceiling.py)"):
        with sections("FUSE ceiling (scripts/bench_ceiling.py)", rows):
            import bench_ceiling
            bench_ceiling.ceiling_rows(sys.modules[__name__], args.rounds, zip_path, row)
    # 14. The peers on the same ZIPs (issue 12: fuse-zip, archivemount, ratarmount; scripts/bench_peers.py).
    if wanted("peers (scripts/bench_peers.py)"):
        with sections("peers (scripts/bench_peers.py)", rows):
            import bench_peers
            bench_peers.peer_rows(sys.modules[__name__], args.rounds, zip_path, zip100k, rows)
    # 15. Decoded copies bounded (issue 12, point 4): RssAnon reading 1 GiB of compressed data (scripts/bench_decode.py).
    if wanted("decode cache (scripts/bench_decode.py)"):
        with sections("decode cache (scripts/bench_decode.py)", rows):
            import bench_decode
            bench_decode.decode_rows(sys.modules[__name__], WORK, 1, rows)
    # 16. Reads while a 1 GiB property is committed (issue 12, point 5; scripts/bench_commit.py).
    if wanted("reads during commits (scripts/bench_commit.py)"):
        with sections("reads during commits (scripts/bench_commit.py)", rows):
            import bench_commit
            bench_commit.commit_rows(sys.modules[__name__], args.rounds, files_dir, rows)
    # 17. Scale: mount, memory, listings and a lookup at 100k and 1M entries, Zarr v2 and v3 (issue 12 point 3;
    #     scripts/bench_scale_rows.py, archives from scripts/bench_scale.py), one section per archive.
    import bench_scale_rows
    mounts_100k = bench_scale_rows.scale_rows(sys.modules[__name__], args.rounds, bench_scale_rows.SIZES, row, rows,
                                              sections, wanted)
    # 12. cp of the published ZIP (--zip, issue 13) vs cp of the native ZIP, warm (scripts/bench_publish.py).
    if wanted("published ZIP (scripts/bench_publish.py)"):
        with sections("published ZIP (scripts/bench_publish.py)", rows):
            import bench_publish
            bench_publish.publish_row(sys.modules[__name__], WORK, args.rounds, zip_path, f"{gib:.0f} GiB", row)
    if wanted("four readers, zarr-python 3"):
        with sections("four readers, zarr-python 3", rows):
            # 9. Four concurrent readers, warm.
            zm = Mount(zip_path, "-o", "ro", "--view", "files")
            zview = os.path.join(zm.path, "matrices/cell/gene/fraction.data")
            dd(zview)
            t_m, t_n = interleave(args.rounds, lambda: four(lambda: dd(zview)),
                                  lambda: four(lambda: dd(zip_path, start, length)))
            row("four concurrent readers of the ZIP payload, warm (aggregate throughput ratio)", t_m, t_n, "s", ">= 0.7")
            rss.append(zm.rss_anon_kib())
            zm.close()
            # 5. zarr-python 3 reads the whole matrix: Zarr view vs a native Zarr v2 directory, same chunk.
            zarr_rows(args.rounds, files_dir, payload, row, rss)
    # 10. Packed 1 GiB matrix: FilesDaf view (decoded lazily by the daemon) vs zarr-python 3 on the same shard.
    if wanted("packed matrix (scripts/bench_packed.py)"):
        with sections("packed matrix (scripts/bench_packed.py)", rows):
            import bench_packed
            bench_packed.packed_row(sys.modules[__name__], WORK, args.rounds, args.packed_mib, row, rows)
    # 11. Remote data set over HTTP (issue 11): first read vs curl, re-read, mount time (scripts/bench_http.py).
    if wanted("HTTP source (scripts/bench_http.py)"):
        with sections("HTTP source (scripts/bench_http.py)", rows):
            import bench_http
            try:
                bench_http.http_rows(sys.modules[__name__], WORK, args.rounds, args.http_mib, SMALL, row, rows)
            except (RuntimeError, OSError, subprocess.CalledProcessError) as e:  # the other rows still get reported
                log(f"HTTP rows NOT MEASURED: {e}")
                rows.append({"figure": f"HTTP rows not measured: {str(e).strip()[:200]}", "mounted": float("nan"),
                             "native": None, "unit": "-", "ratio": None, "target": "-"})
    # Remote reads over an emulated link (20 ms a request, 100 MB/s a connection): the matrix vs curl and
    # aria2c -x 16, and zarr-python reading 10,000 arrays through the mount vs over HTTP with fsspec
    # (scripts/bench_link.py, scripts/slow_link.py).
    if wanted("emulated link (scripts/bench_link.py)"):
        with sections("emulated link (scripts/bench_link.py)", rows):
            import bench_link
            try:
                bench_link.link_rows(sys.modules[__name__], WORK, args.rounds, args.http_mib, 20, 100, row, rows)
                bench_link.peer_mount_rows(sys.modules[__name__], WORK, args.rounds, args.http_mib, 20, 100, row)
                # One round: fsspec reading 10,000 arrays one at a time takes minutes over the link.
                bench_link.zarr_rows(sys.modules[__name__], WORK, 1, SMALL, 20, 100, row)
            except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
                log(f"emulated link rows NOT MEASURED: {e}")
                rows.append({"figure": f"emulated link rows not measured: {str(e).strip()[:200]}",
                             "mounted": float("nan"), "native": None, "unit": "-", "ratio": None, "target": "-"})
    # H5df source: each view of a flat 1 GiB matrix vs a FilesDaf directory's, mount of 10,000 properties.
    if wanted("H5df source (scripts/bench_h5df.py)"):
        with sections("H5df source (scripts/bench_h5df.py)", rows):
            import bench_h5df
            bench_h5df.h5df_rows(sys.modules[__name__], WORK, args.rounds, files_dir, row, rows)
    # --h5df: NAME.h5df of the 1 GiB data set, its build at the first stat, cp vs a native file (scripts/bench_h5file.py).
    if wanted("H5df file (scripts/bench_h5file.py)"):
        with sections("H5df file (scripts/bench_h5file.py)", rows):
            import bench_h5file
            bench_h5file.h5file_rows(sys.modules[__name__], WORK, args.rounds, files_dir, row, rows)
    # The AnnData view: anndata.read_zarr and read_lazy against anndata's own copy (scripts/bench_anndata.py).
    if wanted("AnnData view (scripts/bench_anndata.py)"):
        with sections("AnnData view (scripts/bench_anndata.py)", rows):
            import bench_anndata
            bench_anndata.anndata_rows(sys.modules[__name__], WORK, args.rounds, row, rows)
    # --h5ad: NAME.h5ad of the 1 GiB data set, cp and read_h5ad(backed) vs anndata's own h5ad (scripts/bench_h5ad.py).
    if wanted("h5ad file (scripts/bench_h5ad.py)"):
        with sections("h5ad file (scripts/bench_h5ad.py)", rows):
            import bench_h5ad
            bench_h5ad.h5ad_rows(sys.modules[__name__], WORK, args.rounds, files_dir, row, rows)
    if wanted("mount until usable; cp into a ZIP source"):
        with sections("mount until usable; cp into a ZIP source", rows):
            # 7. Mount until usable (the 100,000-entry archive's mounts are the scale rows' of the same archive).
            for label, archive, target, known in [("10,000", zip10k, "<= 0.1 s", []),
                                                  ("100,000", zip100k, "<= 0.5 s", mounts_100k)]:
                times = list(known)
                while not times or (len(times) < args.rounds and not settled(times)):
                    mm = Mount(archive, "-o", "ro")
                    times.append(mm.seconds)
                    mm.close()
                t = statistics.median(times)
                rows.append({"figure": f"mount until usable, {label} entries", "mounted": t, "native": None, "unit": "s",
                             "ratio": None, "target": target})
                log(f"mount {label}: {t:.3f} s ({len(times)} mounts)")
            cp_rows(args.rounds, payload, size, row, rss)
    if rss:
        rows.append({"figure": "anonymous memory (RssAnon) of the daemon, max over the runs above",
                     "mounted": max(rss) / 1024, "native": None, "unit": "MiB", "ratio": None, "target": "<= 64 MiB"})
    bench_report.write_json(args.json, sections, rows, payload_gib=gib, rounds=args.rounds, min_rounds=MIN_ROUNDS,
                            large_folio_share=folios, sections_filter=args.sections)
    bench_report.print_rows(rows)
    shares = ", ".join(f"{k} {v:.0%}" if v is not None else f"{k} unknown (needs root)" for k, v in folios.items())
    print(f"cached pages of the ZIP payload held in large folios: {shares}")
    bench_report.print_sections(sections)
    if not args.sections:  # a whole run: its rows become doc/performance.md's table and doc/performance.svg
        regenerate_doc(args.json)


def regenerate_doc(json_path):
    """Regenerates doc/performance.md's table and its plot from `json_path` (scripts/perf_doc.py); a failure is
    logged, not fatal: the results are in the JSON already."""
    import perf_doc
    try:
        with open(json_path) as f:
            results = json.load(f)
        doc = os.path.join(ROOT, "doc")
        perf_doc.generate(results, os.path.join(doc, "performance.md"), os.path.join(doc, "performance.svg"))
        log(f"doc/performance.md and doc/performance.svg regenerated from {json_path}")
    except (OSError, ValueError) as e:
        log(f"doc/performance.md NOT regenerated ({e}): run scripts/perf_doc.py {json_path}")


def zarr_rows(rounds, files_dir, payload, row, rss):
    """zarr-python 3 reads the whole matrix: Zarr view vs a native Zarr v2 directory, same chunk."""
    import zarr
    native_zarr = os.path.join(WORK, "native.zarr")
    if not os.path.exists(native_zarr):
        os.makedirs(os.path.join(native_zarr, "m"))
        with open(os.path.join(native_zarr, ".zgroup"), "w") as f:
            f.write('{"zarr_format":2}')
        with open(os.path.join(native_zarr, "m/.zarray"), "w") as f:
            f.write(zarray("<f4", [GENES, CELLS]))
        os.link(payload, os.path.join(native_zarr, "m/0.0"))
    zm = Mount(files_dir, "-o", "ro", "--view", "zarr")

    def read_view():
        start_t = time.perf_counter()
        zarr.open_array(os.path.join(zm.path, "matrices/cell/gene/fraction"), mode="r", zarr_format=2)[...]
        return time.perf_counter() - start_t

    def read_native():
        start_t = time.perf_counter()
        zarr.open_array(os.path.join(native_zarr, "m"), mode="r", zarr_format=2)[...]
        return time.perf_counter() - start_t
    read_view()
    t_m, t_n = interleave(rounds, read_view, read_native)
    row("zarr-python 3 reads the whole matrix (throughput ratio)", t_m, t_n, "s", ">= 0.8")
    rss.append(zm.rss_anon_kib())
    zm.close()


def cp_rows(rounds, payload, size, row, rss):
    """8. cp of the 1 GiB payload into the FilesDaf view of a ZIP source, until close returns: the property is then
    in the data set (both views show it); its entries are appended to the archive in the background. Also measured:
    until that append is durable (fsync of the directory waits for it), against cp + fsync of the native copy."""
    axes_zip = os.path.join(WORK, "axes.daf.zarr.zip")
    make_axes_zip(axes_zip)
    cps, natives, durables, native_durables = [], [], [], []

    def fsync_path(path):
        start_t = time.perf_counter()
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return time.perf_counter() - start_t
    for r in range(rounds):
        target_zip = os.path.join(WORK, f"cp{r}.daf.zarr.zip")
        subprocess.run(["cp", axes_zip, target_zip], check=True)
        cm = Mount(target_zip, "--view", "files")
        folder = os.path.join(cm.path, "matrices/cell/gene")
        with open(os.path.join(folder, "copy.json"), "w") as f:
            f.write('{"format":"dense","eltype":"Float32"}\n')
        cps.append(timed(["cp", payload, os.path.join(folder, "copy.data")]))
        durables.append(cps[-1] + fsync_path(folder))
        committed = os.path.getsize(target_zip) > size
        dst = os.path.join(WORK, "native-copy.data")
        natives.append(timed(["cp", payload, dst]))
        native_durables.append(natives[-1] + fsync_path(dst))
        os.remove(dst)
        rss.append(cm.rss_anon_kib())
        cm.close()
        os.remove(target_zip)
        # The staging area and its record of accepted appends (`.accepted`), which the mount leaves beside the copy.
        subprocess.run(["rm", "-rf", os.path.join(WORK, f".cp{r}.daf.zarr.zip.daf-mount"),
                        os.path.join(WORK, f".cp{r}.daf.zarr.zip.daf-mount.accepted")])
        if not committed:
            raise RuntimeError("the copied property was not in the archive after fsync")
        if settled(cps, natives):
            break
    row("cp of a 1 GiB payload into the FilesDaf view of a ZIP source, until close (throughput ratio)",
        statistics.median(cps), statistics.median(natives), "s", ">= 0.4")
    row("same, until durable in the archive (cp + fsync of the directory, vs cp + fsync)",
        statistics.median(durables), statistics.median(native_durables), "s", "(not a target)")


if __name__ == "__main__":
    main()
