"""Remote sources (issue 11): nginx on 127.0.0.1 serves the fixtures, daf-mount mounts their URLs (ZarrDaf v2 and v3
directories, ZarrDaf ZIPs, a group of a multi-data-set ZIP, packed arrays), and
- both views of the remote mount are the local mount's, file by file (names, st_size before any read, bytes);
- zarr-python (2 and 3) reads every array of the remote mount's Zarr views with exact values;
- a remote mount is read-only: `-o rw` with a URL is refused at mount, writes give EROFS.
The known gaps of remote sources are strict expected failures (GAPS, TREE_GAPS): open points of issue 11."""
import errno
import os
import subprocess
import tempfile

import numpy as np
import pytest
import zarr

from conftest import BIN, ROOT, VECTORS, mounted
from http_serve import serving
from test_v3 import SOURCES, all_arrays, dataset, same, view_roots, zarr_arrays

ZARR3 = int(zarr.__version__.split(".")[0]) >= 3
RO = ("-o", "ro")
PACKED = os.path.join(ROOT, "tests", "data", "packed")
# Source kind (test_v3.SOURCES) -> path below the served root.
REMOTE = {
    "zarr-v2": "vectors/zarr_v2.daf.zarr",
    "zarr-v3": "vectors/zarr_v3.daf.zarr",
    "zarr-v2-zip": "vectors/zarr_v2.daf.zarr.zip",
    "zarr-v3-zip": "vectors/zarr_v3.daf.zarr.zip",
    "packed-zarr": "packed/zarr_packed.daf.zarr",
    "packed-zarr-zip": "packed/zarr_packed.daf.zarr.zip",
    "packed-multi-g2": "packed/multi_v3.dafs.zarr.zip#/g2",
    "foreign-v3": "packed/foreign_v3.daf.zarr",
}
# Known gaps of remote sources, open points of issue 11 (strict: an entry that starts passing fails, so that it is
# removed from here). The issue asks for both.
GAPS = {}
TREE_GAPS = {}


def kinds(gaps=GAPS):
    return [pytest.param(k, marks=pytest.mark.xfail(strict=True, reason=gaps[k])) if k in gaps else k
            for k in REMOTE]


@pytest.fixture(scope="module")
def served():
    """nginx serving the fixtures (read-only inputs: served through symbolic links, never copied or written)."""
    with serving({"vectors": VECTORS, "packed": PACKED}) as base:
        yield base


def tree(root):
    """{relative path: None for a directory, (st_size before reading, bytes) for a file}."""
    out = {}
    for base, dirs, files in os.walk(root):
        rel = os.path.relpath(base, root)
        for d in dirs:
            out[os.path.normpath(os.path.join(rel, d))] = None
        for f in files:
            path = os.path.join(base, f)
            size = os.stat(path).st_size
            with open(path, "rb") as fh:
                out[os.path.normpath(os.path.join(rel, f))] = (size, fh.read())
    return out


@pytest.mark.parametrize("kind, zarr_format", [
    pytest.param(k, f, marks=[pytest.mark.xfail(strict=True, reason=GAPS.get(k) or TREE_GAPS[(k, f)])]
                 if k in GAPS or (k, f) in TREE_GAPS else []) for k in REMOTE for f in ("2", "3")])
def test_a_remote_mount_shows_the_local_mounts_files(served, kind, zarr_format):
    source, _ = SOURCES[kind]
    options = ("--zarr-format", zarr_format, *RO)
    with mounted(source, *options) as local, mounted(f"{served}/{REMOTE[kind]}", *options) as remote:
        want, got = tree(local), tree(remote)
        assert sorted(got) == sorted(want), kind
        for path, entry in want.items():
            if entry is None:
                continue
            size, data = got[path]
            assert size == entry[0], f"{kind}: {path}: st_size {size}, local {entry[0]}"
            assert data == entry[1], f"{kind}: {path}: other bytes"
            assert len(data) == size, f"{kind}: {path}: st_size is not what a read returns"


@pytest.mark.parametrize("kind", kinds())
def test_zarr_python_reads_the_v2_view_of_a_remote_mount(served, kind):
    _, names = SOURCES[kind]
    with mounted(f"{served}/{REMOTE[kind]}", "--zarr-format", "2", *RO) as mnt:
        for name, (_, z) in view_roots(mnt, names).items():
            group = zarr.open_group(z, mode="r", **({"zarr_format": 2} if ZARR3 else {}))
            arrays = all_arrays(group)
            want = zarr_arrays(dataset(names[name]))
            want["daf"] = np.array([1, 0], dtype=np.uint8)
            assert set(arrays) == set(want), f"{kind}/{name}"
            for path, expected in want.items():
                same(arrays[path][...], expected, f"{kind}/{name}/{path} (v2 view, remote)")


@pytest.mark.skipif(not ZARR3, reason="zarr-python 2 cannot read Zarr v3")
@pytest.mark.parametrize("kind", kinds())
def test_zarr_python_3_reads_the_v3_view_of_a_remote_mount(served, kind):
    _, names = SOURCES[kind]
    with mounted(f"{served}/{REMOTE[kind]}", "--zarr-format", "3", *RO) as mnt:
        for name, (_, z) in view_roots(mnt, names).items():
            group = zarr.open_group(z, mode="r", zarr_format=3, use_consolidated=True)
            arrays = all_arrays(group)
            want = zarr_arrays(dataset(names[name]))
            assert set(arrays) == set(want), f"{kind}/{name}"
            for path, expected in want.items():
                same(arrays[path][...], expected, f"{kind}/{name}/{path} (v3 view, remote)")


def test_a_remote_mount_is_read_only(served):
    url = f"{served}/{REMOTE['zarr-v3']}"
    mnt = tempfile.mkdtemp(prefix="daf-mount-interop-")
    try:
        done = subprocess.run([BIN, url, mnt, "-o", "rw"], capture_output=True, text=True, timeout=60)
        assert done.returncode != 0, "-o rw with a URL must be refused"
        assert done.stderr.strip(), "the refusal names the problem"
    finally:
        subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
        os.rmdir(mnt)
    with mounted(url) as mnt:
        for view in ("zarr_v3.daf", "zarr_v3.daf.zarr"):
            with pytest.raises(OSError) as e:
                with open(os.path.join(mnt, view, "new.json"), "w") as f:
                    f.write("{}")
            assert e.value.errno == errno.EROFS, view
        with pytest.raises(OSError) as e:
            os.mkdir(os.path.join(mnt, "zarr_v3.daf.zarr", "g"))
        assert e.value.errno == errno.EROFS
