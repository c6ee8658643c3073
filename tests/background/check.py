#!/usr/bin/python3
"""Background meshes (--background) through imgstat-client --local and a
live server, against photutils' Background2D over the same pixels.

    check.py SERVER_BIN CLIENT_BIN WORK

Images written here (float32 FITS skies with a gradient, sources, NaN and a
blank corner, boxes that do not divide them; uint16 and RGB uint8 PNGs;
a constant image; one pixel) and corpus files, under Background2D's
defaults and other parameters (boxes W x H, filters, estimators, exclude
percentiles, clipping): the meshes and their medians within 1e-12 relative,
the boxes left out equal, the --background-map and --background-mesh files
(float32 FITS and TIFF) within float32 rounding of photutils' maps (of
the exact spline where a mesh is under 10 boxes along an axis: see
exact_map). Boxes
left out are filled from their 10 nearest kept boxes; photutils' k-d tree
breaks ties among equally distant boxes in its own order, imgstat in
row-major order, so the reference here takes the nearest boxes as imgstat
does (and says how many boxes the k-d tree's choice would change).
Refusals: boxes larger than the image or of 0, an even filter, parts,
a stack.
"""
import glob
import json
import os
import subprocess
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from live_server import start_server  # noqa: E402
from verdicts import corpus_dir, equal, fail, finish  # noqa: E402

try:
    import cv2
    import numpy as np
    from astropy.io import fits
    from astropy.stats import SigmaClip
    import photutils.utils.interpolation as photutils_interpolation
    import tifffile
    from photutils.background import Background2D, MeanBackground, MedianBackground
except ImportError as e:  # scripts/install-deps installs python3-photutils, -astropy, -opencv, -tifffile
    print("skipped:", e)
    sys.exit(77)

warnings.simplefilter("ignore")
server_bin, client_bin, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
corpus = corpus_dir()


class RowMajorNearest:
    """The k nearest points, ties in the order the points were given (row-major boxes)."""

    def __init__(self, coords):
        self.coords = np.asarray(coords, float)

    def query(self, positions, k=1, eps=0):
        p = np.asarray(positions, float)
        d2 = ((p[:, None, :] - self.coords[None, :, :]) ** 2).sum(-1)
        idx = np.argsort(d2, axis=1, kind="stable")[:, :k]
        return np.sqrt(np.take_along_axis(d2, idx, 1)), idx


def background2d(data, box, row_major, **kw):
    """photutils' Background2D, its nearest boxes taken row-major when asked."""
    init = photutils_interpolation.ShepardIDWInterpolator.__init__

    def patched(self, *a, **k):
        init(self, *a, **k)
        self.kdtree = RowMajorNearest(self.coordinates)

    if row_major:
        photutils_interpolation.ShepardIDWInterpolator.__init__ = patched
    try:
        b = Background2D(np.asarray(data, np.float64), box, **kw)
        b.background_mesh, b.background_rms_mesh  # computed while patched
        return b
    finally:
        photutils_interpolation.ShepardIDWInterpolator.__init__ = init


def exact_map(mesh, box, shape):
    """photutils' BkgZoomInterpolator (scipy.ndimage.zoom, order 3, reflect, grid
    mode, cropped, clipped) with the spline's exact coefficients: scipy before
    gh-24550's fix mixes the ends of a line of fewer than about 10 boxes into its
    first coefficient, so the mesh is zoomed here inside a reflection of it whole
    periods wide (the same spline: "reflect" repeats it every 2 n boxes), which
    no line is short in."""
    from scipy.ndimage import zoom
    if np.ptp(mesh) == 0:
        return np.full(shape, np.min(mesh))
    pads = [n * -(-12 // n) for n in mesh.shape]
    padded = np.pad(mesh, [(p, p) for p in pads], mode="symmetric")
    z = zoom(padded, box, order=3, mode="reflect", grid_mode=True)
    z = z[pads[0] * box[0]:pads[0] * box[0] + shape[0], pads[1] * box[1]:pads[1] * box[1] + shape[1]]
    return np.clip(z, np.min(mesh), np.max(mesh))


def run(args, timeout=300):
    return subprocess.run([client_bin, "--json", "--stats", "min_max", *args], capture_output=True, text=True,
                          timeout=timeout)


def max_rel(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return np.inf
    scale = np.maximum(np.abs(want), 1e-300)
    return float(np.max(np.abs(got - want) / scale)) if got.size else 0.0


def channels_of(a):
    """An image's planes by imgstat's channel names (a: gray, or R, G, B(, A))."""
    if a.ndim == 2:
        return {"Gray": a}
    return {name: a[:, :, c] for c, name in enumerate("RGBA"[: a.shape[2]])}


def check(name, where, path, planes, flags, kw, maps=True):
    """imgstat's meshes of `path` (planes: by channel name) against photutils'."""
    box_w, _, box_h = flags[flags.index("--background") + 1].partition("x")
    box = (int(box_h or box_w), int(box_w))
    mapf, meshf = os.path.join(work, name + "-map.fits"), os.path.join(work, name + "-mesh.tif")
    extra = ["--background-map", mapf, "--background-mesh", meshf] if maps else []
    out = run([*where, *flags, *extra, path])
    if out.returncode != 0:
        return fail(f"{name}: exit {out.returncode}: {out.stderr.strip()[:300]}")
    got = json.loads(out.stdout.splitlines()[0])["background"]
    equal(sorted(g["channel"] for g in got), sorted(planes), f"{name}: meshes")
    planes = [planes[g["channel"]] for g in got if g["channel"] in planes]
    changed_by_tree = 0
    refs = []
    for c, (g, plane) in enumerate(zip(got, planes)):
        try:
            b = background2d(plane, box, True, **kw)
        except ValueError as e:  # photutils: every box left out
            if "All boxes" not in str(e):
                raise
            if g["background"] or g["boxes_excluded"] != g["rows"] * g["columns"]:
                fail(f"{name} channel {g['channel']}: photutils leaves every box out, imgstat answers a mesh")
            print(f"ok {name}: every box left out, as photutils")
            return
        refs.append(b)
        what = f"{name} channel {g['channel']}"
        equal((g["rows"], g["columns"]), tuple(b.nboxes), what + ": mesh shape")
        excluded = np.ones(b.nboxes, np.uint8)
        excluded[b._mesh_idx] = 0
        equal(np.asarray(g["excluded"], np.uint8).tolist(), excluded.tolist(), what + ": boxes left out")
        equal(g["boxes_excluded"], int(excluded.sum()), what + ": boxes left out, counted")
        for key, want, rel in (("background", b.background_mesh, 1e-12), ("background_rms", b.background_rms_mesh, 1e-12)):
            r = max_rel(g[key], want)
            if not r <= rel:
                fail(f"{what}: {key} mesh {r:.3g} relative from photutils'")
        for key, want in (("background_median", b.background_median), ("background_rms_median", b.background_rms_median)):
            if not abs(g[key] - want) <= 1e-12 * abs(want) + 1e-300:
                fail(f"{what}: {key} {g[key]!r}, photutils {want!r}")
        if excluded.any():
            tree = background2d(plane, box, False, **kw)
            changed_by_tree += int(np.count_nonzero(tree.background_mesh != b.background_mesh))
    if maps:
        with fits.open(mapf) as f:
            bkg, rms = f[0].data, f[1].data
        if len(planes) == 1:
            bkg, rms = bkg[None], rms[None]
        for c, b in enumerate(refs):
            shape = b.data.shape
            for key, got_map, mesh, theirs in (("background", bkg[c], b.background_mesh, b.background),
                                               ("background_rms", rms[c], b.background_rms_mesh, b.background_rms)):
                want = exact_map(mesh, box, shape)
                r = max_rel(got_map.astype(np.float64), want)
                if not r <= 1.2e-7:  # float32 rounding
                    fail(f"{name} channel {c}: --background-map {key} {r:.3g} relative from the exact spline's")
                if min(mesh.shape) >= 10 and not max_rel(got_map.astype(np.float64), theirs) <= 1.2e-7:
                    fail(f"{name} channel {c}: --background-map {key} differs from photutils' own map")
        mesh = tifffile.imread(meshf, key=0)
        rms_mesh = tifffile.imread(meshf, key=1)
        if len(planes) == 1:
            mesh, rms_mesh = mesh[:, :, None], rms_mesh[:, :, None]
        for c, b in enumerate(refs):
            if not max_rel(mesh[:, :, c].astype(np.float64), b.background_mesh) <= 1.2e-7:
                fail(f"{name} channel {c}: --background-mesh's background differs from photutils' mesh")
            if not max_rel(rms_mesh[:, :, c].astype(np.float64), b.background_rms_mesh) <= 1.2e-7:
                fail(f"{name} channel {c}: --background-mesh's RMS differs from photutils' mesh")
    note = f" (photutils' k-d tree would change {changed_by_tree} boxes)" if changed_by_tree else ""
    print(f"ok {name}: {len(planes)} channel(s), {int(refs[0].nboxes_tot)} boxes{note}")


rng = np.random.default_rng(20261203)


def sky(h, w, holes=True):
    a = 1000 + 5 * rng.standard_normal((h, w))
    yy, xx = np.mgrid[0:h, 0:w]
    a += 0.01 * xx + 0.02 * yy
    for _ in range(max(3, h * w // 4000)):
        y, x = rng.integers(0, h), rng.integers(0, w)
        a[max(0, y - 4):y + 4, max(0, x - 4):x + 4] += 300 + 200 * rng.random()
    a = a.astype(np.float32)
    if holes:
        a[rng.random((h, w)) < 0.01] = np.nan
        a[: h // 4, : w // 3] = np.nan  # a blank corner: boxes left out
        a[h // 2, w // 2] = np.inf
    return a


images = {}
sky_a = sky(301, 397)
fits.writeto(os.path.join(work, "sky.fits"), sky_a, overwrite=True)
images["sky.fits"] = channels_of(sky_a)
flat = sky(128, 192, holes=False)
fits.writeto(os.path.join(work, "flat.fits"), flat, overwrite=True)
images["flat.fits"] = channels_of(flat)
g16 = np.clip(20000 + 300 * rng.standard_normal((157, 211)), 0, 65535).astype(np.uint16)
g16[40:60, 50:90] = 65535  # saturated: clipped, its boxes left out
cv2.imwrite(os.path.join(work, "gray16.png"), g16)
images["gray16.png"] = channels_of(g16)
rgb = np.clip(rng.normal((60, 120, 200), 25, (90, 131, 3)), 0, 255).astype(np.uint8)  # R, G, B
cv2.imwrite(os.path.join(work, "rgb.png"), rgb[:, :, ::-1])
images["rgb.png"] = channels_of(rgb)
const = np.full((64, 80), 77, np.uint8)
cv2.imwrite(os.path.join(work, "const.png"), const)
images["const.png"] = channels_of(const)
one = np.array([[1234]], np.uint16)
cv2.imwrite(os.path.join(work, "one.png"), one)
images["one.png"] = channels_of(one)

CASES = [  # (name, image, imgstat flags, Background2D keywords)
    ("sky-defaults", "sky.fits", ["--background", "32"], {}),
    ("sky-wide-boxes", "sky.fits", ["--background", "40x25", "--background-filter", "5x3"], dict(filter_size=(3, 5))),
    ("sky-median", "sky.fits", ["--background", "30", "--background-estimator", "median", "--background-filter", "1"],
     dict(bkg_estimator=MedianBackground(), filter_size=1)),
    ("sky-mean-exclude50", "sky.fits", ["--background", "50", "--background-estimator", "mean", "--background-exclude", "50"],
     dict(bkg_estimator=MeanBackground(), exclude_percentile=50)),
    ("sky-sigma2-converge", "sky.fits", ["--background", "32", "--sigma", "2", "--maxiters", "-1", "--background-exclude", "60"],
     dict(sigma_clip=SigmaClip(sigma=2, maxiters=None), exclude_percentile=60)),
    ("sky-madstd", "sky.fits", ["--background", "64", "--stdfunc", "mad_std", "--cenfunc", "mean", "--sigma-upper", "2.5"],
     dict(sigma_clip=SigmaClip(sigma_lower=3, sigma_upper=2.5, maxiters=10, cenfunc="mean", stdfunc="mad_std"))),
    ("flat", "flat.fits", ["--background", "64"], {}),
    ("gray16", "gray16.png", ["--background", "16x24"], {}),
    ("rgb", "rgb.png", ["--background", "20"], {}),
    ("const", "const.png", ["--background", "16"], {}),
    ("one", "one.png", ["--background", "1"], {}),
]
for name, image, flags, kw in CASES:
    check(name, ["--local"], os.path.join(work, image), images[image], flags, kw)

# Corpus files OpenCV reads as imgstat does (gray and RGB, 8 and 16 bits).
picked = 0
for path in sorted(glob.glob(os.path.join(corpus, "png", "*.png")))[:40]:
    a = cv2.imread(path, cv2.IMREAD_UNCHANGED)
    if a is None or a.dtype not in (np.uint8, np.uint16) or min(a.shape[:2]) < 24:
        continue
    if a.ndim == 3 and a.shape[2] in (3, 4):
        a = a[:, :, [2, 1, 0, 3][: a.shape[2]]]
    if a.ndim == 3 and a.shape[2] not in (3, 4):
        continue
    probe = run(["--local", "--stats", "min_max", path])
    if probe.returncode != 0:
        continue
    answer = json.loads(probe.stdout)
    if answer["channel_count"] != (1 if a.ndim == 2 else a.shape[2]) or answer.get("facts", {}).get("planes", 1) > 1:
        continue
    check("corpus " + os.path.basename(path), ["--local"], path, channels_of(a), ["--background", "24x16"], {},
          maps=False)
    picked += 1
    if picked == 6:
        break
if picked < 3:
    fail(f"only {picked} corpus PNGs checked")

# Every box left out: no mesh, a warning; the map cannot be written.
blank = np.full((40, 40), np.nan, np.float32)
blank[0, 0] = 1
fits.writeto(os.path.join(work, "blank.fits"), blank, overwrite=True)
out = run(["--local", "--background", "10", os.path.join(work, "blank.fits")])
if out.returncode != 0 or "every box" not in out.stdout:
    fail(f"blank.fits: want an answer warning that every box was left out, got {out.returncode} {out.stdout[:300]}")
out = run(["--local", "--background", "10", "--background-map", os.path.join(work, "blank-map.fits"),
           os.path.join(work, "blank.fits")])
if out.returncode == 0 or "no background mesh" not in out.stderr + out.stdout:
    fail(f"blank.fits --background-map: want a clear error, got {out.returncode} {out.stderr[:300]}")

# Refusals, with the status and a message naming the problem.
stack = np.stack([flat, flat])
fits.writeto(os.path.join(work, "stack.fits"), stack, overwrite=True)
REFUSED = [
    (["--background", "0", "flat.fits"], "INVALID_ARGUMENT", "box"),
    (["--background", "300", "flat.fits"], "INVALID_ARGUMENT", "at most the image"),
    (["--background", "16", "--background-filter", "4", "flat.fits"], "INVALID_ARGUMENT", "odd"),
    (["--background", "16", "--tiles", "2x2", "flat.fits"], "UNIMPLEMENTED", "not parts"),
    (["--background", "16", "stack.fits"], "UNIMPLEMENTED", "one plane at a time"),
    (["--background", "2049", "--background-filter", "1", "big.fits"], "RESOURCE_EXHAUSTED", "pixels a box"),
]
big = np.zeros((2049, 2049), np.float32)
fits.writeto(os.path.join(work, "big.fits"), big, overwrite=True)

server, address = start_server(server_bin, work)
try:
    for name, image, flags, kw in CASES[:2] + CASES[8:9]:
        check(name + " (server)", ["--server", address], os.path.join(work, image), images[image], flags, kw)
    for args, code, words in REFUSED:
        for where in (["--local"], ["--server", address]):
            out = run([*where, *args[:-1], os.path.join(work, args[-1])])
            text = out.stdout + out.stderr
            if out.returncode == 0 or code not in text or words not in text:
                fail(f"{' '.join(args)} {where[0]}: want {code} naming '{words}', got {out.returncode}: {text[:300]}")
    ok = run(["--server", address, os.path.join(work, "flat.fits")])
    equal(ok.returncode, 0, "the server answers after the refusals")
finally:
    server.terminate()
    server.wait(timeout=30)

finish(f"background meshes equal photutils' Background2D: {len(CASES)} cases, {picked} corpus files, refusals")
