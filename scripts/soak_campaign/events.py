"""The writers' event log: one JSON object a line, appended with O_APPEND (one write per line),
read by the readers as it grows (to poke at what was just written, and to tell an expected
disappearance from an error) and by the checks after the run (what must be there).

Events, each with `key` (`place/name`) and `t` (time.monotonic(), comparable across processes):
  begin    {op, files}          a writer starts writing the property (its FilesDaf or Zarr files)
  closed   {sha, size, eltype, final, via, version}
                                every close of it returned 0: accepted, shown in both views
  ack      {sha, version}       and the fsync that followed returned 0: durable
  pending  {sha, size, eltype, via}
                                complete and consistent, but committed later (fixed by a
                                truncate(): the next fsync or the unmount commits it)
  refused  {errno, step}        a close refused it (EINVAL), as meant by the operation
  mutating / deleting           about to be rewritten / removed (its bytes may change / go)
  deleted                       its files are gone (a directory source)
  removed                       the staged files of a refused property were removed
  broken   {op}                 an operation on it had an unexpected outcome (a failure, already
                                reported): left alone, its state unknown
"""

import json
import os
import time


class EventLog:
    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def emit(self, ev, key, **fields):
        line = json.dumps(dict(ev=ev, key=key, t=time.monotonic(), **fields)) + "\n"
        os.write(self.fd, line.encode())


class Knowledge:
    """What the log says so far about each property (`refresh()` reads what was appended)."""

    def __init__(self, path):
        self.path, self.offset, self.rest = path, 0, b""
        self.props = {}
        self.new = []  # events since the last `take_new()`

    def refresh(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return
        self.offset += len(data)
        data = self.rest + data
        lines = data.split(b"\n")
        self.rest = lines.pop()
        for line in lines:
            e = json.loads(line)
            p = self.props.setdefault(e["key"], {"events": []})
            p["events"].append(e["ev"])
            p["t_" + e["ev"]] = e["t"]
            if e["ev"] in ("closed", "pending"):
                p.update(sha=e["sha"], size=e["size"], final=e.get("final", False),
                         via=e["via"], eltype=e["eltype"], version=e.get("version", 0))
                p["state"] = e["ev"]
                p["mutating"] = False
            elif e["ev"] == "ack":
                p["acked_sha"] = e["sha"]
            elif e["ev"] in ("mutating", "deleting", "deleted", "refused", "removed", "broken"):
                p[e["ev"]] = True
                if e["ev"] == "refused":
                    p["state"] = "refused"
            elif e["ev"] == "begin":
                p.setdefault("state", "begun")
            self.new.append(e)

    def take_new(self):
        new, self.new = self.new, []
        return new

    def closed(self, key):
        """Accepted (every close returned 0) and neither being changed nor removed."""
        p = self.props.get(key)
        return bool(p and p.get("state") == "closed" and not p.get("mutating")
                    and not p.get("deleting"))

    def stable_sha(self, key):
        """The sha256 its payload must have now, if it can no longer change (a final property:
        never rewritten, never removed)."""
        p = self.props.get(key)
        if p and p.get("state") == "closed" and p.get("final") and not p.get("broken"):
            return p["sha"]
        return None

    def describe(self, key):
        """Where the property stands, for a failure message: its events, the last how long ago."""
        p = self.props.get(key)
        if not p:
            return "no event logged yet"
        now = time.monotonic()
        steps = dict.fromkeys(p["events"])  # in order, once each
        return ", ".join(f"{ev} {now - p['t_' + ev]:.3f} s ago" for ev in steps)

    def may_vanish(self, key):
        p = self.props.get(key)
        return bool(p and (p.get("deleting") or p.get("mutating") or p.get("broken")))


def read_all(path):
    k = Knowledge(path)
    k.refresh()
    events = []
    with open(path, "rb") as f:
        for line in f:
            if line.endswith(b"\n"):
                events.append(json.loads(line))
    return k, events
