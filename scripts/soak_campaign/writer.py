"""A writer process of the soak: THREADS threads, each writing properties of its own through the
FilesDaf view (cp-like: descriptor and payload, closed, then `fsync` of the payload) or the Zarr
view (the node's directory, its `.zarray` + `.zattrs` or `zarr.json`, its one chunk, then
`fsync` of the node's directory), and logging each step to the event log (events.py).

`simple` mix: only that. `random` mix: also temporaries renamed into place (hidden names,
zarr-python's `*.partial`), a staged file renamed to another property's name, payloads rewritten
with O_TRUNC or cut with truncate()/ftruncate() before they complete, writes that must fail to
commit (a payload of the wrong length, an unknown element type, a Zarr shape that disagrees with
its axis: EINVAL at the close, then fixed or removed), a refused name (EPERM at create), touches
right after a close, and per source kind: in a ZIP, deletes, rewrites and truncations of
committed properties (refused, EPERM); in a directory, deletes (rm of both FilesDaf files, or of
the Zarr node), replacements (O_TRUNC rewrites) and a refused truncate() of committed ones.

Every operation has an expected outcome; anything else (an errno where none was due, a success
where a refusal was, a refusal of another errno) is a failure, reported with the step."""

import errno
import json
import os
import random
import shutil
import signal
import sys
import threading
import time

from crash_campaign.mounts import fsync_path

from .events import EventLog
from .model import ELTYPES, PLACES, Prop, sha256
from .verify import read_file

CHUNK = 1 << 20


class Unexpected(Exception):
    pass


def ename(e):
    return errno.errorcode.get(e.errno, str(e.errno)) if isinstance(e, OSError) else str(e)


def put(path, data, flags=os.O_CREAT | os.O_TRUNC, truncate_to=None):
    """Writes `data` to `path` (1 MiB writes) and closes it; `truncate_to` cuts it with
    ftruncate() before the close. Returns None, or the errno name the close gave."""
    fd = os.open(path, os.O_WRONLY | flags, 0o644)
    try:
        view = memoryview(data)
        off = 0
        while off < len(data):
            off += os.write(fd, view[off: off + CHUNK])
        if truncate_to is not None:
            os.ftruncate(fd, truncate_to)
    except BaseException:
        try:
            os.close(fd)
        except OSError:
            pass
        raise
    try:
        os.close(fd)
    except OSError as e:
        return ename(e)
    return None




def expect(what, got, want=None):
    """`got` (an errno name or None) must be `want` (None: success; a set: any of them)."""
    ok = got in want if isinstance(want, (set, frozenset)) else got == want
    if not ok:
        raise Unexpected(f"{what}: {got or 'success'} (expected {want or 'success'})")


def call(what, fn, *args, want=None):
    """Runs fn(*args); its errno (or None) must be `want`. Returns the errno name."""
    try:
        fn(*args)
        got = None
    except OSError as e:
        got = ename(e)
        if got in ("ENOTCONN", "EIO", "ECONNABORTED"):
            raise Unexpected(f"{what}: {got}") from e
    expect(what, got, want)
    return got


SIMPLE = [("create-files", 50), ("create-zarr", 50)]
RANDOM_COMMON = [
    ("create-files", 18), ("create-zarr", 14), ("create-files-temp", 8),
    ("create-zarr-partial", 5), ("create-renamed", 5), ("create-rewritten", 5),
    ("create-truncated", 5), ("create-touched", 4), ("fix-by-truncate", 3), ("bad-length", 5),
    ("bad-type", 4), ("bad-zarr-shape", 4), ("refused-name", 2),
]
RANDOM_ZIP = [("refused-delete", 3), ("refused-rewrite", 3), ("refused-truncate", 2)]
RANDOM_DIR = [("delete", 6), ("replace", 5), ("refused-truncate-committed", 2)]


class Writer:
    """One writer thread."""

    def __init__(self, cfg, ident, log, stop, results):
        self.cfg, self.ident, self.log, self.stop = cfg, ident, log, stop
        self.rng = random.Random(f"{cfg['seed']}/{ident}")
        self.files, self.zarr = cfg["files_view"], cfg["zarr_view"]
        self.zf = cfg["zarr_format"]
        self.is_dir = cfg["is_dir"]
        self.n = 0
        self.finals, self.volatiles = [], []  # acknowledged properties of this thread
        self.versions = {}  # key: the last replacement's number
        self.current = None  # the property the operation under way works on
        self.r = results
        mix = SIMPLE if cfg["mix"] == "simple" else (
            RANDOM_COMMON + (RANDOM_DIR if self.is_dir else RANDOM_ZIP))
        self.ops, self.weights = zip(*mix)

    # -- helpers --------------------------------------------------------------------------------

    def count(self, table, key, n=1):
        with self.r["lock"]:
            self.r[table][key] = self.r[table].get(key, 0) + n

    def new_prop(self):
        self.n += 1
        places = [p for p, _, _ in PLACES]
        place = self.rng.choices(places, weights=[w for _, _, w in PLACES])[0]
        eltype = self.rng.choice(list(ELTYPES))
        self.current = Prop(place, f"{self.ident}_{self.n}", eltype)
        return self.current

    def fpath(self, rel):
        return os.path.join(self.files, rel)

    def zpath(self, rel):
        return os.path.join(self.zarr, rel)

    def closed(self, p, data, via, version=0, final=None):
        """Every close returned 0: logged as accepted. In a directory source 40 % of new
        properties are volatile (later deleted or replaced), the others final."""
        if final is None:
            final = not self.is_dir or self.rng.random() < 0.6
        self.log.emit("closed", p.key, sha=sha256(data), size=len(data), eltype=p.eltype,
                      final=final, via=via, version=version)
        return final

    def acknowledge(self, p, data, via, final, version=0, new=True):
        """fsync of the payload (FilesDaf) or of the node's directory (Zarr); then ACK."""
        target = self.fpath(p.data_path()) if via == "files" else self.zpath(p.node())
        start = time.monotonic()
        call(f"fsync of {os.path.relpath(target, self.files if via == 'files' else self.zarr)}",
             fsync_path, target)
        took = time.monotonic() - start
        with self.r["lock"]:
            self.r["ack_seconds"].append(took)
            self.r["bytes_acked"] += len(data)
        self.log.emit("ack", p.key, sha=sha256(data), version=version)
        self.count("figures", "acknowledged")
        if new:
            (self.finals if final else self.volatiles).append(p)

    def write_files(self, p, data, order=None, data_kw=None, temp=False):
        """The descriptor and payload through the FilesDaf view; the payload's close (or the
        last close) must succeed."""
        files = [(p.json_path(), p.descriptor()), (p.data_path(), data)]
        if order == "data-first" or (order is None and self.rng.random() < 0.5):
            files.reverse()
        for rel, content in files:
            kw = data_kw if rel == p.data_path() and data_kw else {}
            if temp and self.rng.random() < 0.7:
                head, tail = os.path.split(rel)
                tmp = os.path.join(head, f".{tail}.tmp{self.rng.randrange(1 << 30)}")
                expect(f"close of {tmp}", put(self.fpath(tmp), content, **kw))
                call(f"rename of {tmp}", os.rename, self.fpath(tmp), self.fpath(rel))
            else:
                expect(f"close of {rel}", put(self.fpath(rel), content, **kw))

    def write_zarr(self, p, data, partial=False, doc=None):
        """The node through the Zarr view: directory, document(s) and chunk, in random order.
        Returns the errno names the closes gave (expected: none, unless `doc` is a bad one)."""
        node = self.zpath(p.node())
        chunk = p.chunk_key(self.zf)
        os.makedirs(os.path.join(node, os.path.dirname(chunk)), exist_ok=True)
        files = [(p.zarr_doc_name(self.zf), doc or p.zarr_doc(self.zf)), (chunk, data)]
        if self.zf == 2:
            files.insert(1, (".zattrs", b"{}"))
        if self.rng.random() < 0.4:
            files.reverse()
        got = []
        for name, content in files:
            path = os.path.join(node, name)
            if partial:
                tmp = f"{path}.{self.rng.randrange(1 << 60):x}.partial"
                err = put(tmp, content)
                if err is None:
                    call(f"rename of {p.node()}/{name}.partial", os.rename, tmp, path)
            else:
                err = put(path, content)
            got.append(err)
        return got

    # -- operations -------------------------------------------------------------------------------

    def op_create_files(self, temp=False, data_kw=None, data=None, p=None, order=None):
        p = p or self.new_prop()
        data = data or p.payload(self.cfg["seed"])
        self.log.emit("begin", p.key, op="create")
        self.write_files(p, data, temp=temp, data_kw=data_kw, order=order)
        final = self.closed(p, data, "files")
        self.acknowledge(p, data, "files", final)
        return "ok"

    def op_create_files_temp(self):
        return self.op_create_files(temp=True)

    def op_create_truncated(self):
        p = self.new_prop()
        data = p.payload(self.cfg["seed"])
        self.log.emit("begin", p.key, op="create-truncated")
        longer = data + self.rng.randbytes(self.rng.randint(1, 4096))
        if self.rng.random() < 0.5:  # ftruncate() before the close
            self.write_files(p, longer, order="data-first", data_kw={"truncate_to": len(data)})
            final = self.closed(p, data, "files")
            self.acknowledge(p, data, "files", final)
            return "ftruncate"
        expect(f"close of {p.data_path()}", put(self.fpath(p.data_path()), longer))
        call(f"truncate of {p.data_path()}", os.truncate, self.fpath(p.data_path()), len(data))
        expect(f"close of {p.json_path()}", put(self.fpath(p.json_path()), p.descriptor()))
        final = self.closed(p, data, "files")
        self.acknowledge(p, data, "files", final)
        return "truncate"

    def op_create_rewritten(self):
        """A payload written with other bytes (and length) first, rewritten with O_TRUNC."""
        p = self.new_prop()
        data = p.payload(self.cfg["seed"])
        self.log.emit("begin", p.key, op="create-rewritten")
        junk = self.rng.randbytes(self.rng.randint(1, max(2, len(data) // 2)))
        expect(f"close of {p.data_path()} (first bytes)", put(self.fpath(p.data_path()), junk))
        return self.op_create_files(p=p, data=data, order="data-first")

    def op_create_renamed(self):
        """The payload written under another (visible) property name, staged alone, renamed."""
        p = self.new_prop()
        data = p.payload(self.cfg["seed"])
        other = f"{p.place}/{p.name}_pre.data"
        self.log.emit("begin", p.key, op="create-renamed")
        expect(f"close of {other}", put(self.fpath(other), data))
        call(f"rename of {other}", os.rename, self.fpath(other), self.fpath(p.data_path()))
        expect(f"close of {p.json_path()}", put(self.fpath(p.json_path()), p.descriptor()))
        final = self.closed(p, data, "files")
        self.acknowledge(p, data, "files", final)
        return "ok"

    def op_create_touched(self):
        """utime() of both files right after the close that completes the property (while a
        ZIP source commits it): allowed on staged and directory files, EPERM on a committed
        ZIP property."""
        p = self.new_prop()
        data = p.payload(self.cfg["seed"])
        self.log.emit("begin", p.key, op="create-touched")
        self.write_files(p, data)
        want = None if self.is_dir else {None, "EPERM"}
        got = [call(f"utime of {rel}", os.utime, self.fpath(rel), want=want)
               for rel in (p.data_path(), p.json_path())]
        final = self.closed(p, data, "files")
        self.acknowledge(p, data, "files", final)
        return "touched: " + ",".join(g or "ok" for g in got)

    def op_create_zarr(self, partial=False):
        p = self.new_prop()
        data = p.payload(self.cfg["seed"])
        self.log.emit("begin", p.key, op="create-zarr")
        for got in self.write_zarr(p, data, partial=partial):
            expect(f"close in {p.node()}", got)
        final = self.closed(p, data, "zarr")
        self.acknowledge(p, data, "zarr", final)
        return "ok"

    def op_create_zarr_partial(self):
        return self.op_create_zarr(partial=True)

    def op_fix_by_truncate(self):
        """Descriptor, then a payload too long (EINVAL at its close), then truncate() to the
        right length: complete, committed at once or by the next fsync/unmount."""
        p = self.new_prop()
        data = p.payload(self.cfg["seed"])
        self.log.emit("begin", p.key, op="fix-by-truncate")
        expect(f"close of {p.json_path()}", put(self.fpath(p.json_path()), p.descriptor()))
        expect(f"close of {p.data_path()} (too long)",
               put(self.fpath(p.data_path()), data + b"\x07" * 8), "EINVAL")
        self.log.emit("refused", p.key, errno="EINVAL", step="close")
        call(f"truncate of {p.data_path()}", os.truncate, self.fpath(p.data_path()), len(data))
        self.log.emit("pending", p.key, sha=sha256(data), size=len(data), eltype=p.eltype,
                      via="files")
        at_once = os.path.exists(self.zpath(p.zarr_required(self.zf)[1]))
        self.count("figures", "fixed by truncate: committed at once" if at_once else
                   "fixed by truncate: left for the unmount")
        return "refused EINVAL, then truncated"

    def op_bad_length(self):
        p = self.new_prop()
        data = p.payload(self.cfg["seed"])
        self.log.emit("begin", p.key, op="bad-length")
        expect(f"close of {p.json_path()}", put(self.fpath(p.json_path()), p.descriptor()))
        wrong = data[: -1] if len(data) > 1 and self.rng.random() < 0.5 else data + b"\x05"
        expect(f"close of {p.data_path()} (wrong length)", put(self.fpath(p.data_path()), wrong),
               "EINVAL")
        self.log.emit("refused", p.key, errno="EINVAL", step="close")
        if self.rng.random() < 0.5:  # fixed: rewritten with the right length
            expect(f"close of {p.data_path()} (fixed)", put(self.fpath(p.data_path()), data))
            final = self.closed(p, data, "files")
            self.acknowledge(p, data, "files", final)
            return "refused EINVAL, fixed"
        self.remove_files(p, "staged")
        return "refused EINVAL, removed"

    def op_bad_type(self):
        p = self.new_prop()
        self.log.emit("begin", p.key, op="bad-type")
        data = p.payload(self.cfg["seed"])
        bad = p.descriptor(self.rng.choice(["Float128", "UInt9", "Quaternion"]))
        got = [put(self.fpath(p.json_path()), bad), put(self.fpath(p.data_path()), data)]
        if set(got) - {None, "EINVAL"} or "EINVAL" not in got:
            raise Unexpected(f"closes of {p.key} with an unknown element type: {got} "
                             "(expected EINVAL)")
        self.log.emit("refused", p.key, errno="EINVAL", step="close")
        self.remove_files(p, "staged")
        return "refused EINVAL, removed"

    def op_bad_zarr_shape(self):
        p = self.new_prop()
        data = p.payload(self.cfg["seed"])
        shape = p.zarr_shape()
        shape[0] += 1
        self.log.emit("begin", p.key, op="bad-zarr-shape")
        # A chunk that fits the declared shape, which does not fit the axes.
        data = self.rng.randbytes(len(data) // p.zarr_shape()[0] * shape[0])
        got = self.write_zarr(p, data, doc=p.zarr_doc(self.zf, shape))
        if set(got) - {None, "EINVAL"} or "EINVAL" not in got:
            raise Unexpected(f"closes in {p.node()} with shape {shape}: {got} (expected EINVAL)")
        self.log.emit("refused", p.key, errno="EINVAL", step="close")
        call(f"fsync of {p.node()}/ (refused)", fsync_path, self.zpath(p.node()), want="EINVAL")
        call(f"rm -r {p.node()}", shutil.rmtree, self.zpath(p.node()))
        self.log.emit("removed", p.key)
        return "refused EINVAL, fsync EINVAL, removed"

    def op_refused_name(self):
        p = self.new_prop()
        rel = f"{p.place}/{p.name}.csv"
        call(f"create of {rel}", put, self.fpath(rel), b"1,2\n", want="EPERM")
        return "refused EPERM"

    def nothing_yet(self):
        self.op_create_files()
        return "no committed property to do it to yet: created one"

    def pick(self, pool):
        self.current = self.rng.choice(pool) if pool else None
        return self.current

    def op_refused_delete(self):
        p = self.pick(self.finals)
        if p is None:
            return self.nothing_yet()
        call(f"rm of committed {p.data_path()}", os.unlink, self.fpath(p.data_path()), want="EPERM")
        return "refused EPERM"

    def op_refused_rewrite(self):
        p = self.pick(self.finals)
        if p is None:
            return self.nothing_yet()
        call(f"O_TRUNC open of committed {p.data_path()}", put, self.fpath(p.data_path()), b"x",
             want="EPERM")
        return "refused EPERM"

    def op_refused_truncate(self):
        p = self.pick(self.finals)
        if p is None:
            return self.nothing_yet()
        call(f"truncate of committed {p.data_path()}", os.truncate, self.fpath(p.data_path()),
             0, want="EPERM")
        return "refused EPERM"

    def op_refused_truncate_committed(self):
        """truncate() of a committed payload to a wrong length: refused (EINVAL), and the refused
        replacement stays staged, shown in place of the committed bytes (as after a refused
        close), with a size that agrees with what a read gives; then restored by rewriting the
        property's bytes (a replacement with the same content)."""
        p = self.pick(self.volatiles)
        if p is None:
            return self.nothing_yet()
        path = self.fpath(p.data_path())
        self.log.emit("mutating", p.key)
        call(f"truncate of committed {p.data_path()} to a wrong length", os.truncate, path,
             p.size - 1, want="EINVAL")
        size, got = os.stat(path).st_size, len(read_file(path))
        if size != got:
            raise Unexpected(f"after the refused truncate of {p.data_path()}: stat says {size} "
                             f"bytes, a read gives {got}")
        version = self.versions.get(p.key, 0)
        data = p.payload(self.cfg["seed"], version)
        expect(f"close of {p.data_path()} (restored)", put(path, data))
        self.closed(p, data, "files", version=version, final=False)
        self.acknowledge(p, data, "files", False, version=version, new=False)
        return f"refused EINVAL, staged {got} bytes, restored"

    def op_delete(self):
        p = self.pick(self.volatiles)
        if p is None:
            return self.nothing_yet()
        self.volatiles.remove(p)
        self.log.emit("deleting", p.key)
        if self.rng.random() < 0.6:
            self.remove_files(p, "committed")
            how = "rm of both files"
        else:
            call(f"rm -r {p.node()}", shutil.rmtree, self.zpath(p.node()))
            how = "rm -r of the Zarr node"
        self.log.emit("deleted", p.key)
        for rel in (p.data_path(), p.json_path()):
            if os.path.exists(self.fpath(rel)):
                raise Unexpected(f"{rel} still there after the delete ({how})")
        return how

    def op_replace(self):
        p = self.pick(self.volatiles)
        if p is None:
            return self.nothing_yet()
        version = self.versions.get(p.key, 0) + 1
        self.versions[p.key] = version
        data = p.payload(self.cfg["seed"], version)
        self.log.emit("mutating", p.key)
        if self.rng.random() < 0.5:
            rel = p.data_path()
            expect(f"close of {rel} (replacement)", put(self.fpath(rel), data))
            via = "files"
        else:
            rel = p.zarr_required(self.zf)[1]
            expect(f"close of {rel} (replacement)", put(self.zpath(rel), data))
            via = "zarr"
        self.closed(p, data, via, version=version, final=False)
        self.acknowledge(p, data, via, False, version=version, new=False)
        return f"rewrite of the {'payload' if via == 'files' else 'chunk'}"

    def remove_files(self, p, what):
        files = [p.json_path(), p.data_path()]
        self.rng.shuffle(files)
        for rel in files:
            call(f"rm of {what} {rel}", os.unlink, self.fpath(rel))
        if what == "staged":
            self.log.emit("removed", p.key)

    # -- loop -----------------------------------------------------------------------------------

    def run(self):
        while not self.stop.is_set():
            op = self.rng.choices(self.ops, weights=self.weights)[0]
            self.current = None
            try:
                outcome = getattr(self, "op_" + op.replace("-", "_"))()
                self.count("ops", op)
                self.count("outcomes", f"{op}: {outcome}")
            except (Unexpected, OSError) as e:
                text = f"{e}" if isinstance(e, Unexpected) else f"{ename(e)}: {e}"
                self.count("ops", op)
                self.count("outcomes", f"{op}: UNEXPECTED")
                if self.current is not None:  # left alone from now on, checked no further
                    self.log.emit("broken", self.current.key, op=op)
                    for pool in (self.finals, self.volatiles):
                        if self.current in pool:
                            pool.remove(self.current)
                with self.r["lock"]:
                    self.r["failures"].append(dict(t=time.monotonic(), who=self.ident,
                                                   what=f"{op}: {text}"))
                    shown = len(self.r["failures"]) <= 3 and "ENOTCONN" not in text \
                        and "ECONNABORTED" not in text
                if shown:
                    print(f"  FAILURE writer {self.ident}: {op}: {text}", file=sys.stderr,
                          flush=True)
                if any(s in text for s in ("ENOTCONN", "ECONNABORTED")):
                    self.stop.set()  # the mount is gone
                    return
            self.stop.wait(self.rng.uniform(0, 2 * self.cfg["pace"]))


def writer_main(cfg, index):
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    log = EventLog(cfg["events"])
    results = dict(lock=threading.Lock(), ops={}, outcomes={}, figures={}, failures=[],
                   ack_seconds=[], bytes_acked=0)
    threads = [threading.Thread(target=Writer(cfg, f"w{index}t{t}", log, stop, results).run)
               for t in range(cfg["threads"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.pop("lock")
    with open(os.path.join(cfg["results"], f"writer-{index}.json"), "w") as f:
        json.dump(results, f)
    return 0
