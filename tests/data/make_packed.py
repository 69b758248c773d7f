#!/usr/bin/env python3
"""Writes the packed and Zarr v3 test data sets under tests/data/packed/ (daf-formats.md §3, §5, §6, §8).

An EMULATION of what DataAxesFormats.jl 0.3 writes (derived from its packed_format.jl and the spec), not output
captured from Julia; plus `foreign_v3.daf.zarr`, whose arrays zarr-python 3 writes itself. Needs numpy, numcodecs
and zarr 3 (run it with /work/main/.venv/zarr3/bin/python or scripts/test's .venv/zarr3); no network. The bytes
themselves (JSON forms, ZIP, shards, zarr.json) are written by daf_bytes.py. Ends with a self-check that
reproduces the §8 worked example (fixture fpk/zs.files/vectors/cell/score.zip) byte for byte where it is given.
Reruns give the same bytes, except the gzip header time that zarr-python writes into foreign_v3 chunks.

    python tests/data/make_packed.py [OUT]      (OUT defaults to tests/data/packed)
"""
import json
import os
import shutil
import struct
import sys

import numpy as np

from daf_bytes import (GROUP_CONS, GROUP_FILE, LEVEL, assemble_shard, check_zip_side, decode_via_index, encode_shard,
                       fill_of, json16, jstr, lines, mmap_zip, raw_bytes, zarr_json)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(HERE, "packed")

# ------------------------------------------------------------------------------------------------------------------
# The logical data set
# ------------------------------------------------------------------------------------------------------------------

RNG = np.random.default_rng(10)
N_CELL, N_GENE = 1200, 4500
CELLS = ["c%04d" % i for i in range(N_CELL)]
GENES = ["g%04d" % i for i in range(N_GENE)]
BATCHES = ["b1", "b2", "b3"]


def sparse_vec(n, nnz, values):
    ind = np.sort(RNG.choice(n, nnz, replace=False)) + 1
    return ind.tolist(), values


def sparse_mat(nrows, ncols, nnz):
    flat = np.sort(RNG.choice(nrows * ncols, nnz, replace=False))
    cols, rows = flat // nrows, flat % nrows
    colptr = [1] + [int(np.searchsorted(cols, c, side="right")) + 1 for c in range(ncols)]
    return colptr, (rows + 1).tolist()


COUNTS_IND, _ = sparse_vec(N_GENE, 1100, None)
NOTE_IND, _ = sparse_vec(N_GENE, 600, None)
UMIS_COLPTR, UMIS_ROWVAL = sparse_mat(N_GENE, 3, 1500)
LABELS = ["T", "B", "NK", "Mono", "é"]

# Each property: (kind, path, spec). Packed ones carry (codec, inner chunk shape in Julia order) per component,
# following chunks_for: a column of at least 8 KiB (strings 16 B each) is packed.
SCALARS = [("ratio", "Float64", 2.5), ("title", "String", "packed"), ("count", "Int64", 7), ("empty", "String", "")]
PROPS = [
    ("dense", "vectors/cell/score", dict(t="Float64", values=np.round(RNG.normal(size=N_CELL), 3).tolist(),
                                         pack=("zstd", [1024]))),
    ("dense", "vectors/cell/depth", dict(t="Int64", values=RNG.integers(0, 5000, N_CELL).tolist(),
                                         pack=("blosc_lz4_bitshuffle", [1024]))),
    ("dense", "vectors/cell/label", dict(t="String", values=[LABELS[i] for i in RNG.integers(0, 5, N_CELL)],
                                         pack=("blosc_zstd_bitshuffle", [512]))),
    ("sparse10", "vectors/cell/flag", dict(t="Float32", it="Int32", nzind=[2, 5, 1200], nzval=[0.5, -1.25, 3.0])),
    ("sparse", "vectors/gene/counts", dict(t="Float64", it="Int64", nzind=COUNTS_IND,
                                           nzval=(RNG.integers(1, 100, 1100) / 4).tolist(),
                                           pack={"nzind": ("zstd", [1024]), "nzval": ("zstd", [1024])})),
    ("sparse", "vectors/gene/note", dict(t="String", it="UInt32", nzind=NOTE_IND,
                                         nzval=["n%d" % i for i in RNG.integers(0, 99, 600)],
                                         pack={"nzval": ("zstd", [512])})),
    ("dense", "vectors/gene/weight", dict(t="Float32", values=np.round(RNG.random(N_GENE), 2).astype(np.float32)
                                          .astype(float).tolist())),
    ("dense", "vectors/batch/size", dict(t="Int32", values=[10, 20, 30])),
    ("dense", "vectors/batch/zero", dict(t="Float64", values=[0.0, 0.0, 0.0])),
    ("dense", "vectors/batch/name", dict(t="String", values=["x", "y", "z"])),
    ("sparse", "vectors/batch/hits", dict(t="UInt16", it="Int64", nzind=[1, 3], nzval=[4, 5])),
    ("dense", "matrices/gene/batch/expr", dict(t="Float32", shape=[N_GENE, 3],
                                               values=np.round(RNG.normal(size=N_GENE * 3), 1).astype(np.float32)
                                               .astype(float).tolist(), pack=("gzip", [2048, 1]))),
    ("sparse", "matrices/gene/batch/umis", dict(t="Float64", it="Int64", shape=[N_GENE, 3], colptr=UMIS_COLPTR,
                                                rowval=UMIS_ROWVAL, nzval=RNG.integers(1, 50, 1500).astype(float)
                                                .tolist(),
                                                pack={"rowval": ("blosc_zstd_bitshuffle", [1024]),
                                                      "nzval": ("blosc_zstd_bitshuffle", [1024])})),
    ("dense", "matrices/batch/batch/eye", dict(t="Float64", shape=[3, 3],
                                               values=[1.0, 0, 0, 0, 1.0, 0, 0, 0, 1.0])),
]


def axis_len(name):
    return {"cell": N_CELL, "gene": N_GENE, "batch": 3}[name]


def prop_shape(path, spec):
    parts = path.split("/")
    return spec.get("shape") or [axis_len(parts[1])]


def densify(path, kind, spec):
    shape = prop_shape(path, spec)
    if kind == "dense":
        return list(spec["values"])
    n = int(np.prod(shape))
    out = [fill_of(spec["t"])] * n
    if "nzind" in spec:
        for i, v in zip(spec["nzind"], spec["nzval"]):
            out[i - 1] = v
    else:
        nrows = shape[0]
        cp, rv = spec["colptr"], spec["rowval"]
        for c in range(len(cp) - 1):
            for k in range(cp[c] - 1, cp[c + 1] - 1):
                out[c * nrows + rv[k] - 1] = spec["nzval"][k]
    return out


# ------------------------------------------------------------------------------------------------------------------
# FilesDaf 1.1 (and ZipDaf 1.1) entries
# ------------------------------------------------------------------------------------------------------------------


def packed_keys(t, n_elements, pack):
    codec, chunk = pack
    s = '"eltype":"%s",' % t
    if n_elements is not None:
        s += '"n_elements":%d,' % n_elements
    return s + ('"packed_format":"indexed+zipped","chunk_shape":[%s],"compression":"%s","compression_level":%d,'
                '"index_location":"start"' % (",".join(map(str, chunk)), codec, LEVEL))


def comp_desc(t, n, pack):
    if pack is None:
        return '{"format":"dense","eltype":"%s","n_elements":%d}' % (t, n)
    return '{"format":"dense",%s}' % packed_keys(t, n, pack)


def files_entries(allow_string_packing=True):
    """(relative path, bytes) in write order, and the metadata.json registrations."""
    e, reg = [], []
    e.append(("daf.json", b'{"version":[1,1]}\n'))
    for name, t, v in SCALARS:
        doc = json16({"type": t, "value": v}) + "\n"
        e.append(("scalars/%s.json" % name, doc.encode()))
        reg.append(("scalars/" + name, doc))
    for a, entries in (("cell", CELLS), ("gene", GENES), ("batch", BATCHES)):
        e.append(("axes/%s.txt" % a, lines(entries)))
        reg.append(("axes/" + a, json16({"format": "axis", "n_entries": len(entries)})))
    for kind, path, spec in PROPS:
        t = spec["t"]
        shape = prop_shape(path, spec)
        pack = spec.get("pack")
        if t == "String" and not allow_string_packing:
            pack = None
        if kind == "dense":
            if pack:
                doc = '{"format":"dense",%s}\n' % packed_keys(t, None, pack)
                payload = [(path + ".zip", encode_shard(t, spec["values"], shape, pack[1], pack[0]))]
            elif t == "String":
                doc = '{"format":"dense","eltype":"String"}\n'
                payload = [(path + ".txt", lines(spec["values"]))]
            else:
                doc = '{"format":"dense","eltype":"%s"}\n' % t
                payload = [(path + ".data", raw_bytes(t, spec["values"]))]
        elif kind == "sparse10":
            doc = '{"format":"sparse","eltype":"%s","indtype":"%s"}\n' % (t, spec["it"])
            payload = [(path + ".nzind", raw_bytes(spec["it"], spec["nzind"])),
                       (path + ".nzval", raw_bytes(t, spec["nzval"]))]
        else:
            packs = dict(spec.get("pack") or {})
            if t == "String" and not allow_string_packing:
                packs.pop("nzval", None)
            nnz = len(spec["nzval"])
            comps = [("nzind", spec["it"], spec["nzind"])] if "nzind" in spec else \
                [("colptr", spec["it"], spec["colptr"]), ("rowval", spec["it"], spec["rowval"])]
            comps.append(("nzval", t, spec["nzval"]))
            doc = '{"format":"sparse",' + ",".join(
                '"%s":%s' % (c, comp_desc(ct, len(vals), packs.get(c))) for c, ct, vals in comps) + "}\n"
            payload = []
            for c, ct, vals in comps:
                p = packs.get(c)
                if p:
                    payload.append(("%s.%s.zip" % (path, c), encode_shard(ct, vals, [len(vals)], p[1], p[0])))
                elif ct == "String":
                    payload.append((path + ".nztxt", lines(vals)))
                else:
                    payload.append(("%s.%s" % (path, c), raw_bytes(ct, vals)))
            if t == "String" and not packs.get("nzval"):
                payload = [payload[-1]] + payload[:-1]  # sparse strings: .nztxt first, then .nzind
            assert nnz == len(spec["nzval"])
        e.append((path + ".json", doc.encode()))
        e += payload
        reg.append((path, doc))
    return e, reg


def metadata_json(reg):
    return ("{" + ",".join(jstr(k) + ":" + d.rstrip("\n") for k, d in reg) + "}").encode()


def write(root, rel, data):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def gen_files():
    root = os.path.join(OUT, "files_packed.daf")
    shutil.rmtree(root, ignore_errors=True)
    axes = ["cell", "gene", "batch"]
    for d in ["scalars", "axes"] + ["vectors/" + a for a in axes] + \
            ["matrices/%s/%s" % (r, c) for r in axes for c in axes]:
        os.makedirs(os.path.join(root, d), exist_ok=True)
    entries, reg = files_entries()
    for rel, data in entries:
        write(root, rel, data)
    write(root, "metadata.json", metadata_json(reg))
    return dict(entries)


def gen_zipdaf():
    entries, _ = files_entries(allow_string_packing=False)  # §8: ZipDaf never packs strings
    with open(os.path.join(OUT, "zipdaf_packed.daf.zip"), "wb") as f:
        f.write(mmap_zip(entries))


# ------------------------------------------------------------------------------------------------------------------
# ZarrDaf v3 (Zarr.jl 0.10 + JSON >= 1.6)
# ------------------------------------------------------------------------------------------------------------------

def is_fill(t, values):
    return all(v == fill_of(t) for v in values)


def zarr_entries(scalars, props, axes):
    """(key, bytes) in write order, and the consolidated-metadata registrations (path, metadata text)."""
    e, reg = [], []

    def group(p):
        e.append((p + "/zarr.json", GROUP_FILE.encode()))
        reg.append((p, GROUP_CONS))

    def array(p, t, shape, values, pack=None):
        zj = zarr_json(t, shape, pack)
        e.append((p + "/zarr.json", zj.encode()))
        reg.append((p, zj))
        key = p + ("/c/0" if len(shape) == 1 else "/c/0/0")
        if pack:
            e.append((key, encode_shard(t, values, shape, pack[1], pack[0])))
        elif not is_fill(t, values):  # Zarr.jl 0.10 elides an all-fill chunk
            e.append((key, raw_bytes(t, values)))

    e.append(("zarr.json", json16({"zarr_format": 3, "node_type": "group", "attributes": {"daf": [1, 0]}}).encode()))
    for g in ("scalars", "axes", "vectors", "matrices"):
        e.append((g + "/zarr.json", GROUP_FILE.encode()))
    for g in ("axes", "matrices", "vectors", "scalars"):  # the walk at open: root.groups in Dict order
        reg.append((g, GROUP_CONS))
    for name, t, v in scalars:
        array("scalars/" + name, t, [1], [v])
    done = []
    for a, entries in axes:
        array("axes/" + a, "String", [len(entries)], entries)
        group("vectors/" + a)
        group("matrices/" + a)
        group("matrices/%s/%s" % (a, a))
        for x in done:
            group("matrices/%s/%s" % (a, x))
            group("matrices/%s/%s" % (x, a))
        done.append(a)
    for kind, path, spec in props:
        t = spec["t"]
        shape = prop_shape(path, spec)
        if kind == "dense" or t == "String":  # strings are always dense in Zarr
            values = densify(path, kind, spec)
            pack = spec.get("pack") if kind == "dense" else None
            if t == "String" and kind != "dense":
                pack = ("zstd", [512]) if len(values) * 16 >= 8192 else None
            if t == "String" and len(shape) == 2:
                pack = None  # ZarrDaf never packs string matrices
            array(path, t, shape, values, pack)
            continue
        packs = spec.get("pack") or {}
        group(path)
        comps = {"nzind": (spec["it"], spec.get("nzind")), "colptr": (spec["it"], spec.get("colptr")),
                 "rowval": (spec["it"], spec.get("rowval")), "nzval": (t, spec["nzval"])}
        order = ["nzval", "nzind"] if "nzind" in spec else ["nzval", "colptr", "rowval"]  # Julia Dict order
        for c in order:
            ct, vals = comps[c]
            array(path + "/" + c, ct, [len(vals)], vals, packs.get(c))
    return e, reg


AXES = [("cell", CELLS), ("gene", GENES), ("batch", BATCHES)]
SMALL_SCALARS = [("ratio", "Float64", 0.25), ("title", "String", "second")]
SMALL_PROPS = [PROPS[0], PROPS[7]]  # vectors/cell/score (packed) and vectors/batch/size (flat)


def gen_zarr():
    entries, reg = zarr_entries(SCALARS, PROPS, AXES)
    root = os.path.join(OUT, "zarr_packed.daf.zarr")
    shutil.rmtree(root, ignore_errors=True)
    for k, data in entries:
        write(root, k, data)
    cons = "{" + ",".join(jstr(p) + ":" + d for p, d in reg) + "}"
    write(root, "zarr.json", ('{"zarr_format":3,"node_type":"group","attributes":{"daf":[1,0]},'
                              '"consolidated_metadata":{"kind":"inline","must_understand":false,"metadata":' + cons +
                              "}}").encode())
    with open(os.path.join(OUT, "zarr_packed.daf.zarr.zip"), "wb") as f:
        f.write(mmap_zip(entries))
    small, _ = zarr_entries(SMALL_SCALARS, SMALL_PROPS, AXES)
    with open(os.path.join(OUT, "multi_v3.dafs.zarr.zip"), "wb") as f:
        f.write(mmap_zip([("g1/" + k, d) for k, d in entries] + [("g2/" + k, d) for k, d in small]))
    return dict(entries)


# ------------------------------------------------------------------------------------------------------------------
# foreign_v3.daf.zarr: written by zarr-python 3 itself
# ------------------------------------------------------------------------------------------------------------------

F_CELLS = ["cell%d" % i for i in range(10)]
F_GENES = ["gene%d" % i for i in range(7)]


def gen_foreign():
    import zarr
    from zarr.codecs import BloscCodec, BytesCodec, GzipCodec, TransposeCodec

    path = os.path.join(OUT, "foreign_v3.daf.zarr")
    shutil.rmtree(path, ignore_errors=True)
    root = zarr.open_group(path, mode="w", zarr_format=3, attributes={"daf": [1, 0]})
    for g in ["scalars", "axes", "vectors/cell", "vectors/gene"] + \
            ["matrices/%s/%s" % (r, c) for r in ("cell", "gene") for c in ("cell", "gene")]:
        root.require_group(g)
    rng = np.random.default_rng(3)
    score = np.round(rng.random(10), 3)
    score[0:3] = 0.0  # a whole chunk of fill values: zarr-python does not store it
    expr = np.round(rng.random((10, 7)), 3)  # Daf orientation: cell rows x gene columns
    umis = rng.integers(0, 1000, (10, 7)).astype(np.uint16)
    data = {
        "scalars/ratio": (np.array([2.5]), {}),
        "scalars/title": (np.array(["hello"]), {}),
        "axes/cell": (np.array(F_CELLS), dict(chunks=(4,))),
        "axes/gene": (np.array(F_GENES), dict(chunks=(3,))),
        "vectors/cell/score": (score, dict(chunks=(3,))),
        "vectors/cell/type": (np.array(["T", "B", "", "NK", "T", "B", "T", "", "B", "é"]), dict(chunks=(4,))),
        "vectors/cell/depth": (rng.integers(-1000, 1000, 10).astype(np.int64),
                               dict(chunks=(4,), serializer=BytesCodec(endian="big"))),
        "vectors/cell/gz": (np.round(rng.random(10), 3), dict(chunks=(4,), compressors=GzipCodec(level=5))),
        "vectors/cell/bl": (rng.integers(0, 100, 10).astype(np.int32),
                            dict(chunks=(4,), compressors=BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"))),
        "vectors/cell/counts/nzind": (np.array([1, 4, 10], dtype=np.int64), dict(chunks=(2,))),
        "vectors/cell/counts/nzval": (np.array([5, -6, 7], dtype=np.int32), dict(chunks=(2,))),
        "matrices/cell/gene/expr": (expr.T, dict(chunks=(3, 4), filters=[TransposeCodec(order=(1, 0))])),
        "matrices/cell/gene/umis": (umis.T, dict(chunks=(7, 5), shards=(7, 10))),
    }
    for key, (values, kw) in data.items():
        if values.dtype.kind == "U":
            a = root.create_array(key, shape=values.shape, dtype=str, **kw)
            a[...] = values
        else:
            root.create_array(key, data=values, **kw)
    root["vectors/cell"].require_group("counts")
    return {k: v for k, (v, _) in data.items()}


# ------------------------------------------------------------------------------------------------------------------
# expected.json: every property's values (column-major for matrices, as Julia holds them)
# ------------------------------------------------------------------------------------------------------------------


def prop_expect(kind, path, spec):
    shape = prop_shape(path, spec)
    out = {"eltype": spec["t"], "shape": shape, "format": "dense" if kind == "dense" else "sparse"}
    if kind == "dense":
        out["values"] = list(spec["values"])
    else:
        out["indtype"] = spec["it"]
        for c in ("nzind", "colptr", "rowval", "nzval"):
            if c in spec:
                out[c] = list(spec[c])
    if spec.get("pack"):
        out["packed"] = sorted(spec["pack"]) if isinstance(spec["pack"], dict) else [""]
    return out


def dataset_expect(scalars, props, axes):
    return {"scalars": {n: {"type": t, "value": v} for n, t, v in scalars},
            "axes": {a: list(e) for a, e in axes},
            "properties": {path: prop_expect(kind, path, spec) for kind, path, spec in props}}


def foreign_expect(arrays):
    out = {"scalars": {"ratio": {"type": "Float64", "value": 2.5}, "title": {"type": "String", "value": "hello"}},
           "axes": {"cell": F_CELLS, "gene": F_GENES}, "properties": {}}
    names = {"f": "Float", "i": "Int", "u": "UInt"}
    for key, values in arrays.items():
        if not key.startswith(("vectors", "matrices")) or "/counts/" in key:
            continue
        t = "String" if values.dtype.kind == "U" else names[values.dtype.kind] + str(values.dtype.itemsize * 8)
        shape = list(reversed(values.shape))  # Julia shape; the Zarr array is [ncols, nrows]
        vals = values.reshape(-1).tolist()  # C order of the Zarr array = column-major of the Julia matrix
        out["properties"][key] = {"eltype": t, "shape": shape, "format": "dense", "values": vals}
    out["properties"]["vectors/cell/counts"] = {
        "eltype": "Int32", "indtype": "Int64", "shape": [10], "format": "sparse", "nzind": [1, 4, 10],
        "nzval": [5, -6, 7]}
    return out


# ------------------------------------------------------------------------------------------------------------------
# Self-checks
# ------------------------------------------------------------------------------------------------------------------


def check_worked_example():
    """§8: 1200 Float64, zstd, inner [1024]: index, LFH at 36, method 93, name c/0, usize 8192 / csize 960, data at
    89. The compressed bytes of the fixture are not known, so stand-ins of its sizes (960, 230) are placed; the
    index (offsets, sizes and its CRC-32C) depends only on those sizes."""
    raws = [b"\0" * 8192, b"\0" * 8192]
    shard = assemble_shard(93, [b"c/0", b"c/1"], [b"\x01" * 960, b"\x02" * 230], raws)
    want = bytes.fromhex("5900000000000000c0030000000000004e04000000000000e6000000000000008ade3190")
    assert shard[:36] == want, shard[:36].hex()
    assert shard[36:40] == b"PK\x03\x04" and struct.unpack_from("<H", shard, 36 + 8)[0] == 93
    assert shard[36 + 30:36 + 33] == b"c/0"
    assert struct.unpack_from("<QQ", shard, 36 + 33 + 4) == (8192, 960)
    assert 36 + 30 + 3 + 20 == 89 and shard[89:89 + 960] == b"\x01" * 960


def check_outputs(files, zarr_entries_by_key):
    for kind, path, spec in PROPS:
        shape = prop_shape(path, spec)
        pack = spec.get("pack")
        if not pack:
            continue
        comps = {"": pack} if kind == "dense" else pack
        for c, (codec, inner) in comps.items():
            vals = spec["values"] if c == "" else spec[c]
            t = spec["t"] if c in ("", "nzval") else spec["it"]
            cshape = shape if c == "" else [len(vals)]
            name = path + (".zip" if c == "" else ".%s.zip" % c)
            shard = files[name]
            got = decode_via_index(shard, t, cshape, inner, codec)
            assert got == list(vals), name
            check_zip_side(shard)
            zkey = path + ("" if c == "" else "/" + c) + ("/c/0/0" if len(cshape) == 2 else "/c/0")
            if t != "String" or kind == "dense":
                assert zarr_entries_by_key[zkey] == shard, zkey  # the very same shard bytes


def check_with_zarr_python(expect):
    """zarr-python 3 reads every array of the Zarr directory once its packed arrays declare a valid shard: the
    shard shape rounded up to a multiple of the inner chunk (what daf-mount's v3 view declares)."""
    import tempfile

    import zarr

    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "z.daf.zarr")
        shutil.copytree(os.path.join(OUT, "zarr_packed.daf.zarr"), copy)
        for base, _, names in os.walk(copy):
            if "zarr.json" in names and base != copy:
                p = os.path.join(base, "zarr.json")
                meta = json.load(open(p))
                if meta.get("node_type") == "array" and meta["codecs"][0]["name"] == "sharding_indexed":
                    inner = meta["codecs"][0]["configuration"]["chunk_shape"]
                    meta["chunk_grid"]["configuration"]["chunk_shape"] = [
                        -(-s // i) * i for s, i in zip(meta["shape"], inner)]
                    json.dump(meta, open(p, "w"))
        g = zarr.open_group(copy, mode="r", use_consolidated=False)
        for path, prop in expect["properties"].items():
            if prop["format"] == "dense":
                wanted = {path: prop["values"]}
            elif prop["eltype"] == "String":
                dense = [""] * prop["shape"][0]
                for i, v in zip(prop["nzind"], prop["nzval"]):
                    dense[i - 1] = v
                wanted = {path: dense}
            else:
                wanted = {path + "/" + c: prop[c] for c in ("nzind", "colptr", "rowval", "nzval") if c in prop}
            for node, want in wanted.items():
                assert g[node][...].reshape(-1).tolist() == want, node


def main():
    os.makedirs(OUT, exist_ok=True)
    check_worked_example()
    files = gen_files()
    gen_zipdaf()
    zarr_by_key = gen_zarr()
    arrays = gen_foreign()
    packed = dataset_expect(SCALARS, PROPS, AXES)
    expect = {
        "datasets": {"packed": packed, "small": dataset_expect(SMALL_SCALARS, SMALL_PROPS, AXES),
                     "foreign": foreign_expect(arrays)},
        "sources": {"files_packed.daf": "packed", "zarr_packed.daf.zarr": "packed",
                    "zarr_packed.daf.zarr.zip": "packed", "zipdaf_packed.daf.zip": "packed",
                    "multi_v3.dafs.zarr.zip#/g1": "packed", "multi_v3.dafs.zarr.zip#/g2": "small",
                    "foreign_v3.daf.zarr": "foreign"},
    }
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expect, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    check_outputs(files, zarr_by_key)
    check_with_zarr_python(packed)
    print("ok")


if __name__ == "__main__":
    main()
