"""The crash campaign's strict archive check: `unzip -tq`, `zipfile.testzip()`, and our own
parse of the central directory and local headers (names equal, method/CRC equal, no overlapping
entries, nothing past the central directory), with a self-test that it catches damage."""

import os
import shutil
import struct
import subprocess
import warnings
import zipfile

def central_directory(data):
    """Parses the central directory itself (ZIP64 aware): (cd offset, [record dict])."""
    eocd = data.rfind(b"PK\x05\x06", max(0, len(data) - 65557))
    if eocd < 0:
        raise ValueError("no end of central directory record")
    (_, _, _, _, count, cd_size, cd_off, _) = struct.unpack_from("<IHHHHIIH", data, eocd)
    loc = eocd - 20
    if loc >= 0 and data[loc : loc + 4] == b"PK\x06\x07":
        (z64,) = struct.unpack_from("<Q", data, loc + 8)
        if data[z64 : z64 + 4] != b"PK\x06\x06":
            raise ValueError("bad ZIP64 end of central directory record")
        count, cd_size, cd_off = struct.unpack_from("<QQQ", data, z64 + 32)
    records, pos = [], cd_off
    for _ in range(count):
        if data[pos : pos + 4] != b"PK\x01\x02":
            raise ValueError(f"bad central-directory record at {pos}")
        fields = struct.unpack_from("<IHHHHHHIIIHHHHHII", data, pos)
        flags, method, crc, csize, usize = fields[3], fields[4], fields[7], fields[8], fields[9]
        n, m, k, offset = fields[10], fields[11], fields[12], fields[16]
        name = bytes(data[pos + 46 : pos + 46 + n])
        extra = data[pos + 46 + n : pos + 46 + n + m]
        e = 0
        while e + 4 <= len(extra):
            tag, length = struct.unpack_from("<HH", extra, e)
            if tag == 1:
                values, v = extra[e + 4 : e + 4 + length], 0
                if usize == 0xFFFFFFFF:
                    (usize,) = struct.unpack_from("<Q", values, v)
                    v += 8
                if csize == 0xFFFFFFFF:
                    (csize,) = struct.unpack_from("<Q", values, v)
                    v += 8
                if offset == 0xFFFFFFFF:
                    (offset,) = struct.unpack_from("<Q", values, v)
            e += 4 + length
        records.append(
            dict(name=name, flags=flags, method=method, crc=crc, csize=csize, offset=offset)
        )
        pos += 46 + n + m + k
    if pos != cd_off + cd_size:
        raise ValueError(f"central directory size {cd_size} disagrees with its records")
    return cd_off, records


def check_archive(path):
    """Problems found in the archive at `path` (empty: it is intact), and duplicate names."""
    problems = []
    run = subprocess.run(["unzip", "-tq", path], capture_output=True, text=True)
    if run.returncode != 0:
        problems.append(f"unzip -tq: exit {run.returncode}: {run.stdout.strip()[-300:]}")
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
            if bad is not None:
                problems.append(f"zipfile.testzip: bad entry {bad}")
    except Exception as e:  # noqa: BLE001 - any failure of zipfile is a corrupt archive
        problems.append(f"zipfile: {e}")
    with open(path, "rb") as f:
        data = f.read()
    try:
        cd_off, records = central_directory(data)
    except (ValueError, struct.error) as e:
        return problems + [f"central directory: {e}"], []
    ranges = []
    for r in records:
        off = r["offset"]
        if data[off : off + 4] != b"PK\x03\x04":
            problems.append(f"{r['name']!r}: no local header at {off}")
            continue
        (flags, method, _, _, crc, _, _, n, m) = struct.unpack_from("<HHHHIIIHH", data, off + 6)
        local = data[off + 30 : off + 30 + n]
        if local != r["name"]:
            problems.append(f"central-directory name {r['name']!r} != local name {local!r}")
        if method != r["method"] or (not flags & 8 and crc != r["crc"]):
            problems.append(f"{r['name']!r}: local method/CRC disagree with the central record")
        end = off + 30 + n + m + r["csize"]
        if r["flags"] & 8:
            end += 16 if data[end : end + 4] == b"PK\x07\x08" else 12
        ranges.append((off, end, r["name"]))
    ranges.sort()
    for (a0, a1, an), (b0, _, bn) in zip(ranges, ranges[1:]):
        if b0 < a1:
            problems.append(f"entries overlap: {an!r} [{a0}, {a1}) and {bn!r} at {b0}")
    if ranges and ranges[-1][1] > cd_off:
        problems.append(f"entry {ranges[-1][2]!r} runs into the central directory")
    names = [r["name"] for r in records]
    duplicates = sorted({n for n in names if names.count(n) > 1}) if len(set(names)) < len(names) else []
    return problems, duplicates


def self_test(directory):
    """The archive check must pass an intact archive and flag each kind of damage: returns the
    damages it missed (empty: the check works)."""
    good = os.path.join(directory, "self-test.zip")
    with zipfile.ZipFile(good, "w", zipfile.ZIP_STORED) as z:
        z.writestr("a/first", b"x" * 100)
        z.writestr("a/second", b"y" * 100)
    with open(good, "rb") as f:
        data = f.read()
    missed = [] if check_archive(good) == ([], []) else ["an intact archive is flagged"]
    cd_off, records = central_directory(data)
    second = records[1]["offset"]
    damages = {
        "a flipped payload byte": lambda d: d[:60] + bytes([d[60] ^ 1]) + d[61:],
        "a local name that differs": lambda d: d[: second + 30] + b"A" + d[second + 31 :],
        "a central offset pointing elsewhere": lambda d: d[:cd_off] + d[cd_off:].replace(
            struct.pack("<I", second), struct.pack("<I", second - 50), 1),
        "a truncated archive": lambda d: d[: len(d) - 30],
        "a duplicate name": None,
    }
    for what, damage in damages.items():
        bad = os.path.join(directory, "self-test-bad.zip")
        if damage is None:
            shutil.copyfile(good, bad)
            with zipfile.ZipFile(bad, "a", zipfile.ZIP_STORED) as z, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                z.writestr("a/first", b"z")
            if not check_archive(bad)[1]:
                missed.append(what)
            continue
        with open(bad, "wb") as f:
            f.write(damage(data))
        if not check_archive(bad)[0]:
            missed.append(what)
    return missed
