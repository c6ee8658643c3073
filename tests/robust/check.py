#!/usr/bin/python3
"""Robust statistics (--stats robust) through imgstat-client --local and a
live server, against astropy.stats.sigma_clipped_stats, sigma_clip and
median_absolute_deviation over the same samples.

    check.py SERVER_BIN CLIENT_BIN WORK

Images written here (uint8 RGB with outliers, uint16 and int16 gray with
outliers at the type's ends, constant, one pixel) and every 8- and 16-bit
PNG and PNM of the corpus whose channels OpenCV reads as imgstat does, under
astropy's defaults and other clippings (sigma 2 until nothing is left out;
mean and MAD-std); the kept count, rounds and median equal, mean and std
within 1e-12 relative. Float32 images (FITS; a TIFF with NaN, infinities and
outliers) too; merging float samples over images is refused (UNIMPLEMENTED).
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from live_server import start_server  # noqa: E402
from verdicts import close, equal, fail, finish  # noqa: E402

try:
    import cv2
    import numpy as np
    from astropy.io import fits
    from astropy.stats import median_absolute_deviation, sigma_clip, sigma_clipped_stats
except ImportError as e:  # scripts/install-deps installs python3-astropy, -opencv, -numpy
    print("skipped:", e)
    sys.exit(77)

server_bin, client_bin, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
corpus = os.environ.get("IMGSTAT_CORPUS", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                                        "shared", "corpus"))
CLIPS = [  # (imgstat flags, astropy keywords)
    ([], dict(sigma=3, maxiters=5, cenfunc="median", stdfunc="std")),
    (["--sigma", "2", "--maxiters", "-1"], dict(sigma=2, maxiters=None, cenfunc="median", stdfunc="std")),
    (["--sigma-lower", "1.5", "--sigma-upper", "4", "--cenfunc", "mean", "--stdfunc", "mad_std", "--maxiters", "10"],
     dict(sigma_lower=1.5, sigma_upper=4, maxiters=10, cenfunc="mean", stdfunc="mad_std")),
]


def run(args):
    out = subprocess.run([client_bin, "--json", "--stats", "robust", *args], capture_output=True, text=True, timeout=120)
    return out


def channels_of(path):
    """The file's samples per channel as imgstat names them, or None."""
    a = cv2.imread(path, cv2.IMREAD_UNCHANGED)
    if a is None or a.dtype not in (np.uint8, np.uint16, np.int16, np.float32):
        return None
    def finite(v):  # NaN and infinities are never samples
        return v[np.isfinite(v)] if v.dtype == np.float32 else v
    if a.ndim == 2:
        return [finite(a.ravel())]
    order = {3: [2, 1, 0], 4: [2, 1, 0, 3]}.get(a.shape[2])
    return [finite(a[:, :, i].ravel()) for i in order] if order else None


def check(label, where, path, samples, flags, kw):
    out = run(where + flags + [path])
    if out.returncode != 0:
        return fail(f"{label}: exit {out.returncode}: {out.stderr.strip()[:300]}")
    d = json.loads(out.stdout)
    if d["channel_count"] != len(samples):
        return fail(f"{label}: {d['channel_count']} channels, OpenCV {len(samples)}")
    for c, v in enumerate(samples):
        r = d["channels"][c]["robust"]
        x = v.astype(np.float64)
        # sigma_clipped_stats describes the samples that survive every round
        # (sigma_clip's masked=False), not the data masked by the last
        # round's bounds (masked=True: more, where the bounds widened).
        kept = sigma_clip(x, masked=False, **kw)
        what = f"{label} channel {c} {flags}"
        equal(r["count"], int(kept.size), what + " kept")
        equal(r["mad"], float(median_absolute_deviation(x)), what + " MAD")
        if kept.size == 0:
            equal((r["mean"], r["median"], r["stddev"]), (None, None, None), what + " stats of nothing")
            continue
        equal(r["median"], float(np.median(kept)), what + " median")
        close(r["mean"], float(np.mean(kept)), 1e-12, what + " mean (numpy)")
        std = float(np.std(kept))
        close(r["stddev"], std, 1e-12, what + " stddev (numpy)") if std else equal(r["stddev"], 0.0, what + " stddev")
        # astropy's own figures: with bottleneck installed its nanmean and
        # nanstd add naively (about n * 2^-53 relative), numpy pairwise.
        mean, median, std = sigma_clipped_stats(x, **kw)
        equal(r["median"], float(median), what + " median (astropy)")
        close(r["mean"], float(mean), 1e-10, what + " mean (astropy)")
        close(r["stddev"], float(std), 1e-10, what + " stddev (astropy)") if std else None
        equal(r["clipped_low"] + r["clipped_high"] + r["count"], x.size, what + " counts add up")
        equal(r["clipped_low"], int((x < kept.min()).sum()), what + " left out below")
    return d


rng = np.random.default_rng(53)
made = []
rgb = np.clip(rng.normal(120, 30, (97, 131, 3)), 0, 255).astype(np.uint8)
rgb[rng.random(rgb.shape[:2]) < 0.03] = 255
cv2.imwrite(os.path.join(work, "rgb.png"), rgb)
made.append("rgb.png")
g16 = np.clip(rng.normal(30000, 900, (61, 211)), 0, 65535).astype(np.uint16)
g16[rng.random(g16.shape) < 0.02] = 65535
g16[rng.random(g16.shape) < 0.01] = 0
cv2.imwrite(os.path.join(work, "gray16.png"), g16)
made.append("gray16.png")
cv2.imwrite(os.path.join(work, "constant.png"), np.full((13, 17), 77, np.uint8))
made.append("constant.png")
cv2.imwrite(os.path.join(work, "one.png"), np.full((1, 1), 200, np.uint8))
made.append("one.png")
i16 = np.clip(rng.normal(-200, 400, (37, 53)), -32768, 32767).astype(np.int16)
i16[rng.random(i16.shape) < 0.02] = -32768
fits.PrimaryHDU(i16).writeto(os.path.join(work, "int16.fits"), overwrite=True)
f32 = rng.normal(0, 1, (9, 11)).astype(np.float32)
fits.PrimaryHDU(f32).writeto(os.path.join(work, "float.fits"), overwrite=True)
# float32 with NaN, infinities and outliers, as a TIFF
sky = rng.normal(1000, 30, (73, 101)).astype(np.float32)
sky[rng.random(sky.shape) < 0.03] = 1e6
sky[rng.random(sky.shape) < 0.01] = np.nan
sky[rng.random(sky.shape) < 0.005] = np.inf
cv2.imwrite(os.path.join(work, "sky.tiff"), sky)
made.append("sky.tiff")

n = 0
for name in made:
    samples = channels_of(os.path.join(work, name))
    for flags, kw in CLIPS:
        check(name, ["--local"], os.path.join(work, name), samples, flags, kw)
        n += 1
for flags, kw in CLIPS:  # FITS int16 (BZERO 0): the stored values are the values
    check("int16.fits", ["--local"], os.path.join(work, "int16.fits"), [i16.ravel()], flags, kw)
    check("float.fits", ["--local"], os.path.join(work, "float.fits"), [f32.ravel()], flags, kw)
    n += 2
for folder in ("png", "pnm"):
    for name in sorted(os.listdir(os.path.join(corpus, folder))):
        path = os.path.join(corpus, folder, name)
        samples = channels_of(path)
        if samples is None:
            continue
        probe = run(["--local", path])
        if probe.returncode != 0:
            continue
        d = json.loads(probe.stdout)
        if d["channel_count"] != len(samples) or d.get("facts", {}).get("planes", 1) > 1:
            continue  # read otherwise (palette, gray and alpha, an animation's frames): the corpus test holds those
        for flags, kw in CLIPS[:2]:
            check(name, ["--local"], path, samples, flags, kw)
            n += 1

server, address = start_server(server_bin, work)
try:
    for name in ("rgb.png", "gray16.png"):
        for flags, kw in CLIPS:
            check(name + " (server)", ["--server", address], os.path.join(work, name),
                  channels_of(os.path.join(work, name)), flags, kw)
            n += 1
    # --aggregate: the dataset's robust statistics from its merged value counts.
    out = run(["--server", address, "--aggregate", os.path.join(work, "gray16.png"), os.path.join(work, "gray16.png")])
    d = json.loads(out.stdout) if out.returncode == 0 else None
    if d is None:
        fail("--aggregate --stats robust: " + out.stderr[:300])
    else:
        x = np.concatenate([g16.ravel(), g16.ravel()]).astype(np.float64)
        kept = sigma_clip(x, masked=False, sigma=3, maxiters=5)
        r = d["channels"][0]["robust"]
        equal((r["count"], r["median"], r["mad"]), (int(kept.size), float(np.median(kept)),
                                                    float(median_absolute_deviation(x))), "--aggregate of two images")
        close(r["stddev"], float(np.std(kept)), 1e-12, "--aggregate's stddev")
    for flags, kw in CLIPS:
        check("sky.tiff (server)", ["--server", address], os.path.join(work, "sky.tiff"),
              channels_of(os.path.join(work, "sky.tiff")), flags, kw)
        n += 1
    # Float samples merged over images are refused, clearly.
    refused = run(["--server", address, "--aggregate", os.path.join(work, "float.fits"), os.path.join(work, "float.fits")])
    equal(refused.returncode != 0 and "UNIMPLEMENTED" in refused.stderr + refused.stdout and "float32" in refused.stderr + refused.stdout,
          True, "float samples' robust statistics merged over images refused: " + (refused.stderr + refused.stdout)[:300])
finally:
    server.terminate()
    server.wait()
finish(f"robust statistics: {n} images and clippings against astropy")
