"""A plain-Python reader of a FilesDaf tree (numpy.fromfile and text lines, no Daf code)."""
import json
import os

import numpy as np

DTYPES = {
    "Bool": np.bool_, "Int8": np.int8, "Int16": np.int16, "Int32": np.int32, "Int64": np.int64,
    "UInt8": np.uint8, "UInt16": np.uint16, "UInt32": np.uint32, "UInt64": np.uint64,
    "Float32": np.float32, "Float64": np.float64,
}


def lines(path):
    with open(path, "rb") as f:
        text = f.read().decode()
    return text.split("\n")[:-1]


def axis(root, name):
    return lines(os.path.join(root, "axes", name + ".txt"))


def scalar(root, name):
    with open(os.path.join(root, "scalars", name + ".json")) as f:
        return json.load(f)["value"]


def _types(desc):
    """(eltype, indtype) of a descriptor, FilesDaf 1.0 or 1.1 (sparse: per-component descriptors)."""
    if "eltype" in desc:
        return desc["eltype"], desc.get("indtype")
    index = next(desc[c] for c in ("nzind", "colptr", "rowval") if c in desc)
    return desc.get("nzval", {"eltype": "Bool"})["eltype"], index["eltype"]


def _dense_strings(base, desc, n):
    if desc["format"] == "dense":
        return lines(base + ".txt")
    values = lines(base + ".nztxt")
    indtype = DTYPES[_types(desc)[1]]
    index = np.fromfile(base + ".nzind", indtype) if os.path.exists(base + ".nzind") else None
    out = [""] * n
    if index is not None:
        for i, v in zip(index, values):
            out[int(i) - 1] = v
    else:
        colptr = np.fromfile(base + ".colptr", indtype)
        rowval = np.fromfile(base + ".rowval", indtype)
        nrows = n // (len(colptr) - 1)
        k = 0
        for c in range(len(colptr) - 1):
            for j in range(int(colptr[c]) - 1, int(colptr[c + 1]) - 1):
                out[c * nrows + int(rowval[j]) - 1] = values[k]
                k += 1
    return out


def prop(root, rel, shape):
    """(kind, content): ("dense", array in Zarr order) or ("sparse", {component: array})."""
    base = os.path.join(root, rel)
    with open(base + ".json") as f:
        desc = json.load(f)
    n = int(np.prod(shape))
    zarr_shape = tuple(reversed(shape))
    eltype, indtype = _types(desc)
    if eltype == "String":
        return "dense", np.array(_dense_strings(base, desc, n), dtype=object).reshape(zarr_shape)
    t = DTYPES[eltype]
    if desc["format"] == "dense":
        return "dense", np.fromfile(base + ".data", t, count=n).reshape(zarr_shape)
    i = DTYPES[indtype]
    parts = {}
    for comp in ("nzind", "colptr", "rowval"):
        if os.path.exists(base + "." + comp):
            parts[comp] = np.fromfile(base + "." + comp, i)
    if os.path.exists(base + ".nzval"):
        parts["nzval"] = np.fromfile(base + ".nzval", t)
    return "sparse", parts


def properties(root):
    """Every property: {zarr path: (kind, content)}."""
    axes = {f[:-4]: len(axis(root, f[:-4])) for f in os.listdir(os.path.join(root, "axes")) if f.endswith(".txt")}
    out = {"daf": ("dense", np.array([1, 0], dtype=np.uint8))}
    for f in os.listdir(os.path.join(root, "scalars")):
        if f.endswith(".json"):
            out["scalars/" + f[:-5]] = ("scalar", scalar(root, f[:-5]))
    for a in axes:
        out["axes/" + a] = ("dense", np.array(axis(root, a), dtype=object))
        for f in os.listdir(os.path.join(root, "vectors", a)):
            if f.endswith(".json"):
                rel = f"vectors/{a}/{f[:-5]}"
                out[rel] = prop(root, rel, (axes[a],))
        for b in axes:
            for f in os.listdir(os.path.join(root, "matrices", a, b)):
                if f.endswith(".json"):
                    rel = f"matrices/{a}/{b}/{f[:-5]}"
                    out[rel] = prop(root, rel, (axes[a], axes[b]))
    return out
