"""The CLI's options as keyword arguments, turned into imgstat.v1 Options."""
import os

import numpy as np

from ._errors import Error

STATISTICS = {"min_max": 1, "sum": 2, "stddev": 3, "histogram": 4, "distribution": 5, "shape": 6, "positions": 7,
              "unique_colors": 8, "luminance": 9, "summary": 10, "all": 11, "merge_state": 12, "robust": 13,
              "quality": 14, "hashes": 15}
# The CLI's defaults, so that a default call answers what `imgstat-client --json` does.
DEFAULT_STATS = ("min_max", "sum", "stddev", "histogram", "distribution", "shape", "summary")
DEFAULT_PERCENTILES = (5, 25, 75, 95)
DECODERS = {"auto": 0, "cpu": 1, "gpu": 2}
COLOUR_SPACES = {"hsv": 1, "hsv-full": 2, "hls": 3, "lab": 4, "ycrcb": 5, "gray": 6}
COLOUR_CHANNELS = {"hsv": "HSV", "hsv-full": "HSV", "hls": "HLS", "lab": "Lab", "ycrcb": "YCrCb", "gray": "Y"}
SAMPLE_TYPES = {"uint8": 1, "uint16": 2, "int8": 3, "int16": 4, "float32": 5, "float64": 6, "uint32": 7, "int32": 8}
ANALYZE_OPTIONS = ("stats", "bins", "range", "percentiles", "decoder", "allow_truncated", "colour_space", "joint",
                   "joint_range", "roi", "tiles", "mask", "labels", "ignore_label", "max_labels", "planes", "level",
                   "series", "stored_values", "sigma_clip", "background")
# sigma_clip's keys, astropy's names and defaults (sigma_clipped_stats).
SIGMA_CLIP_KEYS = ("sigma", "sigma_lower", "sigma_upper", "maxiters", "cenfunc", "stdfunc")
# background's keys, photutils' Background2D's names (sizes in (ny, nx) order).
BACKGROUND_KEYS = ("box_size", "filter_size", "exclude_percentile", "sigma_clip", "bkg_estimator")
BACKGROUND_ESTIMATORS = {"sextractor": 0, "median": 1, "mean": 2}


def _bad(message):
    return Error("INVALID_ARGUMENT", message)


def _names(stats):
    if isinstance(stats, str):
        stats = [s for s in stats.split(",") if s]
    out = []
    for s in stats:
        if s not in STATISTICS:
            raise _bad(f"unknown statistic {s!r} (known: {', '.join(STATISTICS)})")
        out.append(STATISTICS[s])
    return out


def _joint(pb, spec, ranges, colour_space, out):
    names = ["R", "G", "B", "A"]
    if colour_space:
        names = list({"hsv": ["H", "S", "V"], "hsv-full": ["H", "S", "V"], "hls": ["H", "L", "S"],
                      "lab": ["L", "a", "b"], "ycrcb": ["Y", "Cr", "Cb"], "gray": ["Y"]}[colour_space]) + ["A"]
    if isinstance(spec, str):
        channels, sep, bins = spec.rpartition(":")
        if not sep:
            raise _bad(f"joint wants CHANNELS:BINS, e.g. '0,1,2:32' or 'H,S:30,32'; got {spec!r}")
        channels, bins = channels.split(","), [int(b) for b in bins.split(",")]
    else:
        channels, bins = list(spec["channels"]), spec.get("bins", 32)
        ranges = spec.get("ranges", ranges)
        bins = [bins] if isinstance(bins, int) else list(bins)
    for c in channels:
        if isinstance(c, str) and c in names:
            out.channels.append(names.index(c))
        elif c == "Gray" and not colour_space:
            out.channels.append(0)
        else:
            try:
                out.channels.append(int(c))
            except ValueError:
                raise _bad(f"joint: unknown channel {c!r}") from None
    out.bins.extend(bins)
    if ranges:
        if isinstance(ranges, str):
            ranges = [tuple(float(v) for v in r.split(":")) for r in ranges.split(",")]
        for lo, hi in ranges:
            out.ranges.add(lo=lo, hi=hi)


def _sigma_clip(spec, out):
    """astropy's sigma_clip keywords (sigma 3, maxiters 5 or None, cenfunc
    'median' or 'mean', stdfunc 'std' or 'mad_std') into a SigmaClip."""
    if not isinstance(spec, dict) or set(spec) - set(SIGMA_CLIP_KEYS):
        raise _bad(f"sigma_clip wants a dict of {', '.join(SIGMA_CLIP_KEYS)}; got {spec!r}")
    for key in ("sigma", "sigma_lower", "sigma_upper"):
        v = spec.get(key)
        if v is not None:
            if not (isinstance(v, (int, float, np.integer, np.floating)) and 0 < float(v) < float("inf")):
                raise _bad(f"sigma_clip {key} must be a finite number above 0; got {v!r}")
            setattr(out, key, float(v))
    if "maxiters" in spec:
        m = spec["maxiters"]
        if m is None:
            out.maxiters = -1
        elif isinstance(m, (int, np.integer)) and not isinstance(m, bool) and 1 <= m < 1 << 31:
            out.maxiters = int(m)
        else:
            raise _bad(f"sigma_clip maxiters must be 1 or more, or None (until nothing is left out); got {m!r}")
    centre, spread = spec.get("cenfunc", "median"), spec.get("stdfunc", "std")
    if centre not in ("median", "mean") or spread not in ("std", "mad_std"):
        raise _bad(f"sigma_clip cenfunc is 'median' or 'mean' and stdfunc 'std' or 'mad_std'; got {centre!r}, {spread!r}")
    out.centre = 1 if centre == "mean" else 0
    out.spread = 1 if spread == "mad_std" else 0


def _pair(v, what):
    """photutils' as_pair: an int for both axes or (ny, nx)."""
    pair = (v, v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else tuple(v) if isinstance(v, (tuple, list)) else None
    if pair is None or len(pair) != 2 or not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) and 0 < x < 1 << 32 for x in pair):
        raise _bad(f"background {what} wants a positive int or (ny, nx); got {v!r}")
    return int(pair[0]), int(pair[1])


def _background(spec, out):
    """photutils' Background2D keywords (box_size, filter_size,
    exclude_percentile, sigma_clip as astropy's keywords, bkg_estimator
    'sextractor', 'median' or 'mean'), or the box size alone, into
    BackgroundOptions."""
    if not isinstance(spec, dict):
        spec = {"box_size": spec}
    if set(spec) - set(BACKGROUND_KEYS) or "box_size" not in spec:
        raise _bad(f"background wants a box size or a dict of {', '.join(BACKGROUND_KEYS)} with box_size; got {spec!r}")
    out.box_rows, out.box_columns = _pair(spec["box_size"], "box_size")
    out.filter_rows, out.filter_columns = _pair(spec.get("filter_size", 3), "filter_size")
    p = spec.get("exclude_percentile", 10)
    if not (isinstance(p, (int, float, np.integer, np.floating)) and 0 <= float(p) <= 100):
        raise _bad(f"background exclude_percentile must be 0 to 100; got {p!r}")
    out.exclude_percentile = float(p)
    clip = dict(spec.get("sigma_clip") or {})
    clip.setdefault("maxiters", 10)  # Background2D's SigmaClip(sigma=3, maxiters=10)
    _sigma_clip(clip, out.sigma_clip)
    estimator = spec.get("bkg_estimator", "sextractor")
    if estimator not in BACKGROUND_ESTIMATORS:
        raise _bad(f"background bkg_estimator is one of {', '.join(BACKGROUND_ESTIMATORS)}; got {estimator!r}")
    out.estimator = BACKGROUND_ESTIMATORS[estimator]


def build_options(pb, make_input, stats=None, bins=256, range=None, percentiles=None, decoder="auto",
                  allow_truncated=False, colour_space=None, joint=None, joint_range=None, roi=None, tiles=None,
                  mask=None, labels=None, ignore_label=None, max_labels=0, planes=None, level=0,
                  series=None, stored_values=False, sigma_clip=None, background=None):
    """pb: the imgstat_pb2 module; make_input(x, labels) turns a mask or label
    image (a path, bytes, an array) into an Input."""
    o = pb.Options()
    o.statistics.extend(_names(DEFAULT_STATS if stats is None else stats))
    o.bins = int(bins)
    if range is not None:
        lo, hi = range
        o.range.lo, o.range.hi = float(lo), float(hi)
    o.percentiles.extend(float(p) for p in (DEFAULT_PERCENTILES if percentiles is None else percentiles))
    if decoder not in DECODERS:
        raise _bad(f"decoder must be auto, cpu or gpu; got {decoder!r}")
    o.decoder = DECODERS[decoder]
    o.allow_truncated = bool(allow_truncated)
    o.stored_values = bool(stored_values)
    if colour_space:
        if colour_space not in COLOUR_SPACES:
            raise _bad(f"colour_space must be one of {', '.join(COLOUR_SPACES)}; got {colour_space!r}")
        o.colour_space = COLOUR_SPACES[colour_space]
    if joint_range is not None and joint is None:
        raise _bad("joint_range needs joint")
    if joint is not None:
        _joint(pb, joint, joint_range, colour_space, o.joint)
    kinds = [k for k, v in (("roi", roi), ("tiles", tiles), ("mask", mask), ("labels", labels)) if v is not None]
    if len(kinds) > 1:
        raise _bad(f"one kind of parts at a time: {' and '.join(kinds)} given")
    if (ignore_label is not None or max_labels) and labels is None:
        raise _bad("ignore_label and max_labels go with labels")
    if roi is not None:
        rois = [roi] if len(roi) == 4 and all(isinstance(v, (int, np.integer)) for v in roi) else roi
        for r in rois:
            x, y, w, h = (int(v) for v in r)
            if min(x, y, w, h) < 0 or max(x, y, w, h) >= 1 << 32:
                raise _bad(f"roi {tuple(r)}: values must be 0 to 2^32 - 1")
            o.parts.rectangles.rectangles.add(x=x, y=y, width=w, height=h)
    elif tiles is not None:
        if isinstance(tiles, str):
            sizes = tiles.split("x")
            if len(sizes) not in (2, 3) or not all(v.isdigit() for v in sizes):
                raise _bad(f"tiles wants 'CxR', 'CxRxS' or (columns, rows[, slabs]), e.g. '16x16'; got {tiles!r}")
            tiles = tuple(int(v) for v in sizes)
        if len(tiles) not in (2, 3):
            raise _bad(f"tiles wants (columns, rows) or (columns, rows, slabs); got {tiles!r}")
        o.parts.tiles.columns, o.parts.tiles.rows = int(tiles[0]), int(tiles[1])
        if len(tiles) == 3:
            o.parts.tiles.slabs = int(tiles[2])
    elif mask is not None:
        if isinstance(mask, str) and mask == "alpha":
            o.parts.mask.alpha = True
        else:
            o.parts.mask.image.CopyFrom(make_input(mask, False))
    elif labels is not None:
        o.parts.labels.image.CopyFrom(make_input(labels, True))
        if ignore_label is not None:
            o.parts.labels.ignore = int(ignore_label)
        o.parts.labels.max_labels = int(max_labels)
    if sigma_clip is not None:
        _sigma_clip(sigma_clip, o.sigma_clip)
    if background is not None:
        _background(background, o.background)
    if planes is not None and planes is not False:
        _planes(planes, o.planes)
    if level:
        if not isinstance(level, (int, np.integer)) or isinstance(level, bool) or not 0 <= level < 1 << 32:
            raise _bad(f"level wants a pyramid level, 0 to 2^32 - 1; got {level!r}")
        o.planes.level = int(level)
    if series is not None:
        if not isinstance(series, (int, np.integer)) or isinstance(series, bool) or not 0 <= series < 1 << 32:
            raise _bad(f"series wants a series of the file, 0 to 2^32 - 1; got {series!r}")
        o.planes.series = int(series)
    return o


def _planes(planes, out):
    """planes: True (every plane apart too), an int (that one), a range or
    slice of step 1 (half-open, as Python counts), or the CLI's "N", "A-B"
    (inclusive) or "A-"."""
    out.each = True
    if planes is True:
        return
    if isinstance(planes, (int, np.integer)) and not isinstance(planes, bool):
        first, count = int(planes), 1
    elif isinstance(planes, (range, slice)):
        start = planes.start or 0
        if (planes.step or 1) != 1 or start < 0 or (planes.stop is not None and planes.stop <= start):
            raise _bad(f"planes wants a range of step 1 that is not empty, from 0 on; got {planes!r}")
        first, count = start, (0 if planes.stop is None else planes.stop - start)
    elif isinstance(planes, str):
        a, sep, b = planes.partition("-")
        if not a.isdigit() or (b and not b.isdigit()) or (b and int(b) < int(a)):
            raise _bad(f"planes wants N, A-B or A- (from 0); got {planes!r}")
        first, count = int(a), (1 if not sep else 0 if not b else int(b) - int(a) + 1)
    else:
        raise _bad(f"planes wants True, an int, a range or slice, or 'A-B'; got {planes!r}")
    if first < 0:
        raise _bad(f"planes are numbered from 0; got {planes!r}")
    out.first, out.count = first, count


def parts_asked(options):
    return options.HasField("parts") and not options.parts.HasField("mask")


def is_path(x):
    return isinstance(x, (str, os.PathLike))
