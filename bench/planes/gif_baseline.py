#!/usr/bin/python3
"""The baseline of bench/planes/gif.sh: what a Pillow user runs for an
animation's statistics frame by frame (ImageSequence, each frame as RGB,
ImageStat's count, sum, mean, stddev, extrema and histogram), printed so
that the run compares it with imgstat's answer.

    gif_baseline.py FILE.gif
"""
import sys

from PIL import Image, ImageSequence, ImageStat

frames, total = 0, [0, 0, 0]
with Image.open(sys.argv[1]) as im:
    for frame in ImageSequence.Iterator(im):
        s = ImageStat.Stat(frame.convert("RGB"))
        s.count, s.mean, s.stddev, s.extrema  # computed lazily: ask for each
        total = [t + x for t, x in zip(total, s.sum)]
        frames += 1
print(f"baseline: {frames} frames, sums {[int(t) for t in total]}")
