#!/usr/bin/python3
"""Quality measures (--stats quality) through imgstat-client --local and a
live server, against the same measures computed here: OpenCV's Laplacian
variance of cvtColor's grey image, numpy for contrast, colourfulness and
exposure, and cleanvision's properties as cleanvision computes them from a
PIL image (its formulas written out below with PIL, ImageStat and numpy, at
its default thresholds).

    check.py SERVER_BIN CLIENT_BIN WORK

Images written here: random RGB, RGBA (every alpha), gray and 16-bit ones
of odd sizes (1x1, 2x5, prime widths, a 1000x7 strip, sizes PIL shrinks for
the blurriness), constant black and white, gray stored as RGB, a blurred
photo-like image; then every 8- and 16-bit PNG and JPEG of the corpus of one
plane; and --aggregate's dataset verdicts (issue counts, the images
flagged, odd sizes by cleanvision's SizeProperty). Integer-built measures equal to 1e-12 relative (the Laplacian
variance, the contrast), cleanvision's properties to 1e-12 and its issues
equal. Floats and parts are refused (UNIMPLEMENTED).
"""
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from live_server import start_server  # noqa: E402
from verdicts import close, equal, fail, finish  # noqa: E402

try:
    import cv2
    import numpy as np
    from PIL import Image, ImageFilter, ImageStat
except ImportError as e:  # scripts/install-deps installs python3-opencv, -numpy, -pil
    print("skipped:", e)
    sys.exit(77)

server_bin, client_bin, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
corpus = os.environ.get("IMGSTAT_CORPUS", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                                        "shared", "corpus"))
REL = 1e-12


# ---- cleanvision 0.3's image properties (issue_managers/image_property.py) ----
def cv_brightness(r, g, b):
    return np.sqrt(0.241 * (r * r) + 0.691 * (g * g) + 0.068 * (b * b)) / 255


def cleanvision(image):
    out = {}
    stat = ImageStat.Stat(image)
    try:
        red, green, blue = stat.mean
    except ValueError:
        red, green, blue = stat.mean[0], stat.mean[0], stat.mean[0]
    out["brightness"] = float(cv_brightness(red, green, blue))
    imarr = np.asarray(image)
    if len(imarr.shape) == 3:
        r, g, b = (imarr[:, :, i].astype("int") for i in range(3))
        pixel_brightness = cv_brightness(r, g, b)
    else:
        pixel_brightness = imarr / 255.0
    percentiles = [1, 5, 10, 15, 90, 95, 99]
    for p, v in zip(percentiles, np.percentile(pixel_brightness, percentiles)):
        out[f"brightness_perc_{p}"] = float(v)
    out["dark_score"] = out["brightness_perc_99"]
    out["is_dark_issue"] = bool(out["dark_score"] < 0.32)
    out["light_score"] = 1 - out["brightness_perc_5"]
    out["is_light_issue"] = bool(out["light_score"] < 0.05)
    ratio = max(image.width, image.height) / 64
    if ratio > 1:
        resized = image.resize((max(int(image.width // ratio), 1), max(int(image.height // ratio), 1)))
    else:
        resized = image.copy()
    gray = resized.convert("L")
    edges = gray.filter(ImageFilter.FIND_EDGES)
    out["blurriness"] = float(np.sqrt(ImageStat.Stat(edges).var[0]))
    out["blurriness_grayscale_std"] = float(np.std(gray.histogram()))
    blur = 1 - np.exp(-1 * out["blurriness"] * 0.01)
    std = 1 - np.exp(-1 * out["blurriness_grayscale_std"] * 0.01)
    std = 0 if std <= 0.18 else std
    out["blurry_score"] = float(min(blur + std, 1))
    out["is_blurry_issue"] = bool(out["blurry_score"] < 0.29)
    out["entropy"] = image.entropy()
    out["low_information_score"] = min(0.1 * out["entropy"], 1)
    out["is_low_information_issue"] = bool(out["low_information_score"] < 0.3)
    w, h = image.size
    out["aspect_ratio"] = min(w / h, h / w)
    out["odd_aspect_ratio_score"] = out["aspect_ratio"]
    out["is_odd_aspect_ratio_issue"] = bool(out["aspect_ratio"] < 0.35)
    out["size"] = math.sqrt(w) * math.sqrt(h)
    return out


def expected(a):
    """The measures of OpenCV's pixels a (as cv2.imread gives them: B, G, R(, A))."""
    maxv = float(np.iinfo(a.dtype).max)
    if a.ndim == 2:
        grey, channels, rgb = a, [a], None
    elif a.shape[2] == 2:
        grey, channels, rgb = a[:, :, 0], [a[:, :, 0], a[:, :, 1]], None
    else:
        grey = cv2.cvtColor(a, cv2.COLOR_BGR2GRAY if a.shape[2] == 3 else cv2.COLOR_BGRA2GRAY)
        rgb = a[:, :, [2, 1, 0]].astype(np.int64)
        channels = [a[:, :, i] for i in ([2, 1, 0] if a.shape[2] == 3 else [2, 1, 0, 3])]
    e = {
        "laplacian_variance": float(cv2.Laplacian(grey, cv2.CV_64F).var()),
        "rms_contrast": float(grey.astype(np.float64).std() / maxv),
        "share_at_min": [float(np.mean(c == 0)) for c in channels],
        "share_at_max": [float(np.mean(c == maxv)) for c in channels],
    }
    if rgb is not None:
        rg = rgb[:, :, 0] - rgb[:, :, 1]
        yb = 0.5 * (rgb[:, :, 0] + rgb[:, :, 1]) - rgb[:, :, 2]
        e["colourfulness"] = float(np.sqrt(rg.var() + yb.var()) + 0.3 * np.sqrt(rg.mean() ** 2 + yb.mean() ** 2))
    if a.dtype == np.uint8:
        if a.ndim == 2:
            pil = Image.fromarray(a, "L")
        elif a.shape[2] == 2:
            pil = Image.fromarray(np.ascontiguousarray(a[:, :, 0]), "L")
        elif a.shape[2] == 3:
            pil = Image.fromarray(np.ascontiguousarray(a[:, :, [2, 1, 0]]), "RGB")
        else:
            pil = Image.fromarray(np.ascontiguousarray(a[:, :, [2, 1, 0, 3]]), "RGBA")
        cv = cleanvision(pil)
        if a.ndim == 3 and a.shape[2] == 2:  # gray+alpha: its gray's properties, its entropy over both bands
            cv["entropy"] = Image.fromarray(np.ascontiguousarray(a), "LA").entropy()
            cv["low_information_score"] = min(0.1 * cv["entropy"], 1)
            cv["is_low_information_issue"] = bool(cv["low_information_score"] < 0.3)
        grey_content = a.ndim == 2 or a.shape[2] == 2 or bool(
            (a[:, :, 0] == a[:, :, 1]).all() and (a[:, :, 1] == a[:, :, 2]).all())
        cv["is_grayscale_issue"] = grey_content
        e["cleanvision"] = cv
    return e


def compare(label, got, want):
    for k, v in want.items():
        if k == "cleanvision":
            if "cleanvision" not in got:
                fail(f"{label}: no cleanvision properties")
                continue
            for ck, cvv in v.items():
                g = got["cleanvision"].get(ck)
                if isinstance(cvv, bool):
                    equal(g, cvv, f"{label} cleanvision {ck}")
                else:
                    close(g, cvv, REL, f"{label} cleanvision {ck}")
        elif isinstance(v, list):
            equal(len(got.get(k, [])), len(v), f"{label} {k} entries")
            for i, (g, x) in enumerate(zip(got.get(k, []), v)):
                close(g, x, REL, f"{label} {k}[{i}]")
        else:
            close(got.get(k), v, REL, f"{label} {k}")
    if "cleanvision" not in want and "cleanvision" in got:
        fail(f"{label}: cleanvision properties for a 16-bit image")
    if "colourfulness" not in want and "colourfulness" in got:
        fail(f"{label}: colourfulness of an image without colour")


def answers(where, paths):
    out = subprocess.run([client_bin, "--json", "--stats", "quality", *where, *paths], capture_output=True, text=True,
                         timeout=300)
    lines = [json.loads(x) for x in out.stdout.splitlines() if x.strip()]
    if len(lines) != len(paths):
        fail(f"{where}: {len(lines)} answers for {len(paths)} files: {out.stderr[:300]}")
    return {d["file"]: d for d in lines}


rng = np.random.default_rng(53)
made = {}


def write(name, a):
    path = os.path.join(work, name + ".png")
    cv2.imwrite(path, a)
    made[path] = a


for h, w in [(1, 1), (5, 2), (3, 3), (61, 97), (375, 500), (64, 640), (7, 1000), (129, 65)]:
    write(f"rgb_{w}x{h}", rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
write("rgba_97x61", rng.integers(0, 256, (61, 97, 4), dtype=np.uint8))
write("rgba_300x200", rng.integers(0, 256, (200, 300, 4), dtype=np.uint8))
write("gray_101x67", rng.integers(0, 256, (67, 101), dtype=np.uint8))
write("gray_400x300", rng.integers(0, 256, (300, 400), dtype=np.uint8))
write("gray16_131x71", rng.integers(0, 65536, (71, 131), dtype=np.uint16))
write("rgb16_83x89", rng.integers(0, 65536, (89, 83, 3), dtype=np.uint16))
write("black_200x100", np.zeros((100, 200, 3), np.uint8))
write("white_200x100", np.full((100, 200, 3), 255, np.uint8))
write("grey_as_rgb_150x120", np.repeat(rng.integers(0, 256, (120, 150, 1), dtype=np.uint8), 3, axis=2))
# Smooth structure, blurred: a low-detail image cleanvision calls blurry.
smooth = cv2.resize(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8), (640, 480), interpolation=cv2.INTER_CUBIC)
write("blurred_640x480", cv2.GaussianBlur(smooth, (0, 0), 8))
write("dark_320x240", (rng.integers(0, 256, (240, 320, 3)) // 8).astype(np.uint8))

files = list(made)
for ext in ("png", "jpeg"):
    folder = os.path.join(corpus, ext)
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        path = os.path.join(folder, name)
        a = cv2.imread(path, cv2.IMREAD_UNCHANGED)
        if a is None or a.dtype not in (np.uint8, np.uint16):
            continue
        made[path] = a
        files.append(path)

checked = 0
issues = set()
server, address = start_server(server_bin, work)
try:
    local = answers(["--local"], files)
    remote = answers(["--server", address], files[:12])
    for path in files:
        a = made[path]
        for where, got in (("local", local.get(path)), ("server", remote.get(path))):
            if where == "server" and path not in files[:12]:
                continue
            if got is None:
                continue
            if not got.get("ok"):
                # OpenCV reads a file of several planes as its first: imgstat refuses the quality of a stack.
                if "computed for one plane at a time" in got.get("error", ""):
                    continue
                fail(f"{where} {path}: {got.get('error')}")
                continue
            want = expected(a)
            compare(f"{where} {os.path.basename(path)}", got["quality"], want)
            for k, v in want.get("cleanvision", {}).items():
                if k.startswith("is_") and v:
                    issues.add(k)
            checked += 1
    # --aggregate: cleanvision's verdicts over the dataset (issue counts,
    # the images flagged, odd sizes from every image's size as
    # SizeProperty.get_scores judges them).
    eight = [p for p in files if local.get(p, {}).get("ok") and "cleanvision" in local[p]["quality"]]
    out = subprocess.run([client_bin, "--json", "--local", "--aggregate", "--stats", "quality", *eight],
                         capture_output=True, text=True, timeout=300)
    summary = [json.loads(x) for x in out.stdout.splitlines() if x.startswith('{"dataset_quality"')]
    if len(summary) != 1:
        fail(f"--aggregate --stats quality: no dataset_quality line: {out.stderr[:300]}")
    else:
        dq = summary[0]["dataset_quality"]
        want_flagged = {}
        for p in eight:
            for k, v in expected(made[p])["cleanvision"].items():
                if k.startswith("is_") and v:
                    want_flagged.setdefault(k[3:-6], set()).add(p)
        size = np.array([expected(made[p])["cleanvision"]["size"] for p in eight])
        q1, q3 = np.percentile(size, [25, 75])
        lo, hi = q1 - 3.0 * (q3 - q1), q3 + 3.0 * (q3 - q1)
        mid, gap = (lo + hi) / 2, hi - lo
        score = 1 - np.clip(np.absolute(size - mid) / (gap if gap > 0 else mid), 0, 1)
        want_flagged["odd_size"] = {p for p, sc in zip(eight, score) if sc < (0.5 if gap > 0 else 1.0)}
        equal(dq["images"], len(eight), "--aggregate images with cleanvision's properties")
        for name in ("dark", "light", "blurry", "low_information", "odd_aspect_ratio", "grayscale", "odd_size"):
            equal(dq["issues"][name], len(want_flagged.get(name, ())), f"--aggregate {name} count")
            equal(set(dq["flagged"].get(name, [])), want_flagged.get(name, set()), f"--aggregate {name} images")
        if not want_flagged["odd_size"]:
            fail("no odd size among the images: the check of it proves nothing")
        close(dq["odd_size"]["q1"], float(q1), REL, "--aggregate size q1")
    # Every issue is met at least once, so none of them is a test that cannot fail.
    for k in ("is_dark_issue", "is_light_issue", "is_blurry_issue", "is_low_information_issue",
              "is_odd_aspect_ratio_issue", "is_grayscale_issue"):
        if k not in issues:
            fail(f"no image here has {k}: the check of it proves nothing")
    # Floats and parts are refused, clearly.
    f32 = os.path.join(work, "float.tiff")
    cv2.imwrite(f32, rng.random((20, 30), dtype=np.float32))
    out = subprocess.run([client_bin, "--json", "--stats", "quality", "--local", f32], capture_output=True, text=True)
    d = json.loads(out.stdout)
    equal((d.get("code"), "8- and 16-bit" in d.get("error", "")), ("UNIMPLEMENTED", True), "float32 refused")
    out = subprocess.run([client_bin, "--json", "--stats", "quality", "--server", address, "--tiles", "2x2", files[3]],
                         capture_output=True, text=True)
    d = json.loads(out.stdout)
    equal((d.get("code"), "not parts" in d.get("error", "")), ("UNIMPLEMENTED", True), "parts refused")
    equal(server.poll(), None, "the server still serving")
finally:
    server.terminate()
    server.wait()
finish(f"quality measures of {checked} answers ({len(files)} files, --local and a live server) equal to "
       f"OpenCV's, numpy's and cleanvision's formulas; issues met: {sorted(issues)}")
