"""The writer process of the crash campaign: writes dense matrices of random sizes through the
FilesDaf view of a read-write mount and prints one event line per step (BEGIN, CLOSED, FSYNC,
ACK, ERR) so that the campaign knows what was acknowledged and when to kill."""

import hashlib
import json
import math
import os
import random
import sys

ROWS = 1031  # prime: payload sizes are not all multiples of a power of two
COLS = [1, 3, 7, 17, 41, 101, 251, 631, 1601, 4001, 8136]  # 1031 * 8136 * 8 < 64 MiB
ELTYPES = [("UInt8", 1), ("UInt16", 2), ("UInt32", 4), ("UInt64", 8)]
BLOCK = 64 * 1024


def payload(name, size, rng):
    """Bytes of property `name`: a random block, each 64 KiB stamped with the name and offset,
    so a misplaced block or another property's bytes never compare equal."""
    block = rng.randbytes(BLOCK)
    parts = []
    for off in range(0, size, BLOCK):
        stamp = hashlib.sha256(f"{name}@{off}".encode()).digest()
        parts.append((stamp + block[len(stamp):])[: size - off])
    return b"".join(parts)


def choose_shape(rng, min_size, max_size):
    """(K, eltype, element size) for a payload of about a log-uniform size in the range."""
    target = math.exp(rng.uniform(math.log(min_size), math.log(max_size)))
    shapes = [(ROWS * k * e, k, t, e) for k in COLS for t, e in ELTYPES]
    fitting = [s for s in shapes if s[0] <= max(target, ROWS)]
    best = max(s[0] for s in fitting)
    size, k, t, e = rng.choice([s for s in fitting if s[0] == best])
    return k, t, e


def write_file(path, data, rng, chunk=1 << 20):
    """Writes `data` to `path` directly or through a temporary name renamed into place."""
    via_tmp = rng.random() < 0.25
    # A temporary is a hidden name (the FilesDaf view refuses other names that are not item files).
    head, tail = os.path.split(path)
    target = os.path.join(head, "." + tail + ".tmp") if via_tmp else path
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        off = 0
        while off < len(data):
            off += os.write(fd, view[off : off + chunk])
    finally:
        os.close(fd)
    if via_tmp:
        os.rename(target, path)


def writer_main(dataset_dir, prefix, seed, min_size, max_size):
    out = sys.stdout

    def event(*words):
        out.write(" ".join(str(w) for w in words) + "\n")
        out.flush()

    for i in range(1_000_000):
        name = f"{prefix}_{i}"
        rng = random.Random(f"{seed}/{name}")
        k, eltype, esize = choose_shape(rng, min_size, max_size)
        data = payload(name, ROWS * k * esize, rng)
        sha = hashlib.sha256(data).hexdigest()
        directory = os.path.join(dataset_dir, "matrices", "crash_rows", f"crash_c{k}")
        base = os.path.join(directory, name)
        descriptor = json.dumps({"format": "dense", "eltype": eltype}) + "\n"
        event("BEGIN", name, k, eltype, len(data), sha)
        step = "write"
        try:
            files = [(base + ".data", data), (base + ".json", descriptor.encode())]
            if rng.random() < 0.5:
                files.reverse()
            for path, content in files:
                write_file(path, content, rng)
            event("CLOSED", name)
            step = "fsync"
            how = rng.choice(["descriptor", "payload", "directory"])
            target = {"descriptor": base + ".json", "payload": base + ".data"}.get(how, directory)
            fd = os.open(target, os.O_RDONLY)
            try:
                event("FSYNC", name)
                os.fsync(fd)
            finally:
                os.close(fd)
            event("ACK", name)
        except OSError as e:
            event("ERR", name, step, e.errno, json.dumps(str(e)))
            return 1
    return 0
