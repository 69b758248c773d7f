"""Mounting, killing and unmounting the daf-mount daemon for the crash campaign, and the files
of a mount (the staging area beside a source, whole-file reads, fsync)."""

import ctypes
import os
import signal
import subprocess
import time

def set_subreaper():
    """Orphans (the daemon's tail-writer helper once the daemon is killed) become our children,
    so we can wait for them to finish."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def children_of(pid):
    found = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return found


def wait_gone(pid, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                return True
        except ChildProcessError:
            if not os.path.exists(f"/proc/{pid}"):
                return True
        time.sleep(0.01)
    return False


def mount_device(mnt):
    """major:minor of the FUSE mount at `mnt` from mountinfo (no syscall on the mount itself)."""
    real = os.path.realpath(mnt)
    with open("/proc/self/mountinfo") as f:
        for line in reversed(f.read().splitlines()):
            fields = line.split()
            if fields[4].replace("\\040", " ") == real:
                return fields[2]
    return None


def unmount(mnt):
    """Unmounts whatever daf-mount left at `mnt` (alive or dead); aborts a hung connection."""
    for _ in range(50):
        device = mount_device(mnt)
        if device is None:
            return
        run = subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
        if run.returncode != 0 and mount_device(mnt) is not None:
            minor = device.split(":")[1]
            try:
                with open(f"/sys/fs/fuse/connections/{minor}/abort", "w") as f:
                    f.write("1")
            except OSError:
                pass
            subprocess.run(["umount", "-l", mnt], capture_output=True)
        time.sleep(0.05)
    raise RuntimeError(f"cannot unmount {mnt}")


class Daemon:
    """daf-mount SOURCE MNT -f [-o ro], started in the background, stderr to `log`."""

    def __init__(self, binary, source, mnt, log, readonly=False):
        self.mnt = mnt
        ready_r, ready_w = os.pipe()
        args = [binary, source, mnt, "-f", f"--ready-fd={ready_w}"]
        if readonly:
            args += ["-o", "ro"]
        self.log = open(log, "ab")
        self.log.write(f"\n== {' '.join(args)}\n".encode())
        self.log.flush()
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, pass_fds=[ready_w]
        )
        os.close(ready_w)
        ready = b""
        with os.fdopen(ready_r, "rb") as r:
            ready = r.read(6)
        if ready != b"READY\n":
            self.proc.wait(timeout=30)
            self.log.close()
            raise RuntimeError(f"mount failed (exit {self.proc.returncode}), see {log}")

    def kill(self):
        """SIGKILL; waits for the daemon and its tail-writer helper. Returns False if the daemon
        had already died on its own."""
        helpers = children_of(self.proc.pid)
        alive = self.proc.poll() is None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        for pid in helpers:
            if not wait_gone(pid, 60):
                raise RuntimeError(f"helper {pid} of the killed daemon does not finish")
        self.log.close()
        return alive

    def stop(self):
        """Clean unmount; returns the daemon's exit status."""
        run = subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True, text=True)
        try:
            status = self.proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            self.kill()
            unmount(self.mnt)
            status = (f"hung (no exit 300 s after fusermount3 -u, which exited {run.returncode}"
                      f"{': ' + run.stderr.strip() if run.stderr.strip() else ''})")
        self.log.close()
        return status



def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_file(path):
    """The whole file, unbuffered: Python's buffered open() asks isatty (an ioctl the daemon
    logs as not implemented, once per file)."""
    with open(path, "rb", buffering=0) as f:
        return f.readall()


def staged_files(directory):
    found = []
    for name in os.listdir(directory):
        if name.startswith(".") and name.endswith(".daf-mount"):
            for root, _, files in os.walk(os.path.join(directory, name)):
                found += [os.path.relpath(os.path.join(root, f), directory) for f in files]
    return sorted(found)
