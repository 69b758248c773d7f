"""Mounts for the soak: the real daf-mount binary in the foreground, each on a mount point of its
own, with timeouts on everything (mounting, unmounting, and any phase that touches the mount:
a hung daemon has its FUSE connection aborted, so that blocked calls fail instead of hanging),
and a registry of live mounts that an exit or a signal unmounts."""

import atexit
import os
import select
import signal
import subprocess
import tempfile
import threading
import time

from crash_campaign.mounts import fsync_path, mount_device, unmount  # noqa: F401 (fsync_path: for scripts/soak)

LIVE = set()  # mounts not yet stopped: the exit guard unmounts them


CONNECTIONS = "/sys/fs/fuse/connections"


def ensure_fusectl():
    """The FUSE control file system, without which a hung connection cannot be aborted: mounted
    if it is not (root). Returns a warning, or None."""
    if os.path.ismount(CONNECTIONS):
        return None
    run = subprocess.run(["mount", "-t", "fusectl", "none", CONNECTIONS], capture_output=True,
                         text=True)
    if run.returncode != 0:
        return (f"cannot mount fusectl on {CONNECTIONS} ({run.stderr.strip()}): a hung mount "
                "cannot be aborted, only lazily unmounted")
    return None


def threads_of(pid):
    """`comm state wchan` of each thread of `pid` (where a hung daemon waits)."""
    out = []
    try:
        for tid in sorted(os.listdir(f"/proc/{pid}/task"), key=int):
            base = f"/proc/{pid}/task/{tid}"
            try:
                with open(f"{base}/comm") as f:
                    comm = f.read().strip()
                with open(f"{base}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                with open(f"{base}/wchan") as f:
                    wchan = f.read().strip() or "-"
            except OSError:
                continue
            out.append(f"{comm} {state} {wchan}")
    except OSError:
        pass
    return out


def abort_connection(mnt):
    """Aborts the FUSE connection of the mount at `mnt`: every pending and later request on it
    fails (ENOTCONN), so a hung daemon cannot hang us."""
    device = mount_device(mnt)
    if device is None:
        return False
    try:
        with open(f"/sys/fs/fuse/connections/{device.split(':')[1]}/abort", "w") as f:
            f.write("1")
        return True
    except OSError:
        return False


class Mount:
    """`daf-mount SOURCE MNT -f --ready-fd N [-o ro]`, on a new mount point under `parent`,
    stderr appended to `log`. Returns once the mount is usable (READY), or raises."""

    def __init__(self, binary, source, parent, log, readonly=False, timeout=60):
        self.mnt = tempfile.mkdtemp(prefix="ro-" if readonly else "rw-", dir=parent)
        self.readonly = readonly
        self.log_path = log
        self.log_start = os.path.getsize(log) if os.path.exists(log) else 0
        ready_r, ready_w = os.pipe()
        args = [binary, source, self.mnt, "-f", f"--ready-fd={ready_w}"]
        if readonly:
            args += ["-o", "ro"]
        self.log = open(log, "ab")
        self.log.write(f"\n== {' '.join(args)}\n".encode())
        self.log.flush()
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=self.log, pass_fds=[ready_w])
        os.close(ready_w)
        LIVE.add(self)
        ready = b""
        try:
            deadline = time.monotonic() + timeout
            while len(ready) < 6 and time.monotonic() < deadline:
                if select.select([ready_r], [], [], max(0.0, deadline - time.monotonic()))[0]:
                    chunk = os.read(ready_r, 6 - len(ready))
                    if not chunk:
                        break
                    ready += chunk
        finally:
            os.close(ready_r)
        if ready != b"READY\n":
            status = self.proc.poll()
            self.kill()
            why = f"no READY within {timeout} s" if status is None else f"exit {status}"
            raise RuntimeError(f"mount of {source} failed ({why}), see {log}")

    def alive(self):
        return self.proc.poll() is None

    def exit_description(self):
        code = self.proc.poll()
        if code is None:
            return "running"
        if code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit status {code}"

    def log_tail(self, lines=8, only_new=True):
        """The last lines this daemon wrote (its own part of the log), the FUSE operations it
        does not implement left out."""
        with open(self.log_path, "rb") as f:
            f.seek(self.log_start if only_new else 0)
            text = f.read().decode(errors="replace")
        kept = [l for l in text.splitlines() if l.strip() and "[Not Implemented]" not in l]
        return kept[-lines:]

    def log_lines(self, needle):
        with open(self.log_path, "rb") as f:
            f.seek(self.log_start)
            return [l for l in f.read().decode(errors="replace").splitlines() if needle in l]

    def stop(self, timeout=120):
        """Unmounts (fusermount3 -u) and waits for the daemon: its exit status (0 for a clean
        unmount) or a description of what went wrong (a hung daemon is killed)."""
        LIVE.discard(self)
        if not self.alive():
            code = self.proc.returncode
            unmount(self.mnt)
            self._close()
            return 0 if code == 0 else self.exit_description()
        try:
            run = subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True,
                                 text=True, timeout=timeout)
            said = f"{run.returncode}{': ' + run.stderr.strip() if run.stderr.strip() else ''}"
        except subprocess.TimeoutExpired:
            said = f"nothing within {timeout} s"
        try:
            status = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            where = "; ".join(threads_of(self.proc.pid))
            abort_connection(self.mnt)
            self.kill()
            status = (f"hung (no exit {timeout} s after fusermount3 -u, which exited {said}; "
                      f"its threads: {where})")
        unmount(self.mnt)
        self._close()
        return status

    def kill(self):
        """SIGKILL and unmount. A daemon whose threads are stuck in the kernel (a deadlock on
        the mount itself) dies only once its connection is aborted."""
        LIVE.discard(self)
        if self.alive():
            self.proc.kill()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                abort_connection(self.mnt)
                try:
                    self.proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    pass
        unmount(self.mnt)
        self._close()

    def _close(self):
        if not self.log.closed:
            self.log.close()
        try:
            os.rmdir(self.mnt)
        except OSError:
            pass


def unmount_all():
    for m in list(LIVE):
        try:
            m.kill()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


atexit.register(unmount_all)


class Guard:
    """`with Guard(mount, seconds, what):` aborts the mount's FUSE connection if the block takes
    longer than `seconds` (its blocked calls then fail); `hung` says whether that happened."""

    def __init__(self, mount, seconds, what):
        self.mount, self.seconds, self.what, self.hung = mount, seconds, what, False
        self.timer = threading.Timer(seconds, self._fire)
        self.timer.daemon = True

    def _fire(self):
        self.hung = True
        abort_connection(self.mount.mnt)

    def __enter__(self):
        self.timer.start()
        return self

    def __exit__(self, *exc):
        self.timer.cancel()
        if self.hung and exc[0] is None:
            raise TimeoutError(f"{self.what}: no answer within {self.seconds} s "
                               "(connection aborted)")
        return False


PROBES = iter(range(1 << 62))


def probe(mnt, timeout):
    """stat of the mount root and lookup of a name never asked before (which the kernel cannot
    answer from its caches: the daemon must), in a thread: None if both answered within
    `timeout` (the lookup with ENOENT), else a description (an errno, or 'no answer')."""
    result = []

    def run():
        try:
            os.stat(mnt)
            try:
                os.stat(os.path.join(mnt, f".soak-probe-{os.getpid()}-{next(PROBES)}"))
                result.append("a lookup of a name that does not exist succeeded")
                return
            except FileNotFoundError:
                pass
            result.append(None)
        except OSError as e:
            result.append(f"{type(e).__name__}: {e}")

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    return result[0] if result else f"no answer within {timeout} s"
