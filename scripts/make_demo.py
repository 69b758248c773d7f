#!/usr/bin/env python3
"""Writes a small single-cell style Daf data set as a seed ZarrDaf ZIP (`NAME.daf.zarr.zip`),
with nothing but the Python standard library: 2,000 cells x 500 genes, a dense Float32 matrix, a
sparse UInt16 UMI matrix, string, numeric and sparse Bool vectors, and scalars."""
import json
import random
import struct
import sys
import zipfile

CELLS, GENES = 2000, 500
rng = random.Random(1)


def zarray(dtype, shape, strings=False):
    return json.dumps({"dtype": dtype, "filters": [{"id": "vlen-utf8"}] if strings else None, "shape": shape,
                       "order": "C", "zarr_format": 2, "chunks": shape, "fill_value": None, "compressor": None},
                      separators=(",", ":"))


def vlen(items):
    out = [struct.pack("<I", len(items))]
    for item in items:
        data = item.encode()
        out += [struct.pack("<I", len(data)), data]
    return b"".join(out)


def main(path):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        def group(p):
            prefix = p + "/" if p else ""
            z.writestr(prefix + ".zgroup", '{"zarr_format":2}')
            z.writestr(prefix + ".zattrs", "{}")

        def array(p, dtype, shape, chunk, strings=False):
            z.writestr(p + "/.zarray", zarray(dtype, shape, strings))
            z.writestr(p + "/.zattrs", "{}")
            z.writestr(p + "/" + ".".join("0" * len(shape)), chunk)

        group("")
        array("daf", "|u1", [2], bytes([1, 0]))
        for g in ("scalars", "axes", "vectors", "matrices", "vectors/cell", "vectors/gene"):
            group(g)
        for r in ("cell", "gene"):
            group("matrices/" + r)
            for c in ("cell", "gene"):
                group(f"matrices/{r}/{c}")
        cells = [f"AAAC{i:06d}-1" for i in range(CELLS)]
        genes = [f"GENE{i:04d}" for i in range(GENES)]
        array("scalars/title", "|O", [1], vlen(["demo PBMC-like data set"]), strings=True)
        array("scalars/n_donors", "<i8", [1], struct.pack("<q", 3))
        array("axes/cell", "|O", [CELLS], vlen(cells), strings=True)
        array("axes/gene", "|O", [GENES], vlen(genes), strings=True)
        array("vectors/cell/batch", "|O", [CELLS], vlen([rng.choice(["b1", "b2", "b3"]) for _ in cells]), strings=True)
        array("vectors/cell/score", "<f4", [CELLS], struct.pack(f"<{CELLS}f", *(rng.random() for _ in cells)))
        markers = sorted(rng.sample(range(1, GENES + 1), 40))
        group("vectors/gene/is_marker")
        array("vectors/gene/is_marker/nzind", "<i8", [len(markers)], struct.pack(f"<{len(markers)}q", *markers))
        # Dense Float32 cell x gene fractions: Julia column-major = Zarr C order of [genes, cells].
        fractions = struct.pack(f"<{CELLS * GENES}f", *(rng.random() for _ in range(CELLS * GENES)))
        array("matrices/cell/gene/fraction", "<f4", [GENES, CELLS], fractions)
        # Sparse UInt16 UMIs, CSC over genes (columns), 1-based, Int32 indices.
        colptr, rowval, nzval = [1], [], []
        for _ in range(GENES):
            rows = sorted(rng.sample(range(1, CELLS + 1), rng.randint(0, 60)))
            rowval += rows
            nzval += [rng.randint(1, 500) for _ in rows]
            colptr.append(len(rowval) + 1)
        group("matrices/cell/gene/umis")
        array("matrices/cell/gene/umis/colptr", "<i4", [GENES + 1], struct.pack(f"<{len(colptr)}i", *colptr))
        array("matrices/cell/gene/umis/rowval", "<i4", [len(rowval)], struct.pack(f"<{len(rowval)}i", *rowval))
        array("matrices/cell/gene/umis/nzval", "<u2", [len(nzval)], struct.pack(f"<{len(nzval)}H", *nzval))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "demo.daf.zarr.zip")
