"""The decode-cache rows of scripts/bench (issue 12, point 4): reading 1 GiB of compressed foreign data through
both views keeps the daemon's RssAnon under the decode cache (`-o decode_cache=`, default 256 MiB) + 64 MiB.
Two sources, built once under $DAF_BENCH_DIR:
  - decode.daf.zarr: a ZarrDaf v2 directory whose 65,536 x 4,096 Float32 matrix (1 GiB) is a Zarr v2 array written
    by zarr-python 3 in 256 zlib-compressed chunks of 16 x 65,536 (4 MiB decoded each);
  - decode.daf.zarr.zip: a ZarrDaf ZIP whose matrix is one deflated member of 1 GiB.
Each (source, view) is mounted afresh, read once with dd (FilesDaf view: `fraction.data`; Zarr view: the array's
one chunk `fraction/0.0`) while the daemon's RssAnon is sampled every 10 ms; the peak is the row's figure, and
the read's bytes are checked at three places against the generator.

    .venv/zarr3/bin/python scripts/bench_decode.py [--rounds R]
"""
import os
import sys
import zipfile

import numpy as np

CELLS, GENES = 65536, 4096
CHUNK = 16  # genes per Zarr chunk: 4 MiB decoded, 256 chunks
CACHE_MIB = 256  # daf-mount's default decode_cache
SLACK_MIB = 64
MATRIX = "matrices/cell/gene/fraction"


def slab(k):
    """Genes CHUNK*k .. CHUNK*(k+1) of the matrix, (CHUNK, CELLS) Float32: small integers, so it compresses."""
    rng = np.random.default_rng(1000 + k)
    return rng.integers(0, 64, (CHUNK, CELLS), dtype=np.uint8).astype(np.float32)


def metadata(bench, put):
    """The ZarrDaf v2 groups and arrays around the matrix; `put(key, bytes or str)` writes one key."""
    put(".zgroup", '{"zarr_format":2}')
    put(".zattrs", "{}")
    put("daf/.zarray", bench.zarray("|u1", [2]))
    put("daf/.zattrs", "{}")
    put("daf/0", bytes([1, 0]))
    groups = ["scalars", "axes", "vectors", "matrices", "vectors/cell", "vectors/gene", "matrices/cell",
              "matrices/gene", "matrices/cell/cell", "matrices/cell/gene", "matrices/gene/cell", "matrices/gene/gene"]
    for g in groups:
        put(g + "/.zgroup", '{"zarr_format":2}')
        put(g + "/.zattrs", "{}")
    for axis, n in (("cell", CELLS), ("gene", GENES)):
        put(f"axes/{axis}/.zarray", bench.zarray("|O", [n], True))
        put(f"axes/{axis}/.zattrs", "{}")
        put(f"axes/{axis}/0", bench.vlen([(axis[0] + str(i)).encode() for i in range(n)]))


def make_zarr_dir(bench, path):
    """The ZarrDaf v2 directory with the zlib-chunked matrix (written by zarr-python 3 and numcodecs)."""
    if os.path.exists(os.path.join(path, MATRIX, ".zarray")):
        return
    import numcodecs
    import zarr
    bench.log("building", path)

    def put(key, data):
        os.makedirs(os.path.dirname(os.path.join(path, key)), exist_ok=True)
        with open(os.path.join(path, key), "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
    metadata(bench, put)
    array = zarr.create_array(os.path.join(path, MATRIX), shape=(GENES, CELLS), chunks=(CHUNK, CELLS),
                              dtype="<f4", zarr_format=2, compressors=numcodecs.Zlib(level=1), fill_value=0,
                              overwrite=True)
    for k in range(GENES // CHUNK):
        array[k * CHUNK:(k + 1) * CHUNK] = slab(k)
    with open(os.path.join(path, MATRIX, ".zattrs"), "w") as f:
        f.write("{}")


def make_deflated_zip(bench, path):
    """The ZarrDaf ZIP whose matrix is one deflated 1 GiB member."""
    if os.path.exists(path):
        return
    bench.log("building", path)
    with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        metadata(bench, lambda key, data: z.writestr(bench.regular(key), data))
        z.writestr(bench.regular(MATRIX + "/.zarray"), bench.zarray("<f4", [GENES, CELLS]))
        z.writestr(bench.regular(MATRIX + "/.zattrs"), "{}")
        info = bench.regular(MATRIX + "/0.0")
        info.compress_type = zipfile.ZIP_DEFLATED
        with z.open(info, "w", force_zip64=True) as member:
            for k in range(GENES // CHUNK):
                member.write(slab(k).tobytes())
    os.rename(path + ".tmp", path)


def check(path):
    """Compares three 4 MiB slabs of the mounted matrix `path` with the generator."""
    with open(path, "rb") as f:
        for k in (0, GENES // CHUNK // 2, GENES // CHUNK - 1):
            f.seek(k * CHUNK * CELLS * 4)
            if f.read(CHUNK * CELLS * 4) != slab(k).tobytes():
                raise RuntimeError(f"{path}: slab {k} differs from the generated data")


def decode_rows(bench, work, rounds, rows):
    """Measures the rows with scripts/bench.py's helpers (`bench`: Mount, dd, log, zarray, vlen, regular)."""
    from bench_packed import PeakRss
    sources = {"zlib-chunked Zarr v2 array (directory)": os.path.join(work, "decode.daf.zarr"),
               "deflated ZIP member": os.path.join(work, "decode.daf.zarr.zip")}
    make_zarr_dir(bench, sources["zlib-chunked Zarr v2 array (directory)"])
    make_deflated_zip(bench, sources["deflated ZIP member"])
    for label, source in sources.items():
        for view, member in (("files", "matrices/cell/gene/fraction.data"), ("zarr", MATRIX + "/0.0")):
            seconds, peaks = [], []
            for r in range(rounds):
                m = bench.Mount(source, "-o", "ro", "--view", view)
                try:
                    path = os.path.join(m.path, member)
                    if os.path.getsize(path) != GENES * CELLS * 4:
                        raise RuntimeError(f"{path}: st_size {os.path.getsize(path)}, not {GENES * CELLS * 4}")
                    with PeakRss(m.pids()) as peak:
                        seconds.append(bench.dd(path))
                    peaks.append(peak.peak / 1024)
                    if r == 0:
                        check(path)
                finally:
                    m.close()
            worst = max(peaks)
            figure = f"decode: daemon peak RssAnon reading 1 GiB, {label}, {view} view (dd {min(seconds):.2f} s)"
            bench.log(f"{figure}: {worst:.1f} MiB (target <= {CACHE_MIB + SLACK_MIB} MiB)")
            rows.append({"figure": figure, "mounted": worst, "native": None, "unit": "MiB", "ratio": None,
                         "target": f"<= {CACHE_MIB} + {SLACK_MIB} MiB", "met": worst <= CACHE_MIB + SLACK_MIB,
                         "seconds": seconds})


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench

    bench.run_alone(lambda parser: None, lambda args, row, rows: decode_rows(bench, bench.WORK, args.rounds, rows))


if __name__ == "__main__":
    main()
