"""Writes the sharded Zarr v3 arrays of tests/data/shards (run with zarr-python 3.1).

Each array is one shard (`c/0` or `c/0/0`) plus its `zarr.json`; `expected.json` holds every
array's dtype, shape and values (flat, C order). The Rust tests in src/formats/shard_tests.rs
decode the shards with daf-mount's own code and compare.

    /work/main/.venv/zarr3/bin/python tests/data/shards/make.py
"""

import json
import os
import shutil

import numpy as np
import zarr
from zarr.codecs import (
    BloscCodec,
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    ShardingCodec,
    TransposeCodec,
    VLenUTF8Codec,
    ZstdCodec,
)

HERE = os.path.dirname(os.path.abspath(__file__))


def make(name, values, outer, inner, codecs, location, fill, index_codecs=None):
    path = os.path.join(HERE, name)
    shutil.rmtree(path, ignore_errors=True)
    kwargs = {}
    if index_codecs is not None:
        kwargs["index_codecs"] = index_codecs
    sharding = ShardingCodec(
        chunk_shape=inner, codecs=codecs, index_location=location, **kwargs
    )
    array = zarr.create_array(
        path,
        shape=values.shape,
        chunks=outer,
        dtype=str if values.dtype.kind == "O" else values.dtype,
        serializer=sharding,
        compressors=None,
        filters=None,
        fill_value=fill,
    )
    array[...] = values
    back = array[...]
    assert (back == values).all(), name
    if values.dtype.kind == "O":
        flat, dtype = [str(v) for v in values.ravel()], "str"
    else:
        flat, dtype = values.ravel().tolist(), str(values.dtype)
    return {"dtype": dtype, "shape": list(values.shape), "values": flat}


def main():
    expected = {}
    # 1-D Float64, index at the start, zstd; chunk 2 is all fill (absent), and the declared
    # shard (128) is larger than the array rounded up to whole chunks (112): chunk 7 is absent.
    v = np.arange(100, dtype="<f8") * 1.5 - 20
    v[32:48] = 0
    expected["zstd_start_f64"] = make(
        "zstd_start_f64", v, (128,), (16,), [BytesCodec(), ZstdCodec(level=3)], "start", 0.0
    )
    # 2-D Int32, index at the end, transpose + big-endian + gzip, fill 7, partial edge chunks
    # in both dimensions.
    m = np.arange(185, dtype=">i4").reshape(5, 37) * 3 - 100
    expected["gzip_end_i32_2d"] = make(
        "gzip_end_i32_2d",
        m,
        (6, 40),
        (2, 8),
        [TransposeCodec(order=(1, 0)), BytesCodec(endian="big"), GzipCodec(level=5)],
        "end",
        7,
    )
    # 2-D UInt16 as Daf packs a matrix (one column of the Julia matrix per inner chunk row),
    # blosc zstd bitshuffle, index at the end; row 4 is all zero (absent chunks).
    u = (np.arange(9 * 300, dtype="<u2").reshape(9, 300) * 7) % 1000
    u[4, :] = 0
    expected["blosc_end_u16_2d"] = make(
        "blosc_end_u16_2d",
        u,
        (9, 320),
        (1, 64),
        [BytesCodec(), BloscCodec(cname="zstd", clevel=5, shuffle="bitshuffle")],
        "end",
        0,
    )
    # Float32 with a CRC-32C on every inner chunk and an index without one.
    f = np.linspace(-1, 1, 50, dtype="<f4")
    expected["crc_f32"] = make(
        "crc_f32", f, (56,), (8,), [BytesCodec(), Crc32cCodec()], "start", 0.0,
        index_codecs=[BytesCodec()],
    )
    # Strings (vlen-utf8 + zstd), index at the start; chunk 1 is all "" (absent).
    s = np.array(["a", "bé", "", "dddd", "", "", "", "", "x y", "zz"], dtype=object)
    expected["strings_start"] = make(
        "strings_start",
        s,
        (12,),
        (4,),
        [VLenUTF8Codec(), ZstdCodec(level=1)],
        "start",
        "",
    )
    with open(os.path.join(HERE, "expected.json"), "w") as out:
        json.dump(expected, out)
        out.write("\n")


main()
