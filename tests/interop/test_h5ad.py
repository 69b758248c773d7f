"""NAME.h5ad (`--h5ad`): the AnnData of the AnnData view as one HDF5 file made on the fly, read by anndata
(`read_h5ad` in memory and `backed="r"`), h5py, scanpy and h5dump, from the mount and from a `cp` of it. Every
element is compared with values read independently from the FilesDaf view of the same mount (test_anndata's
`check_anndata`), and with `read_zarr` of the AnnData view of the same mount, for every source kind and the edge
cases of edge.daf."""
import os
import random
import shutil
import subprocess

import anndata
import h5py
import numpy as np
import pytest
import scipy.sparse

from conftest import VECTORS, mounted
from test_anndata import EDGE, EDGE_SELECTIONS, FORMATS, PACKED, SOURCES, Daf, check_anndata, same_values


def mount_args(selection):
    # The AnnData view compared with is in the newest Zarr format this venv's anndata reads.
    return ("-o", "ro", "--zarr-format", FORMATS[-1], "--anndata", selection, "--h5ad")


def dense(matrix):
    return matrix.toarray() if scipy.sparse.issparse(matrix) else np.asarray(matrix)


def same_anndata(a, b, what):
    """The two AnnData objects hold the same elements, exactly."""
    assert list(a.obs_names) == list(b.obs_names) and list(a.var_names) == list(b.var_names), what
    for key, x, y in [("X", a.X, b.X)] + [(f"layers/{k}", a.layers[k], b.layers[k]) for k in a.layers.keys()] + \
            [(f"obsp/{k}", a.obsp[k], b.obsp[k]) for k in a.obsp.keys()] + \
            [(f"varp/{k}", a.varp[k], b.varp[k]) for k in a.varp.keys()]:
        assert scipy.sparse.issparse(x) == scipy.sparse.issparse(y), f"{what}: {key}"
        if scipy.sparse.issparse(x):
            assert x.format == y.format, f"{what}: {key}"
            for part in ("data", "indices", "indptr"):
                same_values(getattr(x, part), getattr(y, part), f"{what}: {key}/{part}")
        else:
            x, y = np.asarray(x), np.asarray(y)
            if x.dtype.kind in "OT" or y.dtype.kind in "OT":  # strings: h5py gives objects, zarr may not
                x, y = x.astype(object), y.astype(object)
            same_values(x, y, f"{what}: {key}")
    assert sorted(a.layers.keys()) == sorted(b.layers.keys()), what
    for frame in ("obs", "var"):
        x, y = getattr(a, frame), getattr(b, frame)
        assert list(x.columns) == list(y.columns), f"{what}: {frame}"
        for column in x.columns:
            u, v = np.asarray(x[column].to_numpy()), np.asarray(y[column].to_numpy())
            if u.dtype.kind in "OT" or v.dtype.kind in "OT":  # strings, as each reader types them
                u, v = u.astype(object), v.astype(object)
            same_values(u, v, f"{what}: {frame}/{column}")
    assert sorted(a.uns.keys()) == sorted(b.uns.keys()), what
    for key in a.uns.keys():
        u, v = a.uns[key], b.uns[key]
        u, v = (u.item() if isinstance(u, np.generic) else u), (v.item() if isinstance(v, np.generic) else v)
        assert type(u) is type(v) and (u == v or (u != u and v != v)), f"{what}: uns/{key}: {u!r} {v!r}"


def walk_h5py(path, daf, selection, what):
    """h5py reads every dataset of the file; the axis entries and X are the FilesDaf view's."""
    obs, var, _ = selection.split(":")
    seen = []
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, item: seen.append(name) if isinstance(item, h5py.Dataset) else None)
        for name in seen:
            f[name][()]  # every dataset reads
        assert f.attrs["encoding-type"] == "anndata", what
        for frame, axis in (("obs", obs), ("var", var)):
            names = [s.decode() for s in f[f"{frame}/_index"][()]]
            assert names == daf.axes[axis], f"{what}: {frame}/_index"
    assert seen, what


def check_mount(mnt, datasets, what, copy_dir=None):
    for name, selection in datasets.items():
        path = os.path.join(mnt, name + ".h5ad")
        daf = Daf(os.path.join(mnt, name + ".daf"))
        zarr_view = anndata.read_zarr(os.path.join(mnt, name + ".anndata.zarr"))
        in_memory = anndata.read_h5ad(path)
        check_anndata(in_memory, daf, selection, f"{what} {name} read_h5ad")
        same_anndata(in_memory, zarr_view, f"{what} {name} read_h5ad vs read_zarr")
        backed = anndata.read_h5ad(path, backed="r")
        try:
            assert backed.shape == in_memory.shape, what
            # A backed sparse X reads whole through to_memory (X[:] needs scipy < 1.15 in anndata 0.10).
            x = backed.X.to_memory() if hasattr(backed.X, "to_memory") else backed.X[:]
            assert np.array_equal(dense(x), dense(in_memory.X), equal_nan=True), f"{what} {name} backed X"
            check_anndata(backed.to_memory(), daf, selection, f"{what} {name} backed", False)
        finally:
            backed.file.close()
        walk_h5py(path, daf, selection, f"{what} {name} h5py")
        if copy_dir is not None:
            copy = os.path.join(copy_dir, name + ".h5ad")
            shutil.copyfile(path, copy)
            same_anndata(anndata.read_h5ad(copy), in_memory, f"{what} {name} copy")
            walk_h5py(copy, daf, selection, f"{what} {name} h5py copy")


@pytest.mark.parametrize("kind", list(SOURCES))
def test_read_h5ad_reads_every_element_of_every_source_kind(kind, tmp_path):
    source, datasets = SOURCES[kind]
    selection = next(iter(datasets.values()))
    with mounted(source, *mount_args(selection)) as mnt:
        check_mount(mnt, datasets, kind, str(tmp_path))


@pytest.mark.parametrize("selection", EDGE_SELECTIONS)
def test_read_h5ad_reads_the_edge_cases_exactly(selection):
    with mounted(EDGE, *mount_args(selection)) as mnt:
        check_mount(mnt, {"edge": selection}, "edge")


def test_random_preads_equal_a_copy_and_h5dump_opens_it(tmp_path):
    with mounted(EDGE, *mount_args("batch:gene:m_u8")) as mnt:
        path = os.path.join(mnt, "edge.h5ad")
        copy = str(tmp_path / "edge.h5ad")
        shutil.copyfile(path, copy)
        with open(copy, "rb") as f:
            want = f.read()
        assert os.path.getsize(path) == len(want)
        rng = random.Random(5)
        fd = os.open(path, os.O_RDONLY)
        try:
            for _ in range(1000):
                at = rng.randrange(len(want))
                n = rng.choice([1, 7, 512, 4096, 70000])
                assert os.pread(fd, n, at) == want[at:at + n], (at, n)
        finally:
            os.close(fd)
        if shutil.which("h5dump") is None:
            pytest.fail("h5dump is not installed (scripts/test installs hdf5-tools)")
        for target in (path, copy):
            done = subprocess.run(["h5dump", target], capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            assert "csr_matrix" in done.stdout or "csc_matrix" in done.stdout


def test_the_h5ad_file_is_read_only(tmp_path):
    source = str(tmp_path / "files_v1_0.daf")
    shutil.copytree(os.path.join(VECTORS, "files_v1_0.daf"), source)
    with mounted(source, "--anndata", "cell:gene:expr", "--h5ad") as mnt:  # a writable mount
        path = os.path.join(mnt, "files_v1_0.h5ad")
        for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC):
            with pytest.raises(OSError) as e:
                os.open(path, flags)
            assert e.value.errno == 30, flags  # EROFS
        with pytest.raises(OSError):
            os.unlink(path)


@pytest.mark.parametrize("source,selection", [
    (os.path.join(VECTORS, "files_v1_0.daf"), "cell:gene:expr"),
    (os.path.join(PACKED, "zarr_packed.daf.zarr.zip"), "batch:gene:umis"),
    (EDGE, "batch:cell:m_bool_dense"),
])
def test_scanpy_reads_all_of_x(source, selection, tmp_path):
    sc = pytest.importorskip("scanpy", reason="scanpy is in the zarr-python 3 venv")
    with mounted(source, *mount_args(selection)) as mnt:
        name = [n for n in os.listdir(mnt) if n.endswith(".h5ad")][0]
        copy = str(tmp_path / name)
        shutil.copyfile(os.path.join(mnt, name), copy)
        for path in (os.path.join(mnt, name), copy):
            adata = sc.read_h5ad(path)
            x = dense(adata.X)
            sc.pp.calculate_qc_metrics(adata, percent_top=None, inplace=True)
            totals = np.sum(x.astype(np.float64), axis=1)
            assert np.allclose(adata.obs["total_counts"].to_numpy(), totals, rtol=1e-5, equal_nan=True), path


def test_remote_sources_show_the_same_h5ad():
    """Served by nginx: the h5ad file of a remote mount reads as the local one (values from the remote FilesDaf
    view)."""
    from http_serve import serving
    remote = {
        "zarr-v2": ("vectors/zarr_v2.daf.zarr", {"zarr_v2": "cell:gene:expr"}),
        "zarr-v3-zip": ("vectors/zarr_v3.daf.zarr.zip", {"zarr_v3": "gene:cell:umis"}),
        "packed-zarr": ("packed/zarr_packed.daf.zarr", {"zarr_packed": "gene:batch:umis"}),
    }
    with serving({"vectors": VECTORS, "packed": PACKED}) as base:
        for kind, (path, datasets) in remote.items():
            selection = next(iter(datasets.values()))
            with mounted(f"{base}/{path}", *mount_args(selection)) as mnt:
                check_mount(mnt, datasets, "remote " + kind)
