"""Daf's own writers through the views of a read-write mount, replayed call by call (no Daf
library runs here: the sequences of system calls are those the writers make):

* the FilesDaf writers that keep the seed-era sidecars (the seed DataAxesFormats, dafr 0.4.9):
  `axes/metadata.json` and `metadata.zip` rebuilt on every writable open and after every
  property, the ZIP built in a mapped file (dafr's MmapZipStore) or written as a stream
  (ZipArchives.jl), as `metadata.zip.new` renamed over `metadata.zip`;
* DataAxesFormats 0.3's FilesDaf 1.1 writer, which appends each new property to the root
  `metadata.json` by byte surgery (truncate the final `}`, write `,"key":descriptor}`);
* ZarrDaf writers, which rewrite the root document after each array: the v3 root `zarr.json`
  (open with `O_TRUNC`, write, close), the v2 `.zmetadata` (as `.zmetadata.new`, renamed).

Each runs into a directory source and a ZIP source; every call must succeed, the derived files
are never stored nor shown afterwards, the properties read back exactly after a remount, and a
clean unmount leaves nothing beside the source.
"""
import errno
import io
import json
import mmap
import os
import time
import zipfile

import pytest

from conftest import VECTORS, mounted
from test_writes import private_copy


def write_file(path, data, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC):
    """open, write, close: R's `writeLines`, Julia's `write(path, data)`."""
    fd = os.open(path, flags, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def sidecar_zip(view):
    """The bytes of `metadata.zip` as the writers build it: STORED copies of `daf.json`,
    `axes/metadata.json` and every descriptor, read back through the view."""
    rels = ["daf.json", "axes/metadata.json"]
    for base, dirs, files in os.walk(view):
        dirs.sort()
        rel = os.path.relpath(base, view)
        if rel.split(os.sep)[0] in ("scalars", "vectors", "matrices"):
            rels += [os.path.join(rel, f) for f in sorted(files) if f.endswith(".json")]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for rel in rels:
            path = os.path.join(view, rel)
            if os.path.exists(path):
                with open(path, "rb") as f:
                    z.writestr(rel, f.read())
    return out.getvalue()


def mapped_zip(path, data, reserve=1 << 20):
    """dafr's MmapZipStore in mode w+: the file reserved, mapped shared, written through the
    map, shrunk to its size, closed."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, reserve)
        with mmap.mmap(fd, reserve, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as m:
            m[: len(data)] = data
            m.flush()
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def streamed_zip(path, data):
    """ZipArchives.jl's ZipWriter on a file opened "w": sequential writes."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for at in range(0, len(data), 512):
            os.write(fd, data[at : at + 512])
    finally:
        os.close(fd)


def rebuild_sidecars(view, zip_writer):
    """`metadata_zip_rebuild!` (`.metadata_zip_rebuild` in dafr): both sidecars afresh."""
    axes = sorted(f[: -len(".txt")] for f in os.listdir(os.path.join(view, "axes")) if f.endswith(".txt"))
    write_file(os.path.join(view, "axes", "metadata.json"), json.dumps(axes, separators=(",", ":")).encode() + b"\n")
    new = os.path.join(view, "metadata.zip.new")
    if os.path.exists(new):
        os.unlink(new)
    zip_writer(new, sidecar_zip(view))
    os.rename(new, os.path.join(view, "metadata.zip"))


def append_index(view, key, descriptor):
    """DataAxesFormats 0.3's append to the root `metadata.json` (daf-formats.md 3.5)."""
    fd = os.open(os.path.join(view, "metadata.json"), os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        was_empty = os.pread(fd, size, 0) == b"{}"
        os.ftruncate(fd, size - 1)
        entry = b'"' + key.encode() + b'":' + descriptor.rstrip(b"\n") + b"}"
        os.pwrite(fd, entry if was_empty else b"," + entry, size - 1)
    finally:
        os.close(fd)


# A new property of each kind, made of a fixture property's files: (new key, fixture key, suffixes).
FILES_PROPERTIES = [
    ("scalars/title_w", "scalars/title", [".json"]),
    ("vectors/cell/score_w", "vectors/cell/score", [".data", ".json"]),
    ("matrices/cell/gene/expr_w", "matrices/cell/gene/expr", [".data", ".json"]),
    ("matrices/gene/cell/expr_w", "matrices/cell/gene/expr", None),
]


def files_of(view, key, suffixes):
    return {s: open(os.path.join(view, key + s), "rb").read() for s in suffixes}


def transposed_expr(view):
    """The fixture's cell x gene `expr` relaid out gene x cell (column-major Float64)."""
    import numpy as np

    data = np.fromfile(os.path.join(view, "matrices/cell/gene/expr.data"), dtype="<f8")
    cells = len(open(os.path.join(view, "axes/cell.txt")).read().splitlines())
    genes = len(open(os.path.join(view, "axes/gene.txt")).read().splitlines())
    by_cell = data.reshape(genes, cells)  # column-major cell x gene: a column per gene
    relaid = by_cell.T.copy()  # a column per cell: gene x cell
    desc = open(os.path.join(view, "matrices/cell/gene/expr.json"), "rb").read()
    return {".data": relaid.astype("<f8").tobytes(), ".json": desc}


def write_files_daf(view, after_each):
    """A FilesDaf writer's `set_scalar!`, `set_vector!`, `set_matrix!` (and its relayout), each
    followed by the writer's index upkeep; returns what each property's files hold."""
    written = {}
    for key, model, suffixes in FILES_PROPERTIES:
        files = files_of(view, model, suffixes) if suffixes else transposed_expr(view)
        for suffix, data in files.items():  # payload first, descriptor last
            write_file(os.path.join(view, key + suffix), data)
        written[key] = files
        after_each(key, files[".json"])
    return written


def check_written(view, written):
    for key, files in written.items():
        for suffix, data in files.items():
            with open(os.path.join(view, key + suffix), "rb") as f:
                assert f.read() == data, key + suffix


def check_nothing_left(source, seconds=10):
    """Nothing beside the source once the daemon is done (after the unmount it ends the appends
    it has queued, then removes what they staged)."""
    parent, name = os.path.split(source)
    deadline = time.time() + seconds
    while True:
        left = [f for f in os.listdir(parent) if f.startswith("." + name)]
        if not left or time.time() > deadline:
            break
        time.sleep(0.05)
    assert left == [], left


FILES_SOURCES = ["files_v1_0.daf", "files_v1_1.daf", "zipdaf_v1_0.daf.zip", "zipdaf_v1_1.daf.zip"]


@pytest.mark.parametrize("zip_writer", [mapped_zip, streamed_zip], ids=["dafr", "seed"])
@pytest.mark.parametrize("fixture", FILES_SOURCES)
def test_a_sidecar_keeping_files_daf_writer(tmp_path, fixture, zip_writer):
    source = private_copy(tmp_path, fixture)
    name = fixture.split(".")[0]
    with mounted(source) as mnt:
        view = os.path.join(mnt, name + ".daf")
        had = {rel: os.path.exists(os.path.join(view, rel)) for rel in ("axes/metadata.json", "metadata.zip")}
        rebuild_sidecars(view, zip_writer)  # the writable open
        written = write_files_daf(view, lambda key, desc: rebuild_sidecars(view, zip_writer))
        check_written(view, written)
        for rel in ("axes/metadata.json", "metadata.zip", "metadata.zip.new"):
            assert os.path.exists(os.path.join(view, rel)) == had.get(rel, False), rel
        zarr_view = os.path.join(mnt, name + ".daf.zarr")
        assert os.path.isdir(os.path.join(zarr_view, "matrices/gene/cell/expr_w"))
    check_nothing_left(source)
    with mounted(source, "-o", "ro") as mnt:
        check_written(os.path.join(mnt, name + ".daf"), written)


@pytest.mark.parametrize("fixture", ["files_v1_1.daf", "zipdaf_v1_1.daf.zip"])
def test_the_files_daf_1_1_writer_appends_to_the_root_index(tmp_path, fixture):
    source = private_copy(tmp_path, fixture)
    name = fixture.split(".")[0]
    with mounted(source) as mnt:
        view = os.path.join(mnt, name + ".daf")
        written = write_files_daf(view, lambda key, desc: append_index(view, key, desc))
        check_written(view, written)
        index = json.load(open(os.path.join(view, "metadata.json")))
        assert [key for key in written if key not in index] == []
    check_nothing_left(source)
    with mounted(source, "-o", "ro") as mnt:
        check_written(os.path.join(mnt, name + ".daf"), written)


def copy_node(view, model, key):
    """A ZarrDaf writer's new array `key`: its directory, its documents, its chunks (a copy of
    the fixture's array `model`, through the view)."""
    written = {}
    for base, dirs, files in os.walk(os.path.join(view, model)):
        dirs.sort()
        rel = os.path.relpath(base, os.path.join(view, model))
        os.makedirs(os.path.join(view, key, rel), exist_ok=True)
        # Documents first, then the chunks (Zarr.jl's `zcreate`, then its writes).
        for f in sorted(files, key=lambda f: (f not in ("zarr.json", ".zarray", ".zattrs", ".zgroup"), f)):
            data = open(os.path.join(base, f), "rb").read()
            write_file(os.path.join(view, key, rel, f), data)
            written[os.path.normpath(os.path.join(key, rel, f))] = data
    return written


# A dense vector, a dense matrix and a sparse one (a group of arrays).
ZARR_ARRAYS = [
    ("vectors/cell/score_w", "vectors/cell/score"),
    ("matrices/cell/gene/expr_w", "matrices/cell/gene/expr"),
    ("matrices/cell/gene/umis_w", "matrices/cell/gene/umis"),
]


def rewrite_root_v3(view):
    """The root `zarr.json`, rewritten as the writer keeps it: the document the view shows
    (its inline consolidated metadata lists the new array), opened with `O_TRUNC`."""
    root = open(os.path.join(view, "zarr.json"), "rb").read()
    write_file(os.path.join(view, "zarr.json"), root)


def rewrite_zmetadata(view):
    """`refresh_consolidated_metadata!`: `.zmetadata.new`, renamed over `.zmetadata`."""
    path = os.path.join(view, ".zmetadata")
    data = open(path, "rb").read() if os.path.exists(path) else b'{"metadata":{},"zarr_consolidated_format":1}'
    write_file(path + ".new", data)
    os.rename(path + ".new", path)


@pytest.mark.parametrize(
    "fixture,rewrite",
    [
        ("zarr_v3.daf.zarr", rewrite_root_v3),
        ("zarr_v3.daf.zarr.zip", rewrite_root_v3),
        ("zarr_v2.daf.zarr", rewrite_zmetadata),
        ("zarr_v2.daf.zarr.zip", rewrite_zmetadata),
    ],
)
def test_a_zarr_daf_writer_rewrites_the_root_after_each_array(tmp_path, fixture, rewrite):
    source = private_copy(tmp_path, fixture)
    name = fixture.split(".")[0]
    version = "3" if "v3" in fixture else "2"
    with mounted(source, "--zarr-format", version) as mnt:
        view = os.path.join(mnt, name + ".daf.zarr")
        written = {}
        for key, model in ZARR_ARRAYS:
            written.update(copy_node(view, model, key))
            rewrite(view)
        for rel, data in written.items():
            assert open(os.path.join(view, rel), "rb").read() == data, rel
    check_nothing_left(source)
    with mounted(source, "-o", "ro", "--zarr-format", version) as mnt:
        view = os.path.join(mnt, name + ".daf.zarr")
        for rel, data in written.items():
            assert open(os.path.join(view, rel), "rb").read() == data, rel


def redirected(path, data):
    """A shell's `cat x > path`: the shell opens the file, duplicates the descriptor onto the
    command's output and closes its own (a close with nothing written), then the command writes
    through the duplicate and closes it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    out = os.dup(fd)
    os.close(fd)
    try:
        os.write(out, data)
    finally:
        os.close(out)


def wait_for_line(log, needle, seconds=10):
    deadline = time.time() + seconds
    while needle not in open(log).read():
        if time.time() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("fixture", ["files_v1_0.daf", "zarr_v3.daf.zarr.zip"])
def test_a_shell_redirection_logs_no_spurious_refusal(tmp_path, fixture):
    source = private_copy(tmp_path, fixture)
    name = fixture.split(".")[0]
    log = str(tmp_path / "daf-mount.log")
    with mounted(source, "--zarr-format", "3", "--log-file", log) as mnt:
        files = os.path.join(mnt, name + ".daf")
        zarr_view = os.path.join(mnt, name + ".daf.zarr")
        score = open(os.path.join(files, "vectors/cell/score.data"), "rb").read()
        desc = open(os.path.join(files, "vectors/cell/score.json"), "rb").read()
        redirected(os.path.join(files, "vectors/cell/copy.data"), score)
        redirected(os.path.join(files, "vectors/cell/copy.json"), desc)
        # An axis: its file alone is a whole item, and an empty one is a whole (empty) axis.
        redirected(os.path.join(files, "axes/batch.txt"), b"b1\nb2\n")
        root = open(os.path.join(zarr_view, "zarr.json"), "rb").read()
        redirected(os.path.join(zarr_view, "zarr.json"), root)
        assert open(os.path.join(files, "vectors/cell/copy.data"), "rb").read() == score
        assert open(os.path.join(files, "axes/batch.txt"), "rb").read() == b"b1\nb2\n"
        assert os.path.isdir(os.path.join(zarr_view, "vectors/cell/copy"))
        assert os.path.isdir(os.path.join(zarr_view, "axes/batch"))
        assert "refused" not in open(log).read()
        # A refusal still fails the close that decides, and is logged once.
        with pytest.raises(OSError) as refused:
            redirected(os.path.join(files, "vectors/cell/bad.json"), b"not json")
        assert refused.value.errno == errno.EINVAL
        assert wait_for_line(log, "bad.json"), open(log).read()
        assert open(log).read().count("refused") == 1, open(log).read()
        os.unlink(os.path.join(files, "vectors/cell/bad.json"))  # a refused file stays staged
    check_nothing_left(source)
