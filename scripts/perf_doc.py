#!/usr/bin/env python3
"""Writes the generated part of doc/performance.md and the plot doc/performance.svg from the JSON that
`scripts/bench` writes (bench-results.json, see scripts/bench_report.py for its shape).

    scripts/perf_doc.py [bench-results.json] [--doc doc/performance.md] [--svg doc/performance.svg]
    scripts/perf_doc.py --self-test

The generated part is what lies between the line starting with `<!-- BEGIN GENERATED` and the line
`<!-- END GENERATED -->` in doc/performance.md; everything outside those markers is written by hand and
kept as it is. The part holds the run's date and duration, one table per bench section (row, measured,
reference, ratio, target, met, what bounds it) and the time each section took. What bounds each row is
the text of the first entry of BOUNDS whose pattern matches "SECTION | FIGURE"; its links point at the
hand-written sections of doc/performance.md (the self-test checks that they exist).

The plot is a hand-made SVG (Python standard library only): each row's ratio on a log scale with its
target marked, and below it the rows that have an absolute limit (ms, MiB, s), as measured / limit.
"""
import argparse
import json
import math
import os
import re
import sys
import tempfile
from xml.sax.saxutils import escape

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from md_anchors import anchors  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN = "<!-- BEGIN GENERATED"
END = "<!-- END GENERATED -->"

# What bounds each row: (pattern searched in "SECTION | FIGURE", case-insensitive; text). First match wins.
ZIP = "[Why](#what-bounds-the-zip-rows)"
LISTING = "[Why](#what-bounds-the-zarr-views-listing)"
COMMITS = "[Why](#what-bounds-reads-during-commits)"
LARGE = "[Why](#commits-into-a-large-data-set)"
BOUNDS = [
    (r"not measured|not built|not packaged", "The tool or example was not available in this run."),
    # directory source
    (r"seq read 1 GiB, FilesDaf view of a directory|4 KiB random reads, second pass",
     "Passthrough: the kernel reads the source file itself, so the page cache bounds both sides."),
    (r"over 10,000 properties",
     "FUSE round trips of the first listing (two requests per directory); names and attributes are then "
     "cached for an hour."),
    # ZIP source
    (r"ZIP source vs FUSE ceiling: first read",
     "daf-mount's page filler against plain readahead, both through the FUSE page cache. "
     "[Why](#the-fuse-ceiling-rows)"),
    (r"ZIP source vs FUSE ceiling",
     "Served by the kernel's page cache alone (daf-mount does no work); swings with where the pages land "
     "in memory. [Why](#the-fuse-ceiling-rows)"),
    (r"ZIP source, first read",
     "The FUSE page cache holds 4 KiB pages where ext4 holds large folios, and the first read also "
     f"allocates and fills them. {ZIP}"),
    (r"ZIP source, second read|four concurrent readers of the ZIP payload",
     f"Copying out of the FUSE page cache's 4 KiB pages: about 0.5 of a native large-folio read. {ZIP}"),
    (r"zarr-python 3 reads the whole matrix",
     "Passthrough of the chunk file: zarr-python's own work bounds both sides."),
    (r"cp of a 1 GiB payload into the FilesDaf view of a ZIP source, until close",
     "Passthrough writes of the staged file at disk speed, then the property's validation; the append "
     "runs after the close."),
    (r"until durable in the archive",
     "The append: the kernel's copy into the archive, its CRC-32 read back, `fsync`, central directory."),
    (r"anonymous memory \(RssAnon\) of the daemon",
     "The inode tree, synthesised metadata and small source files: payloads are maps, not buffers."),
    (r"mount until usable, remote data set",
     "One GET of the consolidated metadata, one ranged GET (the `Range` check), and what every mount reads "
     "(scalars, axis entries)."),
    (r"mount until usable, [\d,]+ entries",
     "Reading the source's metadata, then building the inode tree of both views. "
     "[Why](#what-bounds-the-mount-time)"),
    # H5df sources
    (r"view of an H5df vs of a FilesDaf directory",
     "An HDF5 dataset starts inside its file, so it cannot use passthrough: the FUSE page cache's 4 KiB "
     "pages against the directory's passthrough to large folios. [Why](#what-bounds-the-h5df-rows)"),
    (r"H5df vs the FUSE ceiling", "daf-mount against the smallest FUSE server of the same range (1: nothing added)."),
    (r"FUSE ceiling on the H5df",
     "For information: the most any FUSE filesystem reaches here, the bound of the 0.9 target. "
     "[Why](#what-bounds-the-h5df-rows)"),
    (r"RssAnon\) of an H5df daemon", "The inode tree and the HDF5 metadata: payloads are ranges of one map."),
    (r"mount until usable, H5df", "libhdf5 opening every dataset's object header (address, shape, type)."),
    # the H5df file of --h5df
    (r"first stat of NAME\.h5df",
     "libhdf5 creating every group and dataset of the file in its temporary file (the structure only)."),
    (r"cp of NAME\.h5df",
     f"The read half of `cp`: the FUSE page cache's 4 KiB pages against the native file's large folios. {ZIP}"),
    (r"first cp \(cold page cache of the mount",
     "For information: the first `cp` fills the mount's page cache from the source's map."),
    (r"RssAnon\) of a --h5df daemon",
     "The inode tree and the file's segments: its structure is a map of the temporary file, its payloads "
     "ranges of the source's map."),
    # the h5ad file of --h5ad
    (r"NAME\.h5ad vs cp of the same bytes from the FUSE ceiling",
     "daf-mount against the smallest FUSE server of the same bytes (1: nothing added)."),
    (r"cp of NAME\.h5ad|read_h5ad\(backed",
     "Copying out of the FUSE page cache's 4 KiB pages against the native file's large folios. "
     "[Why](#what-bounds-the-h5ad-and-h5df-files)"),
    (r"RssAnon peak while the h5ad",
     "The inode tree and the file's segments; the payloads are ranges of the source's map."),
    # peers
    (r"peers: .*/FUSE ceiling",
     "For information: the most any FUSE filesystem reaches against that peer, the bound of the 3 × target. "
     "[Why](#what-bounds-the-first-read-against-the-peers)"),
    (r"peers: (first read|re-read).*best peer",
     "Bounded by the kernel: compare the best peer over the FUSE ceiling, the next row. "
     "[Why](#what-bounds-the-first-read-against-the-peers)"),
    (r"peers: ls -lR.*Zarr view", f"Two FUSE requests per directory, one directory per array. {LISTING}"),
    (r"peers: .*RssAnon", "The inode tree and the model. [Why](#what-bounds-the-memory-at-scale)"),
    (r"peers: ", "The same FUSE kernel path as the peers; what differs is each daemon's own work."),
    # decode cache
    (r"decode: ",
     "The decode cache (`-o decode_cache`, 256 MiB by default) plus the chunks being decoded; freed blocks "
     "of 2 MiB or more go back to the kernel."),
    # reads during commits
    (r"native control|FUSE floor",
     f"Control: the same probes natively, or through a minimal passthrough FUSE filesystem. {COMMITS}"),
    (r"during it, ", "For information: what the machine did during the commit."),
    (r"open\+read of small files",
     f"A FUSE `open` waits for a daemon thread on 2 cores kept busy by the writer and writeback; compare "
     f"the FUSE floor rows. {COMMITS}"),
    (r"4 KiB random reads of another", "Served from the page cache; the commit barely touches it."),
    (r"sequential read of another 1 GiB property",
     f"The CPU shared with the writer's copy (and, for a ZIP, the append's copy at the lowest priority). "
     f"{COMMITS}"),
    # published ZIP
    (r"first cp \(CRC-32s computed",
     "For information: the first `cp` also computes each entry's CRC-32 and fills the page cache."),
    (r"published ZIP",
     f"The read half of `cp`: the FUSE page cache's 4 KiB pages against the native file's large folios. {ZIP}"),
    # packed
    (r"peak RssAnon while reading the packed matrix", "At most 8 decoded inner chunks (16 MiB) per array."),
    (r"packed .*matrix",
     "Decoding the zstd inner chunks in Rust as the kernel's reads arrive, against zarr-python decoding them "
     "one by one in Python."),
    # HTTP
    (r"CPU-seconds of that first read",
     "Receiving like `curl` plus delivering like a ZIP mount: the kernel's two copies and ureq's. "
     "[Why](#what-bounds-the-remote-first-read)"),
    (r"page cache taken by that first read|the same with a disk cache",
     "Each byte once, in the FUSE page cache: the blocks a reader passed leave the memory cache, the block "
     "files leave the page cache. [Why](#remote-bytes-in-the-page-cache-and-the-re-read)"),
    (r"as a local ZIP member",
     "Both are the kernel's reads of 4 KiB pages from the FUSE page cache, with no request to the daemon; "
     "they differ by where the pages lie. [Why](#remote-bytes-in-the-page-cache-and-the-re-read)"),
    (r"over an emulated link",
     "The link (20 ms a request, 100 MB/s a connection): the mount reads ahead in concurrent 4 MiB "
     "range requests and fetches a walker's next small files concurrently. "
     "[Why](#the-emulated-links-rows)"),
    (r"through a mount of the URL",
     "CPU on 2 cores: the kernel copies each byte out of the socket, into the page cache and out to the "
     "reader; the smallest FUSE server doing only that is no faster, and one splicing the bodies into "
     "`/dev/fuse` has a median of about 0.55. [Why](#what-bounds-the-remote-first-read)"),
    (r"smallest FUSE server fed by that URL|vs that smallest FUSE server",
     "The least a FUSE daemon can do with these copies: a ranged GET per read of the kernel, the body "
     "received into a buffer and replied from it. [Why](#what-bounds-the-remote-first-read)"),
    (r"splicing each body",
     "One copy fewer: the kernel moves the body from the socket through a pipe into the reply, and copies it "
     "only into the page cache. [Why](#what-bounds-the-remote-first-read)"),
    (r"re-read of it through the same mount", f"The FUSE page cache's 4 KiB pages, as for ZIP members. {ZIP}"),
    # scale
    (r"worst stall of a concurrent reader",
     f"The reader waiting for a CPU on 2 cores while the commit and its append run; the state lock is held "
     f"for milliseconds. {LARGE}"),
    (r"create \+ write \+ close of",
     f"A commit edits the tree and the consolidated document instead of rebuilding them. {LARGE}"),
    (r"vs the FUSE tree ceiling",
     f"For information: daf-mount against the smallest FUSE server of the same tree (1: nothing added). "
     f"{LISTING}"),
    (r"FUSE tree ceiling vs native",
     f"For information: the most any FUSE filesystem reaches on this listing, the bound of the 1.5 target. "
     f"{LISTING}"),
    (r"ls -lR of the view, Zarr view",
     f"Two FUSE requests per directory and one directory per array (two in v3): see the tree-ceiling rows. "
     f"{LISTING}"),
    (r"ls -lR of the view, FilesDaf view",
     "FUSE round trips, and an inode and a dentry made for each entry, which a cached native tree does not "
     "pay."),
    (r"ls -l of ", "One readdirplus page per reply; the kernel makes an inode and a dentry for each entry."),
    (r"lookup \+ read of one small file", "One lookup, open and read round trip each."),
    (r"RssAnon after mounting",
     "The inode tree (24 bytes a node, half of them inside Zarr arrays' directories), the properties and the "
     "ZIP member blobs. [Why](#what-bounds-the-memory-at-scale)"),
    (r"mount of the .* until usable",
     "The archive's index and the data set (both cores), then the tree's build on one thread. "
     "[Why](#what-bounds-the-mount-time)"),
]

GREEN, RED, GREY, INK = "#2a9d3f", "#d62828", "#8a8a8a", "#222222"


def finite(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def parse_target(target):
    """(operator, limit) of a target such as ">= 0.9", "<= 256 + 64 MiB", "<= 5 ms"; None if it has none."""
    m = re.match(r"\s*(>=|<=|<|>)\s*([\d.]+)(?:\s*\+\s*([\d.]+))?", str(target or ""))
    if not m:
        return None
    try:
        return m[1], float(m[2]) + float(m[3] or 0)
    except ValueError:
        return None


def verdict(row):
    """True, False or None: the row's own `met` (bench_report.write_json sets it), else its target decides."""
    if "met" in row:
        return row["met"]
    target = parse_target(row.get("target"))
    value = row.get("ratio") if row.get("ratio") is not None else row.get("mounted")
    if target is None or not finite(value):
        return None
    op, limit = target
    ok = {">=": value >= limit, "<=": value <= limit, ">": value > limit, "<": value < limit}[op]
    return None if row.get("lower_bound") and op in ("<=", "<") and ok else ok


def bound_text(row):
    key = f"{row.get('section', '')} | {row.get('figure', '')}"
    for pattern, text in BOUNDS:
        if re.search(pattern, key, re.IGNORECASE):
            return text
    return ""


def cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def number(value, unit=""):
    if not finite(value):
        return "–"
    text = f"{value:.4g}" if abs(value) < 1e5 else f"{value:,.0f}"
    return f"{text} {unit}" if unit and unit != "-" else text


def target_text(target):
    text = str(target if target not in (None, "", "-") else "–")
    return text.replace(">=", "≥").replace("<=", "≤")


def met_text(row):
    return {True: "met", False: "**not met**", None: "–"}[verdict(row)]


def ratio_text(row):
    if not finite(row.get("ratio")):
        return "–"
    return ("≥ " if row.get("lower_bound") else "") + f"{row['ratio']:.3g}"


def grouped(results):
    """The rows by section, in the sections' order (rows of no known section last)."""
    order = [s["section"] for s in results.get("sections", [])]
    groups = {name: [] for name in order}
    for row in results.get("rows", []):
        groups.setdefault(row.get("section") or "other rows", []).append(row)
    return [(name, rows) for name, rows in groups.items() if rows]


def render_block(results, svg_name="performance.svg"):
    """The generated part of doc/performance.md (without the marker lines)."""
    rows = results.get("rows", [])
    verdicts = [verdict(r) for r in rows]
    total = results.get("total_seconds")
    load = results.get("load_average") or []
    lines = []
    when = f"Last run of `scripts/bench`: {results.get('date', 'date unknown')}"
    if results.get("cpus"):
        when += f", {results['cpus']} CPUs"
    if load:
        when += ", load average " + " / ".join(f"{x:.2f}" for x in load) + " at its end"
    if finite(total):
        when += f"; {total:.0f} s in all ({total / 60:.1f} min; target ≤ 15 min: " + \
                ("met" if total <= 900 else "**not met**") + ")"
    lines.append(when + ".")
    if results.get("sections_filter"):
        lines.append(f"**A partial run**: only the sections matching `{results['sections_filter']}` "
                     "(`scripts/bench --sections`); the rows of the other sections are not in this table.")
    lines.append(f"{len(rows)} rows: {verdicts.count(True)} met, {verdicts.count(False)} not met, "
                 f"{verdicts.count(None)} for information or undecided. Generated by `scripts/perf_doc.py`; "
                 "see [Reading the table](#reading-the-table).")
    lines.append("")
    lines.append(f"![Each row's ratio on a log scale, with its target marked]({svg_name})")
    for name, group in grouped(results):
        lines += ["", f"### {name}", "",
                  "| row | measured | reference | ratio | target | met | what bounds it |",
                  "|---|---|---|---|---|---|---|"]
        for r in group:
            unit = r.get("unit", "")
            lines.append("| " + " | ".join(cell(x) for x in (
                r.get("figure", "?"), number(r.get("mounted"), unit), number(r.get("native"), unit),
                ratio_text(r), target_text(r.get("target")), met_text(r), bound_text(r))) + " |")
    if results.get("sections"):
        lines += ["", "### Time per section", "", "| section | seconds | rows |", "|---|---|---|"]
        for s in results["sections"]:
            lines.append(f"| {cell(s.get('section', '?'))} | {number(s.get('seconds'))} | {s.get('rows', '–')} |")
        if finite(total):
            lines.append(f"| total | {total:.0f} | {len(rows)} |")
    return "\n".join(lines) + "\n"


def splice(document, block):
    """`document` with the lines between its markers replaced by `block`; ValueError without the markers."""
    lines = document.splitlines(keepends=True)
    begin = next((i for i, line in enumerate(lines) if line.startswith(BEGIN)), None)
    end = next((i for i, line in enumerate(lines) if line.strip() == END and begin is not None and i > begin), None)
    if begin is None or end is None:
        raise ValueError(f"no '{BEGIN} ...' and '{END}' lines")
    return "".join(lines[:begin + 1]) + block + "".join(lines[end:])


def plotted(results):
    """(ratio rows, limit rows): each (label, value, target value or None, operator or None, verdict, lower)."""
    ratios, limits = [], []
    for r in results.get("rows", []):
        target = parse_target(r.get("target"))
        label = r.get("figure", "?")
        if finite(r.get("ratio")) and r["ratio"] > 0:
            ratios.append((label, r["ratio"], target[1] if target else None, target[0] if target else None,
                           verdict(r), bool(r.get("lower_bound"))))
        elif finite(r.get("mounted")) and r["mounted"] > 0 and target and target[1] > 0:
            limits.append((label, r["mounted"] / target[1], 1.0, target[0], verdict(r),
                           bool(r.get("lower_bound"))))
    return ratios, limits


def ticks(lo, hi):
    """Tick values for a log axis from lo to hi (decades, and 2 and 5 when it spans few decades)."""
    out, decade = [], 10 ** math.floor(math.log10(lo))
    steps = (1, 2, 5) if math.log10(hi / lo) <= 3 else (1,)
    while decade <= hi:
        out += [decade * s for s in steps if lo <= decade * s <= hi]
        decade *= 10
    return out


def render_svg(results, title="daf-mount bench"):
    ratios, limits = plotted(results)
    width, label_w, left, right, row_h = 1060, 560, 580, 1030, 18
    parts, y = [], 56

    def panel(heading, entries, y):
        parts.append(f'<text x="10" y="{y}" font-weight="bold">{escape(heading)}</text>')
        y += 14
        if not entries:
            parts.append(f'<text x="10" y="{y + 12}" fill="{GREY}">no rows</text>')
            return y + 30
        values = [e[1] for e in entries] + [e[2] for e in entries if e[2]]
        lo = 10 ** math.floor(math.log10(min(values) / 1.3))
        hi = 10 ** math.ceil(math.log10(max(values) * 1.3))

        def x(v):
            return left + (right - left) * (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
        top, bottom = y, y + row_h * len(entries) + 4
        for i in range(0, len(entries), 2):  # every other row shaded, under the grid
            parts.append(f'<rect x="{left - 6}" y="{top + row_h * i + 2}" width="{right - left + 12}" '
                         f'height="{row_h}" fill="#f4f4f4"/>')
        for t in ticks(lo, hi):
            parts.append(f'<line x1="{x(t):.1f}" y1="{top}" x2="{x(t):.1f}" y2="{bottom}" stroke="#e4e4e4"/>')
            parts.append(f'<text x="{x(t):.1f}" y="{bottom + 13}" text-anchor="middle" fill="{GREY}">{t:g}</text>')
        parts.append(f'<line x1="{x(1):.1f}" y1="{top}" x2="{x(1):.1f}" y2="{bottom}" stroke="#b0b0b0"/>'
                     if lo <= 1 <= hi else "")
        for i, (label, value, target, op, ok, lower) in enumerate(entries):
            cy = top + row_h * i + row_h / 2 + 2
            colour = {True: GREEN, False: RED, None: GREY}[ok]
            short = label if len(label) <= 86 else label[:83] + "..."
            aim = f" (target {target_text(op)} {target:g})" if target else ""
            parts.append(f'<g><title>{escape(label + f": {value:.3g}" + aim)}</title>')
            parts.append(f'<text x="{label_w}" y="{cy + 4:.1f}" text-anchor="end">{escape(short)}</text>')
            if target:
                tx = x(target)
                parts.append(f'<line x1="{tx:.1f}" y1="{cy - 7:.1f}" x2="{tx:.1f}" y2="{cy + 7:.1f}" '
                             f'stroke="{INK}" stroke-width="2"/>')
                d = 6 if op in (">=", ">") else -6  # the side that meets the target
                parts.append(f'<polygon points="{tx:.1f},{cy - 4:.1f} {tx + d:.1f},{cy:.1f} {tx:.1f},{cy + 4:.1f}" '
                             f'fill="{INK}"/>')
            cx = x(value)
            if lower:  # a lower bound: the true value is at least this, to the right
                parts.append(f'<line x1="{cx:.1f}" y1="{cy:.1f}" x2="{cx + 14:.1f}" y2="{cy:.1f}" '
                             f'stroke="{colour}" stroke-width="2"/>')
                parts.append(f'<polygon points="{cx + 14:.1f},{cy - 3:.1f} {cx + 19:.1f},{cy:.1f} '
                             f'{cx + 14:.1f},{cy + 3:.1f}" fill="{colour}"/>')
            fill = "white" if lower else colour
            parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4.5" fill="{fill}" stroke="{colour}" '
                         f'stroke-width="2"/></g>')
        return bottom + 40

    y = panel("Ratios against their references (log scale)", ratios, y)
    y = panel("Figures with an absolute limit: measured ÷ limit (log scale; 1 is the limit)", limits, y)
    legend = (f'<circle cx="16" cy="34" r="4.5" fill="{GREEN}"/><text x="26" y="38">met</text>'
              f'<circle cx="76" cy="34" r="4.5" fill="{RED}"/><text x="86" y="38">not met</text>'
              f'<circle cx="160" cy="34" r="4.5" fill="{GREY}"/><text x="170" y="38">information or undecided</text>'
              f'<circle cx="350" cy="34" r="4.5" fill="white" stroke="{INK}" stroke-width="2"/>'
              f'<text x="360" y="38">lower bound (stopped early)</text>'
              f'<line x1="560" y1="27" x2="560" y2="41" stroke="{INK}" stroke-width="2"/>'
              f'<polygon points="560,30 566,34 560,38" fill="{INK}"/>'
              f'<text x="572" y="38">target; the arrow points to the side that meets it</text>')
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y}" viewBox="0 0 {width} {y}" '
            f'font-family="sans-serif" font-size="11" fill="{INK}">'
            f'<rect width="{width}" height="{y}" fill="white"/>'
            f'<text x="10" y="18" font-size="14" font-weight="bold">{escape(title)}: '
            f'{escape(str(results.get("date", "")))}</text>')
    return head + legend + "".join(parts) + "</svg>\n"


def generate(results, doc_path, svg_path):
    with open(doc_path) as f:
        document = f.read()
    block = render_block(results, os.path.relpath(svg_path, os.path.dirname(os.path.abspath(doc_path))))
    new = splice(document, block)
    with open(doc_path, "w") as f:
        f.write(new)
    with open(svg_path, "w") as f:
        f.write(render_svg(results))


def example():
    """A small bench-results.json: one row of each kind the bench writes."""
    return {
        "date": "2000-01-01 00:00", "cpus": 2, "load_average": [0.5, 0.4, 0.3], "total_seconds": 700.0,
        "sections": [{"section": "ZIP source: first read and re-read", "seconds": 20.0, "rows": 2},
                     {"section": "scale: 100k-entry ZarrDaf v2 ZIP (scripts/bench_scale_rows.py)", "seconds": 40.0,
                      "rows": 3}],
        "rows": [
            {"figure": "seq read 1 GiB, ZIP source, first read (throughput ratio)", "mounted": 0.27, "native": 0.05,
             "unit": "s", "ratio": 0.2, "target": ">= 0.4", "met": False,
             "section": "ZIP source: first read and re-read"},
            {"figure": "seq read 1 GiB, ZIP source, second read (throughput ratio)", "mounted": 0.1, "native": 0.05,
             "unit": "s", "ratio": 0.5, "target": ">= 0.4",
             "section": "ZIP source: first read and re-read"},
            {"figure": "ls -lR of the view, Zarr view of the 100k-entry ZarrDaf v2 ZIP (time ratio, stopped after 5 s)",
             "mounted": 5.0, "native": 1.0, "unit": "s", "ratio": 5.0, "target": "<= 1.5", "lower_bound": True,
             "met": None, "section": "scale: 100k-entry ZarrDaf v2 ZIP (scripts/bench_scale_rows.py)"},
            {"figure": "daemon RssAnon after mounting the 100k-entry ZarrDaf v2 ZIP | piped", "mounted": 10.7,
             "native": None, "unit": "MiB", "ratio": None, "target": "<= 32", "met": True,
             "section": "scale: 100k-entry ZarrDaf v2 ZIP (scripts/bench_scale_rows.py)"},
            {"figure": "HTTP rows not measured: nginx missing", "mounted": float("nan"), "native": None, "unit": "-",
             "ratio": None, "target": "-"},
        ]}


def self_test():
    results = json.loads(json.dumps(example()))  # as read back from a file (NaN included)
    block = render_block(results)
    lines = block.splitlines()
    header = "| row | measured | reference | ratio | target | met | what bounds it |"
    assert lines.count(header) == 3, lines  # two sections and the rows of no section
    data = [line for line in lines if line.startswith("| ") and line != header and not line.startswith("| section")]
    assert len(data) == len(results["rows"]) + len(results["sections"]) + 1, data  # + section times and total
    assert "**not met**" in block and "| ≥ 5 |" in block and "| met |" in block, block
    assert "piped" in block and "\\| piped" in block, "a | in a figure must be escaped"
    assert "[Why](#what-bounds-the-zip-rows)" in block, "the ZIP rows' bound"
    assert "(performance.svg)" in block and "700 s in all" in block
    svg = render_svg(results)
    import xml.etree.ElementTree as ET
    tree = ET.fromstring(svg)
    circles = tree.findall(".//{http://www.w3.org/2000/svg}circle")
    assert len(circles) == 4 + 4, len(circles)  # 3 ratio rows + 1 limit row, and 4 in the legend
    document = ("# Performance\n\nhand text\n\n" + BEGIN + " -->\nSTALE-GENERATED-TEXT\n" + END
                + "\n\n## After\n\nmore hand text\n")
    once = splice(document, block)
    assert once == splice(once, block), "splicing twice must give the same document"
    assert once.startswith("# Performance\n\nhand text\n") and once.endswith("## After\n\nmore hand text\n")
    assert "STALE-GENERATED-TEXT" not in once and block in once
    try:
        splice("no markers\n", block)
        raise AssertionError("a document without markers must be refused")
    except ValueError:
        pass
    with tempfile.TemporaryDirectory() as tmp:
        doc, svg_path = os.path.join(tmp, "performance.md"), os.path.join(tmp, "performance.svg")
        with open(doc, "w") as f:
            f.write(document)
        generate(results, doc, svg_path)
        with open(doc) as f:
            assert "(performance.svg)" in f.read()
        ET.parse(svg_path)
    # Every link of the bounds' texts must name a hand-written section of doc/performance.md.
    real = os.path.join(ROOT, "doc", "performance.md")
    if os.path.exists(real):
        with open(real) as f:
            known = anchors(f.read()) | {"reading-the-table"}
        for _, text in BOUNDS:
            for anchor in re.findall(r"\]\(#([^)]+)\)", text):
                assert anchor in known, f"BOUNDS links to #{anchor}, which doc/performance.md does not have"
    assert bound_text({"figure": "something new"}) == ""
    print("perf_doc self-test: ok")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", nargs="?", default="bench-results.json", help="default: ./bench-results.json")
    parser.add_argument("--doc", default=os.path.join(ROOT, "doc", "performance.md"))
    parser.add_argument("--svg", default=os.path.join(ROOT, "doc", "performance.svg"))
    parser.add_argument("--self-test", action="store_true", help="check the generator on a small example")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return
    if not os.path.exists(args.json):
        sys.exit(f"perf_doc: {args.json} not found: run scripts/bench first (it writes bench-results.json)")
    with open(args.json) as f:
        results = json.load(f)
    try:
        generate(results, args.doc, args.svg)
    except ValueError as e:
        sys.exit(f"perf_doc: {args.doc}: {e}")
    print(f"perf_doc: wrote {os.path.relpath(args.doc)} ({len(results.get('rows', []))} rows) and "
          f"{os.path.relpath(args.svg)}")


if __name__ == "__main__":
    main()
