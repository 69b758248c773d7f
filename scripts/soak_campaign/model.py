"""What the soak mounts and writes: the source kinds (copies of the fixtures), the axes and
baseline properties the set-up adds, and the properties the writers write (their places, element
types, payloads, and their files in the FilesDaf view and in a Zarr v2 or v3 view)."""

import array
import hashlib
import json
import os
import random
import shutil

KINDS = {
    # kind: (fixture, source file name, description)
    "zip": ("zarr_v2.daf.zarr.zip", "soak.daf.zarr.zip", "ZarrDaf (Zarr v2) ZIP"),
    "zip3": ("zarr_v3.daf.zarr.zip", "soak.daf.zarr.zip", "ZarrDaf (Zarr v3) ZIP"),
    "zipdaf": ("zipdaf_v1_0.daf.zip", "soak.daf.zip", "ZipDaf (FilesDaf 1.0 in a ZIP)"),
    "zipdaf11": ("zipdaf_v1_1.daf.zip", "soak.daf.zip", "ZipDaf (FilesDaf 1.1 in a ZIP)"),
    "dir": ("files_v1_0.daf", "soak.daf", "FilesDaf 1.0 directory"),
    "dir11": ("files_v1_1.daf", "soak.daf", "FilesDaf 1.1 directory"),
    "zarrdir": ("zarr_v2.daf.zarr", "soak.daf.zarr", "ZarrDaf (Zarr v2) directory"),
    "zarrdir3": ("zarr_v3.daf.zarr", "soak.daf.zarr", "ZarrDaf (Zarr v3) directory"),
}
DIR_KINDS = {"dir", "dir11", "zarrdir", "zarrdir3"}


def make_source(kind, directory, fixtures):
    """A writable copy of the kind's fixture in `directory`; returns its path."""
    fixture, name, _ = KINDS[kind]
    path = os.path.join(directory, name)
    if kind in DIR_KINDS:
        shutil.copytree(os.path.join(fixtures, fixture), path, copy_function=shutil.copyfile)
        for root, dirs, _ in os.walk(path):
            for d in dirs + ["."]:
                os.chmod(os.path.join(root, d), 0o755)
    else:
        shutil.copyfile(os.path.join(fixtures, fixture), path)
        os.chmod(path, 0o644)
    return path


def staging_dir(source):
    head, tail = os.path.split(source)
    return os.path.join(head, f".{tail}.daf-mount")


def staged_files(source):
    found = []
    for root, _, files in os.walk(staging_dir(source)):
        found += [os.path.relpath(os.path.join(root, f), staging_dir(source)) for f in files]
    return sorted(found)


# -- axes and places ----------------------------------------------------------------------------

# `cell` (3 entries) is the fixtures' own; the set-up adds the other two.
AXES = {"cell": 3, "soak": 16384, "soak_big": 131072}
ADDED_AXES = ["soak", "soak_big"]

# Where the writers put properties: (place, axes, weight). Most are small (the case: a
# new vector of a few bytes every fraction of a second), some up to 1.5 MiB.
PLACES = [
    ("vectors/cell", ("cell",), 45),
    ("vectors/soak", ("soak",), 30),
    ("matrices/cell/soak", ("cell", "soak"), 15),
    ("vectors/soak_big", ("soak_big",), 5),
    ("matrices/soak/cell", ("soak", "cell"), 5),
]
# The set-up writes these through the FilesDaf view; they are part of the data set that existed
# before the run, with the fixtures' own properties (1 MiB reads get several per file).
BASELINE = [("vectors/soak_big", "base_v", "Float64"),
            ("matrices/soak_big/cell", "base_m", "Float64"),
            ("vectors/soak", "base_s", "Int32")]

# FilesDaf eltype: (Zarr v2 dtype, Zarr v3 data_type, bytes per element)
ELTYPES = {
    "UInt8": ("|u1", "uint8", 1),
    "Int16": ("<i2", "int16", 2),
    "Int32": ("<i4", "int32", 4),
    "UInt32": ("<u4", "uint32", 4),
    "Int64": ("<i8", "int64", 8),
    "Float64": ("<f8", "float64", 8),
}

# Files derived from the whole data set (rewritten at every commit): read, never hash-checked.
DERIVED = {"files": {"metadata.json"}, "zarr": {".zmetadata", "zarr.json"}}


def axis_text(axis):
    return "".join(f"{axis}_{i}\n" for i in range(AXES[axis])).encode()


def place_axes(place):
    parts = place.split("/")
    return tuple(parts[1:])


class Prop:
    """A dense vector or matrix `name` at `place` (`vectors/AXIS` or `matrices/ROWS/COLS`)."""

    def __init__(self, place, name, eltype):
        self.place, self.name, self.eltype = place, name, eltype
        self.dims = [AXES[a] for a in place_axes(place)]
        self.count = 1
        for d in self.dims:
            self.count *= d
        self.size = self.count * ELTYPES[eltype][2]

    @property
    def key(self):
        return f"{self.place}/{self.name}"

    def payload(self, seed, version=0):
        """Deterministic bytes, never all zero (Zarr v3 leaves an all-fill chunk out); finite
        floats for Float64."""
        rng = random.Random(f"{seed}/{self.key}/{version}")
        if self.eltype == "Float64":
            data = array.array("d", (rng.uniform(-1e6, 1e6) for _ in range(self.count))).tobytes()
        else:
            data = rng.randbytes(self.size)
        return b"\x01" + data[1:]

    def descriptor(self, eltype=None):
        return (json.dumps({"format": "dense", "eltype": eltype or self.eltype}) + "\n").encode()

    # FilesDaf view
    def json_path(self):
        return f"{self.place}/{self.name}.json"

    def data_path(self):
        return f"{self.place}/{self.name}.data"

    # Zarr view: shape [ncols, nrows] for a matrix (column-major), one chunk.
    def zarr_shape(self):
        return list(reversed(self.dims))

    def chunk_key(self, zarr_format):
        if zarr_format == 2:
            return ".".join("0" for _ in self.dims)
        return "c/" + "/".join("0" for _ in self.dims)

    def zarr_doc_name(self, zarr_format):
        return ".zarray" if zarr_format == 2 else "zarr.json"

    def zarr_doc(self, zarr_format, shape=None):
        shape = shape or self.zarr_shape()
        v2, v3, _ = ELTYPES[self.eltype]
        fill = 0.0 if self.eltype == "Float64" else 0
        if zarr_format == 2:
            doc = {"chunks": shape, "compressor": None, "dtype": v2, "fill_value": fill,
                   "filters": None, "order": "C", "shape": shape, "zarr_format": 2}
        else:
            doc = {"chunk_grid": {"configuration": {"chunk_shape": shape}, "name": "regular"},
                   "chunk_key_encoding": {"configuration": {"separator": "/"}, "name": "default"},
                   "codecs": [{"configuration": {"endian": "little"}, "name": "bytes"}],
                   "data_type": v3, "fill_value": fill, "node_type": "array", "shape": shape,
                   "zarr_format": 3}
        return json.dumps(doc, sort_keys=True).encode()

    def node(self):
        return f"{self.place}/{self.name}"

    def zarr_required(self, zarr_format):
        """The files of its Zarr node that must be there once it is committed."""
        node = self.node()
        return [f"{node}/{self.zarr_doc_name(zarr_format)}",
                f"{node}/{self.chunk_key(zarr_format)}"]


def key_of(view, rel):
    """The property (`place/name`) a path of a view belongs to, or None (a directory of places,
    a group document). FilesDaf: `vectors/A/N.ext` and hidden temporaries `.N.ext.tmp`; Zarr:
    anything under `vectors/A/N/` or `matrices/R/C/N/`."""
    parts = rel.split("/")
    depth = {"vectors": 3, "matrices": 4}.get(parts[0])
    if depth is None or len(parts) < depth:
        return None
    if view == "zarr":
        if len(parts) == depth and parts[-1] in (".zgroup", ".zattrs", "zarr.json"):
            return None  # the place's own group documents
        return "/".join(parts[:depth]) if len(parts) > depth or "." not in parts[-1] else None
    if len(parts) != depth:
        return None
    name = parts[-1]
    if name.startswith("."):
        name = name[1:]
    return "/".join(parts[: depth - 1] + [name.split(".")[0]])


def sha256(data):
    return hashlib.sha256(data).hexdigest()
