"""The peer rows of scripts/bench (issue 12, point 2): daf-mount against the other tools that mount a ZIP
(fuse-zip and archivemount from the distribution, ratarmount from PyPI; mount-zip and fuse-archive are not packaged
for this distribution), on the same 1 GiB ZIP and the same 100,000-entry ZIP, one after the other, medians:
  mount time until usable (100k ZIP), first read and re-read of the 1 GiB member, `ls -lR` of the 100k ZIP (each of
  daf-mount's views), the daemon's RssAnon after the listing. A tool that cannot mount an input is reported as such.

    python scripts/bench_peers.py [--rounds R]      (alone: the bench's data sets; installs the peers as root)
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(ROOT, ".venv", "peers")
MEMBER = "matrices/cell/gene/fraction/0.0"
MOUNT_LIMIT = 300  # seconds a peer may take to mount (archivemount needs about 100 s for 100,000 entries)
READ_LIMIT = 120  # seconds a read of the 1 GiB member may take (archivemount's takes many minutes)


def dd(path):
    """Seconds to read `path` with dd, or None past READ_LIMIT."""
    start = time.perf_counter()
    try:
        subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=1M"], check=True, timeout=READ_LIMIT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None
    return time.perf_counter() - start


def install():
    """The peers: apt packages (root) and ratarmount in its own venv. Returns {name: argv prefix or None}."""
    missing = [p for p in ("fuse-zip", "archivemount") if shutil.which(p) is None]
    if missing and os.geteuid() == 0:
        subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=False,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, stdout=subprocess.DEVNULL)
    ratarmount = os.path.join(VENV, "bin", "ratarmount")
    if not os.path.exists(ratarmount):
        subprocess.run([sys.executable, "-m", "venv", VENV], check=False)
        subprocess.run([os.path.join(VENV, "bin", "pip"), "install", "-q", "--disable-pip-version-check",
                        "ratarmount"], check=False)
    return {
        "fuse-zip": ["fuse-zip", "-r"] if shutil.which("fuse-zip") else None,
        "archivemount": ["archivemount", "-o", "ro"] if shutil.which("archivemount") else None,
        "ratarmount": [ratarmount] if os.path.exists(ratarmount) else None,
    }


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


def peer_rows(bench, rounds, big_zip, zip100k, rows):
    """Appends one row per (tool, figure) to `rows` (scripts/bench.py's JSON rows) and logs them."""
    peers = install()
    med = statistics.median
    name_100k = os.path.basename(zip100k)[: -len(".daf.zarr.zip")]
    results = {}

    def daf(view):
        return [bench.BIN, "-o", "ro"] + (["--view", view] if view else [])

    tools = {"daf-mount": None, **peers}
    for tool, argv in tools.items():
        if tool != "daf-mount" and argv is None:
            results[tool] = {"error": "not installed"}
            continue
        r = {"mount": [], "first": [], "second": [], "ls": [], "ls_zarr": [], "rss": []}
        for _ in range(rounds):
            # The 1 GiB member: first read through a fresh mount, then the re-read.
            if tool == "daf-mount":
                m = PeerMount(daf("files"), big_zip, "matrices/cell/gene/fraction.data")
                member = "matrices/cell/gene/fraction.data"
            else:
                m = PeerMount(argv, big_zip, MEMBER)
                member = MEMBER
            try:
                if not m.ok:
                    r["error"] = f"cannot mount {os.path.basename(big_zip)}: {' '.join(m.error)}"
                    break
                first = dd(os.path.join(m.path, member))
                if first is None:
                    r["error"] = f"a read of the 1 GiB member did not end in {READ_LIMIT} s"
                    break
                r["first"].append(first)
                r["second"].append(dd(os.path.join(m.path, member)) or float("inf"))
            finally:
                m.close()
            # The 100k ZIP: mount until usable, ls -lR (each view), RssAnon after.
            probe = f"{name_100k}.daf/daf.json" if tool == "daf-mount" else "daf/.zarray"
            m = PeerMount(daf(None) if tool == "daf-mount" else argv, zip100k, probe)
            try:
                if not m.ok:
                    r["error"] = f"cannot mount {os.path.basename(zip100k)} in {MOUNT_LIMIT} s: {' '.join(m.error)}"
                    break
                r["mount"].append(m.seconds)
                if tool == "daf-mount":
                    r["ls"].append(bench.timed(["ls", "-lR", os.path.join(m.path, f"{name_100k}.daf")]))
                    r["ls_zarr"].append(bench.timed(["ls", "-lR", os.path.join(m.path, f"{name_100k}.daf.zarr")]))
                else:
                    r["ls"].append(bench.timed(["ls", "-lR", m.path]))
                r["rss"].append(m.rss_anon_kib() / 1024)
            finally:
                m.close()
        results[tool] = r
    figures = [("mount", "mount of the 100k-entry ZIP until usable", "s"),
               ("first", "first read of the 1 GiB member", "s"),
               ("second", "re-read of the 1 GiB member", "s"),
               ("ls", "ls -lR of the 100k-entry ZIP (daf-mount: FilesDaf view)", "s"),
               ("ls_zarr", "ls -lR of the 100k-entry ZIP (daf-mount: Zarr view)", "s"),
               ("rss", "daemon RssAnon after mount and ls -lR of the 100k-entry ZIP", "MiB")]
    for key, label, unit in figures:
        ours = results["daf-mount"].get(key) or []
        for tool, r in results.items():
            if tool == "daf-mount":
                continue
            theirs = r.get(key) or []
            if "error" in r and not theirs:
                bench.log(f"peers: {label}: {tool}: {r['error']}")
                rows.append({"figure": f"peers: {label}: {tool}", "mounted": med(ours) if ours else float("nan"),
                             "native": None, "unit": unit, "ratio": None, "target": r["error"]})
                continue
            if not ours or not theirs:
                continue
            ratio = med(theirs) / med(ours)  # > 1: daf-mount is faster (or smaller)
            bench.log(f"peers: {label}: daf-mount {med(ours):.4g} {unit}, {tool} {med(theirs):.4g} {unit}, "
                      f"{tool}/daf-mount {ratio:.2f}")
            rows.append({"figure": f"peers: {label}: daf-mount vs {tool} ({tool}/daf-mount)", "mounted": med(ours),
                         "native": med(theirs), "unit": unit, "ratio": ratio,
                         "target": ">= 3 (first read, re-read of the best peer), > 1 (others)"})


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
