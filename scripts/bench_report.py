"""What scripts/bench prints and writes at the end: per-section durations, and each row with its reference, its
target and whether it is met. Used by scripts/bench.py (the whole bench) and by each row script run alone
(`bench.run_alone`).

A row is a dict: `figure`, `mounted` (daf-mount's figure), `native` (the reference: native, ceiling, peer, idle;
None if there is none), `unit`, `ratio` (throughput ratios are reference/mounted, time ratios mounted/reference),
`target`, and optionally `met` (decided by the row's script), `lower_bound` (the figure is a lower bound: a read or
a listing stopped before its end) and `section` (the bench section that measured it).
"""
import contextlib
import json
import os
import re
import sys
import time


def log(*args):
    print(*args, file=sys.stderr, flush=True)


class Sections:
    """Wall-clock seconds of each section of the bench (`with sections(name, rows):`); the rows a section adds
    are tagged with its name. Logged as they end, printed and written to the JSON at the end."""

    def __init__(self):
        self.began = time.perf_counter()
        self.done = []

    @contextlib.contextmanager
    def __call__(self, name, rows):
        log(f"== {name}")
        start, first = time.perf_counter(), len(rows)
        try:
            yield
        finally:
            seconds = time.perf_counter() - start
            for r in rows[first:]:
                r["section"] = name
            self.done.append({"section": name, "seconds": round(seconds, 1), "rows": len(rows) - first})
            log(f"== {name}: {seconds:.0f} s (bench so far {time.perf_counter() - self.began:.0f} s)")

    def total(self):
        return time.perf_counter() - self.began


def judge(r):
    """Whether row `r` meets its target: True, False, or None (no target, or a bound that does not decide it).
    A row may say it itself (`met`); otherwise its target (">= 0.9", "<= 1.5", "<= 256 + 64 MiB", ...) is
    compared with its ratio, or with its figure when it has no ratio. A row whose figure is a lower bound
    (`lower_bound`: a listing or read stopped before its end) decides only an upper limit it already passes."""
    if "met" in r:
        return r["met"]
    m = re.match(r"\s*(>=|<=|<|>)\s*([\d.]+)(?:\s*\+\s*([\d.]+))?", str(r.get("target", "")))
    value = r["ratio"] if r.get("ratio") is not None else r.get("mounted")
    if not m or value is None or value != value:
        return None
    op, limit = m[1], float(m[2]) + float(m[3] or 0)
    ok = {">=": value >= limit, "<=": value <= limit, ">": value > limit, "<": value < limit}[op]
    if r.get("lower_bound") and op in ("<=", "<") and ok:
        return None
    return ok


def met_text(r):
    return {True: "met", False: "NOT MET", None: "-"}[judge(r)]

def print_rows(rows):
    """The table: figure, daf-mount's figure, reference, ratio, target, met."""
    print(f"{'figure':<110} {'mounted':>10} {'reference':>10} {'ratio':>8}  {'target':<16} met")
    for r in rows:
        native = f"{r['native']:.4g}" if r.get("native") is not None else "-"
        bound = ">=" if r.get("lower_bound") else ""  # the figure says which side was stopped
        ratio = f"{bound}{r['ratio']:.3f}" if r.get("ratio") is not None else "-"
        mounted = f"{r['mounted']:.4g}" if r.get("mounted") is not None else "-"
        print(f"{r['figure']:<110} {mounted:>10} {native:>10} {ratio:>8}  {str(r['target']):<16} {met_text(r)}")


def print_sections(sections):
    print(f"{'section':<60} {'seconds':>8} {'rows':>5}")
    for s in sections.done:
        print(f"{s['section']:<60} {s['seconds']:>8.0f} {s['rows']:>5}")
    print(f"{'total':<60} {sections.total():>8.0f}")


def write_json(path, sections, rows, **extra):
    """Writes the rows (each with its verdict, `met`) and the sections' durations to `path`."""
    for r in rows:
        r["met"] = judge(r)
    with open(path, "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d %H:%M"), "machine": os.uname().nodename, "cpus": os.cpu_count(),
                   "load_average": os.getloadavg(), "total_seconds": round(sections.total(), 1),
                   "sections": sections.done, **extra, "rows": rows}, f, indent=2)
