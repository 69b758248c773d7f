"""Writes tests/data/v3/foreign.daf.zarr: a ZarrDaf on Zarr v3 written by zarr-python 3 (not by
DataAxesFormats), with the codecs and layouts other Zarr v3 writers use: zarr-python's default
codecs (zstd) over several chunks, a transpose + big-endian bytes + gzip + crc32c matrix, blosc,
missing chunks (fill value), chunked strings and v2 chunk key encoding.

Run with zarr-python 3 (tested with zarr 3.1.6, numcodecs 0.16.6):
    /work/main/.venv/zarr3/bin/python tests/data/v3/make_foreign.py
The Rust tests (src/formats/zarr_v3_tests.rs, tests/mount_v3.rs) check the values below.
"""
import os
import shutil

import numpy as np
import zarr
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, TransposeCodec

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "foreign.daf.zarr")
shutil.rmtree(out, ignore_errors=True)
root = zarr.open_group(out, mode="w", zarr_format=3, attributes={"daf": [1, 0]})
for group in ["scalars", "axes", "vectors/cell", "vectors/gene", "matrices/cell/gene"]:
    root.require_group(group)

def array(path, data, chunks, **kw):
    a = root.create_array(path, shape=data.shape, chunks=chunks, dtype=data.dtype, **kw)
    a[...] = data
    return a

# Axes: cell (7 entries, 3 chunks of 3), gene (5 entries, one chunk); default codecs (zstd).
root.create_array("axes/cell", shape=(7,), chunks=(3,), dtype=str)[:] = np.array([f"c{i}" for i in range(7)])
root.create_array("axes/gene", shape=(5,), chunks=(5,), dtype=str)[:] = np.array([f"g{i}" for i in range(5)])

# Scalars: one element each, zstd.
root.create_array("scalars/answer", shape=(1,), chunks=(1,), dtype="int64")[:] = [42]
root.create_array("scalars/name", shape=(1,), chunks=(1,), dtype=str)[:] = np.array(["foreign"])

# Vectors along cell.
array("vectors/cell/x", np.arange(7, dtype="float64") * 0.5, (3,))  # zstd, 3 chunks
partial = root.create_array("vectors/cell/partial", shape=(7,), chunks=(3,), dtype="int16", fill_value=-1)
partial[0:3] = [1, 2, 3]  # chunks 1 and 2 are never written: fill value -1
array(
    "vectors/cell/blosc",
    np.arange(7, dtype="int32") * 3,
    (2,),
    compressors=[BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")],
)
array(
    "vectors/cell/v2keys",
    np.arange(7, dtype="uint8"),
    (4,),
    chunk_key_encoding={"name": "v2", "separator": "."},
)
root.create_array("vectors/cell/label", shape=(7,), chunks=(3,), dtype=str)[:] = np.array(
    ["a", "bb", "", "d", "é", "f", "g"]
)
# A sparse vector: nzind (1-based) and nzval.
array("vectors/cell/sp/nzind", np.array([2, 5], dtype="int64"), (2,))
array("vectors/cell/sp/nzval", np.array([1.5, 2.5], dtype="float64"), (1,))

# Matrices cell x gene: the Zarr shape is [ngenes, ncells] = [5, 7] (column-major Daf).
m = np.arange(35, dtype="int32").reshape(5, 7)
array(
    "matrices/cell/gene/t",
    m,
    (5, 7),
    serializer=BytesCodec(endian="big"),
    filters=[TransposeCodec(order=[1, 0])],
    compressors=[GzipCodec(level=5), Crc32cCodec()],
)
array("matrices/cell/gene/f", m.astype("float64") / 4, (2, 3))  # zstd, edge chunks
print("wrote", out)
