"""zarr-python (2.x or 3.x) writes arrays through the Zarr view of a read-write mount; the FilesDaf
view, and the source after a remount, show them as Daf would have written them."""
import os
import shutil
import stat

import numcodecs
import numpy as np
import pytest
import zarr

import daf_files
from conftest import VECTORS, mounted

ZARR3 = int(zarr.__version__.split(".")[0]) >= 3


def private_copy(tmp_path, name):
    dst = tmp_path / name
    if name.endswith(".zip"):
        shutil.copy(os.path.join(VECTORS, name), dst)
        os.chmod(dst, 0o644)
        return str(dst)
    shutil.copytree(os.path.join(VECTORS, name), dst)
    for base, dirs, files in os.walk(dst):
        for entry in dirs + files:
            path = os.path.join(base, entry)
            os.chmod(path, os.stat(path).st_mode | stat.S_IWUSR)
    os.chmod(dst, os.stat(dst).st_mode | stat.S_IWUSR)
    return str(dst)


def open_for_writing(path):
    if ZARR3:
        return zarr.open_group(path, mode="a", zarr_format=2)
    return zarr.open_group(path, mode="a")


def create(group, name, data, chunks, compressor=None):
    if ZARR3:
        if data.dtype.kind in "OU":
            a = group.create_array(name, shape=data.shape, chunks=chunks, dtype=str, compressors=compressor)
            a[...] = data.astype(str)
            return a
        return group.create_array(name, data=data, chunks=chunks, compressors=compressor)
    if data.dtype.kind in "OU":
        return group.create_dataset(name, data=data.astype(object), chunks=chunks, dtype=object,
                                    object_codec=numcodecs.VLenUTF8(), compressor=compressor)
    return group.create_dataset(name, data=data, chunks=chunks, compressor=compressor)


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@pytest.mark.parametrize("fixture", ["files_v1_0.daf", "zarr_v2.daf.zarr", "zarr_v2.daf.zarr.zip"])
def test_arrays_written_by_zarr_python_become_daf_properties(tmp_path, fixture):
    source = private_copy(tmp_path, fixture)
    name = fixture.split(".")[0]
    size = np.arange(3.0)
    chunked = np.array([5, 6, 7], dtype=np.int32)
    zeros = np.zeros(3, dtype=np.float32)
    labels = np.array(["x", "yy", "z"])
    with mounted(source, "--zarr-format", "2") as mnt:
        files, z = os.path.join(mnt, name + ".daf"), os.path.join(mnt, name + ".daf.zarr")
        g = open_for_writing(z)
        create(g, "vectors/cell/size", size, (3,))
        # One uncompressed chunk, as in the example: committed at once.
        np.testing.assert_array_equal(np.fromfile(os.path.join(files, "vectors/cell/size.data"), np.float64), size)
        # Several compressed chunks: decoded and stored as Daf writes it.
        create(g, "vectors/cell/chunked", chunked, (2,), numcodecs.Zstd())
        np.testing.assert_array_equal(np.fromfile(os.path.join(files, "vectors/cell/chunked.data"), np.int32), chunked)
        # Strings become text in the FilesDaf view.
        create(g, "vectors/cell/label", labels, (3,))
        assert daf_files.lines(os.path.join(files, "vectors/cell/label.txt")) == list(labels)
        # An all-zero array: zarr 3 writes no chunk; fsync of its directory finalizes it.
        create(g, "vectors/cell/zeros", zeros, (3,))
        fsync_dir(os.path.join(z, "vectors/cell/zeros"))
        np.testing.assert_array_equal(np.fromfile(os.path.join(files, "vectors/cell/zeros.data"), np.float32), zeros)
        # Read back through zarr itself, from the committed property.
        np.testing.assert_array_equal(open_for_writing(z)["vectors/cell/size"][...], size)
        # Attributes are not Daf data: refused, not dropped.
        with pytest.raises(PermissionError):
            open_for_writing(z)["vectors/cell/size"].attrs["unit"] = "m"
        g = open_for_writing(z)
        # Writing fill values over an existing array: zarr 3 unlinks the chunk, zarr 2 writes zeros.
        if fixture.endswith(".zip"):
            with pytest.raises(PermissionError):
                open_for_writing(z)["vectors/cell/chunked"][:] = 0
        else:
            open_for_writing(z)["vectors/cell/chunked"][:] = 0
            chunked = np.zeros(3, dtype=np.int32)
            np.testing.assert_array_equal(np.fromfile(os.path.join(files, "vectors/cell/chunked.data"), np.int32), chunked)
        if fixture.endswith(".zip"):
            # ZIP sources are append-only.
            with pytest.raises(PermissionError):
                del g["vectors/cell/size"]
        else:
            # zarr's `del` removes a property from a directory source (and from both views).
            del g["vectors/cell/size"]
            assert not os.path.exists(os.path.join(files, "vectors/cell/size.data"))
    with mounted(source, "-o", "ro", "--zarr-format", "2") as mnt:
        files = os.path.join(mnt, name + ".daf")
        np.testing.assert_array_equal(np.fromfile(os.path.join(files, "vectors/cell/chunked.data"), np.int32), chunked)
        assert daf_files.lines(os.path.join(files, "vectors/cell/label.txt")) == list(labels)
        z = zarr.open_group(os.path.join(mnt, name + ".daf.zarr"), mode="r", **({"zarr_format": 2} if ZARR3 else {}))
        np.testing.assert_array_equal(z["vectors/cell/zeros"][...], zeros)
        assert z["vectors/cell/chunked"].chunks == (3,)
        assert ("size" in z["vectors/cell"]) == fixture.endswith(".zip")
