"""Fixtures for the interop tests: mounting with the real daf-mount binary."""
import contextlib
import os
import subprocess
import tempfile
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VECTORS = os.path.join(ROOT, "..", "shared", "fixtures", "vectors")
JULIA = os.path.join(ROOT, "..", "shared", "fixtures", "julia-filesdaf")
BIN = os.environ.get("DAF_MOUNT_BIN", os.path.join(ROOT, "target", "debug", "daf-mount"))


def _is_mounted(path):
    with open("/proc/self/mountinfo") as info:
        return any(line.split(" ")[4] == path for line in info)


@contextlib.contextmanager
def mounted(source, *options):
    """Mounts `source` in the background on a fresh directory; always unmounts."""
    mnt = tempfile.mkdtemp(prefix="daf-mount-interop-")
    done = subprocess.run([BIN, source, mnt, *options], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    try:
        yield mnt
    finally:
        for command in (["fusermount3", "-u", mnt], ["umount", "-l", mnt]):
            if not _is_mounted(mnt):
                break
            subprocess.run(command, capture_output=True, timeout=60)
        deadline = time.time() + 10
        while _is_mounted(mnt) and time.time() < deadline:
            time.sleep(0.05)
        if not _is_mounted(mnt):
            os.rmdir(mnt)


@pytest.fixture
def mount():
    return mounted
