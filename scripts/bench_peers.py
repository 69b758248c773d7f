"""The peer rows of scripts/bench (issue 12, point 2): daf-mount against the other tools that mount a ZIP
(fuse-zip and archivemount from the distribution, ratarmount from PyPI, mount-zip and fuse-archive from the
distribution where it packages them: a row says "not packaged" otherwise), on the same 1 GiB ZIP and the same
100,000-entry ZIP, one after the other, medians:
  mount time until usable (100k ZIP), first read and re-read of the 1 GiB member, `ls -lR` of the 100k ZIP (each of
  daf-mount's views), the daemon's RssAnon after the listing. A tool that cannot mount an input is reported as such.
  In daf-mount's rounds the FUSE ceiling (scripts/bench_ceiling.py, if built) reads the same member too: the best
  peer's time over the ceiling's bounds what the first-read ratio of any FUSE filesystem can be.
A read that does not end within READ_LIMIT is stopped there (SIGINT: dd reports what it copied) and its time is
extrapolated from the bytes read (or, if none yet, the time so far), a lower bound marked ">=" in its row; a peer's
`ls -lR` is stopped once it has taken LS_FACTOR times daf-mount's slower view's listing (measured first; at least
LS_FLOOR s), its time a lower bound that already decides "ahead of all", and a mount not done in MOUNT_LIMIT is
reported as such. The first round of each tool does everything; the later ones (at most --rounds, fewer once the
samples agree) only the mounts and reads, and for a peer only while its rounds have taken less than TOOL_BUDGET
seconds (its first round, with its listing, takes longer: its reads get one round, their figures being several
times daf-mount's); past that its rounds only mount the 100k ZIP (the closest race), if that takes less than
MOUNT_ONLY_LIMIT seconds. So the rows take about 2-2.5 minutes.

    python scripts/bench_peers.py [--rounds R]      (alone: the bench's data sets; installs the peers as root)
"""
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(ROOT, ".venv", "peers")
MEMBER = "matrices/cell/gene/fraction/0.0"
MOUNT_LIMIT = 120  # seconds a peer may take to mount (archivemount took 18-100 s for 100,000 entries)
READ_LIMIT = 5  # seconds a read of the 1 GiB member may take before it is stopped and extrapolated
LS_FACTOR = 1.25  # a peer's ls -lR of the 100k ZIP is stopped at this many times daf-mount's slower listing ...
LS_FLOOR = 5  # ... and at least this many seconds (a lower bound then)
LS_LIMIT = 30  # seconds, if daf-mount's listings were not measured
TOOL_BUDGET = 25  # seconds of rounds after which a peer's rounds only mount the 100k ZIP ...
MOUNT_ONLY_LIMIT = 5  # ... if its first mount of it took less than this (archivemount: 18-100 s)
PACKAGED = ("fuse-zip", "archivemount", "mount-zip", "fuse-archive")  # from the distribution, where it has them


def dd(path):
    """(seconds, extrapolated) to read `path` with dd. Past READ_LIMIT, dd is stopped and the time is extrapolated
    from the bytes it had copied (a lower bound, if the read does not get faster): `extrapolated` is then True.
    A read that fails raises RuntimeError."""
    size = os.path.getsize(path)
    proc = subprocess.Popen(["dd", f"if={path}", "of=/dev/null", "bs=1M"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    start = time.perf_counter()
    try:
        _, err = proc.communicate(timeout=READ_LIMIT)
        if proc.returncode != 0:
            raise RuntimeError(f"the read failed: {err.strip().splitlines()[:1]}")
        return time.perf_counter() - start, False
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # dd prints what it copied and exits
        try:
            _, err = proc.communicate(timeout=MOUNT_LIMIT)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        seconds = time.perf_counter() - start
        copied = [int(n) for n in re.findall(r"^(\d+) bytes", err, re.M)]
        # Nothing copied yet (fuse-zip reads a whole member before its first byte): the time so far.
        return (seconds * size / copied[-1] if copied and copied[-1] else seconds), True


def listing(command, limit):
    """(seconds, stopped) of `command` (an ls) with its output discarded, stopped after `limit` s."""
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    start = time.perf_counter()
    try:
        if proc.wait(timeout=limit) != 0:
            raise subprocess.CalledProcessError(proc.returncode, command)
        return time.perf_counter() - start, False
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return time.perf_counter() - start, True


def packaged(name):
    """Whether the distribution has a package `name` (apt-cache policy shows a candidate)."""
    try:
        out = subprocess.run(["apt-cache", "policy", name], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "Candidate:" in out and "Candidate: (none)" not in out


def has_file_types(archive):
    """Whether the entries of a ZIP written on Unix carry a file type in their mode (fuse-zip gives EIO for the
    entries whose mode has none, as Python's zipfile.writestr wrote them before scripts/bench.py set one)."""
    import zipfile
    with zipfile.ZipFile(archive) as z:
        return all((i.external_attr >> 16) & 0o170000 for i in z.infolist()[:10] if i.create_system == 3)


def install():
    """The peers: apt packages (root) and ratarmount in its own venv. Returns {name: argv prefix or a reason}."""
    missing = [p for p in PACKAGED if shutil.which(p) is None and packaged(p)]
    if missing and os.geteuid() == 0:
        subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=False,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, stdout=subprocess.DEVNULL)
    ratarmount = os.path.join(VENV, "bin", "ratarmount")
    if not os.path.exists(ratarmount):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=False)
        subprocess.run([os.path.join(VENV, "bin", "pip"), "install", "-q", "--disable-pip-version-check",
                        "ratarmount"], check=False)
    argv = {"fuse-zip": ["fuse-zip", "-r"], "archivemount": ["archivemount", "-o", "ro"], "ratarmount": [ratarmount],
            "mount-zip": ["mount-zip"], "fuse-archive": ["fuse-archive"]}
    peers = {}
    for name, command in argv.items():
        if shutil.which(command[0]) or os.path.exists(command[0]):
            peers[name] = command
        elif name in PACKAGED and not packaged(name):
            peers[name] = "not packaged for this distribution"
        else:
            peers[name] = "not installed"
    return peers


class PeerMount:
    """`argv ARCHIVE MNT` (each peer daemonizes), waited for until `probe` (a path inside) exists."""

    def __init__(self, argv, archive, probe):
        self.path = tempfile.mkdtemp(prefix="daf-peer-")
        start = time.perf_counter()
        try:
            done = subprocess.run([*argv, archive, self.path], capture_output=True, text=True, timeout=MOUNT_LIMIT)
        except subprocess.TimeoutExpired:
            done = subprocess.CompletedProcess(argv, 1, "", f"no answer in {MOUNT_LIMIT} s")
        while done.returncode == 0 and not os.path.exists(os.path.join(self.path, probe)):
            if time.perf_counter() - start > MOUNT_LIMIT:
                break
            time.sleep(0.01)
        self.seconds = time.perf_counter() - start
        self.ok = done.returncode == 0 and os.path.exists(os.path.join(self.path, probe))
        self.error = done.stderr.strip().splitlines()[-1:] if not self.ok else []

    def rss_anon_kib(self):
        total = 0
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        if self.path.encode() not in f.read():
                            continue
                    with open(f"/proc/{pid}/status") as f:
                        total += sum(int(line.split()[1]) for line in f if line.startswith("RssAnon:"))
                except OSError:
                    pass
        return total

    def close(self):
        subprocess.run(["fusermount3", "-u", self.path], capture_output=True)
        for _ in range(200):
            if not self.rss_anon_kib():
                break
            time.sleep(0.05)
        try:
            os.rmdir(self.path)
        except OSError:
            subprocess.run(["fusermount3", "-uz", self.path], capture_output=True)


def ceiling_reads(bench, big_zip, ceiling):
    """Appends the first read and re-read of the 1 GiB member through the FUSE ceiling (scripts/bench_ceiling.py)
    to `ceiling`, if its binary was built (by the ceiling section): the most any FUSE filesystem reaches, which
    bounds the first-read ratio against a peer."""
    import bench_ceiling
    if not os.path.exists(bench_ceiling.CEILING):
        return
    start, length = bench.entry_range(big_zip, MEMBER)
    c = bench_ceiling.Ceiling(big_zip, start, length)
    try:
        for key in ("first", "second"):
            ceiling[key].append(dd(c.data)[0])
    finally:
        c.close()


def peer_rows(bench, rounds, big_zip, zip100k, rows):
    """Appends one row per (tool, figure) to `rows` (scripts/bench.py's JSON rows) and logs them."""
    peers = install()
    if not has_file_types(zip100k):  # built before bench.make_entries_zip set file types: fuse-zip could not stat it
        bench.log(f"rebuilding {zip100k} with file types in its entries' modes")
        os.remove(zip100k)
        if os.path.exists(zip100k + ".index.sqlite"):  # ratarmount's index of the old archive
            os.remove(zip100k + ".index.sqlite")
        bench.make_entries_zip(zip100k, 33300)
    med = statistics.median
    name_100k = os.path.basename(zip100k)[: -len(".daf.zarr.zip")]
    results = {}
    ceiling = {"first": [], "second": []}  # the FUSE ceiling's reads, in daf-mount's rounds

    def daf(view):
        return [bench.BIN, "-o", "ro"] + (["--view", view] if view else [])

    for tool, argv in {"daf-mount": None, **peers}.items():
        if isinstance(argv, str):
            results[tool] = {"error": argv}
            bench.log(f"peers: {tool}: {argv}")
            continue
        r = {"mount": [], "first": [], "second": [], "ls": [], "ls_zarr": [], "rss": [], "extrapolated": set()}
        began = time.perf_counter()
        for i in range(rounds):
            # Past TOOL_BUDGET (daf-mount has none: its rounds take seconds), a peer's later rounds only mount the 100k
            # ZIP (the closest race), and only if that mount is quick.
            reads = i == 0 or tool == "daf-mount" or time.perf_counter() - began <= TOOL_BUDGET
            measured = (r["mount"], r["first"], r["second"]) if reads else (r["mount"],)
            if i and (bench.settled(*measured) or (not reads and r["mount"][0] > MOUNT_ONLY_LIMIT)):
                break
            # The 1 GiB member: first read through a fresh mount, then the re-read.
            member = "matrices/cell/gene/fraction.data" if tool == "daf-mount" else MEMBER
            m = PeerMount(daf("files") if tool == "daf-mount" else argv, big_zip, member) if reads else None
            try:
                if m and not m.ok:
                    r["error"] = f"cannot mount {os.path.basename(big_zip)}: {' '.join(m.error)}"
                    break
                for key in ("first", "second") if m else ():
                    try:
                        seconds, extrapolated = dd(os.path.join(m.path, member))
                    except RuntimeError as e:
                        r["error"] = f"{os.path.basename(big_zip)}: {e}"
                        break
                    r[key].append(seconds)
                    if extrapolated:
                        r["extrapolated"].add(key)
            finally:
                if m:
                    m.close()
            if tool == "daf-mount" and reads:
                ceiling_reads(bench, big_zip, ceiling)
            if "error" in r:
                break
            # The 100k ZIP: mount until usable, ls -lR (each view), RssAnon after.
            probe = f"{name_100k}.daf/daf.json" if tool == "daf-mount" else "daf/.zarray"
            m = PeerMount(daf(None) if tool == "daf-mount" else argv, zip100k, probe)
            try:
                if not m.ok:
                    r["error"] = f"cannot mount {os.path.basename(zip100k)} in {MOUNT_LIMIT} s: {' '.join(m.error)}"
                    break
                r["mount"].append(m.seconds)
                if i == 0:  # the listings (tens of seconds for some tools) once
                    if tool == "daf-mount":
                        r["ls"].append(bench.timed(["ls", "-lR", os.path.join(m.path, f"{name_100k}.daf")]))
                        r["ls_zarr"].append(bench.timed(["ls", "-lR", os.path.join(m.path, f"{name_100k}.daf.zarr")]))
                    else:
                        ours = results["daf-mount"].get("ls", []) + results["daf-mount"].get("ls_zarr", [])
                        limit = max(LS_FLOOR, LS_FACTOR * max(ours)) if ours else LS_LIMIT
                        seconds, stopped = listing(["ls", "-lR", m.path], limit)
                        r["ls"].append(seconds)
                        if stopped:
                            r["extrapolated"].add("ls")
                    r["rss"].append(m.rss_anon_kib() / 1024)
            finally:
                m.close()
        bench.log(f"peers: {tool}: {len(r['mount'])} round(s) in {time.perf_counter() - began:.0f} s")
        results[tool] = r
    figures = [("mount", "mount of the 100k-entry ZIP until usable", "s"),
               ("first", "first read of the 1 GiB member", "s"),
               ("second", "re-read of the 1 GiB member", "s"),
               ("ls", "ls -lR of the 100k-entry ZIP (daf-mount: FilesDaf view)", "s"),
               ("ls_zarr", "ls -lR of the 100k-entry ZIP (daf-mount: Zarr view)", "s"),
               ("rss", "daemon RssAnon after mount and ls -lR of the 100k-entry ZIP", "MiB")]
    ours_all = results["daf-mount"]
    for key, label, unit in figures:
        ours = ours_all.get(key) or []
        best = None  # (median, tool, extrapolated) of the best peer on this figure
        for tool, r in results.items():
            if tool == "daf-mount":
                continue
            theirs = r.get("ls" if key == "ls_zarr" else key) or []
            if not ours or not theirs:
                why = r.get("error") or ours_all.get("error") or "not measured"
                bench.log(f"peers: {label}: {tool}: {why}")
                rows.append({"figure": f"peers: {label}: {tool}: {why}", "mounted": med(ours) if ours else float("nan"),
                             "native": None, "unit": unit, "ratio": None, "target": "-"})
                continue
            extrapolated = ("ls" if key == "ls_zarr" else key) in r["extrapolated"]
            if best is None or med(theirs) < best[0]:
                best = (med(theirs), tool, extrapolated)
            ratio = med(theirs) / med(ours)  # > 1: daf-mount is faster (or smaller)
            at_least = ">= " if extrapolated else ""
            if key.startswith("ls"):
                note = f", {tool} stopped after {med(theirs):.0f} s" if extrapolated else ""
            else:
                note = f", {tool} stopped after {READ_LIMIT} s and extrapolated" if extrapolated else ""
            rounds_note = f", {len(theirs)} round(s)" if len(theirs) < len(ours) else ""
            bench.log(f"peers: {label}: daf-mount {med(ours):.4g} {unit}, {tool} {at_least}{med(theirs):.4g} {unit}, "
                      f"{tool}/daf-mount {at_least}{ratio:.2f}{note}{rounds_note}")
            rows.append({"figure": f"peers: {label}: {tool}/daf-mount{note}{rounds_note}", "mounted": med(ours),
                         "native": med(theirs), "unit": unit, "ratio": ratio, "lower_bound": extrapolated,
                         "target": "> 1", "met": ratio > 1 or (None if extrapolated else False)})
        if best is not None and key in ("first", "second"):
            ratio = best[0] / med(ours)
            bench.log(f"peers: {label}: best peer {best[1]}/daf-mount {ratio:.2f} (target >= 3)")
            rows.append({"figure": f"peers: {label}: best peer ({best[1]})/daf-mount", "mounted": med(ours),
                         "native": best[0], "unit": unit, "ratio": ratio, "lower_bound": best[2], "target": ">= 3",
                         "met": ratio >= 3 or (None if best[2] else False)})
            if ceiling[key]:  # what any FUSE filesystem can reach against that peer (information)
                bound = best[0] / med(ceiling[key])
                bench.log(f"peers: {label}: best peer {best[1]}/FUSE ceiling {bound:.2f} (the most any FUSE "
                          f"filesystem reaches; ceiling {med(ceiling[key]):.3g} s)")
                rows.append({"figure": f"peers: {label}: best peer ({best[1]})/FUSE ceiling (the ratio's bound)",
                             "mounted": med(ceiling[key]), "native": best[0], "unit": unit, "ratio": bound,
                             "lower_bound": best[2], "target": "-"})


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench

    def measure(args, row, rows):
        files_dir = os.path.join(bench.WORK, "big.daf")
        bench.make_filesdaf(files_dir)
        big_zip = os.path.join(bench.WORK, "big.daf.zarr.zip")
        bench.make_zarr_zip(files_dir, big_zip)
        zip100k = os.path.join(bench.WORK, "e100k.daf.zarr.zip")
        bench.make_entries_zip(zip100k, 33300)
        peer_rows(bench, args.rounds, big_zip, zip100k, rows)

    bench.run_alone(lambda parser: None, measure)


if __name__ == "__main__":
    main()
