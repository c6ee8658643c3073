#!/usr/bin/env python3
"""Writes an uncompressed multi-page uint16 TIFF of random pixels without
tifffile (the GPU machine has numpy, not tifffile): PAGES pages of WxH, each
in strips of 64 rows, each page's directory after its pixels.

    write_stack.py OUT PAGES WIDTH HEIGHT [SEED]
"""
import struct
import sys

import numpy as np

out, pages, w, h = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(int(sys.argv[5]) if len(sys.argv) > 5 else 49)
rows = 64
strips = (h + rows - 1) // rows
with open(out, "wb") as f:
    f.write(b"II*\0" + struct.pack("<I", 0))  # the first directory's offset, filled below
    link = 4  # where the offset of the next directory goes
    for _ in range(pages):
        page = rng.integers(0, 4096, (h, w), dtype=np.uint16)
        data_at = f.tell()
        f.write(page.tobytes())
        offsets = [data_at + s * rows * w * 2 for s in range(strips)]
        counts = [min(rows, h - s * rows) * w * 2 for s in range(strips)]
        arrays_at = f.tell()
        f.write(struct.pack(f"<{strips}I", *offsets) + struct.pack(f"<{strips}I", *counts))
        ifd_at = f.tell()
        entries = [(256, 4, 1, w), (257, 4, 1, h), (258, 3, 1, 16), (259, 3, 1, 1), (262, 3, 1, 1),
                   (273, 4, strips, arrays_at if strips > 1 else offsets[0]), (277, 3, 1, 1), (278, 4, 1, rows),
                   (279, 4, strips, arrays_at + 4 * strips if strips > 1 else counts[0])]
        f.write(struct.pack("<H", len(entries)))
        for tag, typ, n, v in entries:
            f.write(struct.pack("<HHII", tag, typ, n, v))
        next_at = f.tell()
        f.write(struct.pack("<I", 0))
        f.seek(link)
        f.write(struct.pack("<I", ifd_at))
        f.seek(0, 2)
        link = next_at
