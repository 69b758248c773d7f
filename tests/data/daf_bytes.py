"""The bytes DataAxesFormats 0.3 writes (daf-formats.md §0.3, §5.2, §7.1, §8): its JSON forms, the MmapZipStore
ZIP layout, the dual-format packed shard (Zarr shard index + CRC-32C, inner ZIP entries, CD, ZIP64 trailer), the
Zarr v3 `zarr.json` of flat and packed arrays; and two shard readers (through the Zarr index, through the ZIP
central directory) for self-checks. Used by make_packed.py, tests/interop/test_v3.py and scripts/bench_packed.py.
The ZIP writer is the one of shared/fixtures/vectors/gen_vectors.py (copied)."""
import base64
import struct
import zlib

import numcodecs
import numpy as np

# ------------------------------------------------------------------------------------------------------------------
# JSON as Julia writes it (JSON.jl >= 1.6: plain Dicts sorted; literal strings as given)
# ------------------------------------------------------------------------------------------------------------------


def jstr(s):
    out = ['"']
    for ch in s:
        c = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch in "\b\f\n\r\t":
            out.append({"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        elif c < 0x20 or c == 0x7F:
            out.append("\\u%04x" % c)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def json16(o):
    """JSON.jl >= 1.6 compact output of a Julia Dict (python dict): keys sorted, recursively."""
    if o is None:
        return "null"
    if isinstance(o, bool):
        return "true" if o else "false"
    if isinstance(o, int):
        return str(o)
    if isinstance(o, float):
        return repr(o)
    if isinstance(o, str):
        return jstr(o)
    if isinstance(o, (list, tuple)):
        return "[" + ",".join(json16(x) for x in o) + "]"
    if isinstance(o, dict):
        return "{" + ",".join(jstr(k) + ":" + json16(o[k]) for k in sorted(o)) + "}"
    raise TypeError(o)


# ------------------------------------------------------------------------------------------------------------------
# Checksums
# ------------------------------------------------------------------------------------------------------------------

_CRC32C_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC32C_TABLE.append(_c)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC32C_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def crc32(data):
    return zlib.crc32(data) & 0xFFFFFFFF


# ------------------------------------------------------------------------------------------------------------------
# MmapZipStore (§7.1), copied from shared/fixtures/vectors/gen_vectors.py
# ------------------------------------------------------------------------------------------------------------------


def padding_for(off):
    r = off % 8
    if r == 0:
        return 0
    t = (-r) % 8
    return t if t >= 4 else t + 8


def zip_trailer(n, cd_size, cd_off):
    tail = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 0x031E, 45, 0, 0, n, n, cd_size, cd_off)
    tail += struct.pack("<IIQI", 0x07064B50, 0, cd_off + cd_size, 1)
    tail += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return tail


def cd_record(name, method, crc, csize, usize, lfh_off):
    cd = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x031E, 45, 0x0800, method, 0, 0x0021, crc, 0xFFFFFFFF,
                     0xFFFFFFFF, len(name), 28, 0, 0, 0, 0o100644 << 16, 0xFFFFFFFF)
    return cd + name + struct.pack("<HHQQQ", 0x0001, 24, usize, csize, lfh_off)


def lfh_zip64(name, method, crc, csize, usize, pad=0):
    lfh = struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0x0800, method, 0, 0x0021, crc, 0xFFFFFFFF, 0xFFFFFFFF,
                      len(name), 20 + pad)
    lfh += name + struct.pack("<HHQQ", 0x0001, 16, usize, csize)
    if pad:
        lfh += struct.pack("<HH", 0xDAF1, pad - 4) + b"\0" * (pad - 4)
    return lfh


def mmap_zip(entries):
    body = bytearray()
    cds = []
    for name, data in entries:
        nb = name.encode("utf-8")
        off = len(body)
        pad = padding_for(off + 30 + len(nb) + 20)
        crc = crc32(data)
        body += lfh_zip64(nb, 0, crc, len(data), len(data), pad)
        assert len(body) % 8 == 0
        body += data
        cds.append(cd_record(nb, 0, crc, len(data), len(data), off))
    cd = b"".join(cds)
    return bytes(body) + cd + zip_trailer(len(entries), len(cd), len(body))


# ------------------------------------------------------------------------------------------------------------------
# Packed codecs and the dual-format shard (§8)
# ------------------------------------------------------------------------------------------------------------------

NUMPY = {"Bool": "u1", "Int8": "i1", "Int16": "<i2", "Int32": "<i4", "Int64": "<i8", "UInt8": "u1", "UInt16": "<u2",
         "UInt32": "<u4", "UInt64": "<u8", "Float32": "<f4", "Float64": "<f8"}
ZARR_TYPE = {"String": "string", **{k: k.lower() for k in NUMPY}}
ZARR_TYPE["Bool"] = "bool"
FILL = {"String": "", "Bool": False, "Float32": 0.0, "Float64": 0.0}
METHOD = {"zstd": 93, "gzip": 8, "blosc_zstd_bitshuffle": 0, "blosc_lz4_bitshuffle": 0}
LEVEL = 5


def fill_of(t):
    return FILL.get(t, 0)


def vlen_utf8(strings):
    out = struct.pack("<I", len(strings))
    for s in strings:
        e = s.encode("utf-8")
        out += struct.pack("<I", len(e)) + e
    return out


def lines(strings):
    return "".join(s + "\n" for s in strings).encode("utf-8")


def raw_bytes(t, values):
    """The array->bytes step: `bytes` little-endian, or `vlen-utf8` for strings."""
    if t == "String":
        return vlen_utf8(list(values))
    return np.asarray(values, dtype=NUMPY[t]).tobytes()


def v3_codecs(t, codec):
    """The inner codec list (Zarr.jl JSON.lower: Dicts, keys sorted on output)."""
    first = ({"configuration": {}, "name": "vlen-utf8"} if t == "String"
             else {"configuration": {"endian": "little"}, "name": "bytes"})
    typesize = 1 if t == "String" else np.dtype(NUMPY[t]).itemsize
    second = {
        "zstd": {"configuration": {"level": LEVEL}, "name": "zstd"},
        "gzip": {"configuration": {"level": LEVEL}, "name": "gzip"},
        "blosc_zstd_bitshuffle": {"configuration": {"blocksize": 0, "clevel": LEVEL, "cname": "zstd",
                                                    "shuffle": "bitshuffle", "typesize": typesize}, "name": "blosc"},
        "blosc_lz4_bitshuffle": {"configuration": {"blocksize": 0, "clevel": LEVEL, "cname": "lz4",
                                                   "shuffle": "bitshuffle", "typesize": typesize}, "name": "blosc"},
    }[codec]
    return [first, second]


def compress(t, codec, raw):
    if codec == "zstd":
        return numcodecs.Zstd(level=LEVEL).encode(raw)
    if codec.startswith("blosc_"):
        cname = codec.split("_")[1]
        typed = np.frombuffer(raw, dtype="u1" if t == "String" else NUMPY[t])
        return bytes(numcodecs.Blosc(cname=cname, clevel=LEVEL, shuffle=numcodecs.Blosc.BITSHUFFLE,
                                     blocksize=0).encode(typed))
    raise ValueError(codec)


def gzip_name(chunk_index):
    """The 10-byte gzip header that is a gzip-codec chunk's ZIP entry name (chunk_index 1-based)."""
    i = chunk_index - 1
    return bytes([0x1F, 0x8B, 0x08, 0x01]) + base64.b64encode(bytes([(i >> 16) & 255, (i >> 8) & 255, i & 255])) + \
        bytes([0x02, 0xFF])


def chunk_name(chunks_per_shard, linear):
    """`c/<i_N>/.../<i_1>`: Julia dims reversed, each zero-padded to the width of its largest index."""
    coords = []
    for k in chunks_per_shard:  # column-major: the first Julia dim varies fastest
        coords.append(linear % k)
        linear //= k
    parts = ["c"]
    for d in reversed(range(len(chunks_per_shard))):
        parts.append(str(coords[d]).zfill(len(str(chunks_per_shard[d] - 1))))
    return "/".join(parts).encode()


def inner_chunks(t, data, shape, inner):
    """The raw bytes of every inner chunk in column-major linear order; edge chunks padded with the fill value."""
    grid = [-(-s // c) for s, c in zip(shape, inner)]
    arr = np.empty(shape, dtype=object if t == "String" else NUMPY[t], order="F")
    arr[...] = np.asarray(data, dtype=object if t == "String" else NUMPY[t]).reshape(shape, order="F")
    out = []
    for linear in range(int(np.prod(grid))):
        coords, rest = [], linear
        for k in grid:
            coords.append(rest % k)
            rest //= k
        block = np.full(inner, fill_of(t), dtype=arr.dtype, order="F")
        sl = tuple(slice(c * n, min((c + 1) * n, s)) for c, n, s in zip(coords, inner, shape))
        block[tuple(slice(0, x.stop - x.start) for x in sl)] = arr[sl]
        out.append(raw_bytes(t, block.reshape(-1, order="F")))
    return grid, out


def assemble_shard(method, names, encoded, raws, codec_json=None):
    """The dual-format shard: Zarr index at 0 (+ CRC-32C), per chunk LFH + data, [codec.json], CD, ZIP64 trailer.
    `encoded[i]` is the ZIP entry data (zstd frame, raw deflate, or codec output), `raws[i]` the decoded bytes."""
    n = len(names)
    index_size = 16 * n + 4
    body = bytearray(b"\0" * index_size)
    index = []
    cds = []
    for name, enc, raw in zip(names, encoded, raws):
        off = len(body)
        if method == 8:
            crc = crc32(raw)
            body += struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0x0800, 8, 0, 0x0021, crc, len(enc), len(raw),
                                len(name), 0) + name
            index.append((off + 30, len(name) + len(enc) + 8))
            body += enc + struct.pack("<II", crc, len(raw) & 0xFFFFFFFF)
            cds.append(cd_record(name, 8, crc, len(enc), len(raw), off))
            continue
        usize = len(enc) if method == 0 else len(raw)
        crc = crc32(enc) if method == 0 else crc32(raw)
        body += lfh_zip64(name, method, crc, len(enc), usize)
        index.append((len(body), len(enc)))
        body += enc
        cds.append(cd_record(name, method, crc, len(enc), usize, off))
    entries = n
    if codec_json is not None:
        off = len(body)
        crc = crc32(codec_json)
        body += lfh_zip64(b"codec.json", 0, crc, len(codec_json), len(codec_json)) + codec_json
        cds.append(cd_record(b"codec.json", 0, crc, len(codec_json), len(codec_json), off))
        entries += 1
    cd = b"".join(cds)
    cd_off = len(body)
    body += cd + zip_trailer(entries, len(cd), cd_off)
    idx = b"".join(struct.pack("<QQ", o, s) for o, s in index)
    body[0:index_size] = idx + struct.pack("<I", crc32c(idx))
    return bytes(body)


def encode_shard(t, data, shape, inner, codec):
    grid, raws = inner_chunks(t, data, shape, inner)
    method = METHOD[codec]
    if method == 8:
        names = [gzip_name(i + 1) for i in range(len(raws))]
        encoded = []
        for raw in raws:
            c = zlib.compressobj(LEVEL, zlib.DEFLATED, -15)
            encoded.append(c.compress(raw) + c.flush())
    else:
        names = [chunk_name(grid, i) for i in range(len(raws))]
        encoded = [compress(t, codec, raw) for raw in raws]
    codec_json = json16(v3_codecs(t, codec)).encode() if method == 0 else None
    return assemble_shard(method, names, encoded, raws, codec_json)


# ------------------------------------------------------------------------------------------------------------------
# Zarr v3 array documents (Zarr.jl 0.10 + JSON >= 1.6)
# ------------------------------------------------------------------------------------------------------------------

GROUP_FILE = json16({"zarr_format": 3, "node_type": "group"})
GROUP_CONS = '{"zarr_format":3,"node_type":"group"}'


def zarr_json(t, shape_julia, pack=None):
    shape = list(reversed(shape_julia))
    meta = {
        "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": ZARR_TYPE[t],
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": shape}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill_of(t),
        "codecs": [v3_codecs(t, "zstd")[0]],
    }
    if pack:
        meta["attributes"] = {"daf_packed_format": "indexed+zipped"}
        meta["codecs"] = [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": list(reversed(pack[1])), "codecs": v3_codecs(t, pack[0]),
            "index_codecs": [{"configuration": {"endian": "little"}, "name": "bytes"}, {"name": "crc32c"}],
            "index_location": "start"}}]
    return json16(meta)



# ------------------------------------------------------------------------------------------------------------------
# Reading shards back (self-checks)
# ------------------------------------------------------------------------------------------------------------------


def decode_via_index(shard, t, shape, inner, codec):
    """Decodes a shard through its Zarr index (what a Zarr reader does) and returns the values column-major."""
    grid = [-(-s // c) for s, c in zip(shape, inner)]
    n = int(np.prod(grid))
    idx = shard[:16 * n]
    assert struct.unpack_from("<I", shard, 16 * n)[0] == crc32c(idx)
    full = np.empty(shape, dtype=object if t == "String" else NUMPY[t], order="F")
    for linear in range(n):
        off, size = struct.unpack_from("<QQ", idx, 16 * linear)
        enc = shard[off:off + size]
        if codec == "gzip":
            raw = zlib.decompress(enc, 16 + 15)
        elif codec == "zstd":
            raw = numcodecs.Zstd().decode(enc)
        else:
            raw = numcodecs.Blosc().decode(enc)
        raw = bytes(raw)
        if t == "String":
            count = struct.unpack_from("<I", raw)[0]
            pos, vals = 4, []
            for _ in range(count):
                ln = struct.unpack_from("<I", raw, pos)[0]
                vals.append(raw[pos + 4:pos + 4 + ln].decode())
                pos += 4 + ln
            block = np.array(vals, dtype=object).reshape(inner, order="F")
        else:
            block = np.frombuffer(raw, dtype=NUMPY[t]).reshape(inner, order="F")
        coords, rest = [], linear
        for k in grid:
            coords.append(rest % k)
            rest //= k
        sl = tuple(slice(c * m, min((c + 1) * m, s)) for c, m, s in zip(coords, inner, shape))
        full[sl] = block[tuple(slice(0, x.stop - x.start) for x in sl)]
    return full.reshape(-1, order="F").tolist()


def check_zip_side(shard):
    """The same bytes read as a ZIP archive through its central directory (fixed-length records in chunk order;
    Python's zipfile cannot be used: the gzip-header names are not UTF-8 although flag bit 11 says so)."""
    cd_size, cd_off = struct.unpack_from("<QQ", shard, len(shard) - 98 + 40)
    pos, lengths = cd_off, set()
    while pos < cd_off + cd_size:
        sig, method, crc = struct.unpack_from("<I6xH4xI", shard, pos)
        n, extra = struct.unpack_from("<HH", shard, pos + 28)
        name = shard[pos + 46:pos + 46 + n]
        usize, csize, off = struct.unpack_from("<QQQ", shard, pos + 46 + n + 4)
        assert sig == 0x02014B50
        if name != b"codec.json":
            lengths.add(n)
        lname_len, lextra = struct.unpack_from("<HH", shard, off + 26)
        assert shard[off + 30:off + 30 + lname_len] == name
        data = shard[off + 30 + lname_len + lextra:off + 30 + lname_len + lextra + csize]
        if method == 8:
            data = zlib.decompress(data, -15)
        elif method == 93:
            data = bytes(numcodecs.Zstd().decode(data))
        assert len(data) == usize and crc32(data) == crc
        pos += 46 + n + extra
    assert len(lengths) == 1
