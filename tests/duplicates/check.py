#!/usr/bin/python3
"""Hashes (--stats hashes) and duplicates (--aggregate --duplicates) through
imgstat-client --local and two live servers, against references computed
here.

    check.py SERVER_BIN CLIENT_BIN WORK

- phash: imagehash's phash as imagehash computes it (PIL's convert("L"),
  LANCZOS resize to 32x32, scipy.fftpack's DCT along both axes, the top-left
  8x8 against their median), for images made here and every 8-bit corpus
  JPEG, PNG, BMP and WebP PIL opens as L, LA, RGB, RGBA or P: equal hex.
- pixels: equal for the same pixels in PNG, BMP, TIFF, PPM and lossless
  WebP (decoders that store R, G, B and B, G, R), different for any other
  image, including one pixel changed.
- groups: a set made here (originals; copies in other formats; JPEG
  re-encodings; half-size resizes; small crops; unrelated images): the exact
  groups are the copies, the near groups each original with its
  re-encodings and resizes (phash within 4 bits), distance 0 groups equal
  phashes (cleanvision's near duplicates), no group holds two originals;
  the same answer from --local and from two servers.
"""
import glob
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from live_server import start_server  # noqa: E402
from verdicts import corpus_dir, equal, fail, finish  # noqa: E402

try:
    import numpy as np
    import scipy.fftpack
    from PIL import Image
except ImportError as e:  # scripts/install-deps installs python3-pil, -scipy, -numpy
    print("skipped:", e)
    sys.exit(77)

server_bin, client_bin, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
corpus = corpus_dir()


def phash_of(path):
    """imagehash.phash(Image.open(path)) as a hex string, as imagehash computes
    it, and whether a coefficient is within rounding of the median (a flat or
    symmetric image's zeros: scipy's FFT rounding decides those bits)."""
    image = Image.open(path).convert("L").resize((32, 32), Image.LANCZOS)
    pixels = np.asarray(image)
    dct = scipy.fftpack.dct(scipy.fftpack.dct(pixels, axis=0), axis=1)
    low = dct[:8, :8]
    median = np.median(low)
    bits = (low > median).flatten()
    tie = bool(np.min(np.abs(low - median)) <= 1e-9 * np.max(np.abs(low)))
    return "%016x" % int("".join("1" if b else "0" for b in bits), 2), tie


def phash(path):
    return phash_of(path)[0]


def hashes(where, files):
    out = subprocess.run([client_bin, *where, "--json", "--stats", "min_max,hashes", *files], capture_output=True,
                         text=True, timeout=600)
    got = {}
    for line in out.stdout.splitlines():
        j = json.loads(line)
        if j.get("ok"):
            got[j["file"]] = j.get("hashes", {})
        else:
            fail(f"{j['file']}: {j.get('code')} {j.get('error')}")
    return got


def made(seed, h=240, w=320):
    r = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    a = np.stack([np.sin(xx / r.uniform(10, 60) + r.uniform(0, 6)) * 80 + 120,
                  np.cos(yy / r.uniform(10, 60) + r.uniform(0, 6)) * 60 + 100,
                  ((xx * r.uniform(0.2, 1) + yy * r.uniform(0.2, 1)) / 2) % 255], -1)
    for _ in range(6):
        y, x = r.integers(0, h - 50), r.integers(0, w - 50)
        a[y:y + r.integers(20, 50), x:x + r.integers(20, 50)] = r.integers(0, 255, 3)
    a += r.normal(0, 6, a.shape)
    return np.clip(a, 0, 255).astype(np.uint8)


# The set: originals, copies in other formats (exact), re-encodings and
# resizes (near), crops (near or not: not asserted), unrelated images.
originals, exact_want, near_want = [], [], []
for i in range(8):
    a = made(i)
    o = os.path.join(work, f"img{i}.png")
    Image.fromarray(a).save(o)
    originals.append(o)
    copies = [o]
    for ext in ("bmp", "tif", "ppm", "webp"):
        c = os.path.join(work, f"img{i}-copy.{ext}")
        Image.fromarray(a).save(c, **({"lossless": True} if ext == "webp" else {}))
        copies.append(c)
    exact_want.append(sorted(copies))
    near = list(copies)
    jpg = os.path.join(work, f"img{i}-q85.jpg")
    Image.fromarray(a).save(jpg, quality=85)
    half = os.path.join(work, f"img{i}-half.png")
    Image.fromarray(a).resize((160, 120), Image.BILINEAR).save(half)
    near += [jpg, half]
    near_want.append(sorted(near))
    Image.fromarray(a[4:-4, 5:-5]).save(os.path.join(work, f"img{i}-crop.png"))
# One pixel changed: not an exact duplicate.
b = made(0)
b[17, 33, 1] ^= 1
Image.fromarray(b).save(os.path.join(work, "img0-onepixel.png"))
files = sorted(glob.glob(os.path.join(work, "img*")))

# Every image's hashes: the phash imagehash's, pixels by content.
got = hashes(["--local"], files)
for f in files:
    equal(got.get(f, {}).get("phash"), phash(f), f"{os.path.basename(f)}: phash")
for group in exact_want:
    equal(len({got[f]["pixels"] for f in group}), 1, f"{os.path.basename(group[0])}'s copies: one pixel hash")
pixel_hashes = [got[g[0]]["pixels"] for g in exact_want] + [got[os.path.join(work, "img0-onepixel.png")]["pixels"]]
equal(len(set(pixel_hashes)), len(pixel_hashes), "different images: different pixel hashes")
equal(len(got[files[0]]["pixels"]), 32, "the pixel hash: 128 bits in hex")

# The corpus: 8-bit files PIL opens in the modes imagehash converts as imgstat.
checked = ties = 0
for path in sorted(glob.glob(os.path.join(corpus, "*", "*"))):
    if os.path.basename(os.path.dirname(path)) not in ("jpeg", "png", "bmp", "webp") or "/bad/" in path:
        continue
    try:
        with Image.open(path) as im:
            if im.mode not in ("L", "LA", "RGB", "RGBA", "P") or getattr(im, "n_frames", 1) > 1:
                continue
            want, tie = phash_of(path)
    except Exception:
        continue
    out = hashes(["--local"], [path]).get(path, {})
    if "phash" not in out:  # not 8-bit as imgstat decodes it (a 16-bit PNG PIL opens as 8-bit P/L: none here)
        continue
    if tie:  # a coefficient at the median, within rounding: scipy's FFT decides its bit
        ties += 1
        continue
    equal(out["phash"], want, f"corpus {os.path.basename(path)}: phash")
    checked += 1
if checked < 40:
    fail(f"only {checked} corpus files' phashes checked")


def groups(where, distance=4):
    out = subprocess.run([client_bin, *where, "--json", "--aggregate", "--duplicates", "--duplicates-distance",
                          str(distance), "--stats", "min_max", *files], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        fail(f"--duplicates {where}: exit {out.returncode}: {out.stderr[:300]}")
        return None
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    d = [line["dataset_duplicates"] for line in lines if "dataset_duplicates" in line]
    return d[0] if d else None


def check_groups(d, what):
    if d is None:
        return fail(f"{what}: no dataset_duplicates line")
    equal(d["images"], len(files), f"{what}: images")
    equal(sorted(sorted(g) for g in d["exact"]), sorted(exact_want), f"{what}: exact groups")
    for want in near_want:
        having = [sorted(g) for g in d["near"] if want[0] in g]
        if len(having) != 1 or not set(want) <= set(having[0]):
            fail(f"{what}: {os.path.basename(want[0])}'s re-encodings and resizes are not one near group: {having}")
    for g in d["near"]:
        if len({f for f in g if os.path.basename(f).startswith("img") and f in originals}) > 1:
            fail(f"{what}: a near group holds two unrelated originals: {g}")


local = groups(["--local"])
check_groups(local, "--local")
# Distance 0: equal phashes, over distinct images.
zero = groups(["--local"], 0)
if zero is not None:
    by_phash = {}
    for f in files:
        by_phash.setdefault(got[f]["phash"], set()).add(got[f]["pixels"])
    want_groups = sum(1 for pixels in by_phash.values() if len(pixels) > 1)
    equal(len(zero["near"]), want_groups, "distance 0: near groups are the phashes shared by different images")
    for g in zero["near"]:
        equal(len({got[f]["phash"] for f in g}), 1, "distance 0: one phash a group")

# Refusals.
for args, words in ((["--duplicates", files[0]], "--aggregate"),
                    (["--aggregate", "--duplicates", "--partial-out", os.path.join(work, "p.bin"), files[0]], "--partial-out")):
    out = subprocess.run([client_bin, "--local", *args], capture_output=True, text=True, timeout=60)
    if out.returncode != 2 or words not in out.stderr:
        fail(f"{' '.join(args[:-1])}: want a usage error naming {words}, got {out.returncode}: {out.stderr[:200]}")
out = subprocess.run([client_bin, "--local", "--stats", "hashes", "--tiles", "2x2", files[0]], capture_output=True,
                     text=True, timeout=60)
if out.returncode == 0 or "UNIMPLEMENTED" not in out.stderr:
    fail(f"hashes of tiles: want UNIMPLEMENTED, got {out.returncode}: {out.stderr[:200]}")

# Two servers: the same groups, the same hashes.
server_a, address_a = start_server(server_bin, work, log_name="server-a.log")
server_b, address_b = start_server(server_bin, work, log_name="server-b.log")
try:
    remote = groups(["--server", f"{address_a},{address_b}"])
    check_groups(remote, "two servers")
    if remote is not None and local is not None:
        equal(sorted(map(sorted, remote["near"])), sorted(map(sorted, local["near"])), "two servers: near groups as --local")
    equal(hashes(["--server", address_a], files), got, "hashes through a server")
finally:
    for s in (server_a, server_b):
        s.terminate()
        s.wait(timeout=30)

finish(f"hashes and duplicates: {len(files)} images made here, {checked} corpus phashes ({ties} at a tie left out), "
       f"{len(local['exact']) if local else 0} exact and {len(local['near']) if local else 0} near groups")
