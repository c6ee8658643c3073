#!/usr/bin/python3
"""Files of several planes (multi-page TIFF and BigTIFF, ImageJ hyperstacks,
OME-TIFF, pyramids, animated GIF) through imgstat-client --local and a live
server, against tifffile's pages (Pillow's frames) and numpy over the same
pixels.

    check.py SERVER_BIN CLIENT_BIN WORK

Each file is made here with tifffile: the answer is every full-resolution
page counted together (count, min, max, sum and the histogram equal; mean
and stddev within 1e-12 relative; the first min and max as (x, y, plane)),
--planes answers each page apart as well, and --planes A-B chooses. Then
the refusals: a page count over --max-planes, pages of different sizes,
planes past the last, statistics that need one plane, and damaged
directory chains (a loop, an offset past the end).
"""
import csv
import io
import json
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from live_server import start_server  # noqa: E402
from verdicts import close, equal, fail, finish  # noqa: E402

try:
    import numpy as np
    import tifffile
except ImportError as e:  # scripts/install-deps installs python3-numpy and python3-tifffile
    print("skipped:", e)
    sys.exit(77)

def run(client_bin, where, *args):
    out = subprocess.run([client_bin, *where, *args], capture_output=True, text=True, timeout=600)
    return out.returncode, out.stdout, out.stderr


def answer(client_bin, where, *args):
    rc, out, err = run(client_bin, where, "--json", *args)
    if rc != 0:
        fail(f"imgstat-client {' '.join(args)} exited {rc}: {err[-1000:]}")
        return None
    return json.loads(out)


def check_channels(got, stack, what):
    """got: an answer's channels; stack: the pixels (planes, h, w, channels)."""
    equal(len(got), stack.shape[-1], what + " channels")
    flt = stack.dtype.kind == "f"
    for c, ch in enumerate(got):
        x = stack[..., c]
        w = f"{what} channel {ch['name']}"
        finite = x[np.isfinite(x)] if flt else x.ravel()
        equal(ch["count"], int(finite.size), w + " count")
        if flt:
            equal(ch["nan_count"], int(np.isnan(x).sum()), w + " NaN count")
        if finite.size == 0:
            continue
        equal(ch["min"], finite.min().item(), w + " min")
        equal(ch["max"], finite.max().item(), w + " max")
        if flt:
            exact = sum(sorted(finite.astype(np.float64).tolist(), key=abs))
            mean = exact / finite.size
            close(ch["sum"], exact, 1e-12, w + " sum")
        else:
            exact = int(finite.astype(np.int64).sum())
            mean = exact / finite.size
            equal(ch["sum"], exact, w + " sum")
        close(ch["mean"], mean, 1e-12, w + " mean")
        d = finite.astype(np.float64) - mean
        close(ch["stddev"], float(np.sqrt((d * d).sum() / finite.size)), 1e-12, w + " stddev")
        if not flt and ch.get("histogram") is not None:
            shift = {1: 0, 2: 8}[x.dtype.itemsize]
            v = finite.astype(np.int64) - (np.iinfo(x.dtype).min if x.dtype.kind == "i" else 0)
            equal(ch["histogram"]["counts"], np.bincount(v >> shift, minlength=256).tolist(), w + " histogram")
        if "min_position" in ch:
            planes = stack.shape[0]
            for key, pick in (("min_position", np.nanargmin if flt else np.argmin),
                              ("max_position", np.nanargmax if flt else np.argmax)):
                p, y, xx = np.unravel_index(pick(x), x.shape)
                want = {"x": int(xx), "y": int(y)}
                if planes > 1:
                    want["plane"] = int(p) + ch_first_plane[0]
                equal(ch[key], want, f"{w} {key}")


ch_first_plane = [0]  # the first plane answered (positions name planes in the file)


def as_stack(a):
    """Pages (planes, h, w) or (planes, h, w, c) to (planes, h, w, c)."""
    return a[..., None] if a.ndim == 3 else a


def expected_axes(path):
    """(sizes {Z, C, T}, plane axes slowest first) of an ImageJ or OME file's
    first series as tifffile reads it, or None for other files."""
    with tifffile.TiffFile(path) as t:
        if not (t.is_imagej or t.is_ome):
            return None
        s = t.series[0]
        plane_axes = [(a, n) for a, n in zip(s.axes, s.shape) if a in "ZCTQI"]
    return {a: n for a, n in plane_axes}, [a for a, _ in plane_axes]


def check_axes(got, path, what):
    """facts.stack_axes and each plane's z, c, t against tifffile's series."""
    want = expected_axes(path)
    if want is None:
        equal("stack_axes" in got.get("facts", {}), False, what + " no stack_axes but in ImageJ and OME files")
        return
    sizes, slowest_first = want
    a = got["facts"].get("stack_axes")
    if a is None:
        return fail(f"{what}: no stack_axes where tifffile reads axes {slowest_first}")
    equal({k: a[k.lower()] for k in sizes}, sizes, what + " stack_axes sizes")
    equal([k for k in a["order"] if k in sizes], slowest_first[::-1], what + " stack_axes order")
    shape = [sizes[k] for k in slowest_first]
    for p in got.get("planes", []):
        coords = dict(zip(slowest_first, np.unravel_index(p["index"], shape)))
        equal({k: p[k.lower()] for k in sizes}, {k: int(v) for k, v in coords.items()}, f"{what} plane {p['index']} z, c, t")


def check_file(client_bin, where, path, stack, reduced, what):
    """The file's answers against its full-resolution pages `stack`."""
    stack = as_stack(stack)
    planes = stack.shape[0]
    stats = ["--stats", "min_max,sum,stddev,histogram,positions"]
    got = answer(client_bin, where, *stats, path)
    if got is None:
        return
    ch_first_plane[0] = 0
    equal((got["width"], got["height"]), (stack.shape[2], stack.shape[1]), what + " a plane's size")
    facts = got.get("facts", {})
    equal(facts.get("planes", 1), planes, what + " facts.planes")
    equal(facts.get("reduced_pages", 0), reduced, what + " facts.reduced_pages")
    check_channels(got["channels"], stack, what + " (the planes together)")
    equal("planes" in got, False, what + " answers each plane only when asked")
    each = answer(client_bin, where, *stats, "--planes", path)
    if each is None:
        return
    check_channels(each["channels"], stack, what + " --planes (together)")
    if path.endswith(".tif"):
        check_axes(each, path, what)
    equal([p["index"] for p in each["planes"]], list(range(planes)), what + " --planes indices")
    for p in each["planes"]:
        ch_first_plane[0] = 0
        check_channels(p["channels"], stack[p["index"]:p["index"] + 1], f"{what} plane {p['index']}")
    if planes >= 3:
        some = answer(client_bin, where, *stats, "--planes", f"1-{planes - 2}", path)
        if some is None:
            return
        ch_first_plane[0] = 1
        check_channels(some["channels"], stack[1:planes - 1], what + " --planes 1-N-2 (together)")
        equal([p["index"] for p in some["planes"]], list(range(1, planes - 1)), what + " --planes 1-N-2 indices")
        equal(some["facts"].get("planes_answered"), planes - 2, what + " --planes 1-N-2 planes_answered")
        one = answer(client_bin, where, *stats, "--planes", str(planes - 1), path)
        if one is not None:
            ch_first_plane[0] = planes - 1
            check_channels(one["channels"], stack[planes - 1:], what + " --planes N-1 (the last alone)")


def refused(client_bin, where, path, code, words, what, *args):
    rc, out, err = run(client_bin, where, *args, path)
    if rc == 0 or code not in err or words not in err:
        fail(f"{what}: wanted {code} saying '{words}', got exit {rc}: {err.strip()[-400:]}")


def ifd_offsets(path):
    """Every directory's offset and where its next-directory pointer lies
    (classic TIFF, little-endian)."""
    data = open(path, "rb").read()
    assert data[:4] == b"II*\0"
    out = []
    at = struct.unpack_from("<I", data, 4)[0]
    while at:
        n = struct.unpack_from("<H", data, at)[0]
        out.append((at, at + 2 + 12 * n))
        at = struct.unpack_from("<I", data, at + 2 + 12 * n)[0]
    return out


def make_files(work, rng):
    """(name, path, full-resolution pages, reduced pages) of each layout."""
    files = []

    def add(name, stack, reduced=0, shape=None, pages=True, **kw):
        """shape: the array as written (an ImageJ hyperstack's TZCYX); pages:
        written a page at a time (tifffile would take a short first axis of
        tiles for samples)."""
        path = os.path.join(work, name)
        if pages:
            with tifffile.TiffWriter(path, bigtiff=kw.pop("bigtiff", False)) as t:
                for page in stack:
                    t.write(page, **kw)
        else:
            tifffile.imwrite(path, stack if shape is None else stack.reshape(shape), **kw)
        files.append((name, path, stack, reduced))

    add("u16-strips.tif", rng.integers(0, 65536, (5, 37, 53), dtype=np.uint16))
    add("u16-bigtiff-tiles.tif", rng.integers(0, 65536, (4, 45, 61), dtype=np.uint16), bigtiff=True, tile=(16, 16),
        compression="zlib", pages=True)
    add("u8-rgb-zlib.tif", rng.integers(0, 256, (3, 29, 31, 3), dtype=np.uint8), photometric="rgb", compression="zlib",
        predictor=True)
    add("u8-gray-tiles.tif", rng.integers(0, 256, (7, 40, 33), dtype=np.uint8), tile=(16, 32))
    a = rng.normal(100, 30, (4, 23, 41)).astype(np.float32)
    a[1, 3, 5] = np.nan
    a[2, 0, 0] = -1e6
    add("f32-nan.tif", a)
    add("i16.tif", rng.integers(-32768, 32768, (3, 19, 17), dtype=np.int16))
    add("u16-imagej-tzc.tif", rng.integers(0, 4096, (12, 21, 25), dtype=np.uint16), shape=(2, 3, 2, 21, 25),
        imagej=True, metadata={"axes": "TZCYX"}, pages=False)
    add("u16-ome.tif", rng.integers(0, 65536, (3, 27, 29), dtype=np.uint16), ome=True, metadata={"axes": "ZYX"}, pages=False)
    add("constant-stack.tif", np.full((6, 9, 11), 4242, dtype=np.uint16))
    add("thousand-pages.tif", rng.integers(0, 256, (1000, 8, 8), dtype=np.uint8))
    add("one-page.tif", rng.integers(0, 65536, (1, 33, 35), dtype=np.uint16))

    # A pyramid of reduced-resolution pages in the main chain (NewSubfileType
    # 1), and one in SubIFDs (OME's way): both are the full pages alone.
    full = rng.integers(0, 65536, (3, 32, 48), dtype=np.uint16)
    path = os.path.join(work, "pyramid-chain.tif")
    with tifffile.TiffWriter(path) as t:
        for page in full:
            t.write(page)
            t.write(page[::2, ::2].copy(), subfiletype=1)
            t.write(page[::4, ::4].copy(), subfiletype=1)
    files.append(("pyramid-chain.tif", path, full, 6))
    path = os.path.join(work, "pyramid-subifds.tif")
    with tifffile.TiffWriter(path) as t:
        for page in full:
            t.write(page, subifds=1)
            t.write(page[::2, ::2].copy(), subfiletype=1)
    files.append(("pyramid-subifds.tif", path, full, 0))
    return files


def check_csv(client_bin, where, path, stack):
    """--csv --planes: the planes together, then a row per plane named in the part column."""
    rc, out, err = run(client_bin, where, "--csv", "--planes", "--stats", "min_max,sum", path)
    if rc != 0:
        return fail(f"--csv --planes exited {rc}: {err[-400:]}")
    rows = list(csv.DictReader(io.StringIO(out)))
    stack = as_stack(stack)
    equal([r["part"] for r in rows], [""] + [f"plane {i}" for i in range(stack.shape[0])], "--csv --planes rows")
    equal([int(r["sum"]) for r in rows], [int(stack.sum(dtype=np.int64))] +
          [int(p.sum(dtype=np.int64)) for p in stack], "--csv --planes sums")


def pillow_frames(path):
    """Pillow's frames of an animation, as RGB, or RGBA where the first frame
    has a transparent colour (Pillow's own mode for the frames after it),
    and each frame's delay."""
    from PIL import Image, ImageSequence
    with Image.open(path) as im:
        mode = "RGBA" if "transparency" in im.info else "RGB"
        frames, delays = [], []
        for f in ImageSequence.Iterator(im):
            frames.append(np.asarray(f.convert(mode)))
            delays.append(f.info.get("duration", 0))
    return np.stack(frames), delays


def make_gifs(work, rng):
    """Animated GIFs as Pillow writes them: full frames and frames cut to
    what changed, global and local palettes, interlaced or not, a
    transparent colour, each disposal method, delays that differ."""
    from PIL import Image
    out = []

    def save(name, frames, **kw):
        path = os.path.join(work, name)
        frames[0].save(path, save_all=True, append_images=frames[1:], loop=0, **kw)
        out.append((name, path))

    rgb = [Image.fromarray(rng.integers(0, 256, (23, 31, 3), dtype=np.uint8)) for _ in range(5)]
    save("full-frames.gif", rgb, duration=[40, 70, 100, 20, 500])
    save("not-interlaced.gif", rgb[:3], duration=80, interlace=False)
    # Frames that change in a corner only: Pillow writes the changed rectangle.
    base = rng.integers(0, 256, (40, 52, 3), dtype=np.uint8)
    moving = []
    for i in range(6):
        f = base.copy()
        f[5 + i:15 + i, 7 + 2 * i:19 + 2 * i] = rng.integers(0, 256, 3, dtype=np.uint8)
        moving.append(Image.fromarray(f))
    save("changed-rectangles.gif", moving, duration=60)
    # Palette frames with a transparent colour (index 0), under each disposal.
    palette = rng.integers(0, 256, 768, dtype=np.uint8).tolist()
    for disposal in (0, 1, 2, 3):
        frames = []
        for i in range(5):
            idx = rng.integers(1, 256, (29, 37), dtype=np.uint8)
            idx[rng.random((29, 37)) < 0.3] = 0
            idx[3 + i:9 + i, 4:20] = 0
            f = Image.fromarray(idx, "P")
            f.putpalette(palette)
            frames.append(f)
        save(f"transparent-disposal-{disposal}.gif", frames, transparency=0, disposal=disposal, duration=30,
             optimize=False)
    # Frames of their own palettes (local colour tables), no transparency, disposal 2.
    frames = []
    for i in range(4):
        f = Image.fromarray(rng.integers(0, 64, (17, 19), dtype=np.uint8), "P")
        f.putpalette(rng.integers(0, 256, 768, dtype=np.uint8).tolist())
        frames.append(f)
    save("local-palettes.gif", frames, disposal=2, duration=50, optimize=False)
    # Frames in rectangles of their own, as other writers make them: the
    # first not covering the screen, transparent colours, a disposal method
    # given once and holding, a background colour that is not entry 0.
    for name, first_transparent in (("rectangles.gif", None), ("rectangles-transparent.gif", 7)):
        frames = [(4, 3, 21, 13, first_transparent, 0, 20),
                  (10, 8, 17, 11, 7, 2, 30),
                  (0, 0, 9, 6, None, 0, 40),  # disposal unsaid: 2 holds
                  (20, 14, 13, 9, 5, 3, 50),
                  (18, 12, 16, 12, 9, 0, 60),  # 3 holds
                  (2, 17, 30, 6, None, 1, 70),
                  (1, 1, 33, 24, 11, 0, 80)]
        path = os.path.join(work, name)
        write_gif(path, 34, 26, rng.integers(0, 256, 768, dtype=np.uint8), 13, frames, rng)
        out.append((name, path))
    return out


def write_gif(path, width, height, palette, background, frames, rng):
    """A GIF89a of frames (x, y, w, h, transparent index or None, disposal,
    delay in hundredths) with random indices, each frame's LZW data taken
    from Pillow's encoding of it alone."""
    from PIL import Image
    out = bytearray(b"GIF89a" + struct.pack("<HHBBB", width, height, 0xF7, background, 0) + bytes(palette))
    out += b"!\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00"
    for i, (x, y, w, h, transparent, disposal, delay) in enumerate(frames):
        idx = rng.integers(0, 256, (h, w), dtype=np.uint8)
        if transparent is not None:
            idx[rng.random((h, w)) < 0.4] = transparent
        one = io.BytesIO()
        im = Image.fromarray(idx, "P")
        im.putpalette(list(palette))
        im.save(one, "GIF", interlace=i % 2 == 1, optimize=False)
        data = one.getvalue()
        at = 13 + (3 << ((data[10] & 7) + 1) if data[10] & 0x80 else 0)
        while data[at] == 0x21:  # Pillow's own extensions
            at += 2
            while data[at]:
                at += data[at] + 1
            at += 1
        assert data[at] == 0x2C
        flags = data[at + 9]
        body = at + 10 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
        end = body + 1
        while data[end]:
            end += data[end] + 1
        packed = disposal << 2 | (1 if transparent is not None else 0)
        out += b"!\xf9\x04" + struct.pack("<BHB", packed, delay, transparent or 0) + b"\x00"
        out += b"," + struct.pack("<HHHHB", x, y, w, h, flags & 0x40) + data[body:end + 1]
    out += b";"
    open(path, "wb").write(out)


def check_animations(client_bin, work, rng, where):
    """An animated GIF is a stack of its frames, composited as Pillow
    composites them; APNG and animated WebP are answered by their first
    frame, never silently: the facts count the frames and a warning says so."""
    try:
        from PIL import Image
    except ImportError:
        return fail("Pillow is missing (python3-pil)")
    for name, path in make_gifs(work, rng):
        stack, delays = pillow_frames(path)
        check_file(client_bin, where, path, stack, 0, name)
        got = answer(client_bin, where, "--stats", "min_max", "--planes", path)
        if got is not None:
            equal([p.get("delay_ms", 0) for p in got["planes"]], delays, name + " each frame's delay")
            equal(got["facts"].get("duration_ms"), sum(delays), name + " facts.duration_ms")
    frames = [Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)) for _ in range(3)]
    for ext, kw in (("png", {}), ("webp", {"lossless": True})):
        path = os.path.join(work, "animated." + ext)
        frames[0].save(path, save_all=True, append_images=frames[1:], duration=100, loop=0, **kw)
        got = answer(client_bin, where, "--stats", "min_max", path)
        if got is None:
            continue
        equal((got["facts"].get("planes"), got["facts"].get("planes_answered")), (3, 1), f"animated {ext}: facts")
        equal(got["facts"].get("duration_ms"), 300, f"animated {ext}: facts.duration_ms")
        if not any("frame" in w for w in got["warnings"]):
            fail(f"animated {ext}: no warning that only the first frame was analyzed: {got['warnings']}")
        equal(got["channels"][0]["count"], 12 * 16, f"animated {ext}: the first frame's pixels")


def check_label_stacks(client_bin, work, rng, where):
    """A label stack (multi-page TIFF) over an image stack: each label over
    the volume, its bounding box and first min (x, y, plane), against numpy;
    --planes A-B takes the same planes of both."""
    vol = rng.integers(0, 65536, (6, 19, 23), dtype=np.uint16)
    labels = (rng.integers(0, 9, vol.shape) * 7).astype(np.uint16)
    labels[2:4, 5:9, 3:6] = 500  # a label in two planes only
    for name, stack in (("volume.tif", vol), ("labels.tif", labels)):
        with tifffile.TiffWriter(os.path.join(work, name)) as t:
            for page in stack:
                t.write(page, compression="zlib")
    for chosen, first in ((None, 0), ("1-4", 1)):
        args = ["--stats", "min_max,sum,positions", "--labels", os.path.join(work, "labels.tif")]
        if chosen:
            args += ["--planes", chosen]
        got = answer(client_bin, where, *args, os.path.join(work, "volume.tif"))
        if got is None:
            continue
        v, lab = (vol, labels) if chosen is None else (vol[1:5], labels[1:5])
        what = "label stack" + (f" --planes {chosen}" if chosen else "")
        equal([p["label"] for p in got["parts"]], sorted(int(k) for k in np.unique(lab)), what + " labels")
        for p in got["parts"]:
            m = lab == p["label"]
            z, y, x = np.nonzero(m)
            ch = p["channels"][0]
            equal((ch["count"], ch["sum"], ch["min"], ch["max"]),
                  (int(m.sum()), int(v[m].sum(dtype=np.int64)), int(v[m].min()), int(v[m].max())), f"{what} label {p['label']}")
            equal(p["box"], [int(x.min()), int(y.min()), int(z.min()), int(x.max() - x.min() + 1),
                             int(y.max() - y.min() + 1), int(z.max() - z.min() + 1)], f"{what} label {p['label']} box")
            fz, fy, fx = np.unravel_index(np.argmin(np.where(m, v, 65536)), v.shape)
            equal(ch["min_position"], {"x": int(fx), "y": int(fy), "plane": int(fz) + first}, f"{what} label {p['label']} first min")
    # A label stack of other planes than the image's is refused.
    with tifffile.TiffWriter(os.path.join(work, "labels-5.tif")) as t:
        for page in labels[:5]:
            t.write(page)
    refused(client_bin, where, os.path.join(work, "volume.tif"), "INVALID_ARGUMENT", "as many",
            "a label stack of 5 planes over 6", "--labels", os.path.join(work, "labels-5.tif"))


def check_refusals(client_bin, server_bin, work, rng, local):
    pages = rng.integers(0, 65536, (5, 16, 16), dtype=np.uint16)
    path = os.path.join(work, "five.tif")
    tifffile.imwrite(path, pages)
    check_csv(client_bin, local, path, pages)
    refused(client_bin, local, path, "INVALID_ARGUMENT", "has 5 planes", "--planes past the last", "--planes", "5")
    rgb = os.path.join(work, "rgb-stack.tif")
    tifffile.imwrite(rgb, rng.integers(0, 256, (3, 8, 8, 3), dtype=np.uint8), photometric="rgb")
    refused(client_bin, local, rgb, "UNIMPLEMENTED", "one plane at a time", "the luminance of a stack",
            "--stats", "luminance")
    one = answer(client_bin, local, "--stats", "luminance", "--planes", "1", rgb)
    if one is not None:
        equal(one["luminance"]["count"], 64, "the luminance of one chosen plane")
    refused(client_bin, local, rgb, "UNIMPLEMENTED", "rectangles and tiles of a file of several planes", "tiles of a stack",
            "--tiles", "2x2")
    mixed = os.path.join(work, "mixed.tif")
    with tifffile.TiffWriter(mixed) as t:
        t.write(pages[0])
        t.write(pages[1][:8])
    refused(client_bin, local, mixed, "INVALID_ARGUMENT", "differ in size or samples", "pages of different sizes")

    # A page whose compressed strip is damaged: refused with libtiff's words.
    cut = os.path.join(work, "cut.tif")
    with tifffile.TiffWriter(cut) as t:
        for page in pages[:3]:
            t.write(page, compression="zlib")
    with tifffile.TiffFile(cut) as t:
        at, n = t.pages[1].dataoffsets[0], t.pages[1].databytecounts[0]
    data = bytearray(open(cut, "rb").read())
    data[at:at + n] = bytes(n)
    open(cut, "wb").write(data)
    refused(client_bin, local, cut, "INVALID_ARGUMENT", "could not decode its planes (libtiff", "a damaged page")

    # A directory chain that loops back, and one that points past the end:
    # the pages before the damage are answered, with a warning that says so.
    for name, target in (("loop", lambda offs, size: offs[1][0]), ("past-end", lambda offs, size: size + 4096)):
        damaged = os.path.join(work, name + ".tif")
        data = bytearray(open(path, "rb").read())
        offs = ifd_offsets(path)
        struct.pack_into("<I", data, offs[2][1], target(offs, len(data)))
        open(damaged, "wb").write(data)
        got = answer(client_bin, local, "--stats", "min_max,sum,stddev", damaged)
        if got is None:
            continue
        equal(got["facts"].get("planes"), 3, f"{name}: pages before the damage")
        check_channels(got["channels"], as_stack(pages[:3]), f"{name}: the pages before the damage")
        if not any("directories end" in w for w in got["warnings"]):
            fail(f"{name}: no warning about the damaged chain: {got['warnings']}")

    # More pages than --max-planes: refused by a server with that limit.
    server, address = start_server(server_bin, work, "--max-planes", "4", log_name="server-max-planes.log")
    try:
        refused(client_bin, ["--server", address], path, "RESOURCE_EXHAUSTED", "--max-planes", "more pages than --max-planes")
        refused(client_bin, ["--server", address], os.path.join(work, "full-frames.gif"), "RESOURCE_EXHAUSTED",
                "--max-planes", "more frames than --max-planes")
        got = answer(client_bin, ["--server", address], "--stats", "min_max", os.path.join(work, "rgb-stack.tif"))
        equal(got and got["facts"]["planes"], 3, "a server with --max-planes 4 serves a 3-page file")
    finally:
        server.terminate()
        server.wait()


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    server_bin, client_bin, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(49)
    files = make_files(work, rng)
    for name, path, stack, reduced in files:
        # What tifffile reads is what the file holds: the test's pixels.
        with tifffile.TiffFile(path) as t:
            main_pages = [p for p in t.pages if not (p.subfiletype & 1)]
            read = np.stack([p.asarray() for p in main_pages])
        assert read.shape == stack.shape and np.array_equal(read, stack, equal_nan=True), name
    local = ["--local"]
    for name, path, stack, reduced in files:
        check_file(client_bin, local, path, stack, reduced, name + " (--local)")
    check_animations(client_bin, work, rng, local)
    check_label_stacks(client_bin, work, rng, local)
    check_refusals(client_bin, server_bin, work, rng, local)
    server, address = start_server(server_bin, work)
    try:
        check_animations(client_bin, work, rng, ["--server", address])
        check_label_stacks(client_bin, work, rng, ["--server", address])
        for name, path, stack, reduced in files:
            check_file(client_bin, ["--server", address], path, stack, reduced, name + " (server)")
        # Large enough to be streamed to the server (4 MiB and more).
        big = rng.integers(0, 65536, (40, 256, 256), dtype=np.uint16)
        path = os.path.join(work, "streamed.tif")
        with tifffile.TiffWriter(path) as t:
            for page in big:
                t.write(page, tile=(64, 64), compression="zlib")
        check_file(client_bin, ["--server", address], path, big, 0, "streamed.tif (server)")
    finally:
        server.terminate()
        server.wait()
    finish(f"planes: {len(files) + 1} files, every page against tifffile and numpy, both ways; refusals checked")


if __name__ == "__main__":
    main()
