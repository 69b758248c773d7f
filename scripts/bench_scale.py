"""The scale data sets of scripts/bench (issue 12, point 3): a 1,000,000-entry ZarrDaf v2 ZIP and a 1,000,000-entry
ZarrDaf v3 ZIP, generated once and cached under the bench directory (DAF_BENCH_DIR, default /var/tmp/daf-bench):

  e1m.daf.zarr.zip      Zarr v2: 333,333 vectors `vectors/item/pN/{.zarray,.zattrs,0}` (bench.make_entries_zip)
  e1m-v3.daf.zarr.zip   Zarr v3: 500,000 vectors `vectors/item/pN/{zarr.json,c/0}` (one chunk per vector)
  e100k.daf.zarr.zip, e100000-v3.daf.zarr.zip: the same at 100,000 entries (`--entries 100000`)

Both have one axis `item` of 4 entries and every vector is 4 float32 (pN holds N four times). Written with Python's
zipfile, ZIP_STORED, no fsync per entry: a few seconds each.

    python scripts/bench_scale.py [--entries N] [--measure]   (alone: builds both, prints their paths; --measure
        mounts each with DAF_MOUNT_BIN and prints mount time, RssAnon after the mount and after `ls -lR`)
"""
import argparse
import json
import os
import struct
import sys
import zipfile

SCALE_ENTRIES = 1_000_000


def v2_path(bench, entries=SCALE_ENTRIES):
    """The v2 archive of about `entries` entries (3 per vector), built if missing."""
    if entries == 100_000:  # the bench's own 100k archive (33,300 vectors)
        name, vectors = "e100k.daf.zarr.zip", 33_300
    else:
        name = "e1m.daf.zarr.zip" if entries == SCALE_ENTRIES else f"e{entries}.daf.zarr.zip"
        vectors = entries // 3
    path = os.path.join(bench.WORK, name)
    bench.make_entries_zip(path, vectors)
    return path


def v3_array(dtype, shape, fill):
    """A Daf-written v3 array's zarr.json (keys in DAF's order: sorted), one chunk of the whole shape."""
    codec = {"configuration": {}, "name": "vlen-utf8"} if dtype == "string" else \
        {"configuration": {"endian": "little"}, "name": "bytes"}
    return json.dumps({"chunk_grid": {"configuration": {"chunk_shape": shape}, "name": "regular"},
                       "chunk_key_encoding": {"configuration": {"separator": "/"}, "name": "default"},
                       "codecs": [codec], "data_type": dtype, "fill_value": fill, "node_type": "array",
                       "shape": shape, "zarr_format": 3}, separators=(",", ":"))


GROUP_V3 = '{"node_type":"group","zarr_format":3}'


def make_entries_zip_v3(path, vectors):
    """A ZarrDaf v3 ZIP with 2 entries per small vector (`zarr.json` and `c/0`), all in `vectors/item`."""
    if os.path.exists(path):
        return
    with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_STORED) as z:
        z.writestr("zarr.json", '{"attributes":{"daf":[1,0]},"node_type":"group","zarr_format":3}')
        for g in ["scalars", "axes", "vectors", "matrices", "vectors/item", "matrices/item", "matrices/item/item"]:
            z.writestr(g + "/zarr.json", GROUP_V3)
        z.writestr("axes/item/zarr.json", v3_array("string", [4], ""))
        z.writestr("axes/item/c/0", struct.pack("<I", 4) + b"".join(struct.pack("<I", 1) + c for c in
                                                                    [b"a", b"b", b"c", b"d"]))
        body = v3_array("float32", [4], 0.0)
        for i in range(vectors):
            z.writestr(f"vectors/item/p{i}/zarr.json", body)
            z.writestr(f"vectors/item/p{i}/c/0", struct.pack("<4f", i + 1, i, i, i))
    os.rename(path + ".tmp", path)


def v3_path(bench, entries=SCALE_ENTRIES):
    """The v3 archive of about `entries` entries (2 per vector), built if missing."""
    name = "e1m-v3.daf.zarr.zip" if entries == SCALE_ENTRIES else f"e{entries}-v3.daf.zarr.zip"
    path = os.path.join(bench.WORK, name)
    bench.log("building", path) if not os.path.exists(path) else None
    make_entries_zip_v3(path, entries // 2)
    return path


def daemon_rss_mib(mount):
    """The daemon's own RssAnon in MiB: the largest of the mount's processes (a writable ZIP mount's
    tail-writer helper is a fork sharing the daemon's pages: summing would count them twice)."""
    best = 0
    for pid in mount.pids():
        try:
            with open(f"/proc/{pid}/status") as f:
                best = max([best] + [int(l.split()[1]) for l in f if l.startswith("RssAnon:")])
        except OSError:
            pass
    return best / 1024


def measure(bench, source, *options):
    """Mount `source`, and return mount seconds and the daemon's RssAnon (MiB) after the mount, after `ls -lR` of
    the mount (both views under --view both) and the seconds of that listing (slow in a debug build: minutes)."""
    import subprocess
    import time
    mount = bench.Mount(source, *options)
    try:
        out = {"mount_s": mount.seconds, "rss_mount_mib": daemon_rss_mib(mount)}
        start = time.perf_counter()
        subprocess.run(["ls", "-lR", mount.path], check=True, stdout=subprocess.DEVNULL)
        out["ls_lR_s"] = time.perf_counter() - start
        out["rss_ls_mib"] = daemon_rss_mib(mount)
        return out
    finally:
        mount.close()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench as _bench
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=SCALE_ENTRIES)
    parser.add_argument("--measure", action="store_true", help="mount each (DAF_MOUNT_BIN) and print its figures")
    args = parser.parse_args()
    os.makedirs(_bench.WORK, exist_ok=True)
    for path in (v2_path(_bench, args.entries), v3_path(_bench, args.entries)):
        print(path, json.dumps(measure(_bench, path)) if args.measure else "", flush=True)
