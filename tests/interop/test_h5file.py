"""`NAME.h5df` (`--h5df`): for every local source kind, h5py walks the mounted H5df file and every dataset equals
the FilesDaf view's values (read with numpy and text lines, tests/interop/daf_files.py); upstream's layout (flat
payloads contiguous and 8-byte aligned, Bool a bitfield, empty datasets without storage); `h5dump` reads all of it;
1,000 random `pread`s equal a `cp` of it; and the copy mounted again with daf-mount (an H5df source) shows the same
FilesDaf and Zarr views, file by file."""
import json
import os
import random
import subprocess

import h5py
import numpy as np
import pytest

from conftest import VECTORS, mounted
from daf_files import properties
from test_h5df import H5DF, h5_arrays
from test_v3 import SOURCES

# Every local source kind: the Zarr, FilesDaf and ZipDaf sources of test_v3.py, and H5df files.
KINDS = dict(SOURCES)
KINDS["zipdaf-1.0"] = (os.path.join(VECTORS, "zipdaf_v1_0.daf.zip"), {"zipdaf_v1_0": None})
KINDS["multi-zipdaf"] = (os.path.join(VECTORS, "multi_v1_1.dafs.zip"), {"g1": None})
for fixture in ("tiny.h5df", "tiny-sb0.h5df", "edge.h5df", "packed-zstd.h5df"):
    KINDS["h5df-" + fixture[: -len(".h5df")]] = (os.path.join(H5DF, fixture), {fixture[: -len(".h5df")]: None})
KINDS["h5dfs-multi"] = (os.path.join(H5DF, "multi.h5dfs"), {"julia": None, "more/tiny": None})

# The FilesDaf view is read in version 1.0 and the Zarr view in v2 everywhere, so that a source and the copy of its
# H5df file (an H5df source, shown in those formats by default) show the same formats.
FORMATS = ("--files-version", "1.0", "--zarr-format", "2", "-o", "ro")


def h5df_names(mnt, names):
    out = []
    for name in names:
        path = os.path.join(mnt, name + ".h5df")
        assert os.path.isfile(path), f"{name}: {sorted(os.listdir(mnt))}"
        out.append((name, path))
    return out


def same_numbers(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    if want.dtype == np.bool_:
        want = want.astype(np.uint8)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype.itemsize == want.dtype.itemsize, f"{what}: {got.dtype} != {want.dtype}"
    assert got.tobytes() == want.tobytes(), what


def check_values(h5path, filesdaf, what):
    """Every dataset of the H5df file at `h5path` against the FilesDaf view at `filesdaf`."""
    want = properties(filesdaf)
    with h5py.File(h5path, "r") as h5:
        walked = []
        h5.visititems(lambda name, node: walked.append(name) if isinstance(node, h5py.Dataset) else None)
        got = h5_arrays(h5)
        same_numbers(h5["daf"][()], np.array([1, 0], dtype=np.uint8), f"{what}: daf")
        covered = {"daf"}
        for path, (kind, content) in want.items():
            if path == "daf":
                continue
            node = h5[path]
            if kind == "scalar":
                value = node[()]
                if isinstance(content, str):
                    assert node.dtype.kind == "S", f"{what}: {path}: {node.dtype}"
                    assert value.split(b"\0")[0].decode() == content, f"{what}: {path}"
                elif isinstance(content, float) and np.isnan(content):
                    assert np.isnan(value), f"{what}: {path}"
                else:
                    assert value == content, f"{what}: {path}: {value!r} != {content!r}"
                covered.add(path)
            elif kind == "dense" and content.dtype == object:
                assert isinstance(node, h5py.Dataset) or "nztxt" in node, f"{what}: {path}"
                assert got[path] == ("str", [str(v) for v in content.ravel()]), f"{what}: {path}"
                covered.update(n for n in walked if n == path or n.startswith(path + "/"))
            elif kind == "dense":
                assert isinstance(node, h5py.Dataset), f"{what}: {path} is not a dataset"
                same_numbers(node[()], content, f"{what}: {path}")
                covered.add(path)
            else:
                assert isinstance(node, h5py.Group), f"{what}: {path} is not a group"
                assert sorted(node) == sorted(content), f"{what}: {path}: {sorted(node)}"
                for component, values in content.items():
                    same_numbers(node[component][()], values, f"{what}: {path}/{component}")
                    covered.add(f"{path}/{component}")
        assert sorted(covered) == sorted(walked), f"{what}: datasets not compared: {set(walked) - covered}"
        check_layout(h5, walked, what)


def check_layout(h5, walked, what):
    """Upstream's H5df layout: UTF-8 link names, contiguous datasets, flat payloads 8-byte aligned, empty ones
    without storage, Bool a bitfield (h5py reads it as uint8), scalars with a scalar dataspace."""
    for name in walked:
        ds = h5[name]
        parent, _, leaf = name.rpartition("/")
        group = h5[parent or "/"]  # kept: its identifier must outlive the link proxy's call
        link = group.id.links.get_info(leaf.encode())
        assert link.cset == h5py.h5t.CSET_UTF8, f"{what}: {name}: its link name is not UTF-8"
        assert ds.chunks is None and ds.compression is None, f"{what}: {name} is not contiguous"
        offset = ds.id.get_offset()
        if ds.size == 0:
            assert offset is None and ds.id.get_storage_size() == 0, f"{what}: {name}: empty with storage"
        elif not h5py.check_string_dtype(ds.dtype) or ds.shape == ():
            assert offset % 8 == 0, f"{what}: {name} at {offset}"
        if name.startswith("scalars/"):
            assert ds.shape == (), f"{what}: {name}: {ds.shape}"
        if ds.id.get_type().get_class() == h5py.h5t.BITFIELD:
            assert ds.dtype == np.uint8, f"{what}: {name}"


def random_preads(mounted_path, copy, what):
    with open(copy, "rb") as f:
        data = f.read()
    size = len(data)
    rng = random.Random(size)
    fd = os.open(mounted_path, os.O_RDONLY | os.O_DIRECT)
    try:
        for _ in range(1000):
            offset, length = rng.randrange(size), rng.randrange(1, 5000)
            got = os.pread(fd, length, offset)
            assert got == data[offset:offset + length], f"{what}: at {offset}+{length}"
    finally:
        os.close(fd)


def tree(root):
    """Every file below `root`: its bytes, JSON documents parsed (a FilesDaf source's own documents are served
    byte for byte, the copy's are made)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for f in sorted(filenames):
            path = os.path.join(dirpath, f)
            with open(path, "rb") as fh:
                data = fh.read()
            if f.endswith(".json") or f in (".zarray", ".zattrs", ".zgroup", ".zmetadata"):
                data = json.loads(data)
            out[os.path.relpath(path, root)] = data
    return out


@pytest.mark.parametrize("kind", list(KINDS))
def test_h5py_reads_the_h5df_file_as_the_filesdaf_view(kind, tmp_path):
    source, names = KINDS[kind]
    with mounted(source, "--h5df", *FORMATS) as mnt:
        for name, path in h5df_names(mnt, names):
            what = f"{kind}/{name}"
            check_values(path, os.path.join(mnt, name + ".daf"), what)
            done = subprocess.run(["h5dump", path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)
            assert done.returncode == 0, f"{what}: h5dump: {done.stderr.decode()[:2000]}"
            copy = tmp_path / (name.replace("/", "_") + ".h5df")
            subprocess.run(["cp", path, str(copy)], check=True, timeout=300)
            assert os.path.getsize(copy) == os.stat(path).st_size
            random_preads(path, copy, what)
            check_values(str(copy), os.path.join(mnt, name + ".daf"), what + " (copy)")
            with mounted(str(copy), *FORMATS) as again:
                stem = os.path.basename(str(copy))[: -len(".h5df")]
                for suffix in (".daf", ".daf.zarr"):
                    assert tree(os.path.join(again, stem + suffix)) == tree(os.path.join(mnt, name + suffix)), (
                        f"{what}: the copy's {suffix} view differs"
                    )
