"""The AnnData view (`--anndata`, NAME.anndata.zarr/) read by anndata itself: `read_zarr` (anndata 0.10 with
zarr-python 2 on the Zarr v2 view; the current anndata with zarr-python 3 on both formats), `read_lazy` (anndata >=
0.12), and a scanpy function that reads all of X. Every element is compared with values read independently from the
FilesDaf view of the same mount (numpy.fromfile and text lines, tests/interop/daf_files.py): obs/var names, X and
every layer (dense, csr or csc with the exact 0-based indices, their dtypes), obs/var columns (sparse ones dense),
obsp/varp, uns; for every source kind (FilesDaf 1.0/1.1, ZarrDaf v2/v3 directories and ZIPs, ZipDaf, a group of a
multi-data-set archive and the whole archive, packed and foreign arrays, remote URLs served by nginx), and for the
edge cases of shared/fixtures/h5df/expected/edge.daf (every element and index type, empty axes, square and String
matrices, Bool X, NaN and infinities)."""
import json
import os

import anndata
import numpy as np
import pytest
import scipy.sparse
import zarr

import daf_files
from conftest import ROOT, VECTORS, mounted

ZARR3 = int(zarr.__version__.split(".")[0]) >= 3
LAZY = hasattr(anndata.experimental, "read_lazy")
PACKED = os.path.join(ROOT, "tests", "data", "packed")
EDGE = os.path.join(ROOT, "..", "shared", "fixtures", "h5df", "expected", "edge.daf")
FORMATS = ["2", "3"] if ZARR3 else ["2"]

# Source kind -> (source, {data set name: selection}).
SOURCES = {
    "files-1.0": (os.path.join(VECTORS, "files_v1_0.daf"), {"files_v1_0": "cell:gene:expr"}),
    "files-1.1": (os.path.join(VECTORS, "files_v1_1.daf"), {"files_v1_1": "gene:cell:umis"}),
    "zarr-v2": (os.path.join(VECTORS, "zarr_v2.daf.zarr"), {"zarr_v2": "cell:gene:umis"}),
    "zarr-v3": (os.path.join(VECTORS, "zarr_v3.daf.zarr"), {"zarr_v3": "gene:cell:expr"}),
    "zarr-v2-zip": (os.path.join(VECTORS, "zarr_v2.daf.zarr.zip"), {"zarr_v2": "gene:cell:umis"}),
    "zarr-v3-zip": (os.path.join(VECTORS, "zarr_v3.daf.zarr.zip"), {"zarr_v3": "cell:gene:expr"}),
    "zipdaf-1.0": (os.path.join(VECTORS, "zipdaf_v1_0.daf.zip"), {"zipdaf_v1_0": "cell:gene:umis"}),
    "zipdaf-1.1": (os.path.join(VECTORS, "zipdaf_v1_1.daf.zip"), {"zipdaf_v1_1": "gene:cell:expr"}),
    "multi-g1": (os.path.join(VECTORS, "multi_v1_1.dafs.zip") + "#/g1", {"g1": "cell:gene:expr"}),
    "multi": (os.path.join(VECTORS, "multi_v1_1.dafs.zip"), {"g1": "gene:cell:umis"}),
    "packed-files": (os.path.join(PACKED, "files_packed.daf"), {"files_packed": "gene:batch:expr"}),
    "packed-zipdaf": (os.path.join(PACKED, "zipdaf_packed.daf.zip"), {"zipdaf_packed": "batch:gene:umis"}),
    "packed-zarr": (os.path.join(PACKED, "zarr_packed.daf.zarr"), {"zarr_packed": "batch:gene:expr"}),
    "packed-zarr-zip": (os.path.join(PACKED, "zarr_packed.daf.zarr.zip"), {"zarr_packed": "gene:batch:umis"}),
    "foreign-v3": (os.path.join(PACKED, "foreign_v3.daf.zarr"), {"foreign_v3": "cell:gene:umis"}),
}
# The edge cases: (obs, var, X) on edge.daf.
EDGE_SELECTIONS = [
    "cell:gene:m_f32",  # X and layers stored both ways: (var, obs) used; csr layers; Bool sparse layer
    "gene:cell:m_i64_sparse",  # the other way round
    "batch:gene:m_u8",  # X natural; flipped dense layers (F order); sparse indices of every width; String layers;
    # obsp: square sparse (UInt8/Int8 indices) and square String
    "gene:batch:m_u8",  # X in F order; csc layers; a sparse String layer reordered to C order
    "batch:cell:m_bool_dense",  # a Bool X; an all-false Bool sparse layer
    "cell:empty:e_m_sparse",  # an empty var axis, a sparse X of shape (300, 0)
    "empty:cell:e_m_f32",  # an empty obs axis
]


def mount_args(selection, fmt):
    return ("-o", "ro", "--zarr-format", fmt, "--anndata", selection)


# --- what the FilesDaf view says the AnnData is -------------------------------------------------------------------


class Daf:
    """A data set read from the FilesDaf view: axes, scalars, and properties in Zarr order (daf_files)."""

    def __init__(self, root):
        self.root = root
        self.props = daf_files.properties(root)
        self.axes = {p[len("axes/"):]: list(v) for p, (_, v) in self.props.items() if p.startswith("axes/")}

    def n(self, axis):
        return len(self.axes[axis])

    def vectors(self, axis):
        prefix = f"vectors/{axis}/"
        return sorted(p[len(prefix):] for p in self.props if p.startswith(prefix))

    def matrices(self, rows, cols):
        prefix = f"matrices/{rows}/{cols}/"
        return sorted(p[len(prefix):] for p in self.props if p.startswith(prefix))

    def eltype(self, rel):
        with open(os.path.join(self.root, rel + ".json")) as f:
            return daf_files._types(json.load(f))

    def vector(self, axis, name):
        """The dense values (sparse densified)."""
        rel = f"vectors/{axis}/{name}"
        kind, content = self.props[rel]
        eltype, _ = self.eltype(rel)
        if kind == "dense":
            return content
        dense = np.zeros(self.n(axis), dtype=daf_files.DTYPES[eltype])
        values = content.get("nzval", np.ones(len(content["nzind"]), dtype=np.bool_))
        dense[content["nzind"].astype(np.int64) - 1] = values
        return dense

    def matrix(self, rows, cols, name):
        """(kind, Zarr-order array [n_cols, n_rows] or the sparse parts, eltype, indtype)."""
        rel = f"matrices/{rows}/{cols}/{name}"
        kind, content = self.props[rel]
        eltype, indtype = self.eltype(rel)
        return kind, content, eltype, indtype

    def dense_matrix(self, rows, cols, name):
        """The Zarr-order array [n_cols, n_rows] (sparse densified)."""
        kind, content, eltype, _ = self.matrix(rows, cols, name)
        if kind == "dense":
            return content
        nr, nc = self.n(rows), self.n(cols)
        m = np.zeros((nc, nr), dtype=daf_files.DTYPES[eltype])
        colptr, rowval = content["colptr"].astype(np.int64), content["rowval"].astype(np.int64)
        values = content.get("nzval", np.ones(len(rowval), dtype=np.bool_))
        for c in range(nc):
            for k in range(colptr[c] - 1, colptr[c + 1] - 1):
                m[c, rowval[k] - 1] = values[k]
        return m

    def scalar_type(self, name):
        with open(os.path.join(self.root, "scalars", name + ".json")) as f:
            return json.load(f)["type"]

    def scalars(self):
        names = [p[len("scalars/"):] for p in self.props if p.startswith("scalars/")]
        return {n: self.props["scalars/" + n][1] for n in names}


def widened(indtype):
    return np.int64 if indtype in ("Int64", "UInt32", "UInt64") else np.int32


def same_values(got, want, what):
    """Exact: same dtype and the same bits (NaN payloads included) for numbers; equal strings."""
    got = np.asarray(got)
    if want.dtype == object:
        assert [str(x) for x in got.ravel()] == [str(x) for x in want.ravel()], what
        assert got.shape == want.shape, what
        return
    assert got.dtype == want.dtype, f"{what}: {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: {got.shape} != {want.shape}"
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes(), what


def check_matrix(got, daf, rows, cols, name, flipped, what, index_dtype=True):
    """`got` (an AnnData matrix) is Daf matrix (rows, cols) `name`: [n_obs, n_var] = the Zarr-order array itself,
    or its transpose when `flipped` (stored as (obs, var)); a sparse one csr (csc when flipped) with Daf's own
    0-based indices, index dtype widened (`index_dtype`: read_lazy's to_memory narrows indices that fit int32, as
    scipy does), `data` the stored values."""
    kind, content, eltype, indtype = daf.matrix(rows, cols, name)
    want = daf.dense_matrix(rows, cols, name)
    want = want.T if flipped else want
    if eltype == "String":
        same_values(np.asarray(got, dtype=object), want, what)
        return
    if kind == "dense":
        assert not scipy.sparse.issparse(got), what
        same_values(got, want, what)
        return
    assert scipy.sparse.issparse(got), what
    assert got.format == ("csc" if flipped else "csr"), f"{what}: {got.format}"
    i = widened(indtype)
    for part, daf_part in (("indptr", "colptr"), ("indices", "rowval")):
        index = getattr(got, part)
        want_index = (content[daf_part].astype(np.int64) - 1).astype(i)
        if not index_dtype:
            index, want_index = index.astype(np.int64), want_index.astype(np.int64)
        same_values(index, want_index, f"{what} {part}")
    data = content.get("nzval", np.ones(len(content["rowval"]), dtype=np.bool_))
    same_values(got.data, data, what + " data")
    # scipy's toarray adds the stored values to zeros: a stored -0.0 comes out +0.0.
    dense = got.toarray()
    assert dense.dtype == want.dtype and np.array_equal(dense, want, equal_nan=want.dtype.kind == "f"), what


def check_anndata(adata, daf, selection, what, index_dtype=True):
    obs, var, x = selection.split(":")
    assert list(adata.obs_names) == daf.axes[obs], what
    assert list(adata.var_names) == daf.axes[var], what
    assert adata.shape == (daf.n(obs), daf.n(var)), what
    joined = {}
    for name in daf.matrices(obs, var):
        joined[name] = (obs, var, True)
    for name in daf.matrices(var, obs):
        joined[name] = (var, obs, False)
    rows, cols, flipped = joined[x]
    check_matrix(adata.X, daf, rows, cols, x, flipped, f"{what}: X", index_dtype)
    layers = sorted(k for k in adata.layers.keys() if k is not None)
    assert layers == sorted(n for n in joined if n != x), what
    for name in layers:
        rows, cols, flipped = joined[name]
        check_matrix(adata.layers[name], daf, rows, cols, name, flipped, f"{what}: layers/{name}", index_dtype)
    for frame, axis in (("obs", obs), ("var", var)):
        df = getattr(adata, frame)
        columns = [c for c in daf.vectors(axis) if c != "_index"]
        assert list(df.columns) == columns, f"{what}: {frame} columns"
        for column in columns:
            want = daf.vector(axis, column)
            got = df[column].to_numpy()
            if want.dtype == object:
                got = np.array([str(v) for v in got], dtype=object)
            same_values(got, want, f"{what}: {frame}/{column}")
        square = getattr(adata, frame + "p")
        assert sorted(square.keys()) == daf.matrices(axis, axis), f"{what}: {frame}p"
        for name in square.keys():
            check_matrix(square[name], daf, axis, axis, name, False, f"{what}: {frame}p/{name}", index_dtype)
    assert len(adata.obsm) == 0 and len(adata.varm) == 0, what
    want_uns = {n: (daf.scalar_type(n), v) for n, v in daf.scalars().items()}
    for key, default, chosen in (("obs_is", "obs", obs), ("var_is", "var", var), ("X_is", "X", x)):
        want_uns.pop(key, None)
        if chosen != default:
            want_uns[key] = ("String", chosen)
    assert sorted(adata.uns.keys()) == sorted(want_uns), what
    for key, (eltype, value) in want_uns.items():
        got = adata.uns[key]
        got = got.item() if isinstance(got, np.generic) else got
        if eltype == "String":
            assert isinstance(got, str) and got == value, f"{what}: uns/{key}"
        elif eltype in ("Float32", "Float64"):
            t = daf_files.DTYPES[eltype]
            assert t(got).tobytes() == t(value).tobytes(), f"{what}: uns/{key}: {got!r} {value!r}"
        else:
            assert got == value, f"{what}: uns/{key}: {got!r} {value!r}"


def check_mount(mnt, names_selections, fmt, what):
    for name, selection in names_selections.items():
        view = os.path.join(mnt, name + ".anndata.zarr")
        daf = Daf(os.path.join(mnt, name + ".daf"))
        adata = anndata.read_zarr(view)
        check_anndata(adata, daf, selection, f"{what} v{fmt} {name} read_zarr")
        if LAZY:
            lazy = anndata.experimental.read_lazy(view)
            assert lazy.shape == adata.shape
            check_anndata(lazy.to_memory(), daf, selection, f"{what} v{fmt} {name} read_lazy", False)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", list(SOURCES))
def test_anndata_reads_every_element_of_every_source_kind(kind, fmt):
    source, datasets = SOURCES[kind]
    selection = next(iter(datasets.values()))
    with mounted(source, *mount_args(selection, fmt)) as mnt:
        check_mount(mnt, datasets, fmt, kind)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("selection", EDGE_SELECTIONS)
def test_anndata_reads_the_edge_cases_exactly(selection, fmt):
    with mounted(EDGE, *mount_args(selection, fmt)) as mnt:
        check_mount(mnt, {"edge": selection}, fmt, "edge")


def write_large(root):
    """A FilesDaf 1.0 data set large enough that the view splits its arrays in chunks (8 MiB at most): axes cell
    (3001) and gene (1003); a dense Float32 matrix stored as (cell, gene) only (12 MB: F order, split in column
    blocks), a dense Float64 one stored as (gene, cell) only (24 MB: C order, row blocks, the last one padded), a
    sparse UInt16 one with Int64 indices (3 M non-zeros: data, indices and indptr each split) stored as (gene, cell),
    and a sparse Float32 vector of the cell axis."""
    rng = np.random.default_rng(11)
    ncell, ngene = 3001, 1003
    for d in ["scalars", "axes", "vectors/cell", "vectors/gene"] + \
            [f"matrices/{r}/{c}" for r in ("cell", "gene") for c in ("cell", "gene")]:
        os.makedirs(os.path.join(root, d), exist_ok=True)
    with open(os.path.join(root, "daf.json"), "w") as f:
        f.write('{"version":[1,0]}\n')
    for axis, n in (("cell", ncell), ("gene", ngene)):
        with open(os.path.join(root, "axes", axis + ".txt"), "w") as f:
            f.write("".join(f"{axis}{i}\n" for i in range(n)))

    def dense(rel, eltype, values):
        with open(os.path.join(root, rel + ".json"), "w") as f:
            f.write('{"format":"dense","eltype":"%s"}\n' % eltype)
        values.tofile(os.path.join(root, rel + ".data"))
    dense("matrices/cell/gene/frac", "Float32", rng.random(ncell * ngene, dtype=np.float32))
    dense("matrices/gene/cell/norm", "Float64", rng.random(ncell * ngene))
    per = 1000
    base = os.path.join(root, "matrices/gene/cell/umis")
    with open(base + ".json", "w") as f:
        f.write('{"format":"sparse","eltype":"UInt16","indtype":"Int64"}\n')
    (np.arange(ncell + 1, dtype=np.int64) * per + 1).tofile(base + ".colptr")
    rows = np.sort(np.stack([rng.choice(ngene, per, replace=False) for _ in range(ncell)]), axis=1) + 1
    rows.astype(np.int64).tofile(base + ".rowval")
    rng.integers(1, 60000, ncell * per, dtype=np.uint16).tofile(base + ".nzval")
    base = os.path.join(root, "vectors/cell/sparse")
    with open(base + ".json", "w") as f:
        f.write('{"format":"sparse","eltype":"Float32","indtype":"UInt32"}\n')
    np.arange(1, ncell + 1, 3, dtype=np.uint32).tofile(base + ".nzind")
    rng.random(len(range(1, ncell + 1, 3)), dtype=np.float32).tofile(base + ".nzval")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("selection", ["cell:gene:frac", "gene:cell:umis"])
def test_arrays_split_in_chunks_read_exactly(tmp_path, selection, fmt):
    root = str(tmp_path / "large.daf")
    write_large(root)
    with mounted(root, *mount_args(selection, fmt)) as mnt:
        view = os.path.join(mnt, "large.anndata.zarr")
        for array in ("layers/norm", "X" if selection.endswith("frac") else "X/indices"):
            chunks = [f for _, _, files in os.walk(os.path.join(view, array)) for f in files
                      if not f.startswith(".") and f != "zarr.json"]
            assert len(chunks) > 1, (array, chunks)
        check_mount(mnt, {"large": selection}, fmt, "large")


@pytest.mark.skipif(not LAZY, reason="read_lazy needs anndata >= 0.12")
@pytest.mark.parametrize("fmt", FORMATS)
def test_read_lazy_slices_without_reading_everything(fmt):
    with mounted(EDGE, *mount_args("batch:gene:m_u8", fmt)) as mnt:
        lazy = anndata.experimental.read_lazy(os.path.join(mnt, "edge.anndata.zarr"))
        daf = Daf(os.path.join(mnt, "edge.daf"))
        want = daf.dense_matrix("gene", "batch", "m_u8")
        same_values(np.asarray(lazy.X[1:3, 5:9].compute()), want[1:3, 5:9], "X slice")
        sparse = lazy.layers["m_f64_sparse_u32"][:, 10:20]
        got = sparse.compute() if hasattr(sparse, "compute") else sparse
        want = daf.dense_matrix("gene", "batch", "m_f64_sparse_u32")[:, 10:20]
        assert np.array_equal(got.toarray(), want, equal_nan=True), "layer slice"


@pytest.mark.skipif(not ZARR3, reason="scanpy is in the zarr-python 3 venv")
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("source,selection", [
    (os.path.join(VECTORS, "files_v1_0.daf"), "cell:gene:expr"),
    (os.path.join(VECTORS, "zarr_v3.daf.zarr"), "gene:cell:umis"),
    (os.path.join(PACKED, "zarr_packed.daf.zarr.zip"), "batch:gene:umis"),
    (EDGE, "cell:gene:m_f32"),
    (EDGE, "batch:cell:m_bool_dense"),
])
def test_scanpy_reads_all_of_x(source, selection, fmt):
    import scanpy as sc
    with mounted(source, *mount_args(selection, fmt)) as mnt:
        name = [n for n in os.listdir(mnt) if n.endswith(".anndata.zarr")][0]
        adata = anndata.read_zarr(os.path.join(mnt, name)).copy()
        x = adata.X.toarray() if scipy.sparse.issparse(adata.X) else np.asarray(adata.X)
        sc.pp.calculate_qc_metrics(adata, percent_top=None, inplace=True)
        totals = np.sum(x.astype(np.float64), axis=1)
        assert np.allclose(adata.obs["total_counts"].to_numpy(), totals, rtol=1e-5, equal_nan=True)


def test_remote_sources_show_the_same_anndata():
    """Served by nginx: the AnnData view of a remote mount reads as the local one (values from the remote FilesDaf
    view)."""
    from http_serve import serving
    remote = {
        "zarr-v2": ("vectors/zarr_v2.daf.zarr", {"zarr_v2": "cell:gene:expr"}),
        "zarr-v3-zip": ("vectors/zarr_v3.daf.zarr.zip", {"zarr_v3": "gene:cell:umis"}),
        "packed-zarr": ("packed/zarr_packed.daf.zarr", {"zarr_packed": "gene:batch:umis"}),
        "packed-multi-g2": ("packed/zarr_packed.daf.zarr.zip", {"zarr_packed": "batch:gene:expr"}),
        "foreign-v3": ("packed/foreign_v3.daf.zarr", {"foreign_v3": "cell:gene:expr"}),
    }
    with serving({"vectors": VECTORS, "packed": PACKED}) as base:
        for kind, (path, datasets) in remote.items():
            selection = next(iter(datasets.values()))
            for fmt in FORMATS:
                with mounted(f"{base}/{path}", *mount_args(selection, fmt)) as mnt:
                    check_mount(mnt, datasets, fmt, "remote " + kind)
