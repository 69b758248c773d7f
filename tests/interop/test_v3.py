"""The Zarr v3 view (`--zarr-format 3`) of every source kind, read by zarr-python 3 (plain and consolidated) and
TensorStore `zarr3`, checked value by value against known values (tests/data/packed/expected.json, made by
tests/data/make_packed.py, and the fixtures of daf-formats.md §11.1); the `--zarr-format 2` view still read by
zarr-python 2 and 3; the FilesDaf view of packed sources flat; and arrays that zarr-python 3 and TensorStore create
through the v3 view stored in the source as Julia would have written them (daf-formats.md §3, §5)."""
import errno
import json
import os
import shutil
import stat
import struct
import sys
import zipfile

import numpy as np
import pytest
import zarr

import daf_files
from conftest import ROOT, VECTORS, mounted

ZARR3 = int(zarr.__version__.split(".")[0]) >= 3
PACKED = os.path.join(ROOT, "tests", "data", "packed")
with open(os.path.join(PACKED, "expected.json")) as _f:
    EXPECTED = json.load(_f)

sys.path.insert(0, os.path.join(ROOT, "tests", "data"))
import daf_bytes  # noqa: E402  (the exact JSON forms Julia writes: zarr_json)

needs_zarr3 = pytest.mark.skipif(not ZARR3, reason="zarr-python 2 cannot read Zarr v3")
V3 = ("--zarr-format", "3")
RO = ("-o", "ro")  # reading tests: no writer lock on the (shared) fixtures, nothing staged beside them

# The data set of the §11 fixtures (daf-formats.md §11.1), in the layout of expected.json.
FIXTURE = {
    "scalars": {"ratio": {"type": "Float64", "value": 2.5}, "title": {"type": "String", "value": "hello"}},
    "axes": {"cell": ["c1", "c2", "c3"], "gene": ["g1", "g2"]},
    "properties": {
        "vectors/cell/score": {"eltype": "Float32", "shape": [3], "format": "dense", "values": [1.5, 2.0, -0.5]},
        "vectors/cell/counts": {"eltype": "Int64", "indtype": "Int64", "shape": [3], "format": "sparse",
                                "nzind": [1, 3], "nzval": [10, 30]},
        "vectors/cell/type": {"eltype": "String", "shape": [3], "format": "dense", "values": ["T", "B", "T"]},
        "vectors/cell/is_marker": {"eltype": "Bool", "indtype": "Int64", "shape": [3], "format": "sparse",
                                   "nzind": [2]},
        "matrices/cell/gene/expr": {"eltype": "Float64", "shape": [3, 2], "format": "dense",
                                    "values": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]},
        "matrices/cell/gene/umis": {"eltype": "UInt16", "indtype": "Int64", "shape": [3, 2], "format": "sparse",
                                    "colptr": [1, 3, 4], "rowval": [1, 3, 2], "nzval": [7, 9, 8]},
    },
}

# Source kind -> (source path, {data set name in the mount: expected data set}).
SOURCES = {
    "files-1.0": (os.path.join(VECTORS, "files_v1_0.daf"), {"files_v1_0": FIXTURE}),
    "files-1.1": (os.path.join(VECTORS, "files_v1_1.daf"), {"files_v1_1": FIXTURE}),
    "zarr-v2": (os.path.join(VECTORS, "zarr_v2.daf.zarr"), {"zarr_v2": FIXTURE}),
    "zarr-v3": (os.path.join(VECTORS, "zarr_v3.daf.zarr"), {"zarr_v3": FIXTURE}),
    "zarr-v3-zip": (os.path.join(VECTORS, "zarr_v3.daf.zarr.zip"), {"zarr_v3": FIXTURE}),
    "zarr-v2-zip": (os.path.join(VECTORS, "zarr_v2.daf.zarr.zip"), {"zarr_v2": FIXTURE}),
    "zipdaf-1.1": (os.path.join(VECTORS, "zipdaf_v1_1.daf.zip"), {"zipdaf_v1_1": FIXTURE}),
    "packed-files": (os.path.join(PACKED, "files_packed.daf"), {"files_packed": "packed"}),
    "packed-zipdaf": (os.path.join(PACKED, "zipdaf_packed.daf.zip"), {"zipdaf_packed": "packed"}),
    "packed-zarr": (os.path.join(PACKED, "zarr_packed.daf.zarr"), {"zarr_packed": "packed"}),
    "packed-zarr-zip": (os.path.join(PACKED, "zarr_packed.daf.zarr.zip"), {"zarr_packed": "packed"}),
    "packed-multi-g2": (os.path.join(PACKED, "multi_v3.dafs.zarr.zip") + "#/g2", {"g2": "small"}),
    "packed-multi": (os.path.join(PACKED, "multi_v3.dafs.zarr.zip"), {"g1": "packed", "g2": "small"}),
    "foreign-v3": (os.path.join(PACKED, "foreign_v3.daf.zarr"), {"foreign_v3": "foreign"}),
}
KINDS = list(SOURCES)


def dataset(expected):
    return EXPECTED["datasets"][expected] if isinstance(expected, str) else expected


def typed(values, eltype):
    if eltype == "String":
        return np.array(values, dtype=object)
    return np.array(values, dtype=daf_files.DTYPES[eltype])


def zarr_arrays(ds):
    """{Zarr path: expected array (Zarr shape, numpy dtype)} of a data set, as a Zarr view shows it: matrices are
    [ncols, nrows]; sparse strings dense; other sparse properties groups of their components."""
    out = {}
    for name, s in ds["scalars"].items():
        out["scalars/" + name] = typed([s["value"]], s["type"])
    for name, entries in ds["axes"].items():
        out["axes/" + name] = typed(entries, "String")
    for path, p in ds["properties"].items():
        shape = tuple(reversed(p["shape"]))
        if p["format"] == "dense":
            out[path] = typed(p["values"], p["eltype"]).reshape(shape)
        elif p["eltype"] == "String":
            dense = [""] * int(np.prod(shape))
            for i, v in zip(p["nzind"], p["nzval"]):
                dense[i - 1] = v
            out[path] = typed(dense, "String").reshape(shape)
        else:
            for comp in ("nzind", "colptr", "rowval"):
                if comp in p:
                    out[f"{path}/{comp}"] = typed(p[comp], p["indtype"])
            if "nzval" in p:
                out[f"{path}/nzval"] = typed(p["nzval"], p["eltype"])
    return out


def same(got, expected, what):
    got = np.asarray(got)
    assert got.shape == expected.shape, what
    if expected.dtype == object:
        assert [str(x) for x in got.ravel()] == [str(x) for x in expected.ravel()], what
    else:
        assert got.dtype == expected.dtype, f"{what}: {got.dtype} != {expected.dtype}"
        np.testing.assert_array_equal(got, expected, err_msg=what)


def all_arrays(group, prefix=""):
    out = {}
    for name, array in group.arrays():
        out[prefix + name] = array
    for name, sub in group.groups():
        out.update(all_arrays(sub, prefix + name + "/"))
    return out


def view_roots(mnt, names):
    """{name: (FilesDaf view, Zarr view)} for the data sets of a mount."""
    out = {}
    for name in names:
        files, z = os.path.join(mnt, name + ".daf"), os.path.join(mnt, name + ".daf.zarr")
        assert os.path.isdir(files) and os.path.isdir(z), f"{name}: {sorted(os.listdir(mnt))}"
        out[name] = (files, z)
    return out


# ------------------------------------------------------------------------------------------------------------------
# Reading the v3 view
# ------------------------------------------------------------------------------------------------------------------


@needs_zarr3
@pytest.mark.parametrize("consolidated", [True, False], ids=["consolidated", "plain"])
@pytest.mark.parametrize("kind", KINDS)
def test_zarr_python_3_reads_every_array_of_the_v3_view(kind, consolidated):
    source, names = SOURCES[kind]
    with mounted(source, *V3, *RO) as mnt:
        for name, (_, z) in view_roots(mnt, names).items():
            with open(os.path.join(z, "zarr.json")) as f:
                root = json.load(f)
            assert root["zarr_format"] == 3 and root["attributes"]["daf"] == [1, 0], name
            keys = list(root["consolidated_metadata"]["metadata"])
            assert keys == sorted(keys), f"{name}: consolidated keys not sorted"
            group = zarr.open_group(z, mode="r", zarr_format=3, use_consolidated=consolidated)
            arrays = all_arrays(group)
            want = zarr_arrays(dataset(names[name]))
            assert set(arrays) == set(want), f"{kind}/{name}"
            for path, expected in want.items():
                same(arrays[path][...], expected, f"{kind}/{name}/{path}")


@needs_zarr3
@pytest.mark.parametrize("kind", KINDS)
def test_tensorstore_reads_every_numeric_array_of_the_v3_view(kind):
    ts = pytest.importorskip("tensorstore")
    source, names = SOURCES[kind]
    with mounted(source, *V3, *RO) as mnt:
        for name, (_, z) in view_roots(mnt, names).items():
            for path, expected in zarr_arrays(dataset(names[name])).items():
                if expected.dtype == object:
                    continue
                spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": os.path.join(z, path) + "/"}}
                got = ts.open(spec, read=True).result().read().result()
                same(got, expected, f"{kind}/{name}/{path} (tensorstore)")


@needs_zarr3
@pytest.mark.parametrize("kind", ["packed-files", "packed-zarr", "packed-zarr-zip"])
def test_packed_arrays_show_the_source_shard_with_a_valid_shard_shape(kind):
    source, names = SOURCES[kind]
    with mounted(source, *V3, *RO) as mnt:
        (_, z), = view_roots(mnt, names).values()
        packed = [(p, d) for p, d in EXPECTED["datasets"]["packed"]["properties"].items() if d.get("packed")]
        for path, prop in packed:
            for comp in prop["packed"]:
                if prop["eltype"] == "String" and comp == "nzval":
                    continue  # a sparse string is a dense string array in Zarr
                node = path if comp == "" else f"{path}/{comp}"
                with open(os.path.join(z, node, "zarr.json")) as f:
                    meta = json.load(f)
                codec, = meta["codecs"]
                assert codec["name"] == "sharding_indexed", node
                inner = codec["configuration"]["chunk_shape"]
                shard = meta["chunk_grid"]["configuration"]["chunk_shape"]
                assert shard == [-(-s // i) * i for s, i in zip(meta["shape"], inner)], node
                key = "c/0" if len(inner) == 1 else "c/0/0"
                with open(os.path.join(z, node, key), "rb") as f:
                    got = f.read()
                with open(os.path.join(PACKED, "files_packed.daf", path + (".zip" if comp == "" else f".{comp}.zip")),
                          "rb") as f:
                    assert got == f.read(), f"{node}: not the source's shard bytes"


@pytest.mark.parametrize("kind", KINDS)
def test_zarr_python_reads_every_array_of_the_v2_view(kind):
    source, names = SOURCES[kind]
    with mounted(source, "--zarr-format", "2", *RO) as mnt:
        for name, (_, z) in view_roots(mnt, names).items():
            assert os.path.exists(os.path.join(z, ".zgroup")) and not os.path.exists(os.path.join(z, "zarr.json"))
            group = zarr.open_group(z, mode="r", **({"zarr_format": 2} if ZARR3 else {}))
            arrays = all_arrays(group)
            want = zarr_arrays(dataset(names[name]))
            want["daf"] = np.array([1, 0], dtype=np.uint8)
            assert set(arrays) == set(want), f"{kind}/{name}"
            for path, expected in want.items():
                same(arrays[path][...], expected, f"{kind}/{name}/{path} (v2 view)")


@pytest.mark.parametrize("kind", [k for k in KINDS if k.startswith(("packed", "foreign"))])
def test_the_files_view_of_packed_and_v3_sources_is_flat(kind):
    source, names = SOURCES[kind]
    with mounted(source, *V3, *RO) as mnt:
        for name, (files, _) in view_roots(mnt, names).items():
            got = daf_files.properties(files)
            got.pop("daf")
            want = zarr_arrays(dataset(names[name]))
            seen = set()
            for rel, (what, content) in got.items():
                if what == "scalar":
                    seen.add(rel)
                    assert content == want[rel][0], rel
                elif what == "dense":
                    seen.add(rel)
                    same(content, want[rel], f"{kind}/{rel} (files view)")
                else:
                    for comp, values in content.items():
                        seen.add(f"{rel}/{comp}")
                        same(values, want[f"{rel}/{comp}"], f"{kind}/{rel}.{comp} (files view)")
            assert seen == set(want), kind
            for base, _, entries in os.walk(files):
                assert not [e for e in entries if e.endswith(".zip")], f"{base}: packed payloads shown"


@needs_zarr3
def test_the_v3_view_is_the_default_for_sources_written_by_daf_0_3_and_an_option_otherwise():
    def fmt(mnt, name):
        return "v3" if os.path.exists(os.path.join(mnt, name + ".daf.zarr", "zarr.json")) else "v2"

    with mounted(os.path.join(VECTORS, "zarr_v3.daf.zarr"), *RO) as mnt:
        assert fmt(mnt, "zarr_v3") == "v3"
    with mounted(os.path.join(PACKED, "files_packed.daf"), *RO) as mnt:
        assert fmt(mnt, "files_packed") == "v3"
    with mounted(os.path.join(VECTORS, "files_v1_0.daf"), *RO) as mnt:
        assert fmt(mnt, "files_v1_0") == "v2"
    with mounted(os.path.join(VECTORS, "files_v1_0.daf"), "-o", "ro,zarr_format=3") as mnt:
        assert fmt(mnt, "files_v1_0") == "v3"


# ------------------------------------------------------------------------------------------------------------------
# Writing through the v3 view
# ------------------------------------------------------------------------------------------------------------------

WRITE_SOURCES = ["zarr_v3.daf.zarr", "zarr_v3.daf.zarr.zip", "files_v1_1.daf"]
VEC = np.array([1.5, -2.0, 0.0], dtype=np.float64)  # cell axis: 3
MAT = np.arange(6, dtype=np.int32).reshape(2, 3) + 1  # Zarr shape [ncols=gene 2, nrows=cell 3]


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
    return str(dst)


def write_zarr_python(z, vec_name, mat_name):
    g = zarr.open_group(z, mode="a", zarr_format=3, use_consolidated=False)
    g.create_array(f"vectors/cell/{vec_name}", data=VEC, chunks=(2,))  # default codecs: bytes + zstd
    g.create_array(f"matrices/cell/gene/{mat_name}", data=MAT, chunks=(1, 2))


def write_tensorstore(z, vec_name, mat_name):
    ts = pytest.importorskip("tensorstore")
    for rel, data, chunks in ((f"vectors/cell/{vec_name}", VEC, [2]), (f"matrices/cell/gene/{mat_name}", MAT, [1, 2])):
        spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": os.path.join(z, rel) + "/"},
                "metadata": {"shape": list(data.shape), "data_type": str(data.dtype),
                             "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
                             "chunk_key_encoding": {"name": "default"},
                             "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                        {"name": "zstd", "configuration": {"level": 3}}]}}
        ts.open(spec, create=True).result().write(data).result()


def source_files(source):
    """{relative path: bytes} of a directory or ZIP source."""
    if source.endswith(".zip"):
        with zipfile.ZipFile(source) as z:
            return {i.filename: z.read(i) for i in z.infolist()}
    out = {}
    for base, _, entries in os.walk(source):
        for e in entries:
            full = os.path.join(base, e)
            with open(full, "rb") as f:
                out[os.path.relpath(full, source)] = f.read()
    return out


def check_source_as_julia_writes_it(source, fixture, vec_name, mat_name):
    held = source_files(source)
    vec, mat = f"vectors/cell/{vec_name}", f"matrices/cell/gene/{mat_name}"
    julia_mat = MAT.reshape(-1)  # C order of [ncols, nrows] = column-major of the 3x2 Julia matrix
    if fixture.startswith("files"):
        assert held[vec + ".json"] == b'{"format":"dense","eltype":"Float64"}\n'
        assert held[vec + ".data"] == VEC.tobytes()
        assert held[mat + ".json"] == b'{"format":"dense","eltype":"Int32"}\n'
        assert held[mat + ".data"] == julia_mat.tobytes()
        index = json.loads(held["metadata.json"])
        assert index[vec] == {"format": "dense", "eltype": "Float64"}
        assert index[mat] == {"format": "dense", "eltype": "Int32"}
        assert not held["metadata.json"].endswith(b"\n")
        return
    vec_meta = daf_bytes.zarr_json("Float64", [3]).encode()
    mat_meta = daf_bytes.zarr_json("Int32", [3, 2]).encode()
    assert held[vec + "/zarr.json"] == vec_meta
    assert held[vec + "/c/0"] == VEC.tobytes()
    assert held[mat + "/zarr.json"] == mat_meta
    assert held[mat + "/c/0/0"] == julia_mat.tobytes()
    assert not [k for k in held if k.startswith((vec + "/c/", mat + "/c/")) and k not in (vec + "/c/0", mat + "/c/0/0")]
    root = json.loads(held["zarr.json"])
    if fixture.endswith(".zip"):
        assert "consolidated_metadata" not in root  # §5.5: the ZIP backend keeps none
        with zipfile.ZipFile(source) as z, open(source, "rb") as f:
            for key in (vec + "/zarr.json", vec + "/c/0", mat + "/zarr.json", mat + "/c/0/0"):
                info = z.getinfo(key)
                f.seek(info.header_offset + 26)
                name_len, extra_len = struct.unpack("<HH", f.read(4))
                assert info.compress_type == zipfile.ZIP_STORED, key  # §7.1: stored, data 8-byte aligned
                assert (info.header_offset + 30 + name_len + extra_len) % 8 == 0, key
    else:
        cons = root["consolidated_metadata"]["metadata"]
        assert cons[vec] == json.loads(vec_meta) and cons[mat] == json.loads(mat_meta)


@needs_zarr3
@pytest.mark.parametrize("writer", ["zarr-python", "tensorstore"])
@pytest.mark.parametrize("fixture", WRITE_SOURCES)
def test_arrays_created_through_the_v3_view_are_stored_as_julia_writes_them(tmp_path, fixture, writer):
    source = private_copy(tmp_path, fixture)
    name = fixture.split(".")[0]
    vec_name, mat_name = f"{writer[:2]}_vec", f"{writer[:2]}_mat"
    options = (*V3, "--files-version", "1.1")
    with mounted(source, *options) as mnt:
        z = os.path.join(mnt, name + ".daf.zarr")
        (write_zarr_python if writer == "zarr-python" else write_tensorstore)(z, vec_name, mat_name)
        # Writers leave out chunks that hold only the fill value (VEC's last chunk is [0.0]): an
        # array is complete when its writer says it is done, by fsync of its directory.
        for rel in (f"vectors/cell/{vec_name}", f"matrices/cell/gene/{mat_name}"):
            fd = os.open(os.path.join(z, rel), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        files = os.path.join(mnt, name + ".daf")
        np.testing.assert_array_equal(np.fromfile(os.path.join(files, f"vectors/cell/{vec_name}.data")), VEC)
    check_source_as_julia_writes_it(source, fixture, vec_name, mat_name)
    with mounted(source, *options, "-o", "ro") as mnt:
        z = os.path.join(mnt, name + ".daf.zarr")
        for consolidated in (False, True):
            g = zarr.open_group(z, mode="r", zarr_format=3, use_consolidated=consolidated)
            same(g[f"vectors/cell/{vec_name}"][...], VEC, vec_name)
            same(g[f"matrices/cell/gene/{mat_name}"][...], MAT, mat_name)
        files = os.path.join(mnt, name + ".daf")
        got = np.fromfile(os.path.join(files, f"matrices/cell/gene/{mat_name}.data"), np.int32)
        np.testing.assert_array_equal(got, MAT.reshape(-1))


# ------------------------------------------------------------------------------------------------------------------
# Corrupt packed data: an error, never a wrong byte
# ------------------------------------------------------------------------------------------------------------------


def packed_copy(tmp_path):
    dst = tmp_path / "files_packed.daf"
    shutil.copytree(os.path.join(PACKED, "files_packed.daf"), dst)
    return str(dst)


def flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.parametrize("prop,where", [
    ("vectors/cell/score", "inner-chunk"),  # zstd: a frame without checksum; the ZIP CRC-32 catches it
    ("vectors/cell/depth", "inner-chunk"),  # blosc: no checksum; the CRC-32 of the stored entry catches it
    ("matrices/gene/batch/expr", "inner-chunk"),  # gzip: its trailer's CRC-32
    ("vectors/cell/score", "shard-index"),  # the index's CRC-32C
])
def test_a_corrupt_packed_property_gives_an_error_never_a_wrong_byte(tmp_path, prop, where):
    source = packed_copy(tmp_path)
    shard = os.path.join(source, prop + ".zip")
    with open(shard, "rb") as f:
        head = f.read(36)
    offset, size = struct.unpack_from("<QQ", head, 16)  # the second inner chunk
    flip(shard, offset + size // 2 if where == "inner-chunk" else 20)
    want = zarr_arrays(EXPECTED["datasets"]["packed"])
    try:
        context = mounted(source, "-o", "ro")
        mnt = context.__enter__()
    except AssertionError as refused:  # refusing the whole source is allowed: one line naming the shard
        assert where == "shard-index" and os.path.basename(shard) in str(refused), str(refused)
        return
    try:
        files = os.path.join(mnt, "files_packed.daf")
        with pytest.raises(OSError) as error:
            with open(os.path.join(files, prop + ".data"), "rb") as f:
                f.read()
        assert error.value.errno == errno.EIO
        # The rest of the data set is served.
        got = np.fromfile(os.path.join(files, "vectors/gene/weight.data"), np.float32)
        same(got, want["vectors/gene/weight"], "weight")
    finally:
        context.__exit__(None, None, None)
