"""A reader process of the soak (niced): walks both views again and again (os.walk, then stat,
open, 1 MiB reads and SHA-256 of every file), and, if it is a *hot* reader, pokes at the files of
the properties the writers have just begun, closed or begun to delete (stat, open, read, in both
views, every few milliseconds for a while: the moment a commit is copying them).

What is an error:
- a file that existed before the run (the baseline, hashed through a read-only mount): any errno
  on stat/open/read, a short read, other bytes or size than before;
- a directory that existed before: any errno listing it;
- a derived document (`.zmetadata`, the v3 root `zarr.json`, a 1.1 `metadata.json`): any errno,
  or content that is not JSON;
- a just-written file: ENOENT on a path that was listed (or is a file of an accepted property)
  and that a fresh listing of its directory still shows, or that belongs to an accepted
  property nobody is deleting or rewriting (both views must show it once its close returned);
  any other errno (EIO, ENOTCONN, ...); a short read or other bytes than the writer's
  acknowledged ones for a property that can no longer change.
What is not: ENOENT on a temporary renamed into place, on files of a property being deleted, on
a path of a property not yet complete. Everything is counted by kind (class:op:errno)."""

import errno
import hashlib
import json
import os
import random
import signal
import sys
import time

from .events import Knowledge
from .model import DERIVED, key_of

CHUNK = 1 << 20
MAX_FAILURES = 100
GONE = ("ENOTCONN", "ECONNABORTED")  # the mount is gone (dead daemon, aborted connection)


class Stop(Exception):
    pass


class Reader:
    def __init__(self, cfg, index):
        self.cfg, self.index = cfg, index
        self.hot = index < cfg["hot_readers"]
        self.name = f"{'hot ' if self.hot else ''}reader {index}"
        self.rng = random.Random(f"{cfg['seed']}/reader{index}")
        self.roots = {"files": cfg["files_view"], "zarr": cfg["zarr_view"]}
        self.zf = cfg["zarr_format"]
        with open(cfg["baseline"]) as f:
            base = json.load(f)
        self.baseline, self.base_dirs = base["files"], {v: set(d) for v, d in base["dirs"].items()}
        self.k = Knowledge(cfg["events"])
        self.stopping = False
        self.hotset = {}  # key: poke until this time
        self.c = dict(walks=0, files_read=0, bytes_read=0, stats=0, listings=0, pokes=0,
                      originals_checked=0, original_bytes=0, written_checked=0, derived_read=0)
        self.errors, self.expected, self.failures, self.seen = {}, {}, [], {}

    # -- bookkeeping ------------------------------------------------------------------------------

    def fail(self, kind, what, where=None):
        """Counts every failure; keeps (and prints the first 2 of) one per kind and path."""
        self.errors[kind] = self.errors.get(kind, 0) + 1
        seen = (kind, where or what)
        if seen in self.seen:
            self.seen[seen]["times"] += 1
        elif len(self.failures) < MAX_FAILURES:
            f = dict(t=time.monotonic(), who=self.name, kind=kind, what=what, times=1)
            self.seen[seen] = f
            self.failures.append(f)
            if len(self.failures) <= 2 and not kind.endswith(GONE):
                print(f"  FAILURE {self.name}: {what}", file=sys.stderr, flush=True)
        if kind.endswith(GONE):
            raise Stop()  # the mount is gone: nothing more to learn here

    def fine(self, kind):
        self.expected[kind] = self.expected.get(kind, 0) + 1

    # -- one file -----------------------------------------------------------------------------

    def classify(self, view, rel):
        if rel in self.baseline[view]:
            return "original", None
        if rel in DERIVED[view]:
            return "derived", None
        key = key_of(view, rel)
        return ("written", key) if key else ("unknown", None)

    def files_of(self, key):
        """The files property `key` shows once accepted: (view, descriptor), (view, payload) in
        the FilesDaf view, then in the Zarr view."""
        ndims = 1 if key.startswith("vectors/") else 2
        chunk = ".".join(["0"] * ndims) if self.zf == 2 else "c/" + "/".join(["0"] * ndims)
        doc = ".zarray" if self.zf == 2 else "zarr.json"
        return [("files", key + ".json"), ("files", key + ".data"),
                ("zarr", f"{key}/{doc}"), ("zarr", f"{key}/{chunk}")]

    def required(self, view, rel, key):
        return (view, rel) in self.files_of(key)

    def is_payload(self, view, rel, key):
        return (view, rel) in self.files_of(key)[1::2]

    def check_file(self, view, rel, known):
        """stat, open, read 1 MiB at a time, hash; `known`: the path was listed or is a file of
        an accepted property (so ENOENT means something)."""
        cls, key = self.classify(view, rel)
        full = os.path.join(self.roots[view], rel)
        accepted, expect_sha = False, None
        if cls == "written":
            self.k.refresh()
            known = known or self.k.closed(key)
            accepted = self.k.closed(key)
            expect_sha = self.k.stable_sha(key) if self.is_payload(view, rel, key) else None
        op = "stat"
        try:
            os.stat(full)
            self.c["stats"] += 1
            op = "open"
            fd = os.open(full, os.O_RDONLY)
            try:
                op = "read"
                size = os.fstat(fd).st_size
                h, total = hashlib.sha256(), 0
                data = b""
                while True:
                    piece = os.read(fd, CHUNK)
                    if not piece:
                        break
                    h.update(piece)
                    total += len(piece)
                    if cls == "derived":
                        data += piece
            finally:
                os.close(fd)
        except OSError as e:
            self.error(view, rel, cls, key, op, e, known, accepted)
            return
        self.c["files_read"] += 1
        self.c["bytes_read"] += total
        sha = h.hexdigest()
        where = f"{view}:{rel}"
        if cls == "original":
            want_size, want_sha = self.baseline[view][rel]
            self.c["originals_checked"] += 1
            self.c["original_bytes"] += total
            if total != size:
                self.fail("original:short-read", f"short read of {where}: {total} of {size} bytes",
                          where)
            elif (total, sha) != (want_size, want_sha):
                self.fail("original:checksum", f"{where} changed: {total} bytes sha256 "
                          f"{sha[:16]}, was {want_size} bytes {want_sha[:16]}", where)
        elif cls == "derived":
            self.c["derived_read"] += 1
            try:
                json.loads(data)
            except ValueError as e:
                try:
                    now = os.stat(full).st_size
                except OSError:
                    now = "?"
                self.fail("derived:not-json", f"{where} is not JSON: read {total} bytes (its size "
                          f"at the open: {size}, now: {now}): {e}")
        elif cls == "written" and expect_sha is not None:
            self.c["written_checked"] += 1
            if total != size:
                self.fail("written:short-read", f"short read of {where}: {total} of {size} bytes"
                          f" ({self.k.describe(key)})", where)
            elif sha != expect_sha:
                self.k.refresh()
                if self.k.stable_sha(key) == expect_sha:
                    self.fail("written:checksum", f"{where}: sha256 {sha[:16]} ({total} bytes), "
                              f"the writer acknowledged {expect_sha[:16]} "
                              f"({self.k.describe(key)})", where)

    def error(self, view, rel, cls, key, op, e, known, accepted):
        name = errno.errorcode.get(e.errno, str(e.errno))
        kind = f"{cls}:{op}:{name}"
        where = f"{view}:{rel}"
        if cls != "written":
            what = "existed before the run" if cls == "original" else cls
            self.fail(kind, f"{op} of {where} ({what}): {name}", where)
            return
        self.k.refresh()
        if name not in ("ENOENT", "ESTALE"):
            self.fail(kind, f"{op} of just-written {where}: {name} (its property: "
                      f"{self.k.describe(key)})", where)
            return
        if not known:
            self.fine(f"{kind} (not there yet)")
            return
        parent = os.path.dirname(os.path.join(self.roots[view], rel))
        if os.path.basename(rel) in self.listing(parent):
            self.fail(kind + " (still listed)", f"{op} of {where}: {name}, and a fresh listing "
                      f"of its directory still shows it (its property: {self.k.describe(key)})",
                      where)
        elif accepted and self.required(view, rel, key) and not self.k.may_vanish(key):
            self.fail(kind + " (accepted property)", f"{op} of {where}: {name}, a file of "
                      "a property whose closes all returned 0, nobody deleting or rewriting it "
                      f"({self.k.describe(key)})", where)
        else:
            self.fine(f"{kind} (gone: renamed temporary, deleted, or refused)")

    def listing(self, directory):
        try:
            self.c["listings"] += 1
            return set(os.listdir(directory))
        except OSError:
            return set()

    # -- walks and pokes ---------------------------------------------------------------------------

    def walk_forever(self):
        """(view, rel) of every file of both views, in random order of views, forever."""
        while True:
            views = list(self.roots)
            self.rng.shuffle(views)
            for view in views:
                root = self.roots[view]

                def onerror(e, view=view, root=root):
                    rel = os.path.relpath(e.filename, root) if e.filename else "?"
                    name = errno.errorcode.get(e.errno, str(e.errno))
                    if rel in self.base_dirs[view] or rel == ".":
                        self.fail(f"original-dir:list:{name}", f"listing of {view}:{rel}/ "
                                  f"(existed before the run): {name}")
                    elif name in ("ENOENT", "ESTALE"):
                        self.fine(f"written-dir:list:{name} (gone)")
                    else:
                        self.fail(f"written-dir:list:{name}", f"listing of {view}:{rel}/: {name}")

                for d, dirs, files in os.walk(root, onerror=onerror):
                    self.c["listings"] += 1
                    self.rng.shuffle(files)
                    for f in files:
                        yield view, os.path.relpath(os.path.join(d, f), root)
            self.c["walks"] += 1

    def service_hot(self):
        self.k.refresh()
        now = time.monotonic()
        for e in self.k.take_new():
            if e["ev"] in ("begin", "closed", "deleting", "mutating", "pending"):
                self.hotset[e["key"]] = now + (1.0 if e["ev"] != "begin" else 3.0)
        for key, until in list(self.hotset.items()):
            if until < now or self.stopping:
                del self.hotset[key]
                continue
            self.c["pokes"] += 1
            for view, rel in self.files_of(key):
                self.check_file(view, rel, known=False)

    def run(self):
        walk = self.walk_forever()
        try:
            while not self.stopping:
                if self.hot:
                    self.service_hot()
                    if self.hotset:
                        time.sleep(0.002)
                view, rel = next(walk)
                self.check_file(view, rel, known=True)
        except Stop:
            pass

    def results(self):
        return dict(counts=self.c, errors=self.errors, expected=self.expected,
                    failures=self.failures, hot=self.hot)


def reader_main(cfg, index):
    os.nice(10)
    r = Reader(cfg, index)

    def stop(*_):
        r.stopping = True

    signal.signal(signal.SIGTERM, stop)
    r.run()
    with open(os.path.join(cfg["results"], f"reader-{index}.json"), "w") as f:
        json.dump(r.results(), f)
    return 0
