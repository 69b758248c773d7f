"""xarray opens the Zarr view of every source kind mounted with `--dimension-names` (Zarr v2 and v3, consolidated
and not): `xr.open_datatree(..., engine="zarr")` at the view's root and `xr.open_zarr` on every group. Every variable
equals the FilesDaf view's bytes (tests/interop/daf_files.py reads them without Daf code), every dimension is named
after its axis (doc/user-guide.md "Named dimensions"), and in `axes/` each axis is the coordinate of its own dimension. Without
the option the view has no names at all (the byte-exact forms are tests/dimension_names.rs and the core tests), and
xarray refuses it as before. Through dask (`chunks={}`), every variable is a dask array computing the same values.
xarray writes a vector through a named view, and the source gets it without names.
(Run in the zarr-python 3 venv, which has xarray and dask: current xarray needs zarr-python 3.)"""
import json
import os

import dask.array
import numpy as np
import pytest
import xarray as xr

import daf_files
from conftest import mounted
from test_v3 import RO, SOURCES, view_roots
from test_writes import private_copy

KINDS = list(SOURCES)
NAMED = ("--dimension-names",)


def expected_dims(path, ndim):
    """The names doc/user-guide.md "Named dimensions" promises for array `path` (no fixture has an axis named like ours)."""
    parts = path.split("/")
    if parts == ["daf"]:
        return ("daf_version",)
    if parts[0] == "scalars":
        return ("scalar",)
    if parts[0] == "axes" or (parts[0] == "vectors" and len(parts) == 3):
        return (parts[1],)
    if parts[-1] == "colptr":
        return ("ncolptr",)
    if parts[-1] in ("nzind", "nzval", "rowval"):
        return ("nnz",)
    rows, cols = parts[1], parts[2]
    assert ndim == 2, path
    return (cols, rows + "_rows") if rows == cols else (cols, rows)


def files_arrays(files_root, zarr_format):
    """{Zarr path: numpy array} of the FilesDaf view, as the Zarr view shows each array."""
    out = {}
    for path, (kind, content) in daf_files.properties(files_root).items():
        if kind == "scalar":
            # A JSON value: compared as text (its numeric type is the descriptor's, not Python's).
            out[path] = np.array([content if isinstance(content, str) else repr(content)], dtype=object)
        elif kind == "dense":
            out[path] = content
        else:
            for comp, values in content.items():
                out[f"{path}/{comp}"] = values
    if zarr_format == 3:
        del out["daf"]  # a root attribute in Zarr v3
    return out


def same(got, expected, what):
    got = np.asarray(got)
    assert got.shape == expected.shape, f"{what}: {got.shape} != {expected.shape}"
    if expected.dtype == object:
        assert [str(x) for x in got.ravel()] == [str(x) for x in expected.ravel()], what
    else:
        assert got.dtype == expected.dtype, f"{what}: {got.dtype} != {expected.dtype}"
        np.testing.assert_array_equal(got, expected, err_msg=what)


def check_variables(variables, prefix, want, seen, what):
    """Checks xarray variables of the group at `prefix` against `want`; records their paths in `seen`."""
    for name, var in variables.items():
        path = f"{prefix}/{name}" if prefix else name
        assert path in want, f"{what}: {path} is not an array of the FilesDaf view"
        assert var.dims == expected_dims(path, var.ndim), f"{what}: {path} {var.dims}"
        same(var.values, want[path], f"{what}: {path}")
        seen.add(path)


def groups(z):
    """Every group of a Zarr view below its root (relative paths), from its directories."""
    out = []
    for dirpath, dirs, files in os.walk(z):
        if ".zgroup" in files or ("zarr.json" in files and json.load(open(os.path.join(dirpath, "zarr.json")))[
                "node_type"] == "group"):
            out.append(os.path.relpath(dirpath, z).replace(os.sep, "/").removeprefix("."))
    return out


@pytest.mark.parametrize("consolidated", [True, False], ids=["consolidated", "plain"])
@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("kind", KINDS)
def test_xarray_opens_every_group_of_the_named_view(kind, zarr_format, consolidated):
    source, names = SOURCES[kind]
    with mounted(source, "--zarr-format", str(zarr_format), *NAMED, *RO) as mnt:
        for name, (files, z) in view_roots(mnt, names).items():
            what = f"{kind}/{name} v{zarr_format}"
            want = files_arrays(files, zarr_format)
            # The whole tree at once.
            tree = xr.open_datatree(z, engine="zarr", consolidated=consolidated, zarr_format=zarr_format)
            seen = set()
            for node in tree.subtree:
                prefix = node.path.strip("/")
                check_variables(node.to_dataset(inherit=False).variables, prefix, want, seen, what)
            assert seen == set(want), f"{what}: missing {sorted(set(want) - seen)}"
            axes = tree["axes"].to_dataset(inherit=False)
            assert set(axes.indexes) == {p.split("/")[1] for p in want if p.startswith("axes/")}, what
            # Each group on its own.
            seen = set()
            for group in groups(z):
                ds = xr.open_zarr(z, group=group or None, consolidated=consolidated, zarr_format=zarr_format)
                check_variables(ds.variables, group, want, seen, f"{what} open_zarr {group!r}")
            assert seen == set(want), f"{what}: missing {sorted(set(want) - seen)}"


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("kind", ["files-1.0", "zarr-v2-zip", "packed-zarr", "foreign-v3"])
def test_dask_computes_every_variable_of_the_named_view(kind, zarr_format):
    source, names = SOURCES[kind]
    with mounted(source, "--zarr-format", str(zarr_format), *NAMED, *RO) as mnt:
        for name, (files, z) in view_roots(mnt, names).items():
            what = f"{kind}/{name} v{zarr_format} (dask)"
            want = files_arrays(files, zarr_format)
            tree = xr.open_datatree(z, engine="zarr", chunks={}, zarr_format=zarr_format)
            seen = set()
            for node in tree.subtree:
                ds = node.to_dataset(inherit=False)
                for var in ds.data_vars.values():
                    assert isinstance(var.data, dask.array.Array), f"{what}: {node.path}/{var.name}"
                check_variables(ds.compute().variables, node.path.strip("/"), want, seen, what)
            assert seen == set(want), what


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("kind", ["files-1.0", "zarr-v3-zip", "packed-multi"])
def test_without_the_option_the_view_has_no_names(kind, zarr_format):
    source, names = SOURCES[kind]
    with mounted(source, "--zarr-format", str(zarr_format), *RO) as plain, \
            mounted(source, "-o", f"ro,zarr_format={zarr_format},dimension_names") as named:  # fstab's form
        for name, (_, z) in view_roots(plain, names).items():
            _, zn = view_roots(named, names)[name]
            for dirpath, _, files in os.walk(z):
                for f in files:
                    rel = os.path.relpath(os.path.join(dirpath, f), z)
                    with open(os.path.join(z, rel), "rb") as a, open(os.path.join(zn, rel), "rb") as b:
                        before, after = a.read(), b.read()
                    assert b"_ARRAY_DIMENSIONS" not in before and b"dimension_names" not in before, rel
                    if f in (".zattrs", ".zmetadata", "zarr.json") and before != after:
                        assert b"_ARRAY_DIMENSIONS" in after or b"dimension_names" in after, rel
                    else:
                        assert before == after, rel
            with pytest.raises((KeyError, ValueError), match="_ARRAY_DIMENSIONS|dimension"):
                xr.open_zarr(z, group="axes", consolidated=False, zarr_format=zarr_format)


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("fixture", ["files_v1_0.daf", "zarr_v3.daf.zarr"])
def test_xarray_writes_a_vector_through_the_named_view(tmp_path, fixture, zarr_format):
    source = private_copy(tmp_path, fixture)
    name = fixture.split(".")[0]
    values = np.array([0.25, 0.5, 4.0])
    with mounted(source, "--zarr-format", str(zarr_format), *NAMED) as mnt:
        z = os.path.join(mnt, name + ".daf.zarr")
        # (xarray writes a float's NaN fill as a `_FillValue` attribute, which a Daf node cannot hold: none here.)
        xr.Dataset({"size": ("cell", values)}).to_zarr(
            z, group="vectors/cell", mode="a", zarr_format=zarr_format, consolidated=False,
            encoding={"size": {"_FillValue": None}})
        files = os.path.join(mnt, name + ".daf")
        np.testing.assert_array_equal(np.fromfile(os.path.join(files, "vectors/cell/size.data")), values)
        back = xr.open_zarr(z, group="vectors/cell", zarr_format=zarr_format)
        assert back["size"].dims == ("cell",)
        np.testing.assert_array_equal(back["size"].values, values)
    # The source holds it as Julia writes it: no names.
    for dirpath, _, files in os.walk(source):
        for f in files:
            if f in (".zattrs", "zarr.json", ".zmetadata"):
                with open(os.path.join(dirpath, f), "rb") as doc:
                    text = doc.read()
                assert b"_ARRAY_DIMENSIONS" not in text and b"dimension_names" not in text, os.path.join(dirpath, f)
