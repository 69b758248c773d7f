"""The soak's checks outside the run: the baseline (every file of both views hashed through a
read-only mount before the run), and after it, through a fresh read-only mount, what the event
log says must be there (every acknowledged, accepted or pending property with its last bytes,
in both views), what must not (deleted properties, refused ones removed, and no file in the
written places that nobody accounts for), and the baseline unchanged."""

import hashlib
import json
import os

from crash_campaign.dircheck import beside, check_directory, strays
from crash_campaign.zipcheck import check_archive

from .model import DERIVED, DIR_KINDS, key_of

CHUNK = 1 << 20
UNSURE = ("left", "unfinished", "deleting", "broken")  # nothing to expect of these
GROUP_DOCS = ("/.zgroup", "/.zattrs", "/zarr.json")


def hash_file(path):
    h, total = hashlib.sha256(), 0
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            piece = os.read(fd, CHUNK)
            if not piece:
                break
            h.update(piece)
            total += len(piece)
    finally:
        os.close(fd)
    return total, h.hexdigest()


def read_file(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        parts = []
        while True:
            piece = os.read(fd, CHUNK)
            if not piece:
                return b"".join(parts)
            parts.append(piece)
    finally:
        os.close(fd)


def tree(root):
    """(files, dirs): the relative paths under `root`."""
    files, dirs = [], []
    for d, ds, fs in os.walk(root):
        rel = os.path.relpath(d, root)
        dirs.append(rel)
        files += [os.path.normpath(os.path.join(rel, f)) for f in fs]
    return sorted(files), sorted(dirs)


def baseline(views):
    """{'files': {view: {rel: [size, sha256]}}, 'dirs': {view: [rel]}} of both views, derived
    documents left out."""
    out = {"files": {}, "dirs": {}}
    for view, root in views.items():
        files, dirs = tree(root)
        out["files"][view] = {rel: list(hash_file(os.path.join(root, rel)))
                              for rel in files if rel not in DERIVED[view]}
        out["dirs"][view] = dirs
    return out


def expected_states(events):
    """{key: state} from the event log: `present` (accepted: closed, or pending, as last
    written, with its sha), `absent` (deleted, or refused and removed), `left` (refused and
    not removed: the writer was stopped), `unfinished` (begun only), `broken` (an operation on
    it failed: already reported)."""
    states = {}
    for e in events:
        s = states.setdefault(e["key"], {"state": "unfinished"})
        if e["ev"] in ("closed", "pending"):
            s.update(state="present", sha=e["sha"], size=e["size"], eltype=e["eltype"],
                     how=e["ev"])
        elif e["ev"] == "ack":
            s["acked"] = True
        elif e["ev"] in ("deleted", "removed"):
            s["state"] = "absent"
        elif e["ev"] == "refused":
            s["state"] = "left"
        elif e["ev"] == "deleting":
            s["state"] = "deleting"  # stays so if the writer was stopped in the middle
        elif e["ev"] == "broken":
            s["broken"] = True
    for s in states.values():
        if s.get("broken"):
            s["state"] = "broken"  # a failure already reported: nothing more to expect
    return states


def chunk_key(key, zarr_format):
    ndims = 1 if key.startswith("vectors/") else 2
    return ".".join(["0"] * ndims) if zarr_format == 2 else "c/" + "/".join(["0"] * ndims)


def check_after(views, zarr_format, base, states):
    """Through a read-only mount: returns {check name: (problems, figures)}."""
    out = {}
    files_root, zarr_root = views["files"], views["zarr"]
    # Every accepted property with its last bytes, in both views.
    problems, n, nbytes, acked = [], 0, 0, 0
    for key, s in sorted(states.items()):
        if s["state"] != "present":
            continue
        n += 1
        acked += bool(s.get("acked"))
        what = "acknowledged" if s.get("acked") else (
            "accepted (closed, no fsync yet)" if s["how"] == "closed" else "pending (truncated)")
        try:
            descriptor = json.loads(read_file(os.path.join(files_root, key + ".json")))
            total, sha = hash_file(os.path.join(files_root, key + ".data"))
            nbytes += total
            if sha != s["sha"] or descriptor.get("eltype") != s["eltype"]:
                problems.append(f"{what} {key}: FilesDaf view has {total} bytes sha256 "
                                f"{sha[:16]} {descriptor}, written {s['size']} bytes "
                                f"{s['sha'][:16]} {s['eltype']}")
            chunk = f"{key}/{chunk_key(key, zarr_format)}"
            total, sha = hash_file(os.path.join(zarr_root, chunk))
            nbytes += total
            if sha != s["sha"]:
                problems.append(f"{what} {key}: Zarr view {chunk} has {total} bytes sha256 "
                                f"{sha[:16]}, written {s['sha'][:16]}")
        except (OSError, ValueError) as e:
            problems.append(f"{what} {key}: {type(e).__name__}: {e}")
    out["every acknowledged/accepted property present with its bytes, both views"] = (
        problems, f"{n} properties ({acked} acknowledged, {n - acked} accepted without an "
                  f"fsync), {nbytes / 2**20:.1f} MiB read back")
    # Nothing else in the written places: deleted and removed properties gone, no temporaries.
    present = {k for k, s in states.items() if s["state"] == "present"}
    unsure = {k for k, s in states.items() if s["state"] in UNSURE}
    problems, seen = [], 0
    for view, root in views.items():
        files, _ = tree(root)
        for rel in files:
            if rel in base["files"][view] or rel in DERIVED[view]:
                continue
            key = key_of(view, rel)
            if key is None and view == "zarr" and rel.endswith(GROUP_DOCS):
                # a group document of a place: every place existed in the baseline
                problems.append(f"unexpected {view}:{rel} (not in the baseline)")
                continue
            seen += 1
            if key in present:
                ok = (rel in (key + ".json", key + ".data") if view == "files" else
                      rel.startswith(key + "/"))
                if ok:
                    continue
            if key in unsure:
                continue
            state = states.get(key, {}).get("state", "never written")
            problems.append(f"unexpected {view}:{rel} (its property: {state})")
    absent = sum(1 for s in states.values() if s["state"] == "absent")
    out["deleted and refused properties absent, no stray files"] = (
        problems, f"{absent} deleted or removed properties, {seen} written files listed")
    # The baseline unchanged.
    problems, n, nbytes = [], 0, 0
    for view, files in base["files"].items():
        for rel, (size, sha) in sorted(files.items()):
            try:
                got = hash_file(os.path.join(views[view], rel))
            except OSError as e:
                problems.append(f"{view}:{rel} (existed before): {e}")
                continue
            n += 1
            nbytes += got[0]
            if got != (size, sha):
                problems.append(f"{view}:{rel} changed: {got[0]} bytes {got[1][:16]}, "
                                f"was {size} bytes {sha[:16]}")
    out["files that existed before the run unchanged"] = (
        problems, f"{n} files, {nbytes / 2**20:.1f} MiB")
    return out


def check_source(kind, path):
    """Problems of the source itself: the strict archive check of the crash campaign for a ZIP,
    its directory check (no swap record, no temporary, a valid data set) for a directory."""
    if kind not in DIR_KINDS:
        problems, duplicates = check_archive(path)
        return problems + [f"duplicate names {duplicates[:5]}"] if duplicates else problems
    if kind == "zarrdir3":  # the crash campaign's check knows Zarr v2 only
        problems = beside(path) + strays(path, set())
        for d, _, fs in os.walk(path):
            for f in fs:
                if f == "zarr.json":
                    try:
                        json.loads(read_file(os.path.join(d, f)))
                    except ValueError as e:
                        problems.append(f"{os.path.relpath(d, path)}/zarr.json: {e}")
        return problems
    return check_directory(path)
