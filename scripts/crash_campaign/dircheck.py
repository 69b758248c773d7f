"""The crash campaign's strict check of a directory source (a FilesDaf or a Zarr v2 Daf
directory) after recovery: nothing left beside it (no `.NAME.daf-mount.moves` record of a swap,
nor its `.tmp`), no daf-mount temporary (`.daf-mount-tmp*`) or other stray file in it, and a
valid data set: `daf.json` (FilesDaf) or `.zgroup` (Zarr), every property's descriptor and
payload sizes agreeing with its axes' lengths, no payload without its descriptor. With a
self-test that it catches damage."""

import json
import os
import shutil

ESIZE = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2, "int32": 4,
         "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8}
ZARR_DOCS = {".zarray", ".zattrs", ".zgroup", ".zmetadata"}


def esize(eltype):
    size = ESIZE.get(str(eltype).lower())
    if size is None:
        raise ValueError(f"unknown eltype {eltype!r}")
    return size


def lines(path):
    with open(path, "rb") as f:
        data = f.read()
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def size(path):
    return os.path.getsize(path) if os.path.exists(path) else None


def beside(source):
    """Problems beside the source: a swap's record left (or its temporary)."""
    head, tail = os.path.split(os.path.abspath(source))
    prefix = f".{tail}.daf-mount.moves"  # `.moves` of older daemons, `.moves.PID.N` (and `.tmp`)
    return [f"{name} left beside the source" for name in sorted(os.listdir(head)) if name.startswith(prefix)]


def strays(source, allowed_hidden):
    found = []
    for root, dirs, files in os.walk(source):
        for name in dirs + files:
            if name.startswith(".") and name not in allowed_hidden:
                found.append(os.path.relpath(os.path.join(root, name), source))
    return [f"stray file {rel}" for rel in sorted(found)]


def check_property(base, descriptor, dims):
    """Problems of one FilesDaf property `base` (path without suffix) over axes of `dims`."""
    n = 1
    for d in dims:
        n *= d
    if descriptor.get("format") == "dense":
        if str(descriptor.get("eltype")).lower() == "string":
            got = lines(base + ".txt") if os.path.exists(base + ".txt") else None
            return [] if got == n else [f"{base}.txt: {got} lines, {n} expected"]
        want = n * esize(descriptor.get("eltype"))
        got = size(base + ".data")
        return [] if got == want else [f"{base}.data: {got} bytes, {want} expected"]
    if descriptor.get("format") != "sparse":
        return [f"{base}.json: unknown format {descriptor}"]
    problems = []
    index = ["nzind"] if len(dims) == 1 else ["colptr", "rowval"]
    if "indtype" in descriptor:  # FilesDaf 1.0: one index type, counts from the file sizes
        isize = esize(descriptor["indtype"])
        counts = {part: (size(f"{base}.{part}") or 0) // isize for part in index}
        nnz = counts[index[-1]]
        if len(dims) == 2 and size(f"{base}.colptr") != (dims[1] + 1) * isize:
            problems.append(f"{base}.colptr: {size(base + '.colptr')} bytes")
        for part in index:
            if size(f"{base}.{part}") is None or size(f"{base}.{part}") % isize:
                problems.append(f"{base}.{part}: {size(base + '.' + part)} bytes")
        if str(descriptor.get("eltype")).lower() == "string":
            if lines(base + ".nztxt") != nnz:
                problems.append(f"{base}.nztxt: not {nnz} lines")
        elif os.path.exists(base + ".nzval") or str(descriptor["eltype"]).lower() != "bool":
            if size(base + ".nzval") != nnz * esize(descriptor["eltype"]):
                problems.append(f"{base}.nzval: {size(base + '.nzval')} bytes, nnz {nnz}")
        return problems
    for part in index + ["nzval"]:  # FilesDaf 1.1: one dense descriptor per component
        component = descriptor.get(part)
        if component is None:
            if part != "nzval":
                problems.append(f"{base}.json: no {part}")
            continue
        if part == "colptr" and component.get("n_elements") != dims[1] + 1:
            problems.append(f"{base}.json: colptr of {component.get('n_elements')} elements")
        want = component.get("n_elements", -1) * esize(component.get("eltype"))
        if size(f"{base}.{part}") != want:
            problems.append(f"{base}.{part}: {size(base + '.' + part)} bytes, {want} expected")
    return problems


def check_filesdaf(source):
    problems = []
    try:
        with open(os.path.join(source, "daf.json")) as f:
            version = json.load(f).get("version")
        if version not in ([1, 0], [1, 1]):
            problems.append(f"daf.json: version {version}")
    except (OSError, ValueError) as e:
        return [f"daf.json: {e}"]
    axes = {}
    for name in os.listdir(os.path.join(source, "axes")):
        if name == "metadata.json":  # FilesDaf 1.0's list of axes
            continue
        if not name.endswith(".txt"):
            problems.append(f"axes/{name}: not an axis file")
            continue
        axes[name[:-4]] = lines(os.path.join(source, "axes", name))
    for name in os.listdir(os.path.join(source, "scalars")):
        try:
            with open(os.path.join(source, "scalars", name)) as f:
                json.load(f)
        except (OSError, ValueError) as e:
            problems.append(f"scalars/{name}: {e}")
    places = []
    for axis in os.listdir(os.path.join(source, "vectors")):
        places.append((os.path.join("vectors", axis), [axis]))
    for rows in os.listdir(os.path.join(source, "matrices")):
        for cols in os.listdir(os.path.join(source, "matrices", rows)):
            places.append((os.path.join("matrices", rows, cols), [rows, cols]))
    for place, names in places:
        if any(a not in axes for a in names):
            problems.append(f"{place}: no such axis")
            continue
        files = os.listdir(os.path.join(source, place))
        props = {f[:-5] for f in files if f.endswith(".json")}
        for f in files:
            if f.rsplit(".", 1)[0] not in props:
                problems.append(f"{place}/{f}: no descriptor")
        for prop in sorted(props):
            base = os.path.join(source, place, prop)
            try:
                with open(base + ".json") as f:
                    descriptor = json.load(f)
                problems += [p.replace(source + os.sep, "")
                             for p in check_property(base, descriptor, [axes[a] for a in names])]
            except (OSError, ValueError) as e:
                problems.append(f"{place}/{prop}.json: {e}")
    return problems


def check_zarr(source):
    """Zarr v2: every array's `.zarray` parses, matrices' shapes agree with the axes, and every
    chunk of an uncompressed fixed-size array has the chunk's size."""
    problems = []
    if not os.path.exists(os.path.join(source, ".zgroup")):
        problems.append(".zgroup missing")
    arrays = {}
    for root, _, files in os.walk(source):
        if ".zarray" not in files:
            problems += [f"{os.path.relpath(os.path.join(root, n), source)}: not in an array"
                         for n in files if n not in ZARR_DOCS]
        else:
            rel = os.path.relpath(root, source)
            try:
                with open(os.path.join(root, ".zarray")) as f:
                    arrays[rel] = (json.load(f), [n for n in files if n not in ZARR_DOCS])
            except (OSError, ValueError) as e:
                problems.append(f"{rel}/.zarray: {e}")
    axes = {rel.split(os.sep)[1]: meta["shape"][0] for rel, (meta, _) in arrays.items()
            if rel.startswith("axes" + os.sep) and rel.count(os.sep) == 1}
    for rel, (meta, chunks) in sorted(arrays.items()):
        parts = rel.split(os.sep)
        if parts[0] == "matrices" and len(parts) == 4 and parts[1] in axes and parts[2] in axes:
            if meta["shape"] != [axes[parts[2]], axes[parts[1]]]:  # column-major: transposed
                problems.append(f"{rel}: shape {meta['shape']}")
        if meta.get("compressor") is None and not meta.get("filters") and "O" not in meta["dtype"]:
            want = int(meta["dtype"][2:])
            for c in meta["chunks"]:
                want *= c
            for chunk in chunks:
                got = os.path.getsize(os.path.join(source, rel, chunk))
                if got != want:
                    problems.append(f"{rel}/{chunk}: {got} bytes, {want} expected")
    return problems


def check_directory(source):
    """All problems of the directory source `source` (empty: intact)."""
    zarr = os.path.exists(os.path.join(source, ".zgroup")) or source.endswith(".zarr")
    problems = beside(source) + strays(source, ZARR_DOCS if zarr else set())
    try:
        problems += check_zarr(source) if zarr else check_filesdaf(source)
    except (OSError, ValueError, KeyError, TypeError) as e:
        problems.append(f"unreadable: {type(e).__name__}: {e}")
    return problems


def self_test(workdir, fixtures):
    """Damages copies of the fixtures in ways a crash could; returns the damages not caught."""
    missed = []
    base = os.path.join(workdir, "dircheck-self-test")
    for fixture, damaged in [("files_v1_0.daf", "matrices/cell/gene/expr.data"),
                             ("files_v1_1.daf", "matrices/cell/gene/umis.nzval"),
                             ("zarr_v2.daf.zarr", None)]:
        for damage in ["none", "truncate", "moves", "tmp", "orphan", "no-daf"]:
            shutil.rmtree(base, ignore_errors=True)
            os.makedirs(base)
            src = os.path.join(base, fixture)
            shutil.copytree(os.path.join(fixtures, fixture), src)
            for root, dirs, files in os.walk(src):
                for name in dirs + files + ["."]:
                    os.chmod(os.path.join(root, name), 0o755 if name in dirs + ["."] else 0o644)
            zarr, payload = damaged is None, damaged
            if zarr:
                payload = next(os.path.join(os.path.relpath(r, src), "0.0")
                               for r, _, f in os.walk(src) if "0.0" in f and "matrices" in r)
            if damage == "truncate":
                with open(os.path.join(src, payload), "r+b") as f:
                    f.truncate(os.path.getsize(os.path.join(src, payload)) - 1)
            elif damage == "moves":
                open(os.path.join(base, f".{fixture}.daf-mount.moves"), "wb").close()
            elif damage == "tmp":
                open(os.path.join(src, "matrices", ".daf-mount-tmp.1.2"), "wb").close()
            elif damage == "orphan":
                shutil.copyfile(os.path.join(src, payload),
                                os.path.join(src, os.path.dirname(payload),
                                             "lost.data" if not zarr else "../lost.data"))
            elif damage == "no-daf":
                os.remove(os.path.join(src, ".zgroup" if zarr else "daf.json"))
            caught = bool(check_directory(src))
            if caught != (damage != "none"):
                missed.append(f"{fixture} {damage}: {check_directory(src)}")
    shutil.rmtree(base, ignore_errors=True)
    return missed
