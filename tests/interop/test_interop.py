"""zarr-python (2.x or 3.x, whichever this venv has) against the mounted Zarr view of every
source kind, checked against a plain-Python reading of the FilesDaf view; and sources written by
zarr-python itself (chunked, compressed, missing chunks) shown correctly in both views."""
import os
import shutil
import zipfile

import numcodecs
import numpy as np
import pytest
import zarr

import daf_files
from conftest import JULIA, VECTORS, mounted

ZARR3 = int(zarr.__version__.split(".")[0]) >= 3

# The data written by zarr-python for the foreign sources (Daf orientation: rows x columns).
CELLS = [f"cell{i}" for i in range(10)]
GENES = [f"gene{i}" for i in range(7)]
RNG = np.random.default_rng(7)
SCORE = RNG.random(10).astype(np.float32)
TYPES = ["T", "B", "", "NK", "T", "B", "T", "", "B", "é"]
EXPR = RNG.random((10, 7))
EXPR[0:4, 0:3] = 0.0  # one whole zero chunk in the Zarr layout (zarr 3 does not store it)
UMIS = RNG.integers(0, 1000, (10, 7)).astype(np.uint16)
COUNTS_IND = np.array([1, 4, 10], dtype=np.int64)
COUNTS_VAL = np.array([5, -6, 7], dtype=np.int32)
COMPRESSORS = [numcodecs.Blosc(), numcodecs.Zstd(), numcodecs.Zlib(), numcodecs.GZip(), numcodecs.LZ4(), numcodecs.BZ2()]


def _array(group, name, data, chunks, compressor):
    data = np.asarray(data)
    strings = data.dtype.kind in "OU"
    if ZARR3:
        if strings:
            a = group.create_array(name, shape=data.shape, chunks=chunks, dtype=str, compressors=compressor)
            a[...] = data.astype(str)
        else:
            group.create_array(name, data=data, chunks=chunks, compressors=compressor)
    elif strings:
        group.create_dataset(name, data=data.astype(object), chunks=chunks, dtype=object,
                             object_codec=numcodecs.VLenUTF8(), compressor=compressor)
    else:
        group.create_dataset(name, data=data, chunks=chunks, compressor=compressor)


def write_foreign(path):
    """A Daf data set written by zarr-python with its own defaults: many chunks, compression."""
    root = zarr.open_group(path, mode="w", zarr_format=2) if ZARR3 else zarr.open_group(path, mode="w")
    c = iter(COMPRESSORS * 3)
    _array(root, "daf", np.array([1, 0], dtype=np.uint8), (1,), next(c))
    for g in ("scalars", "axes", "vectors", "matrices", "vectors/cell", "vectors/gene"):
        root.require_group(g)
    for r in ("cell", "gene"):
        for col in ("cell", "gene"):
            root.require_group(f"matrices/{r}/{col}")
    _array(root["scalars"], "ratio", np.array([2.5]), (1,), next(c))
    _array(root["scalars"], "title", np.array(["hello"]), (1,), next(c))
    _array(root["axes"], "cell", np.array(CELLS), (4,), next(c))
    _array(root["axes"], "gene", np.array(GENES), (3,), next(c))
    _array(root["vectors/cell"], "score", SCORE, (3,), next(c))
    _array(root["vectors/cell"], "type", np.array(TYPES), (4,), next(c))
    counts = root["vectors/cell"].require_group("counts")
    _array(counts, "nzind", COUNTS_IND, (2,), next(c))
    _array(counts, "nzval", COUNTS_VAL, (2,), next(c))
    gene_cell = root["matrices/cell/gene"]
    _array(gene_cell, "expr", EXPR.T, (3, 4), next(c))  # Zarr shape [ncols, nrows]
    _array(gene_cell, "umis", UMIS.T, (7, 10), next(c))


def zip_directory(directory, archive):
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for base, _, files in os.walk(directory):
            for name in sorted(files):
                full = os.path.join(base, name)
                z.write(full, os.path.relpath(full, directory))


@pytest.fixture(scope="session")
def sources(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sources")
    foreign = tmp / "foreign.daf.zarr"
    write_foreign(str(foreign))
    zip_directory(foreign, tmp / "foreign.daf.zarr.zip")
    with zipfile.ZipFile(os.path.join(VECTORS, "zarr_v2.daf.zarr.zip")) as src, \
            zipfile.ZipFile(tmp / "many.dafs.zarr.zip", "w") as dst:
        for prefix in ("g1/", "nested/g2/"):
            for info in src.infolist():
                dst.writestr(prefix + info.filename, src.read(info))
    return {
        "files-dir": os.path.join(VECTORS, "files_v1_0.daf"),
        "files-1.1-dir": os.path.join(VECTORS, "files_v1_1.daf"),
        "julia-files-dir": JULIA,
        "zarr-dir": os.path.join(VECTORS, "zarr_v2.daf.zarr"),
        "zarr-zip": os.path.join(VECTORS, "zarr_v2.daf.zarr.zip"),
        "zipdaf": os.path.join(VECTORS, "zipdaf_v1_0.daf.zip"),
        "multi-group": str(tmp / "many.dafs.zarr.zip") + "#/nested/g2",
        "multi-whole": str(tmp / "many.dafs.zarr.zip"),
        "foreign-dir": str(foreign),
        "foreign-zip": str(tmp / "foreign.daf.zarr.zip"),
    }


def open_zarr(path, consolidated):
    if ZARR3:
        return zarr.open_group(path, mode="r", zarr_format=2, use_consolidated=consolidated)
    return zarr.open_consolidated(path, mode="r") if consolidated else zarr.open_group(path, mode="r")


def all_arrays(group, prefix=""):
    out = {}
    for name, array in group.arrays():
        out[prefix + name] = array
    for name, sub in group.groups():
        out.update(all_arrays(sub, prefix + name + "/"))
    return out


def same(got, expected, what):
    got = np.asarray(got)
    assert got.shape == expected.shape, what
    if expected.dtype == object:
        assert [str(x) for x in got.ravel()] == [str(x) for x in expected.ravel()], what
    else:
        assert got.dtype == expected.dtype, what
        np.testing.assert_array_equal(got, expected, err_msg=what)


def view_pairs(mnt):
    pairs = []
    for base, dirs, _ in os.walk(mnt):
        for d in dirs:
            if d.endswith(".daf") and d + ".zarr" in dirs:
                pairs.append((os.path.join(base, d), os.path.join(base, d + ".zarr")))
        dirs[:] = [d for d in dirs if not d.endswith((".daf", ".zarr"))]
    return pairs


@pytest.mark.parametrize("consolidated", [True, False], ids=["consolidated", "plain"])
@pytest.mark.parametrize("kind", ["files-dir", "files-1.1-dir", "julia-files-dir", "zarr-dir", "zarr-zip", "zipdaf",
                                  "multi-group", "multi-whole", "foreign-dir", "foreign-zip"])
def test_zarr_view_agrees_with_the_files_view(sources, kind, consolidated):
    with mounted(sources[kind], "--zarr-format", "2") as mnt:
        pairs = view_pairs(mnt)
        assert len(pairs) == (2 if kind == "multi-whole" else 1)
        for files_root, zarr_root in pairs:
            expected = daf_files.properties(files_root)
            arrays = all_arrays(open_zarr(zarr_root, consolidated))
            wanted = set()
            for rel, (what, content) in expected.items():
                if what == "scalar":
                    wanted.add(rel)
                    value = arrays[rel][0]
                    assert (str(value) if isinstance(content, str) else value) == content, rel
                elif what == "dense":
                    wanted.add(rel)
                    same(arrays[rel][...], content, rel)
                else:
                    for component, values in content.items():
                        wanted.add(f"{rel}/{component}")
                        same(arrays[f"{rel}/{component}"][...], values, f"{rel}/{component}")
            assert set(arrays) == wanted, f"{kind}: arrays without a FilesDaf counterpart"


@pytest.mark.parametrize("kind", ["foreign-dir", "foreign-zip"])
def test_arrays_written_by_zarr_python_show_their_values_in_both_views(sources, kind):
    with mounted(sources[kind], "--zarr-format", "2") as mnt:
        files, z = os.path.join(mnt, "foreign.daf"), os.path.join(mnt, "foreign.daf.zarr")
        assert daf_files.axis(files, "cell") == CELLS
        assert daf_files.scalar(files, "title") == "hello"
        assert daf_files.scalar(files, "ratio") == 2.5
        np.testing.assert_array_equal(np.fromfile(os.path.join(files, "vectors/cell/score.data"), np.float32), SCORE)
        assert daf_files.lines(os.path.join(files, "vectors/cell/type.txt")) == TYPES
        np.testing.assert_array_equal(np.fromfile(os.path.join(files, "vectors/cell/counts.nzind"), np.int64), COUNTS_IND)
        np.testing.assert_array_equal(np.fromfile(os.path.join(files, "vectors/cell/counts.nzval"), np.int32), COUNTS_VAL)
        # FilesDaf matrices are column-major (Julia order).
        expr = np.fromfile(os.path.join(files, "matrices/cell/gene/expr.data"), np.float64).reshape((7, 10)).T
        np.testing.assert_array_equal(expr, EXPR)
        umis = np.fromfile(os.path.join(files, "matrices/cell/gene/umis.data"), np.uint16).reshape((7, 10)).T
        np.testing.assert_array_equal(umis, UMIS)
        # The Zarr view presents the same data as Daf writes it: one uncompressed chunk.
        group = open_zarr(z, False)
        for rel in ("vectors/cell/score", "matrices/cell/gene/expr", "axes/cell"):
            a = group[rel]
            assert a.chunks == a.shape and (a.compressors == () if ZARR3 else a.compressor is None), rel
        np.testing.assert_array_equal(group["matrices/cell/gene/expr"][...].T, EXPR)
        with open(os.path.join(z, "vectors/cell/score/0"), "rb") as f:
            assert f.read() == SCORE.tobytes()
