#!/usr/bin/env python3
"""Writes an uncompressed multi-page uint16 TIFF of random pixels without
tifffile (the GPU machine has numpy, not tifffile): PAGES pages of WxH, each
in strips of 64 rows, each page's directory after its pixels; a BigTIFF
where the file would pass 4 GB.

    write_stack.py OUT PAGES WIDTH HEIGHT [SEED]
"""
import struct
import sys

import numpy as np

out, pages, w, h = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(int(sys.argv[5]) if len(sys.argv) > 5 else 49)
rows = 64
strips = (h + rows - 1) // rows
big = pages * w * h * 2 > 4_000_000_000
off, offs = ("Q", "Q") if big else ("I", "I")  # an offset's format, in the header and the arrays
with open(out, "wb") as f:
    # The first directory's offset, filled below.
    f.write(b"II+\0" + struct.pack("<HHQ", 8, 0, 0) if big else b"II*\0" + struct.pack("<I", 0))
    link = 8 if big else 4  # where the offset of the next directory goes
    for _ in range(pages):
        page = rng.integers(0, 4096, (h, w), dtype=np.uint16)
        data_at = f.tell()
        f.write(page.tobytes())
        offsets = [data_at + s * rows * w * 2 for s in range(strips)]
        counts = [min(rows, h - s * rows) * w * 2 for s in range(strips)]
        arrays_at = f.tell()
        f.write(struct.pack(f"<{strips}{offs}", *offsets) + struct.pack(f"<{strips}{offs}", *counts))
        ifd_at = f.tell()
        long_ = 16 if big else 4  # LONG8 in a BigTIFF
        size = 8 if big else 4
        entries = [(256, 4, 1, w), (257, 4, 1, h), (258, 3, 1, 16), (259, 3, 1, 1), (262, 3, 1, 1),
                   (273, long_, strips, arrays_at if strips > 1 else offsets[0]), (277, 3, 1, 1), (278, 4, 1, rows),
                   (279, long_, strips, arrays_at + size * strips if strips > 1 else counts[0])]
        f.write(struct.pack("<Q" if big else "<H", len(entries)))
        for tag, typ, n, v in entries:
            f.write(struct.pack("<HHQQ" if big else "<HHII", tag, typ, n, v))
        next_at = f.tell()
        f.write(struct.pack("<" + off, 0))
        f.seek(link)
        f.write(struct.pack("<" + off, ifd_at))
        f.seek(0, 2)
        link = next_at
