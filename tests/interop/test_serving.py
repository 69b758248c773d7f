"""Serving a mount over HTTP (doc/user-guide.md "Serving a mount over HTTP"): nginx on 127.0.0.1 serves the mount point of a
read-only daf-mount, and zarr-python (2 and 3, through fsspec's HTTP file system) reads every array of the Zarr v2
view (from its consolidated `.zmetadata`) and of the v3 view (zarr-python 3, from the root's consolidated metadata)
over HTTP with exact values."""
import json
import os
import urllib.error
import urllib.request

import numpy as np
import pytest
import zarr

from conftest import mounted
from http_serve import nginx
from test_v3 import SOURCES, all_arrays, dataset, same, zarr_arrays

ZARR3 = int(zarr.__version__.split(".")[0]) >= 3
RO = ("-o", "ro")
# Every local source kind of the fixtures (a FilesDaf directory, Zarr v2/v3 directories and ZIPs, a ZipDaf, packed).
KINDS = ["files-1.0", "zarr-v3-zip", "zipdaf-1.1", "packed-zarr", "packed-multi"]


def open_v2(url):
    """The call the user guide shows, the same for zarr-python 2 and 3."""
    return zarr.open_consolidated(url, mode="r")


@pytest.mark.parametrize("kind", KINDS)
def test_zarr_python_reads_the_served_v2_view(kind):
    source, names = SOURCES[kind]
    with mounted(source, "--zarr-format", "2", *RO) as mnt, nginx(mnt) as base:
        for name in names:
            url = f"{base}/{name}.daf.zarr"
            with urllib.request.urlopen(url + "/.zmetadata") as r:
                assert "metadata" in json.load(r), name
            arrays = all_arrays(open_v2(url))
            want = zarr_arrays(dataset(names[name]))
            want["daf"] = np.array([1, 0], dtype=np.uint8)
            assert set(arrays) == set(want), f"{kind}/{name}"
            for path, expected in want.items():
                same(arrays[path][...], expected, f"{kind}/{name}/{path} (v2 view over HTTP)")


@pytest.mark.skipif(not ZARR3, reason="zarr-python 2 cannot read Zarr v3")
@pytest.mark.parametrize("kind", KINDS)
def test_zarr_python_3_reads_the_served_v3_view(kind):
    source, names = SOURCES[kind]
    with mounted(source, "--zarr-format", "3", *RO) as mnt, nginx(mnt) as base:
        for name in names:
            url = f"{base}/{name}.daf.zarr"
            with urllib.request.urlopen(url + "/zarr.json") as r:
                assert "consolidated_metadata" in json.load(r), name
            group = zarr.open_group(url, mode="r", zarr_format=3, use_consolidated=True)
            arrays = all_arrays(group)
            want = zarr_arrays(dataset(names[name]))
            assert set(arrays) == set(want), f"{kind}/{name}"
            for path, expected in want.items():
                same(arrays[path][...], expected, f"{kind}/{name}/{path} (v3 view over HTTP)")


@pytest.mark.skipif(os.geteuid() != 0, reason="nginx workers as another user need root to start")
def test_workers_of_another_user_need_allow_other():
    """The user guide's advice: nginx workers running as an unprivileged user read the mount only with allow_other."""
    source, names = SOURCES["files-1.0"]
    (name,) = names
    for options, status in ((("-o", "ro,allow_other"), 200), (RO, 403)):
        with mounted(source, "--zarr-format", "2", *options) as mnt, nginx(mnt, user="nobody nogroup") as base:
            try:
                with urllib.request.urlopen(f"{base}/{name}.daf.zarr/.zmetadata") as r:
                    got = r.status
                    assert "metadata" in json.load(r)
            except urllib.error.HTTPError as e:
                got = e.code
            assert got == status, options
