#!/usr/bin/python3
"""Files of several planes (multi-page TIFF and BigTIFF, ImageJ hyperstacks,
OME-TIFF, pyramids, animated GIF, APNG and WebP) through imgstat-client --local and a live
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
    if 1 < sizes.get("C", 1) <= 4:  # the pages' C axis made channels: the planes are the rest
        equal(len(got["channels"]), sizes["C"], what + " C made channels")
        equal([c["name"] for c in got["channels"]], [f"C{i}" for i in range(sizes["C"])], what + " channel names")
        slowest_first = [k for k in slowest_first if k != "C"]
        sizes = {k: n for k, n in sizes.items() if k != "C"}
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


WRITTEN = {}  # each file's pages as written


def make_files(work, rng):
    """(name, path, full-resolution pages, reduced pages) of each layout."""
    files = []

    def add(name, stack, reduced=0, shape=None, pages=True, expect=None, **kw):
        """shape: the array as written (an ImageJ hyperstack's TZCYX); pages:
        written a page at a time (tifffile would take a short first axis of
        tiles for samples); expect: the planes answered, where the pages'
        C axis becomes channels."""
        path = os.path.join(work, name)
        if pages:
            with tifffile.TiffWriter(path, bigtiff=kw.pop("bigtiff", False)) as t:
                for page in stack:
                    t.write(page, **kw)
        else:
            tifffile.imwrite(path, stack if shape is None else stack.reshape(shape), **kw)
        WRITTEN[name] = stack
        files.append((name, path, stack if expect is None else expect, reduced))

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
    # ImageJ and OME stacks of one-channel pages: their C axis (up to 4) is
    # the planes' channels, each plane a z and t.
    tzc = rng.integers(0, 4096, (12, 21, 25), dtype=np.uint16)
    add("u16-imagej-tzc.tif", tzc, shape=(2, 3, 2, 21, 25), imagej=True, metadata={"axes": "TZCYX"}, pages=False,
        expect=tzc.reshape(2, 3, 2, 21, 25).transpose(0, 1, 3, 4, 2).reshape(6, 21, 25, 2))
    add("u16-ome.tif", rng.integers(0, 65536, (3, 27, 29), dtype=np.uint16), ome=True, metadata={"axes": "ZYX"}, pages=False)
    czyx = rng.integers(0, 256, (12, 19, 23), dtype=np.uint8)
    add("u8-ome-czyx.tif", czyx, shape=(3, 4, 19, 23), ome=True, metadata={"axes": "CZYX"}, pages=False,
        expect=czyx.reshape(3, 4, 19, 23).transpose(1, 2, 3, 0))
    ctz = rng.normal(0, 1, (8, 11, 13)).astype(np.float32)
    add("f32-ome-tcyx.tif", ctz, shape=(2, 4, 11, 13), ome=True, metadata={"axes": "TCYX"}, pages=False,
        expect=ctz.reshape(2, 4, 11, 13).transpose(0, 2, 3, 1))
    # Five channels are more than a plane's four: they stay planes.
    add("u16-imagej-c5.tif", rng.integers(0, 65536, (10, 9, 14), dtype=np.uint16), shape=(2, 5, 9, 14), imagej=True,
        metadata={"axes": "ZCYX"}, pages=False)
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


def check_levels(client_bin, where, work):
    """--level N: each page's N-th reduced copy, as tifffile reads it (a
    SubIFD pyramid's series levels; the reduced pages after each page of a
    chain pyramid); a level past the last refused, naming how many."""
    for name in ("pyramid-subifds.tif", "pyramid-chain.tif"):
        path = os.path.join(work, name)
        with tifffile.TiffFile(path) as t:
            if name == "pyramid-subifds.tif":
                # Written a page at a time: a series a page, each with its levels.
                levels = [np.stack([s.levels[k].asarray() for s in t.series]) for k in range(len(t.series[0].levels))]
            else:
                full = [i for i, p in enumerate(t.pages) if not p.subfiletype & 1]
                levels = [np.stack([t.pages[i + k].asarray() for i in full]) for k in range(3)]
        for level, stack in enumerate(levels):
            what = f"{name} --level {level}"
            got = answer(client_bin, where, "--stats", "min_max,sum,stddev,histogram,positions", "--level", str(level),
                         "--planes", path)
            if got is None:
                continue
            equal((got["width"], got["height"]), (stack.shape[2], stack.shape[1]), what + " a plane's size")
            equal((got["facts"].get("levels"), got["facts"].get("level")), (len(levels), level), what + " facts levels")
            ch_first_plane[0] = 0
            check_channels(got["channels"], as_stack(stack), what)
            for p in got["planes"]:
                ch_first_plane[0] = 0
                check_channels(p["channels"], as_stack(stack[p["index"]:p["index"] + 1]), f"{what} plane {p['index']}")
        refused(client_bin, where, path, "INVALID_ARGUMENT", f"this TIFF has {len(levels)} levels (0 to {len(levels) - 1})",
                name + " a level past the last", "--level", str(len(levels)))
    refused(client_bin, where, os.path.join(work, "u16-strips.tif"), "INVALID_ARGUMENT", "no pyramid",
            "--level 1 of a file without a pyramid", "--level", "1")
    refused(client_bin, where, os.path.join(work, "full-frames.gif"), "INVALID_ARGUMENT", "a GIF has none",
            "--level 1 of a GIF", "--level", "1")


def check_tiles(client_bin, where, work, rng):
    """--tiles CxRxS of a stack: boxes through its planes, each against numpy
    over the same voxels (positions in the file: x, y and plane); CxR is one
    slab; a grid that does not fit, and slabs of one plane, refused."""
    vol = rng.integers(0, 65536, (7, 23, 31), dtype=np.uint16)
    flt = rng.normal(0, 10, (5, 13, 17)).astype(np.float32)
    flt[2, 3, 4] = np.nan
    for name, stack in (("tiles-u16.tif", vol), ("tiles-f32.tif", flt)):
        path = os.path.join(work, name)
        with tifffile.TiffWriter(path) as t:
            for page in stack:
                t.write(page, compression="zlib")
        for grid, planes in (("3x2x2", None), ("2x3", None), ("4x4x3", "1-5"), ("1x1x5", None)):
            first, last = (int(v) for v in planes.split("-")) if planes else (0, stack.shape[0] - 1)
            chosen = stack[first:last + 1]
            what = f"{name} --tiles {grid}" + (f" --planes {planes}" if planes else "")
            args = ["--stats", "min_max,sum,stddev,positions", "--tiles", grid] + (["--planes", planes] if planes else [])
            got = answer(client_bin, where, *args, path)
            if got is None:
                continue
            c, r, s = (int(v) for v in (grid + "x1").split("x")[:3])
            equal(len(got["parts"]), c * r * s, what + " tiles")
            for part in got["parts"]:
                tc, tr, ts = part["tile"]
                x, y, z, w, h, d = part["box"]
                edge = lambda i, n, k: i * n // k  # noqa: E731
                equal((x, y, z, x + w, y + h, z + d),
                      (edge(tc, chosen.shape[2], c), edge(tr, chosen.shape[1], r), edge(ts, chosen.shape[0], s),
                       edge(tc + 1, chosen.shape[2], c), edge(tr + 1, chosen.shape[1], r), edge(ts + 1, chosen.shape[0], s)),
                      f"{what} tile {part['tile']} box")
                channels = json.loads(json.dumps(part["channels"]))
                for ch in channels:  # positions in the file, made the box's own
                    for key in ("min_position", "max_position"):
                        if key in ch:
                            pos = ch[key]
                            pos["x"] -= x
                            pos["y"] -= y
                            pos["plane"] -= z + first
                            if d == 1:
                                equal(pos.pop("plane"), 0, f"{what} tile {part['tile']} {key} plane")
                ch_first_plane[0] = 0
                check_channels(channels, as_stack(chosen[z:z + d, y:y + h, x:x + w]), f"{what} tile {part['tile']}")
    path = os.path.join(work, "tiles-u16.tif")
    refused(client_bin, where, path, "INVALID_ARGUMENT", "does not fit", "--tiles with more slabs than planes",
            "--tiles", "2x2x8")
    refused(client_bin, where, path, "INVALID_ARGUMENT", "one plane", "--tiles CxRxS of one plane",
            "--tiles", "2x2x2", "--planes", "3")


def answers(client_bin, where, *args):
    """Every JSON line of one call (a file of several series gives one a series)."""
    rc, out, err = run(client_bin, where, "--json", *args)
    if rc != 0:
        fail(f"imgstat-client {' '.join(args)} exited {rc}: {err[-1000:]}")
        return []
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def make_series(work, rng):
    """Files of several series, each with tifffile's series of it: pages of
    different kinds in one chain (tifffile's generic series: each kind's
    pages, wherever they are, in the order first met), and an OME-TIFF of
    three images, two of the same page kind (its images are its series)."""
    out = []
    generic = os.path.join(work, "series-generic.tif")
    kinds = [rng.integers(0, 65536, (16, 16), dtype=np.uint16), rng.integers(0, 256, (8, 12, 3), dtype=np.uint8),
             rng.integers(0, 65536, (16, 16), dtype=np.uint16), rng.integers(0, 65536, (9, 5), dtype=np.uint16),
             rng.integers(0, 256, (8, 12, 3), dtype=np.uint8), rng.integers(0, 65536, (16, 16), dtype=np.uint16)]
    with tifffile.TiffWriter(generic) as t:
        for page in kinds:
            t.write(page, photometric="rgb" if page.ndim == 3 else "minisblack", metadata=None)
    out.append((generic, [np.stack([kinds[0], kinds[2], kinds[5]]), np.stack([kinds[1], kinds[4]]), kinds[3][None]]))
    ome = os.path.join(work, "series-ome.ome.tif")
    zcyx = rng.integers(0, 65536, (2, 3, 20, 30), dtype=np.uint16)
    tyxs = rng.integers(0, 256, (4, 10, 12, 3), dtype=np.uint8)
    zyx = rng.integers(0, 65536, (3, 20, 30), dtype=np.uint16)
    with tifffile.TiffWriter(ome, ome=True) as t:
        t.write(zcyx, metadata={"axes": "ZCYX"})
        t.write(tyxs, photometric="rgb", metadata={"axes": "TYXS"})
        t.write(zyx, metadata={"axes": "ZYX"})
    out.append((ome, [zcyx.transpose(0, 2, 3, 1), tyxs, zyx]))
    for path, want in out:  # what tifffile reads is what the files hold
        with tifffile.TiffFile(path) as t:
            got = [s.asarray() for s in t.series]
        assert len(got) == len(want), path
        for g, w in zip(got, want):
            g = g.transpose(0, 2, 3, 1) if g.ndim == 4 and g.shape[1] == 3 and w.shape[-1] == 3 and g.dtype == np.uint16 else g
            assert np.array_equal(g.reshape(w.shape), w), path
    return out


def check_series(client_bin, where, work, series_files):
    """Each series answered apart, never mixed, named FILE [series N];
    --series N alone; --aggregate merges each series with its kind."""
    stats = ["--stats", "min_max,sum,stddev,histogram,positions"]
    for path, series in series_files:
        name = os.path.basename(path)
        got = answers(client_bin, where, *stats, path)
        equal(len(got), len(series), f"{name}: an answer a series")
        for k, (one, stack) in enumerate(zip(got, series)):
            what = f"{name} series {k} ({' '.join(where)})"
            equal(one["file"], f"{path} [series {k}]", what + " named")
            equal((one["facts"].get("series_count"), one["facts"].get("series")), (len(series), k), what + " facts")
            ch_first_plane[0] = 0
            check_channels(one["channels"], as_stack(stack), what)
        last = len(series) - 1
        alone = answers(client_bin, where, *stats, "--series", str(last), "--planes", path)
        if len(alone) == 1:
            what = f"{name} --series {last}"
            equal(alone[0]["file"], f"{path} [series {last}]", what + " named by its series")
            check_channels(alone[0]["channels"], as_stack(series[last]), what)
            for p in alone[0]["planes"]:
                ch_first_plane[0] = 0
                check_channels(p["channels"], as_stack(series[last])[p["index"]:p["index"] + 1], f"{what} plane {p['index']}")
        else:
            fail(f"{name} --series {last}: {len(alone)} answers")
        refused(client_bin, where, path, "INVALID_ARGUMENT", f"has {len(series)} (0 to {last})",
                f"{name}: a series past the last", "--series", str(len(series)))
    # The OME file's first image: C as channels, with its axes.
    path, series = series_files[1]
    got = answers(client_bin, where, *stats, "--series", "0", path)
    if got:
        equal([c["name"] for c in got[0]["channels"]], ["C0", "C1", "C2"], "OME series 0: C as channels")
        equal(got[0]["facts"].get("stack_axes", {}).get("z"), 2, "OME series 0: its own Z")
    got = answers(client_bin, where, "--stats", "min_max", "--series", "2", path)
    if got:
        equal(got[0]["facts"].get("stack_axes", {}).get("z"), 3, "OME series 2: its own Z")
    # --aggregate: the generic file's uint16 series (16x16 and 9x5) join the
    # five-page uint16 file's kind (one sample type and channel count); its
    # RGB series is a kind of its own.
    generic, series = series_files[0]
    five = os.path.join(work, "five.tif")
    with tifffile.TiffFile(five) as t:
        five_pages = t.asarray()
    merged = answers(client_bin, where, "--aggregate", "--stats", "min_max,sum", generic, five)
    kinds = {(m["sample_type"], m["channel_count"]): m for m in merged}
    u16 = kinds.get(("uint16", 1))
    if u16:
        equal(u16["images"], 3, "--aggregate: uint16 series (16x16 and 9x5) and the file")
        equal(u16["channels"][0]["sum"],
              int(series[0].astype(np.int64).sum() + series[2].astype(np.int64).sum() + five_pages.astype(np.int64).sum()),
              "--aggregate: uint16 sum")
    else:
        fail(f"--aggregate of series: no uint16 answer in {merged}")
    rgb = kinds.get(("uint8", 3))
    equal(rgb and rgb["channels"][1]["sum"], int(series[1][..., 1].astype(np.int64).sum()), "--aggregate: the RGB series")
    rc, out, err = run(client_bin, where, "--csv", "--stats", "min_max", generic)
    equal(rc == 0 and f"{generic} [series 2]" in out, True, "CSV rows name each series")


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
    has a transparent colour (Pillow's own mode for the frames after it) or
    alpha, gray as gray; and each frame's delay."""
    from PIL import Image, ImageSequence
    with Image.open(path) as im:
        mode = "RGBA" if "transparency" in im.info or im.mode in ("RGBA", "LA") else "L" if im.mode == "L" else "RGB"
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


def make_apngs(work, rng):
    """APNGs as Pillow writes them (frames cut to what changed, each disposal
    and blend, RGBA with alpha 0 or 255, RGB, palette with a transparent
    entry, gray, a default image that is not a frame), with Pillow's frames;
    and APNGs written here (16-bit, alpha between 0 and 255, rectangles of
    every disposal and blend) with the specification's compositing in numpy."""
    from PIL import Image
    out = []

    def save(name, frames, **kw):
        path = os.path.join(work, name)
        frames[0].save(path, save_all=True, append_images=frames[1:], loop=0, **kw)
        stack, delays = pillow_frames(path)
        if kw.get("default_image"):  # Pillow's frame 0 is the default image, which a viewer does not show
            stack, delays = stack[1:], delays[1:]
        out.append((name, path, stack, delays))

    def moving(mode, h, w, n):
        base = rng.integers(0, 256, (h, w, len(mode)), dtype=np.uint8)
        frames = []
        for i in range(n):
            f = base.copy()
            f[2 + i:9 + i, 3 + 2 * i:14 + 2 * i] = rng.integers(0, 256, (7, 11, len(mode)), dtype=np.uint8)
            if mode == "RGBA":  # what a viewer shows: alpha 0 or 255, and no colour where it is 0
                f[..., 3] = np.where(f[..., 3] > 90, 255, 0)
                f[f[..., 3] == 0] = 0
            frames.append(Image.fromarray(f[..., 0] if mode == "L" else f, mode))
        return frames

    for disposal in (0, 1, 2):
        for blend in (0, 1):
            save(f"rgba-dispose-{disposal}-blend-{blend}.png", moving("RGBA", 23, 37, 5), disposal=disposal,
                 blend=blend, duration=[30, 40, 50, 60, 70])
    save("rgb.png", moving("RGB", 19, 29, 4), disposal=1, duration=25)
    save("gray.png", moving("L", 17, 21, 3), duration=[10, 20, 30])
    # Pillow composites the first frame over the default image, which the
    # specification and viewers leave out: frames of their own everywhere.
    save("default-image.png", [Image.fromarray(rng.integers(0, 256, (15, 22, 4), dtype=np.uint8)) for _ in range(4)],
         default_image=True, duration=40)
    palette = rng.integers(0, 256, 768, dtype=np.uint8)
    palette[:3] = 0  # the transparent entry's colour is black: what a viewer's transparent black is
    palette = palette.tolist()
    frames = []
    for i in range(4):
        idx = rng.integers(1, 256, (16, 22), dtype=np.uint8)
        idx[rng.random((16, 22)) < 0.3] = 0
        f = Image.fromarray(idx, "P")
        f.putpalette(palette)
        frames.append(f)
    save("palette-transparent.png", frames, transparency=0, disposal=0, blend=1, duration=33)

    # Written here: (x, y, w, h, dispose, blend, delay num, delay den) each.
    controls = [(0, 0, 26, 19, 0, 0, 1, 10), (3, 2, 11, 7, 1, 1, 7, 100), (10, 6, 15, 12, 2, 1, 3, 0),
                (0, 0, 26, 19, 2, 1, 120, 1000), (5, 4, 9, 9, 0, 0, 1, 50), (1, 11, 24, 8, 1, 1, 2, 25)]
    for name, colour, dtype, hidden in (("rgba16.png", 6, np.uint16, False), ("rgba8-partial.png", 6, np.uint8, True),
                                        ("gray-alpha16.png", 4, np.uint16, False), ("rgb16.png", 2, np.uint16, False)):
        path = os.path.join(work, name)
        stack, delays = write_apng(path, 26, 19, colour, dtype, controls, hidden, rng)
        out.append((name, path, stack, delays))
    return out


def png_chunk(kind, data):
    import zlib
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff)


def write_apng(path, width, height, colour, dtype, controls, hidden, rng):
    """An APNG of random frames (colour type 2, 4 or 6; 8 or 16 bits; alpha
    anywhere from 0 to the most) and what a viewer shows of it: each frame
    composited by the APNG specification's formula, in numpy."""
    import zlib
    channels = {2: 3, 4: 2, 6: 4}[colour]
    most = np.iinfo(dtype).max
    big = ">u2" if dtype == np.uint16 else "u1"

    def encoded(pixels):
        h, w = pixels.shape[:2]
        rows = pixels.astype(big).reshape(h, -1).view(np.uint8).reshape(h, -1)
        return zlib.compress(b"".join(b"\0" + r.tobytes() for r in rows))

    ihdr = struct.pack(">IIBBBBB", width, height, 16 if dtype == np.uint16 else 8, colour, 0, 0, 0)
    out = bytearray(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr))
    out += png_chunk(b"acTL", struct.pack(">II", len(controls), 0))
    seq = 0
    if hidden:
        out += png_chunk(b"IDAT", encoded(rng.integers(0, most + 1, (height, width, channels), dtype=dtype)))
    # The planes as the decoder gives them: gray+alpha as RGBA.
    plane_channels = 4 if colour in (4, 6) else 3
    canvas = np.zeros((height, width, plane_channels), np.int64)
    stack, delays = [], []
    for k, (x, y, w, h, dispose, blend, num, den) in enumerate(controls):
        px = rng.integers(0, most + 1, (h, w, channels), dtype=dtype)
        if channels in (2, 4):
            a = px[..., -1]
            a[rng.random((h, w)) < 0.25] = 0
            a[rng.random((h, w)) < 0.25] = most
        out += png_chunk(b"fcTL", struct.pack(">IIIIIHHBB", seq, w, h, x, y, num, den, dispose, blend))
        seq += 1
        data = encoded(px)
        if k == 0 and not hidden:
            out += png_chunk(b"IDAT", data)
        else:
            out += png_chunk(b"fdAT", struct.pack(">I", seq) + data)
            seq += 1
        src = px.astype(np.int64)
        if colour == 4:
            src = np.concatenate([src[..., :1]] * 3 + [src[..., 1:]], axis=-1)
        region = canvas[y:y + h, x:x + w]
        before = region.copy()
        if blend == 0 or plane_channels != 4:
            region[...] = src
        else:
            sa, da = src[..., 3:], region[..., 3:]
            u, v = sa * most, (most - sa) * da
            al = u + v
            blended = np.concatenate([(src[..., :3] * u + region[..., :3] * v) // np.maximum(al, 1), al // most], -1)
            take = (sa == most) | (da == 0)
            region[...] = np.where(sa == 0, region, np.where(take, src, blended))
        stack.append(canvas.astype(dtype))
        delays.append(round(num * 1000 / (den or 100)))
        if dispose == 2 and k > 0:
            region[...] = before
        elif dispose in (1, 2):
            region[...] = 0
    out += png_chunk(b"IEND", b"")
    open(path, "wb").write(out)
    return np.stack(stack), delays


def make_webps(work, rng):
    """Animated WebP as Pillow writes it (lossless and lossy, with and
    without alpha), with Pillow's frames."""
    from PIL import Image
    out = []
    for alpha in (False, True):
        for lossless in (True, False):
            base = rng.integers(0, 256, (21, 33, 4), dtype=np.uint8)
            frames = []
            for i in range(5):
                f = base.copy()
                f[i:i + 7, 2 * i:2 * i + 9] = rng.integers(0, 256, (7, 9, 4), dtype=np.uint8)
                frames.append(Image.fromarray(f if alpha else f[..., :3]))
            name = f"animated-{'alpha' if alpha else 'rgb'}-{'lossless' if lossless else 'lossy'}.webp"
            path = os.path.join(work, name)
            frames[0].save(path, save_all=True, append_images=frames[1:], duration=[10, 20, 30, 40, 50],
                           lossless=lossless, loop=0)
            stack, delays = [], []
            from PIL import ImageSequence
            with Image.open(path) as im:
                for f in ImageSequence.Iterator(im):
                    stack.append(np.asarray(f).copy())
                    delays.append(f.info.get("duration", 0))
            out.append((name, path, np.stack(stack), delays))
    return out


def check_animations(client_bin, work, rng, where):
    """An animation is a stack of its frames, composited as a viewer shows
    them: GIF as Pillow composites it, APNG and WebP by their specifications
    (against Pillow's frames where Pillow follows them, else numpy)."""
    try:
        from PIL import Image  # noqa: F401
    except ImportError:
        return fail("Pillow is missing (python3-pil)")
    files = [(name, path) + pillow_frames(path) for name, path in make_gifs(work, rng)]
    files += make_apngs(work, rng) + make_webps(work, rng)
    for name, path, stack, delays in files:
        check_file(client_bin, where, path, stack, 0, name)
        got = answer(client_bin, where, "--stats", "min_max", "--planes", path)
        if got is not None:
            equal([p.get("delay_ms", 0) for p in got["planes"]], [round(d) for d in delays], name + " each frame's delay")
            equal(got["facts"].get("duration_ms"), round(sum(delays)), name + " facts.duration_ms")
            equal(got["warnings"], [], name + " no warnings")
    # Damaged APNGs: refused naming what is wrong.
    good = open(os.path.join(work, "rgba16.png"), "rb").read()
    first_fctl = good.index(b"fcTL") - 4
    outside = bytearray(good)
    struct.pack_into(">I", outside, first_fctl + 8 + 4 + 8, 1)  # frame 0's x offset: 1, past the canvas
    struct.pack_into(">I", outside, first_fctl + 8 + 26, __import__("zlib").crc32(bytes(outside[first_fctl + 4:first_fctl + 8 + 26])) & 0xffffffff)
    for name, data, words in (("apng-cut.png", good[:len(good) * 2 // 3], "past the end of the file"),
                              ("apng-outside.png", bytes(outside), "not inside the 26x19 canvas")):
        path = os.path.join(work, name)
        open(path, "wb").write(data)
        refused(client_bin, where, path, "INVALID_ARGUMENT", words, name)


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
    refused(client_bin, local, rgb, "UNIMPLEMENTED", "rectangles of a file of several planes", "rectangles of a stack",
            "--roi", "1,1,4,4")
    refused(client_bin, local, path, "INVALID_ARGUMENT", "is one series (series 0)", "--series 1 of one series",
            "--series", "1")

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
        for name in ("full-frames.gif", "rgba-dispose-0-blend-0.png", "animated-rgb-lossless.webp"):
            refused(client_bin, ["--server", address], os.path.join(work, name), "RESOURCE_EXHAUSTED",
                    "--max-planes", f"{name}: more frames than --max-planes")
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
        written = WRITTEN.get(name, stack)
        assert read.shape == written.shape and np.array_equal(read, written, equal_nan=True), name
    local = ["--local"]
    for name, path, stack, reduced in files:
        check_file(client_bin, local, path, stack, reduced, name + " (--local)")
    check_animations(client_bin, work, rng, local)
    check_levels(client_bin, local, work)
    check_tiles(client_bin, local, work, rng)
    check_label_stacks(client_bin, work, rng, local)
    check_refusals(client_bin, server_bin, work, rng, local)
    series_files = make_series(work, rng)
    check_series(client_bin, local, work, series_files)
    server, address = start_server(server_bin, work)
    try:
        check_animations(client_bin, work, rng, ["--server", address])
        check_levels(client_bin, ["--server", address], work)
        check_tiles(client_bin, ["--server", address], work, rng)
        check_label_stacks(client_bin, work, rng, ["--server", address])
        check_series(client_bin, ["--server", address], work, series_files)
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
