"""The remote rows of scripts/bench at the speed of an emulated network: the data set of scripts/bench_http.py
(a ZarrDaf v2 directory with a 1 GiB dense Float32 matrix in one chunk) served by nginx on 127.0.0.1 behind
scripts/slow_link.py, which delays every request by 20 ms and caps each connection at 100 MB/s:
  (a) first read of the matrix through a fresh mount of the URL (FilesDaf view) vs the fastest of `curl` (one
  connection) and `aria2c -x 16 -s 16` (16 connections) fetching the chunk's URL through the same link;
  (b) the same first read against rclone mount (HTTP backend, VFS cache on) and httpdirfs of the same URL;
  (c) zarr-python 3 (.venv/zarr3) reading every array of a data set of 10,000 small vectors through a mount of the
  URL vs directly over HTTP (fsspec), through the same link.
rclone, httpdirfs and aria2c are Debian's, installed with apt-get when missing.
aria2c is installed with apt-get when missing (the bench runs as root, as the tests do).

    python scripts/bench_link.py [--mib N] [--delay-ms D] [--rate-mb R] [--rounds R]
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "interop"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_serve import nginx  # noqa: E402

import bench_http  # noqa: E402
import bench_peers  # noqa: E402  (its dd: a read stopped after 5 s and extrapolated)
import slow_link  # noqa: E402


def ensure(command, package):
    """`command`, installing Debian's `package` when it is missing; None when that fails."""
    if shutil.which(command) is None:
        subprocess.run(["apt-get", "install", "-y", "-qq", package], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    return shutil.which(command)


def start_link(upstream_port, delay_ms, rate_mb):
    """Starts the emulated link in this process (a thread); its port."""
    ready = threading.Event()
    port = []

    def on_ready(p):
        port.append(p)
        ready.set()
    threading.Thread(target=slow_link.serve, args=(upstream_port, delay_ms / 1000, rate_mb * 1e6, on_ready),
                     daemon=True).start()
    ready.wait(10)
    return port[0]


def timed(command):
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def link_rows(bench, work, rounds, mib, delay_ms, rate_mb, row, rows):
    name = f"remote{mib}m100.daf.zarr"
    chunk = bench_http.make_remote_zarr(bench, os.path.join(work, "link", name), mib, 100)
    size = os.path.getsize(chunk)
    bench.recache(chunk)
    aria2c = ensure("aria2c", "aria2")
    with nginx(os.path.join(work, "link")) as base:
        port = start_link(int(base.rsplit(":", 1)[1]), delay_ms, rate_mb)
        url = f"http://127.0.0.1:{port}/{name}"
        chunk_url = f"{url}/{bench_http.CHUNK}"
        firsts, curls, arias = [], [], []
        out = tempfile.mkdtemp(prefix="daf-bench-aria2-")
        try:
            for _ in range(rounds):
                m = bench.Mount(url, "-o", "ro", "--view", "files")
                try:
                    view = os.path.join(m.path, "matrices/cell/gene/fraction.data")
                    if os.path.getsize(view) != size:
                        raise RuntimeError(f"{view}: st_size {os.path.getsize(view)}, not {size}")
                    firsts.append(bench.dd(view))
                finally:
                    m.close()
                curls.append(timed(["curl", "-sSf", "-o", "/dev/null", chunk_url]))
                if aria2c:
                    target = os.path.join(out, "chunk")
                    arias.append(timed([aria2c, "-q", "-x", "16", "-s", "16", "-k", "1M", "--allow-overwrite=true",
                                        "--file-allocation=none", "-d", out, "-o", "chunk", chunk_url]))
                    os.remove(target)
        finally:
            shutil.rmtree(out, ignore_errors=True)
    link = f"{delay_ms:g} ms a request, {rate_mb:g} MB/s a connection"
    first = statistics.median(firsts)
    peers = {"curl": statistics.median(curls)}
    if arias:
        peers["aria2c -x 16"] = statistics.median(arias)
    fastest = min(peers, key=peers.get)
    for peer, seconds in peers.items():
        bench.log(f"link ({link}): {peer} {size / seconds / 1e6:.0f} MB/s")
    bench.log(f"link ({link}): mount first read {size / first / 1e6:.0f} MB/s")
    row(f"first read of a {mib} MiB matrix through a mount of the URL over an emulated link ({link}) vs the fastest "
        f"of curl and aria2c -x 16 on the same link, here {fastest} (throughput ratio)", first, peers[fastest], "s",
        ">= 0.9")


def wait_mounted(path, seconds=30):
    deadline = time.perf_counter() + seconds
    while not os.path.ismount(path):
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{path}: not mounted after {seconds} s")
        time.sleep(0.05)


def unmount(path):
    subprocess.run(["fusermount3", "-u", path], capture_output=True)
    for _ in range(200):
        if not os.path.ismount(path):
            return
        time.sleep(0.05)
    subprocess.run(["umount", "-l", path], capture_output=True)


def peer_mount_rows(bench, work, rounds, mib, delay_ms, rate_mb, row):
    """The first read of the matrix through daf-mount against rclone mount (HTTP backend, VFS cache on) and
    httpdirfs mounting the same URL through the same link (each a fresh mount a round, interleaved)."""
    name = f"remote{mib}m100.daf.zarr"
    bench_http.make_remote_zarr(bench, os.path.join(work, "link", name), mib, 100)
    peers = {"rclone mount": ensure("rclone", "rclone"), "httpdirfs": ensure("httpdirfs", "httpdirfs")}
    link = f"{delay_ms:g} ms a request, {rate_mb:g} MB/s a connection"
    with nginx(os.path.join(work, "link")) as base:
        port = start_link(int(base.rsplit(":", 1)[1]), delay_ms, rate_mb)
        url = f"http://127.0.0.1:{port}/{name}"
        times = {"daf-mount": [], **{p: [] for p, b in peers.items() if b}}
        stopped = set()
        for _ in range(rounds):
            m = bench.Mount(url, "-o", "ro", "--view", "files")
            try:
                times["daf-mount"].append(bench.dd(os.path.join(m.path, "matrices/cell/gene/fraction.data")))
            finally:
                m.close()
            for peer, binary in peers.items():
                if not binary:
                    continue
                mnt = tempfile.mkdtemp(prefix="daf-bench-peer-")
                cache = tempfile.mkdtemp(prefix="daf-bench-rclone-")
                try:
                    if peer == "rclone mount":
                        subprocess.run([binary, "mount", ":http:", mnt, "--http-url", url + "/", "--read-only",
                                        "--vfs-cache-mode", "full", "--cache-dir", cache, "--daemon"], check=True,
                                       capture_output=True)
                        wait_mounted(mnt)
                        times[peer].append(bench.dd(os.path.join(mnt, bench_http.CHUNK)))
                    else:
                        # httpdirfs 1.2.5 takes nginx for a server without range requests (its check
                        # fails on nginx, httpdirfs issue 188), refuses the first read, and the mount ends
                        # ("Transport endpoint is not connected"); its documented way round is
                        # --no-range-check. Its cache is on (8 MiB segments), as rclone's VFS cache is. A read
                        # not done after 5 s is stopped and its time extrapolated.
                        subprocess.run([binary, "--no-range-check", "--cache", "--cache-location", cache, "-o", "ro",
                                        url + "/", mnt], check=True, capture_output=True)
                        wait_mounted(mnt)
                        seconds, extrapolated = bench_peers.dd(os.path.join(mnt, bench_http.CHUNK))
                        times[peer].append(seconds)
                        if extrapolated:
                            stopped.add(peer)
                except (RuntimeError, subprocess.CalledProcessError) as e:
                    bench.log(f"link ({link}): {peer} NOT MEASURED: {e}")
                    peers[peer] = None
                finally:
                    unmount(mnt)
                    os.rmdir(mnt)
                    shutil.rmtree(cache, ignore_errors=True)
    ours = statistics.median(times["daf-mount"])
    for peer in peers:
        if times.get(peer):
            seconds = statistics.median(times[peer])
            note = f", {peer} stopped after {bench_peers.READ_LIMIT} s and extrapolated" if peer in stopped else ""
            bench.log(f"link ({link}): {peer} first read {mib * 2**20 / seconds / 1e6:.0f} MB/s{note}")
            row(f"first read of a {mib} MiB matrix through a mount of the URL vs {peer} of the same URL, over an "
                f"emulated link ({link}) (throughput ratio{note})", ours, seconds, "s", ">= 1",
                lower_bound=peer in stopped)


READ_ALL = """
import sys, time, zarr
source = sys.argv[1]  # a mount's directory, or a URL (fsspec's HTTP store)
start = time.perf_counter()
group = zarr.open_consolidated(source, mode="r", zarr_format=2)
items = group["vectors/item"]
total = 0
for name in sorted(items.array_keys()):
    total += items[name][:].size
print(time.perf_counter() - start, total)
"""


def zarr_rows(bench, work, rounds, props, delay_ms, rate_mb, row):
    """zarr-python 3 reading every array of `props` small vectors through a mount of the URL vs directly over HTTP
    (fsspec), both through the emulated link."""
    python = os.path.join(ROOT, ".venv", "zarr3", "bin", "python")
    name = f"remote16m{props}.daf.zarr"
    bench_http.make_remote_zarr(bench, os.path.join(work, "link", name), 16, props)
    with nginx(os.path.join(work, "link")) as base:
        port = start_link(int(base.rsplit(":", 1)[1]), delay_ms, rate_mb)
        url = f"http://127.0.0.1:{port}/{name}"
        mounted, direct, mounts = [], [], []

        def read_all(source):
            out = subprocess.run([python, "-c", READ_ALL, source], check=True, capture_output=True, text=True)
            seconds, total = out.stdout.split()
            if int(total) != props * 100:
                raise RuntimeError(f"{source}: {total} values, not {props * 100}")
            return float(seconds)
        for _ in range(rounds):
            m = bench.Mount(url, "-o", "ro", "--view", "zarr")
            try:
                mounts.append(m.seconds)
                mounted.append(read_all(m.path))
            finally:
                m.close()
            direct.append(read_all(url))
    link = f"{delay_ms:g} ms a request, {rate_mb:g} MB/s a connection"
    row(f"zarr-python 3 reading every array of a remote data set of {props:,} properties through a mount of the URL vs "
        f"directly over HTTP with fsspec, over an emulated link ({link}) (throughput ratio)",
        statistics.median(mounted), statistics.median(direct), "s", ">= 1")
    bench.log(f"link ({link}): mount of {props} properties {statistics.median(mounts):.3f} s")


def main():
    import bench

    def options(parser):
        parser.add_argument("--mib", type=int, default=1024)
        parser.add_argument("--delay-ms", type=float, default=20)
        parser.add_argument("--rate-mb", type=float, default=100)
        parser.add_argument("--props", type=int, default=10_000)
        parser.add_argument("--only", choices=["matrix", "peers", "zarr"], default=None)

    def measure(args, row, rows):
        if args.only in (None, "matrix"):
            link_rows(bench, bench.WORK, args.rounds, args.mib, args.delay_ms, args.rate_mb, row, rows)
        if args.only in (None, "peers"):
            peer_mount_rows(bench, bench.WORK, args.rounds, args.mib, args.delay_ms, args.rate_mb, row)
        if args.only in (None, "zarr"):
            zarr_rows(bench, bench.WORK, args.rounds, args.props, args.delay_ms, args.rate_mb, row)

    bench.run_alone(options, measure)


if __name__ == "__main__":
    main()
