"""GitHub-style anchors of markdown headings, shared by scripts/check_docs and scripts/perf_doc.py."""
import re


def slug(heading, seen):
    """GitHub's anchor for a heading: its text (links to their text, code and emphasis marks dropped) in lower
    case, every character but letters, digits, `_`, `-` and spaces dropped, spaces made `-`; a repeated anchor
    gets `-1`, `-2`, ... (`seen` counts them per document)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = re.sub(r"<[^>]+>|`", "", text).lower()
    base = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
    n = seen.get(base, 0)
    seen[base] = n + 1
    return base if n == 0 else f"{base}-{n}"


def headings(markdown):
    """(line number, heading text) of every ATX heading, fenced code skipped."""
    fenced = False
    for number, line in enumerate(markdown.splitlines(), 1):
        if re.match(r"\s*(```|~~~)", line):
            fenced = not fenced
            continue
        m = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            yield number, m[1]


def anchors(markdown):
    """The set of anchors of a markdown text's headings."""
    seen = {}
    return {slug(text, seen) for _, text in headings(markdown)}
