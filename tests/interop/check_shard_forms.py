"""Which Zarr v3 readers accept a DataAxesFormats 0.3 packed array, in Julia's own form and in the
form daf-mount's Zarr v3 view declares (daf-formats.md §8; doc/user-guide.md "The Zarr v3 view").

The shards are made here as Julia writes them (§8, the fixture `fpk/zs.files/vectors/cell/score.zip`):
1200 Float64 values (and a 1200 x 3 matrix, one column per inner chunk column), inner chunks of
1024, the edge chunks encoded at full size (the tail padded with the fill value), zstd, the index
(u64 offset + u64 size per inner chunk, then CRC-32C) at the start, each encoded chunk inside a ZIP
local header, a ZIP central directory after them. The same bytes are then declared two ways:

* julia:   chunk_grid chunk_shape = the array shape ([1200], [3, 1200]), as Julia's zarr.json says;
* rounded: the shape rounded up to a multiple of the inner chunks ([2048], [3, 2048]), as
  daf-mount's Zarr v3 view says.

and read with zarr-python 3 and TensorStore (zarr3 driver). Prints one line per (form, reader)
and exits non-zero if the rounded form is not read back exactly by every reader.

Run: /work/main/.venv/zarr3/bin/python tests/interop/check_shard_forms.py
"""

import json
import struct
import sys
import tempfile
import zlib
from pathlib import Path

import google_crc32c
import numpy as np
import numcodecs

N, INNER = 1200, 1024
CODECS = [
    {"configuration": {"endian": "little"}, "name": "bytes"},
    {"configuration": {"checksum": False, "level": 5}, "name": "zstd"},
]
INDEX_CODECS = [{"configuration": {"endian": "little"}, "name": "bytes"}, {"name": "crc32c"}]


def julia_shard(values: np.ndarray, inner: list) -> bytes:
    """The shard bytes as DataAxesFormats 0.3 writes them (index at start, ZIP-wrapped chunks):
    `values` in Zarr (C) order, inner chunks of shape `inner`, in C order of their grid, each
    encoded at full size (the edge ones padded with the fill value)."""
    grid = [-(-n // c) for n, c in zip(values.shape, inner)]
    padded = np.zeros([g * c for g, c in zip(grid, inner)], dtype="<f8")
    padded[tuple(slice(0, n) for n in values.shape)] = values
    zstd = numcodecs.Zstd(level=5)
    index_len = int(np.prod(grid)) * 16 + 4
    body = bytearray()
    index = []
    central = bytearray()
    for coords in np.ndindex(*grid):
        block = padded[tuple(slice(i * c, (i + 1) * c) for i, c in zip(coords, inner))]
        raw = np.ascontiguousarray(block).tobytes()
        frame = zstd.encode(raw)
        name = ("c/" + "/".join(str(i) for i in reversed(coords))).encode()
        crc = zlib.crc32(raw)
        extra = struct.pack("<HHQQ", 1, 16, len(raw), len(frame))
        lfh_at = index_len + len(body)
        lfh = struct.pack(
            "<IHHHHHIIIHH", 0x04034B50, 45, 0, 93, 0, 0x21, crc, 0xFFFFFFFF, 0xFFFFFFFF,
            len(name), len(extra),
        )
        body += lfh + name + extra
        index.append((index_len + len(body), len(frame)))
        body += frame
        central += struct.pack(
            "<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 93, 0, 0x21, crc, 0xFFFFFFFF,
            0xFFFFFFFF, len(name), 28, 0, 0, 0, 0, 0xFFFFFFFF,
        ) + name + struct.pack("<HHQQQ", 1, 24, len(raw), len(frame), lfh_at)
    raw_index = b"".join(struct.pack("<QQ", o, n) for o, n in index)
    raw_index += struct.pack("<I", google_crc32c.value(raw_index))
    # The ZIP trailer is not part of what a Zarr reader looks at; the central directory stands in.
    return raw_index + bytes(body) + bytes(central)


def zarr_json(shape: list, inner: list, shard_shape: list) -> dict:
    return {
        "attributes": {"daf_packed_format": "indexed+zipped"},
        "chunk_grid": {"configuration": {"chunk_shape": shard_shape}, "name": "regular"},
        "chunk_key_encoding": {"configuration": {"separator": "/"}, "name": "default"},
        "codecs": [
            {
                "configuration": {
                    "chunk_shape": inner,
                    "codecs": CODECS,
                    "index_codecs": INDEX_CODECS,
                    "index_location": "start",
                },
                "name": "sharding_indexed",
            }
        ],
        "data_type": "float64",
        "fill_value": 0.0,
        "node_type": "array",
        "shape": shape,
        "zarr_format": 3,
    }


def read_zarr_python(path: Path) -> np.ndarray:
    import zarr

    return zarr.open_array(str(path), mode="r")[:]


def read_tensorstore(path: Path) -> np.ndarray:
    import tensorstore as ts

    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}
    return ts.open(spec, read=True).result().read().result()


def main() -> int:
    # A vector of 1200 values (inner chunks of 1024), and a 1200 x 3 matrix (Zarr shape [3, 1200],
    # one column per inner chunk column: inner [1, 1024]), as DataAxesFormats packs them.
    vector = np.arange(N, dtype="<f8") * 0.5 + 1.0
    matrix = np.arange(3 * N, dtype="<f8").reshape(3, N)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for what, values, inner in [("vector", vector, [INNER]), ("matrix", matrix, [1, INNER])]:
            shard = julia_shard(values, inner)
            if what == "vector":  # the first chunk's data at 89, as in §8's worked example
                assert shard[:8] == struct.pack("<Q", 36 + 53)
            shape = list(values.shape)
            rounded = [-(-n // c) * c for n, c in zip(shape, inner)]
            for form, shard_shape in [("julia", shape), ("rounded", rounded)]:
                node = Path(tmp) / what / form
                key = node / "c" / "/".join("0" for _ in shape)
                key.parent.mkdir(parents=True)
                doc = zarr_json(shape, inner, shard_shape)
                (node / "zarr.json").write_text(json.dumps(doc, separators=(",", ":")))
                key.write_bytes(shard)
                for reader, read in [("zarr-python", read_zarr_python), ("tensorstore", read_tensorstore)]:
                    try:
                        got = read(node)
                        verdict = "reads exactly" if np.array_equal(got, values) else "WRONG VALUES"
                    except Exception as e:  # noqa: BLE001 - the refusal is the result
                        why = str(e).splitlines()[0].replace(tmp, "").split(" [tensorstore_spec")[0]
                        verdict = f"refuses: {type(e).__name__}: {why.split(': ')[-1]}"
                    if form == "rounded" and verdict != "reads exactly":
                        ok = False
                    print(f"{what} {form:8} chunk_shape {shard_shape}  {reader:12} {verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
