"""TensorStore and xarray create arrays in the Zarr view with their normal calls; the FilesDaf
view shows them as Daf properties. (Run in the zarr-python 3 venv, which has both.)"""
import os

import numpy as np
import pytest

from conftest import mounted
from test_writes import private_copy

ts = pytest.importorskip("tensorstore")
xr = pytest.importorskip("xarray")

FIXTURES = ["files_v1_0.daf", "zarr_v2.daf.zarr", "zarr_v2.daf.zarr.zip"]


@pytest.mark.parametrize("fixture", FIXTURES)
def test_tensorstore_writes_a_vector(tmp_path, fixture):
    source = private_copy(tmp_path, fixture)
    name = fixture.split(".")[0]
    values = np.array([1.5, 2.5, 3.5])
    with mounted(source, "--zarr-format", "2") as mnt:
        path = os.path.join(mnt, name + ".daf.zarr", "vectors/cell/ts_vec/")
        spec = {"driver": "zarr", "kvstore": {"driver": "file", "path": path},
                "metadata": {"dtype": "<f8", "shape": [3], "chunks": [3], "compressor": None, "fill_value": None, "order": "C"}}
        array = ts.open(spec, create=True).result()
        array.write(values).result()
        files = os.path.join(mnt, name + ".daf")
        np.testing.assert_array_equal(np.fromfile(os.path.join(files, "vectors/cell/ts_vec.data")), values)
        assert ts.open({"driver": "zarr", "kvstore": {"driver": "file", "path": path}}).result().read().result().tolist() == values.tolist()


@pytest.mark.parametrize("fixture", FIXTURES)
def test_xarray_writes_a_vector(tmp_path, fixture):
    source = private_copy(tmp_path, fixture)
    name = fixture.split(".")[0]
    with mounted(source, "--zarr-format", "2") as mnt:
        ds = xr.Dataset({"size": ("cell", np.arange(3.0))})
        ds.to_zarr(os.path.join(mnt, name + ".daf.zarr"), group="vectors/cell", mode="a", zarr_format=2, consolidated=False)
        files = os.path.join(mnt, name + ".daf")
        np.testing.assert_array_equal(np.fromfile(os.path.join(files, "vectors/cell/size.data")), np.arange(3.0))
