#!/usr/bin/python3
"""Quality measures over a dataset of small JPEGs: imgstat against the same
measures in Python, in the same run.

N (default 400) 500x375 RGB JPEGs of quality 90 (a smooth scene with noise),
made here. Timed, each the whole pass over the files, best of R (default 3):
- imgstat-client --local --json with the default statistics: the baseline
  pass without quality measures;
- the same with --stats quality added (default statistics + quality);
- the measures in Python, one process, as the peers compute them: OpenCV
  reads the file, Laplacian variance of the grey image, RMS contrast,
  colourfulness and exposure in numpy, and cleanvision's properties from the
  PIL image (brightness and its percentiles, blurriness of the 64-pixel
  thumbnail, entropy, aspect ratio: cleanvision's formulas), an MD5 of the
  pixels and imagehash's phash (PIL, scipy's DCT), grouped by dict;
- imgstat-client --local --aggregate, the default statistics, and the same
  with quality measures, hashes and --duplicates (issue 53's target pass).
fastdup's published figure (1,002 images/s on 32 cores over ImageNet-21K
resized, its README: 31 images/s per core) is the other baseline. Per-core
rates: imgstat's images/s over the cores it used (os.cpu_count()), the
Python pass's over one.

    quality_vs_numpy.py CLIENT_BIN [N] [R] [WORK]
"""
import hashlib
import math
import os
import subprocess
import sys
import time

import cv2
import numpy as np
import scipy.fftpack
from PIL import Image, ImageFilter, ImageStat

client = sys.argv[1]
count = int(sys.argv[2]) if len(sys.argv) > 2 else 400
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
work = sys.argv[4] if len(sys.argv) > 4 else "/tmp/imgstat-quality-bench"
os.makedirs(work, exist_ok=True)
rng = np.random.default_rng(53)
scene = cv2.resize(rng.integers(0, 256, (30, 40, 3), dtype=np.uint8), (500, 375), interpolation=cv2.INTER_CUBIC)
files = []
for i in range(count):
    path = os.path.join(work, f"img{i:05d}.jpg")
    if not os.path.exists(path):
        noisy = np.clip(scene.astype(np.int16) + rng.integers(-20, 20, scene.shape), 0, 255).astype(np.uint8)
        cv2.imwrite(path, noisy, [cv2.IMWRITE_JPEG_QUALITY, 90])
    files.append(path)


def brightness(r, g, b):
    return np.sqrt(0.241 * (r * r) + 0.691 * (g * g) + 0.068 * (b * b)) / 255


def python_measures(path):
    bgr = cv2.imread(path, cv2.IMREAD_UNCHANGED)
    grey = cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)
    out = {"laplacian_variance": cv2.Laplacian(grey, cv2.CV_64F).var(), "rms_contrast": grey.std() / 255}
    r, g, b = (bgr[:, :, i].astype(np.int64) for i in (2, 1, 0))
    rg, yb = r - g, 0.5 * (r + g) - b
    out["colourfulness"] = np.sqrt(rg.var() + yb.var()) + 0.3 * np.sqrt(rg.mean() ** 2 + yb.mean() ** 2)
    out["share_at_min"] = [(bgr[:, :, i] == 0).mean() for i in (2, 1, 0)]
    out["share_at_max"] = [(bgr[:, :, i] == 255).mean() for i in (2, 1, 0)]
    image = Image.open(path)
    mean = ImageStat.Stat(image).mean
    out["brightness"] = brightness(*mean[:3])
    out["percentiles"] = np.percentile(brightness(r, g, b), [1, 5, 10, 15, 90, 95, 99])
    ratio = max(image.width, image.height) / 64
    small = image.resize((max(int(image.width // ratio), 1), max(int(image.height // ratio), 1))) if ratio > 1 else image
    gray = small.convert("L")
    out["blurriness"] = math.sqrt(ImageStat.Stat(gray.filter(ImageFilter.FIND_EDGES)).var[0])
    out["blurriness_grayscale_std"] = np.std(gray.histogram())
    out["entropy"] = image.entropy()
    out["aspect_ratio"] = min(image.width / image.height, image.height / image.width)
    # Duplicates as cleanvision finds them: an MD5 of the pixels, imagehash's phash.
    out["md5"] = hashlib.md5(image.tobytes()).hexdigest()
    low = scipy.fftpack.dct(scipy.fftpack.dct(np.asarray(image.convert("L").resize((32, 32), Image.LANCZOS)), axis=0),
                            axis=1)[:8, :8]
    out["phash"] = (low > np.median(low)).flatten().tobytes()
    return out


def python_pass():
    exact, near = {}, {}
    for f in files:
        m = python_measures(f)
        exact.setdefault(m["md5"], []).append(f)
        near.setdefault(m["phash"], []).append(f)
    return exact, near


def best(fn):
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def imgstat(stats):
    def run():
        out = subprocess.run([client, "--local", "--json", *stats, *files], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        if out.returncode != 0:
            raise SystemExit(out.stderr)
    return run


cores = os.cpu_count()
base = best(imgstat([]))
quality = best(imgstat(["--stats", "min_max,sum,stddev,histogram,distribution,shape,summary,quality"]))
python = best(python_pass)
aggregate = best(imgstat(["--aggregate"]))
verdicts = best(imgstat(["--aggregate", "--duplicates", "--stats",
                         "min_max,sum,stddev,histogram,distribution,shape,summary,quality,hashes"]))
fastdup = 1002 / 32
rows = [
    ("imgstat --local, default statistics (baseline pass)", base, cores),
    ("imgstat --local, default statistics + quality", quality, cores),
    ("imgstat --local --aggregate, default statistics", aggregate, cores),
    ("imgstat --local --aggregate, + quality, hashes, --duplicates", verdicts, cores),
    ("Python: OpenCV + numpy + cleanvision's PIL formulas + hashes", python, 1),
]
print(f"{count} 500x375 RGB JPEGs (q90), {cores} cores, best of {rounds}")
print(f"{'pass':56} {'seconds':>8} {'images/s':>9} {'per core':>9}")
for name, t, c in rows:
    print(f"{name:56} {t:8.3f} {count / t:9.0f} {count / t / c:9.1f}")
print(f"{'fastdup, published (1,002/s on 32 cores)':56} {'':>8} {1002:9d} {fastdup:9.1f}")
q = count / quality / cores
print(f"quality pass / baseline pass: {base / quality:.2f}x its rate; per core {q / fastdup:.1f}x fastdup's, "
      f"{q / (count / python):.1f}x the Python version's")
v = count / verdicts / cores
print(f"--aggregate with quality, hashes and duplicates / without: {aggregate / verdicts:.2f}x its rate; per core "
      f"{v / fastdup:.1f}x fastdup's, {v / (count / python):.1f}x the Python version's")
