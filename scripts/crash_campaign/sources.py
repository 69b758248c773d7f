"""The crash campaign's source kinds: the ZIP archives and the directories it appends to, made
from the fixtures, their strict check (scripts/crash_campaign/zipcheck.py or dircheck.py), the
properties they hold, and the damage `--inject` does to one on purpose."""

import os
import shutil
import struct
import zipfile

from .dircheck import check_directory
from .zipcheck import check_archive

KINDS = {
    # kind: (file name, fixture, source suffix)
    "zarr": ("crash.daf.zarr.zip", "zarr_v2.daf.zarr.zip", ""),
    "zipdaf": ("crash.daf.zip", "zipdaf_v1_0.daf.zip", ""),
    "group": ("crash.dafs.zarr.zip", "zarr_v2.daf.zarr.zip", "#/g2"),
    # DataAxesFormats 0.3 archives: appends in Zarr v3 and FilesDaf 1.1 forms.
    "zarr3": ("crash.daf.zarr.zip", "zarr_v3.daf.zarr.zip", ""),
    "zipdaf11": ("crash.daf.zip", "zipdaf_v1_1.daf.zip", ""),
    # Directory sources: a commit renames its staged payloads into them (with a record of moves).
    "dir": ("crash.daf", "files_v1_0.daf", ""),
    "dir11": ("crash.daf", "files_v1_1.daf", ""),
    "zarrdir": ("crash.daf.zarr", "zarr_v2.daf.zarr", ""),
}
DIR_KINDS = {"dir", "dir11", "zarrdir"}
DEFAULT_KINDS = "zarr,zipdaf,group,zarr3,zipdaf11"  # the ZIP kinds


def make_source(kind, directory, fixtures):
    name, fixture, suffix = KINDS[kind]
    path = os.path.join(directory, name)
    if kind == "group":  # two data sets (g1, g2) from the fixture's entries, stored
        with zipfile.ZipFile(os.path.join(fixtures, fixture)) as z, zipfile.ZipFile(
            path, "w", zipfile.ZIP_STORED
        ) as out:
            out.writestr(".zgroup", '{"zarr_format":2}')
            out.writestr(".zattrs", "{}")
            for group in ["g1", "g2"]:
                for info in z.infolist():
                    out.writestr(f"{group}/{info.filename}", z.read(info))
    elif kind in DIR_KINDS:  # the fixtures are read-only: writable copies
        shutil.copytree(os.path.join(fixtures, fixture), path, copy_function=shutil.copyfile)
        for root, dirs, _ in os.walk(path):
            for name in dirs + ["."]:
                os.chmod(os.path.join(root, name), 0o755)
    else:
        shutil.copyfile(os.path.join(fixtures, fixture), path)
    return path, path + suffix


def source_size(path):
    if not os.path.isdir(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


def check_source(kind, path):
    """(problems, duplicate names) of the source: the archive check for a ZIP, the directory
    check (nothing left of a swap, no stray file, a valid data set) for a directory."""
    return (check_directory(path), []) if kind in DIR_KINDS else check_archive(path)


def committed_names(kind, path):
    """The properties in the source (a staged file of one of them was left behind)."""
    if kind not in DIR_KINDS:
        with zipfile.ZipFile(path) as z:
            return {chunk_owner(e) for e in z.namelist()}
    top = os.path.join(path, "matrices", "crash_rows")
    return {n.split(".")[0] for _, _, files in os.walk(top) for n in files} | {
        os.path.basename(r) for r, _, files in os.walk(top) if ".zarray" in files}


def chunk_owner(entry):
    """The property an archive entry belongs to: the node of a matrix chunk (`P/0.0` in Zarr v2,
    `P/c/0/0` in v3), else the entry's own name without its suffix."""
    for chunk in ("/0.0", "/c/0/0"):
        if entry.endswith(chunk):
            return entry[: -len(chunk)].rsplit("/", 1)[-1]
    return entry.rsplit("/", 1)[-1].split(".")[0]


def inject(kind, path, how, name):
    """Damages the source on purpose (`--inject`), to show that the campaign catches it:
    `flip-byte` flips a byte of property `name`'s payload, `drop` rewrites the archive
    without `name`'s entries (a valid archive that lost an acknowledged write)."""
    if kind in DIR_KINDS:
        return inject_directory(how, name, path)
    mine = lambda entry: f"/{name}/" in f"/{entry}" or f"/{name}." in f"/{entry}"
    with zipfile.ZipFile(path) as z:
        infos = [i for i in z.infolist() if mine(i.filename)]
        if how == "flip-byte":
            target = max(infos, key=lambda i: i.file_size)
            with open(path, "r+b") as f:
                f.seek(target.header_offset + 26)
                n, m = struct.unpack("<HH", f.read(4))
                at = target.header_offset + 30 + n + m + target.compress_size // 2
                f.seek(at)
                byte = f.read(1)
                f.seek(at)
                f.write(bytes([byte[0] ^ 0x40]))
        else:
            rewritten = path + ".rewritten"
            with zipfile.ZipFile(rewritten, "w") as out:
                for info in z.infolist():
                    if not mine(info.filename):
                        out.writestr(info, z.read(info), compress_type=info.compress_type)
            os.replace(rewritten, path)
    print(f"  injected: {how} on {name} ({len(infos)} entries)", flush=True)

def inject_directory(how, name, path):
    """`--inject` on a directory source: flips a byte in the middle of the largest file of
    property `name`, or removes its files (a valid data set without that write)."""
    top = os.path.join(path, "matrices", "crash_rows")
    mine = [os.path.join(r, f) for r, _, fs in os.walk(top) for f in fs
            if f.split(".")[0] == name or os.path.basename(r) == name]
    if how == "flip-byte":
        target = max(mine, key=os.path.getsize)
        with open(target, "r+b") as f:
            f.seek(os.path.getsize(target) // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0x40]))
    else:
        for r, dirs, _ in os.walk(top):
            if name in dirs:
                shutil.rmtree(os.path.join(r, name))
        for f in mine:
            if os.path.exists(f):
                os.remove(f)
    print(f"  injected: {how} on {name} ({len(mine)} files)", flush=True)
