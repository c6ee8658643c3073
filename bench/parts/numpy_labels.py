#!/usr/bin/python3
"""The numpy baseline for per-label statistics: count, sum, sum of squares,
min and max per label and channel of an 8000x6000 RGB uint8 image with
65,536 labels (a 256x256 grid of blocks, as imgstat-parts-bench uses), by
np.bincount and np.minimum/maximum.at. Median of 3 runs, in ms."""
import sys
import time

import numpy as np

w, h = (int(v) for v in (sys.argv[1:3] if len(sys.argv) > 2 else (8000, 6000)))
rng = np.random.default_rng(5)
img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
labels = ((np.arange(h)[:, None] * 256 // h) * 256 + np.arange(w)[None, :] * 256 // w).astype(np.int64).ravel()


def stats(with_extremes):
    out = []
    for c in range(3):
        x = img[:, :, c].ravel().astype(np.int64)
        n = np.bincount(labels, minlength=65536)
        s = np.bincount(labels, weights=x, minlength=65536)
        q = np.bincount(labels, weights=x * x, minlength=65536)
        if with_extremes:
            mn = np.full(65536, 255)
            mx = np.zeros(65536, np.int64)
            np.minimum.at(mn, labels, x)
            np.maximum.at(mx, labels, x)
        out.append((n, s, q))
    return out


for name, extremes in (("count, sum, sum of squares (bincount)", False), ("and min, max (ufunc.at)", True)):
    t = []
    for _ in range(3):
        t0 = time.perf_counter()
        stats(extremes)
        t.append((time.perf_counter() - t0) * 1e3)
    print(f"numpy, 65,536 labels, 3 channels, {name}: {sorted(t)[1]:.0f} ms")
