#!/usr/bin/python3
"""The baseline of bench/planes/labels.sh: what a scipy user runs for
per-label statistics of a volume: scipy.ndimage's sum, mean,
standard_deviation, minimum, maximum over every label, np.bincount for the
voxel counts and find_objects for the bounding boxes, from the raw files.

    labels_baseline.py VOLUME.raw LABELS.raw SIDE [TYPE]
"""
import sys

import numpy as np
from scipy import ndimage

side = int(sys.argv[3])
vol = np.fromfile(sys.argv[1], sys.argv[4] if len(sys.argv) > 4 else "float32").reshape(side, side, side)
labels = np.fromfile(sys.argv[2], np.uint16).reshape(side, side, side)
index = np.arange(int(labels.max()) + 1)
counts = np.bincount(labels.ravel())
sums = ndimage.sum(vol, labels, index)
means = ndimage.mean(vol, labels, index)
stds = ndimage.standard_deviation(vol, labels, index)
mins = ndimage.minimum(vol, labels, index)
maxs = ndimage.maximum(vol, labels, index)
boxes = ndimage.find_objects(labels)  # labels 1 and up (0 is background to scipy)
print(f"baseline: {len(index)} labels, voxels of label 7 {counts[7]}, sum {float(sums[7]):.6f}, "
      f"min {float(mins[7]):.6f}, max {float(maxs[7]):.6f}, box of label 7 {boxes[6]}")
