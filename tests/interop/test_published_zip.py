"""The published ZIP (`--zip`): `NAME.daf.zarr.zip` at the mount root of every source kind, copied with `cp` and
read by zarr-python's `ZipStore` (2 and 3), Zarr v2 and v3, every array checked value by value against known values
(the same as test_v3.py's), and passed by `python -m zipfile -t`; upstream's layout checked entry by entry (stored,
data at multiples of 8, ZIP64 records)."""
import os
import shutil
import struct
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import zarr

from conftest import mounted
from test_v3 import KINDS, SOURCES, ZARR3, all_arrays, dataset, needs_zarr3, same, zarr_arrays

RO = ("-o", "ro")


def published_copies(mnt, names, tmp_path):
    """cp of every published file of the mount; {data set name: copy}."""
    out = {}
    for name in names:
        published = os.path.join(mnt, name + ".daf.zarr.zip")
        assert os.path.isfile(published), f"{name}: {sorted(os.listdir(mnt))}"
        copy = tmp_path / (name + ".daf.zarr.zip")
        subprocess.run(["cp", published, str(copy)], check=True, timeout=120)
        assert os.path.getsize(copy) == os.stat(published).st_size
        out[name] = str(copy)
    return out


def check_layout(path):
    """Upstream's layout (daf-formats.md §7.1): stored entries, data at multiples of 8, ZIP64 sizes, the fixed
    1980 time; and what `python -m zipfile -t` says."""
    done = subprocess.run([sys.executable, "-m", "zipfile", "-t", path], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(path, "rb") as f:
        data = f.read()
    assert data[-98:-94] == b"PK\x06\x06" and data[-22:-18] == b"PK\x05\x06", "not the 98-byte ZIP64 trailer"
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            assert info.compress_type == zipfile.ZIP_STORED, info.filename
            assert info.date_time == (1980, 1, 1, 0, 0, 0), info.filename
            n, extra = struct.unpack("<HH", data[info.header_offset + 26:info.header_offset + 30])
            start = info.header_offset + 30 + n + extra
            assert start % 8 == 0, f"{info.filename}: data at {start}"
            assert data[start:start + info.file_size] == z.read(info), info.filename


def open_zip(path, zarr_format):
    if ZARR3:
        store = zarr.storage.ZipStore(path, mode="r")
        return zarr.open_group(store, mode="r", zarr_format=zarr_format, use_consolidated=False)
    return zarr.open_group(zarr.ZipStore(path, mode="r"), mode="r")


def check_values(path, zarr_format, expected, what):
    group = open_zip(path, zarr_format)
    arrays = all_arrays(group)
    want = zarr_arrays(dataset(expected))
    if zarr_format == 2:
        want["daf"] = np.array([1, 0], dtype=np.uint8)
    else:
        assert group.attrs["daf"] == [1, 0], what
    assert set(arrays) == set(want), what
    for array_path, values in want.items():
        same(arrays[array_path][...], values, f"{what}/{array_path}")


@pytest.mark.parametrize("kind", KINDS)
def test_zipstore_reads_the_published_v2_zip(kind, tmp_path):
    source, names = SOURCES[kind]
    with mounted(source, "--zip", "--zarr-format", "2", *RO) as mnt:
        copies = published_copies(mnt, names, tmp_path)
    for name, copy in copies.items():
        check_layout(copy)
        check_values(copy, 2, names[name], f"{kind}/{name} (v2)")


@needs_zarr3
@pytest.mark.parametrize("kind", KINDS)
def test_zipstore_reads_the_published_v3_zip(kind, tmp_path):
    source, names = SOURCES[kind]
    with mounted(source, "--zip", "--zarr-format", "3", *RO) as mnt:
        copies = published_copies(mnt, names, tmp_path)
    for name, copy in copies.items():
        check_layout(copy)
        with zipfile.ZipFile(copy) as z:
            first = z.infolist()[0]
            assert first.filename == "zarr.json", first.filename
            assert z.read(first) == b'{"attributes":{"daf":[1,0]},"node_type":"group","zarr_format":3}'
        check_values(copy, 3, names[name], f"{kind}/{name} (v3)")


def test_the_copy_mounts_again(tmp_path):
    source, names = SOURCES["zarr-v3"]
    with mounted(source, "--zip", *RO) as mnt:
        copy = published_copies(mnt, names, tmp_path)["zarr_v3"]
        with mounted(copy, *RO) as again:
            for rel in ("zarr_v3.daf/vectors/cell/score.data", "zarr_v3.daf.zarr/matrices/cell/gene/expr/c/0/0"):
                with open(os.path.join(mnt, rel), "rb") as a, open(os.path.join(again, rel), "rb") as b:
                    assert a.read() == b.read(), rel
