#!/usr/bin/python3
"""The baseline of bench/planes/run.sh: what a tifffile user runs for a
stack's statistics (tifffile.imread of every page into one array, then numpy
min, max, sum, mean, std and a 256-bin histogram), printed so that the run
compares it with imgstat's answer.

    baseline.py FILE.tif
"""
import sys

import numpy as np
import tifffile

a = tifffile.imread(sys.argv[1], key=slice(None))  # every page, not the first series alone
hist, _ = np.histogram(a, bins=256, range=(0, 65536))
print(f"baseline: {a.shape[0]} pages, sum {int(a.sum(dtype=np.uint64))}, min {a.min()}, max {a.max()}, "
      f"mean {a.mean():.6f}, std {a.std():.6f}, histogram total {int(hist.sum())}")
