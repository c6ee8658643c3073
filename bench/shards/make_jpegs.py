"""N 500x375 RGB JPEGs (quality 90, sine bands and noise: about 100 KB each),
named 000000.jpg ..., into FOLDER: the dataset the shards and objects
benchmarks read.

    make_jpegs.py FOLDER N
"""
import sys

import numpy as np
from PIL import Image

folder, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(5)
base = [np.clip(128 + 80 * np.sin(np.mgrid[0:375, 0:500][1] / (30 + k)) + rng.normal(0, 20, (375, 500)), 0, 255)
        for k in range(16)]
for i in range(n):
    g = base[i % 16]
    rgb = np.stack([g, np.roll(g, i % 97, 1), np.roll(g, i % 89, 0)], -1).astype(np.uint8)
    Image.fromarray(rgb).save(f"{folder}/{i:06d}.jpg", quality=90)
