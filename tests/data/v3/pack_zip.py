"""Packs directories into one ZIP archive (stored entries), each under a group prefix:
    python3 pack_zip.py ARCHIVE DIR=PREFIX/ [DIR=PREFIX/ ...]
Used by the tests to build multi-data-set `.dafs.zarr.zip` archives from the fixtures."""
import os
import sys
import zipfile

with zipfile.ZipFile(sys.argv[1], "w") as z:
    for pair in sys.argv[2:]:
        src, prefix = pair.split("=")
        for root, dirs, files in sorted(os.walk(src)):
            for name in sorted(files):
                full = os.path.join(root, name)
                z.write(full, prefix + os.path.relpath(full, src))
