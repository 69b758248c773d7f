"""H5df sources: h5py (with hdf5plugin's filters) reads each fixture of shared/fixtures/h5df on
its own, and zarr-python (2.x or 3.x, whichever this venv has) reads every array of the mounted
Zarr view, in each Zarr format it reads (2; and 3 with zarr-python 3); the two must hold the same
values."""
import json
import os

import h5py
import hdf5plugin  # noqa: F401  (registers the blosc, zstd and bitshuffle filters with h5py)
import numpy as np
import pytest
import zarr

from conftest import ROOT, mounted

H5DF = os.path.join(ROOT, "..", "shared", "fixtures", "h5df")
with open(os.path.join(H5DF, "index.json")) as f:
    INDEX = json.load(f)


def cases():
    for file, entry in sorted(INDEX["fixtures"].items()):
        for group in sorted(entry["groups"]):
            if group:
                stem = file[: -len(".h5dfs")]
                yield f"{file}#/{group}", os.path.join(H5DF, f"{stem}.h5dfs#/{group}"), file, group
            else:
                yield file, os.path.join(H5DF, file), file, group


def text(value):
    if isinstance(value, bytes):
        value = value.split(b"\0")[0].decode()
    return str(value)


def strings(ds):
    return [text(v) for v in np.asarray(ds[()]).ravel()]


def h5_arrays(root):
    """Every array of the data set as h5py reads it, by its Zarr view path, as (kind, values):
    numbers as a numpy array (Bool bitfields as uint8), strings as a list; sparse strings
    densified (the Zarr views have none)."""
    out = {}
    for name, ds in root["scalars"].items():
        value = ds[()]
        if ds.dtype.kind in "SOU":
            out[f"scalars/{name}"] = ("str", [text(value)])
        else:
            out[f"scalars/{name}"] = ("num", np.asarray([value]))
    for name, ds in root["axes"].items():
        out[f"axes/{name}"] = ("str", strings(ds))
    lengths = {name: ds.shape[0] for name, ds in root["axes"].items()}

    def prop(path, node, shape):
        if isinstance(node, h5py.Dataset):
            if h5py.check_string_dtype(node.dtype):
                out[path] = ("str", strings(node))
            else:
                out[path] = ("num", np.asarray(node[()]))
            return
        if "nztxt" in node:
            dense = [""] * int(np.prod(shape))
            values = strings(node["nztxt"])
            if "nzind" in node:
                positions = [int(i) - 1 for i in node["nzind"][()]]
            else:
                colptr, rowval = node["colptr"][()], node["rowval"][()]
                nrows = shape[1]
                positions = [
                    col * nrows + int(rowval[k]) - 1
                    for col in range(len(colptr) - 1)
                    for k in range(int(colptr[col]) - 1, int(colptr[col + 1]) - 1)
                ]
            for p, v in zip(positions, values):
                dense[p] = v
            out[path] = ("str", dense)
            return
        for component in ("nzind", "nzval", "colptr", "rowval"):
            if component in node:
                out[f"{path}/{component}"] = ("num", np.asarray(node[component][()]))

    for axis, group in root["vectors"].items():
        for name, node in group.items():
            prop(f"vectors/{axis}/{name}", node, (lengths[axis],))
    for rows, by_rows in root["matrices"].items():
        for cols, group in by_rows.items():
            for name, node in group.items():
                prop(f"matrices/{rows}/{cols}/{name}", node, (lengths[cols], lengths[rows]))
    return out


def zarr_values(array):
    data = np.asarray(array[...])
    if data.dtype.kind in "OUST":
        return "str", [str(v) for v in data.ravel()]
    if data.dtype == np.bool_:
        data = data.astype(np.uint8)
    return "num", data


# zarr-python 2 reads Zarr v2 only: the v3 view is read in the zarr3 venv.
ZARR_FORMATS = ["2", "3"] if int(zarr.__version__.split(".")[0]) >= 3 else ["2"]


@pytest.mark.parametrize("zarr_format", ZARR_FORMATS)
@pytest.mark.parametrize("label,source,file,group", list(cases()), ids=[c[0] for c in cases()])
def test_zarr_view_holds_what_h5py_reads(label, source, file, group, zarr_format):
    with h5py.File(os.path.join(H5DF, file), "r") as h5:
        want = h5_arrays(h5[group] if group else h5)
    assert len(want) >= 10, f"{label}: only {sorted(want)}"
    name = group.rsplit("/", 1)[-1] if group else file.rsplit(".", 1)[0]
    with mounted(source, "--zarr-format", zarr_format) as mnt:
        root = zarr.open_group(os.path.join(mnt, f"{name}.daf.zarr"), mode="r")
        for path, (kind, values) in want.items():
            got_kind, got = zarr_values(root[path])
            assert got_kind == kind, f"{label} {path}"
            if kind == "str":
                assert got == values, f"{label} {path}"
            else:
                assert got.shape == values.shape, f"{label} {path}"
                assert got.tobytes() == np.ascontiguousarray(values).astype(got.dtype).tobytes(), (
                    f"{label} {path}"
                )
