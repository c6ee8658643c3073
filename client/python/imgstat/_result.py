"""What an analysis answers: ``Result``, its ``Channel`` and ``Part``
objects, and ``to_dict()``, which is the CLI's ``--json`` object exactly."""
import math

import numpy as np

SAMPLE_TYPE_NAMES = {0: "unspecified", 1: "uint8", 2: "uint16", 3: "int8", 4: "int16", 5: "float32",
                     6: "float64", 7: "uint32", 8: "int32"}
FLOAT_TYPES = (5, 6)


def _num(v):
    """A float as nlohmann's dump writes it: NaN and infinities are null."""
    return v if math.isfinite(v) else None


def _ms(d):
    return d.seconds * 1e3 + d.nanos * 1e-6



def _robust_dict(q):
    """RobustStats as the CLI's --json writes it (NaN: None)."""
    return {"mean": _num(q.mean), "median": _num(q.median), "stddev": _num(q.stddev), "count": q.count,
            "clipped_low": q.clipped_low, "clipped_high": q.clipped_high, "iterations": q.iterations,
            "lower_bound": _num(q.lower_bound), "upper_bound": _num(q.upper_bound), "mad": _num(q.mad),
            "mad_std": _num(q.mad_std)}

_PERCENTILE_NAMES = {1: "brightness_perc_1", 5: "brightness_perc_5", 10: "brightness_perc_10",
                     15: "brightness_perc_15", 90: "brightness_perc_90", 95: "brightness_perc_95",
                     99: "brightness_perc_99"}


def _background_dict(m):
    def rows(v):
        v = list(v)
        return [v[i * m.columns:(i + 1) * m.columns] for i in range(m.rows)] if v else []
    return {"channel": m.channel, "rows": m.rows, "columns": m.columns, "box_rows": m.box_rows,
            "box_columns": m.box_columns, "background_median": m.background_median,
            "background_rms_median": m.background_rms_median, "boxes_excluded": m.boxes_excluded,
            "background": rows(m.background), "background_rms": rows(m.background_rms), "excluded": rows(m.excluded)}


def _quality_dict(q):
    """QualityStats as the CLI's --json writes it; cleanvision's properties
    under their cleanvision names."""
    d = {"laplacian_variance": q.laplacian_variance, "rms_contrast": q.rms_contrast,
         "share_at_min": list(q.share_at_min), "share_at_max": list(q.share_at_max)}
    if q.HasField("colourfulness"):
        d["colourfulness"] = q.colourfulness
    if q.HasField("cleanvision"):
        c = q.cleanvision
        v = {"brightness": c.brightness}
        for p in c.brightness_percentiles:
            v[_PERCENTILE_NAMES[int(p.p)]] = p.value
        for k in ("dark_score", "is_dark_issue", "light_score", "is_light_issue", "blurriness",
                  "blurriness_grayscale_std", "blurry_score", "is_blurry_issue", "entropy", "low_information_score",
                  "is_low_information_issue", "aspect_ratio", "is_odd_aspect_ratio_issue", "size",
                  "is_grayscale_issue"):
            v[k] = getattr(c, k)
        v["odd_aspect_ratio_score"] = c.aspect_ratio
        d["cleanvision"] = dict(sorted(v.items()))
    return dict(sorted(d.items()))


class Channel:
    """One channel's statistics. Sample values (min, max, median, mode,
    percentiles) are ints for integer images; ``sum`` is the exact sum, a
    Python int, for integer images. A statistic not asked for, or of a
    channel with no finite sample, is None."""

    __slots__ = ("_c", "_float", "_sum", "_stack")

    def __init__(self, c, float_samples, exact_sum=None, stack=False):
        self._c = c
        self._float = float_samples
        self._sum = exact_sum
        self._stack = stack  # positions are in a stack of planes: (x, y, plane)

    def _sample(self, v):
        return v if self._float else int(v)

    name = property(lambda self: self._c.name)
    count = property(lambda self: self._c.count)
    nan_count = property(lambda self: self._c.nan_count)
    posinf_count = property(lambda self: self._c.posinf_count)
    neginf_count = property(lambda self: self._c.neginf_count)

    @property
    def min(self):
        return self._sample(self._c.min) if self._c.HasField("min") else None

    @property
    def max(self):
        return self._sample(self._c.max) if self._c.HasField("max") else None

    @property
    def sum(self):
        if self._sum is not None:
            return self._sum
        if self._c.HasField("sum_int"):
            return self._c.sum_int
        return self._c.sum if self._c.HasField("sum") else None

    @property
    def mean(self):
        return self._c.mean if self._c.HasField("mean") else None

    @property
    def stddev(self):
        return self._c.stddev if self._c.HasField("stddev") else None

    @property
    def histogram(self):
        """The counts, a uint64 numpy array (None when not asked for)."""
        if not self._c.HasField("histogram"):
            return None
        return np.array(self._c.histogram.counts, dtype=np.uint64)

    @property
    def histogram_range(self):
        """(lo, hi): bins are equal slices of it (the last one includes hi for an automatic float range)."""
        h = self._c.histogram
        return (h.lo, h.hi) if self._c.HasField("histogram") else None

    @property
    def histogram_edges(self):
        """bins + 1 edges, numpy.histogram's form."""
        if not self._c.HasField("histogram"):
            return None
        h = self._c.histogram
        return np.linspace(h.lo, h.hi, len(h.counts) + 1)

    underflow = property(lambda self: self._c.histogram.underflow)
    overflow = property(lambda self: self._c.histogram.overflow)

    @property
    def median(self):
        return self._sample(self._c.median) if self._c.HasField("median") else None

    @property
    def percentiles(self):
        """{p: value} for the percentiles asked for."""
        return {p.p: self._sample(p.value) for p in self._c.percentiles}

    @property
    def mode(self):
        return self._sample(self._c.mode) if self._c.HasField("mode") else None

    entropy = property(lambda self: self._c.entropy if self._c.HasField("entropy") else None)
    bin_error = property(lambda self: self._c.bin_error if self._c.HasField("bin_error") else None)
    skewness = property(lambda self: self._c.skewness if self._c.HasField("skewness") else None)
    kurtosis = property(lambda self: self._c.kurtosis if self._c.HasField("kurtosis") else None)

    @property
    def robust(self):
        """Sigma-clipped statistics (stats="robust"), as a dict: mean, median,
        stddev, count, clipped_low, clipped_high, iterations, lower_bound,
        upper_bound, mad, mad_std; None where not asked for."""
        return _robust_dict(self._c.robust) if self._c.HasField("robust") else None

    def _position(self, p):
        return (p.x, p.y, p.plane) if self._stack else (p.x, p.y)

    @property
    def min_position(self):
        """(x, y), or (x, y, plane) in a file of several planes."""
        return self._position(self._c.min_position) if self._c.HasField("min_position") else None

    @property
    def max_position(self):
        return self._position(self._c.max_position) if self._c.HasField("max_position") else None

    @property
    def proto(self):
        """The imgstat.v1.ChannelStats message itself."""
        return self._c

    def to_dict(self):
        """This channel as the CLI's --json writes it."""
        c, flt = self._c, self._float
        sample = (lambda v: _num(v)) if flt else (lambda v: int(v))
        d = {"name": c.name, "count": c.count,
             "min": sample(c.min) if c.HasField("min") else None,
             "max": sample(c.max) if c.HasField("max") else None,
             "mean": _num(c.mean) if c.HasField("mean") else None,
             "stddev": _num(c.stddev) if c.HasField("stddev") else None}
        if self._sum is not None:
            d["sum"] = self._sum
        elif c.HasField("sum_int"):
            d["sum"] = c.sum_int
        else:
            d["sum"] = _num(c.sum) if c.HasField("sum") else None
        if c.HasField("median"):
            d["median"] = sample(c.median)
            d["percentiles"] = [{"p": _num(p.p), "value": sample(p.value)} for p in c.percentiles]
            d["mode"] = sample(c.mode)
            d["entropy"] = _num(c.entropy)
            d["bin_error"] = _num(c.bin_error)
        if c.HasField("skewness"):
            d["skewness"] = _num(c.skewness)
            d["kurtosis"] = _num(c.kurtosis)
        if c.HasField("robust"):
            d["robust"] = _robust_dict(c.robust)
        if c.HasField("min_position"):
            for key, p in (("min_position", c.min_position), ("max_position", c.max_position)):
                d[key] = {"x": p.x, "y": p.y, "plane": p.plane} if self._stack else {"x": p.x, "y": p.y}
        if c.HasField("histogram"):
            h = c.histogram
            d["histogram"] = {"counts": list(h.counts), "lo": _num(h.lo), "hi": _num(h.hi),
                              "underflow": h.underflow, "overflow": h.overflow}
        else:
            d["histogram"] = None
        if self._float_samples():
            d["nan_count"] = c.nan_count
            d["inf_count"] = c.posinf_count + c.neginf_count
            d["posinf_count"] = c.posinf_count
            d["neginf_count"] = c.neginf_count
        return d

    def _float_samples(self):
        return self._float

    def __repr__(self):
        return (f"Channel({self.name!r}, count={self.count}, min={self.min!r}, max={self.max!r}, "
                f"mean={self.mean!r}, stddev={self.stddev!r})")


def _joint_dict(h):
    d = {"channels": list(h.channels), "bins": list(h.bins), "ranges": [[_num(r.lo), _num(r.hi)] for r in h.ranges]}
    if len(h.nonzero_index) > 0 or len(h.counts) == 0:
        d["nonzero"] = [[i, c] for i, c in zip(h.nonzero_index, h.nonzero_count)]
    else:
        d["counts"] = list(h.counts)
    d["outside"] = h.outside
    return d


class Joint:
    """A joint histogram: ``counts`` a numpy array of shape ``bins`` (numpy's
    histogramdd layout, the first channel slowest), even where the server
    sent only the bins that are not zero."""

    def __init__(self, h):
        self.proto = h
        self.channels = list(h.channels)
        self.bins = tuple(h.bins)
        self.ranges = [(r.lo, r.hi) for r in h.ranges]
        self.outside = h.outside

    @property
    def counts(self):
        n = int(np.prod(self.bins)) if self.bins else 0
        if len(self.proto.counts):
            flat = np.array(self.proto.counts, dtype=np.uint64)
        else:
            flat = np.zeros(n, dtype=np.uint64)
            flat[np.array(self.proto.nonzero_index, dtype=np.int64)] = np.array(self.proto.nonzero_count, dtype=np.uint64)
        return flat.reshape(self.bins)


class Part:
    """One rectangle, label or tile: ``roi`` (x, y, width, height), ``label``
    with its ``box`` (x, y, z, width, height, depth; z the plane of a
    volume), ``tile`` (column, row; a stack's (column, row, slab) with its
    box) where they apply, and its channels."""

    def __init__(self, p, float_samples, stack=False):
        self.proto = p
        self._float = float_samples
        self.label = p.label if p.HasField("label") else None
        self.tile = None
        if p.HasField("tile"):  # a stack's tiles: (column, row, slab), with their box
            self.tile = (p.tile.column, p.tile.row) + ((p.tile.slab,) if p.HasField("box") else ())
        self.roi = (p.roi.x, p.roi.y, p.roi.width, p.roi.height) if p.HasField("roi") else None
        b = p.box
        self.box = (b.x, b.y, b.z, b.width, b.height, b.depth) if p.HasField("box") else None
        self.channels = [Channel(c, float_samples, stack=stack) for c in p.channels]
        self.joint = Joint(p.joint) if p.HasField("joint") else None

    def to_dict(self):
        d = {}
        if self.label is not None:
            d["label"] = self.label
        if self.tile is not None:
            d["tile"] = list(self.tile)
        if self.roi is not None:
            d["roi"] = list(self.roi)
        if self.box is not None:
            d["box"] = list(self.box)
        d["channels"] = [c.to_dict() for c in self.channels]
        if self.joint is not None:
            d["joint"] = _joint_dict(self.proto.joint)
        return d

    def __repr__(self):
        where = (f"label={self.label}" if self.label is not None else
                 f"tile={self.tile}" if self.tile is not None else f"roi={self.roi}")
        return f"Part({where}, {len(self.channels)} channels)"


class Plane:
    """One plane of a file of several (``planes=`` asked): its ``index`` in
    the file, its channels and, for an animation's frame, ``delay_ms``
    (how long it shows; 0 otherwise)."""

    def __init__(self, p, float_samples, axes=False):
        self.proto = p
        self._axes = axes
        self.index = p.index
        self.delay_ms = p.delay_ms
        self.z, self.c, self.t = p.z, p.c, p.t  # where the file gives its stack's axes (facts["stack_axes"])
        self.channels = [Channel(c, float_samples) for c in p.channels]

    def __getitem__(self, name):
        for c in self.channels:
            if c.name == name:
                return c
        raise KeyError(name)

    def to_dict(self):
        d = {"index": self.index}
        if self.delay_ms:
            d["delay_ms"] = self.delay_ms
        if self._axes:
            d["z"], d["c"], d["t"] = self.z, self.c, self.t
        d["channels"] = [c.to_dict() for c in self.channels]
        return d

    def __repr__(self):
        return f"Plane({self.index}, {len(self.channels)} channels)"


class Result:
    """One input's statistics (or, from ``Client.aggregate``, many inputs'
    together). ``channels`` are the image's (or a colour space's) in order;
    ``result["R"]`` finds one by name. ``proto`` is the imgstat.v1
    AnalyzeResponse itself."""

    def __init__(self, response, file, parts_asked=False, images=0, exact_sums=None):
        # The response, or its serialized bytes (analyze_many), parsed on first use.
        self._proto = response
        self.file = file
        self._parts_asked = parts_asked
        self.images = images  # aggregate: the inputs merged into it
        self._exact = exact_sums or []
        self._channels = None

    @property
    def proto(self):
        """The imgstat.v1 AnalyzeResponse."""
        if isinstance(self._proto, bytes):
            from .v1 import imgstat_pb2
            self._proto = imgstat_pb2.AnalyzeResponse.FromString(self._proto)
        return self._proto

    format = property(lambda self: self.proto.format)
    width = property(lambda self: self.proto.width)
    height = property(lambda self: self.proto.height)
    channel_count = property(lambda self: self.proto.channel_count)
    sample_type = property(lambda self: SAMPLE_TYPE_NAMES.get(self.proto.sample_type, "unknown"))
    engine = property(lambda self: self.proto.engine)
    decoder = property(lambda self: self.proto.decoder)
    device = property(lambda self: self.proto.device if self.proto.HasField("device") else None)
    warnings = property(lambda self: list(self.proto.warnings))
    decode_ms = property(lambda self: _ms(self.proto.decode_time))
    compute_ms = property(lambda self: _ms(self.proto.compute_time))
    unique_colors = property(lambda self: self.proto.unique_colors if self.proto.HasField("unique_colors") else None)

    @property
    def _float(self):
        return self.proto.sample_type in FLOAT_TYPES

    def _exact_sum(self, k):
        return self._exact[k] if k < len(self._exact) else None

    @property
    def channels(self):
        if self._channels is None:
            stack = self.proto.facts.planes_answered > 1
            self._channels = [Channel(c, self._float, self._exact_sum(k), stack)
                              for k, c in enumerate(self.proto.channels)]
        return self._channels

    def __getitem__(self, name):
        for c in self.channels:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def summary(self):
        if not self.proto.HasField("summary"):
            return None
        return Channel(self.proto.summary, self._float, self._exact_sum(len(self.proto.channels)))

    @property
    def luminance(self):
        return Channel(self.proto.luminance, self._float) if self.proto.HasField("luminance") else None

    @property
    def quality(self):
        """Quality measures (stats="quality"), as a dict: laplacian_variance,
        rms_contrast, colourfulness (colour images), share_at_min and
        share_at_max per channel, and for 8-bit images cleanvision's
        properties, scores and issues under its names; else None."""
        return _quality_dict(self.proto.quality) if self.proto.HasField("quality") else None

    @property
    def hashes(self):
        """Hashes (stats="hashes"), as the CLI's --json writes them: pixels
        (XXH3-128 of the decoded pixels, hex) and, 8-bit images, phash
        (imagehash's, hex); else None."""
        if not self.proto.HasField("hashes"):
            return None
        h = {"pixels": self.proto.hashes.pixels.hex()}
        if self.proto.hashes.HasField("phash"):
            h["phash"] = "%016x" % self.proto.hashes.phash
        return h

    @property
    def background(self):
        """Background meshes (background=...), one dict per channel as
        photutils' Background2D names them: background_mesh and
        background_rms_mesh (numpy arrays of boxes, ny x nx), background_median,
        background_rms_median, box_size (ny, nx), excluded (the boxes left out
        and filled, a bool array) and channel; else None."""
        if not len(self.proto.background):
            return None
        out = []
        for m in self.proto.background:
            shape = (m.rows, m.columns)
            def mesh(v):
                return np.array(v, dtype=np.float64).reshape(shape) if len(v) else None
            out.append({"channel": m.channel, "box_size": (m.box_rows, m.box_columns),
                        "background_mesh": mesh(m.background), "background_rms_mesh": mesh(m.background_rms),
                        "excluded": np.array(m.excluded, dtype=bool).reshape(shape) if len(m.excluded) else None,
                        "boxes_excluded": m.boxes_excluded, "background_median": m.background_median,
                        "background_rms_median": m.background_rms_median})
        return out

    @property
    def parts(self):
        stack = self.proto.HasField("facts") and self.proto.facts.planes_answered > 1
        return [Part(p, self._float, stack) for p in self.proto.parts]

    @property
    def joint(self):
        return Joint(self.proto.joint) if self.proto.HasField("joint") else None

    @property
    def planes(self):
        """Each plane's own statistics, with ``planes=`` asked (else [])."""
        axes = self.proto.HasField("facts") and self.proto.facts.HasField("stack_axes")
        return [Plane(p, self._float, axes) for p in self.proto.planes]

    @property
    def other_series(self):
        """A file of several series answered whole: series 1 onwards, each a
        Result of its own (this one is series 0's); else []."""
        return [Result(r, self.file, self._parts_asked) for r in self.proto.other_series]

    @property
    def facts(self):
        """What an encoded file says about itself (None for raw and bytes input)."""
        if not self.proto.HasField("facts"):
            return None
        f = self.proto.facts
        d = {"bit_depth": f.bit_depth, "color_type": f.color_type, "palette_size": f.palette_size,
                "jpeg_quality": f.jpeg_quality, "chroma_subsampling": f.chroma_subsampling,
                "progressive": f.progressive, "icc_profile": f.icc_profile, "exif_orientation": f.exif_orientation}
        if f.planes > 1:
            d["planes"], d["planes_answered"] = f.planes, f.planes_answered
        if f.reduced_pages:
            d["reduced_pages"] = f.reduced_pages
        if f.series_count > 1:
            d["series_count"], d["series"] = f.series_count, f.series
        if f.levels > 1:
            d["levels"], d["level"] = f.levels, f.level
        if f.duration_ms:
            d["duration_ms"] = f.duration_ms
        if f.keywords:  # a FITS, NIfTI or DICOM header's facts
            d["keywords"] = dict(sorted(f.keywords.items()))
        if f.HasField("stack_axes"):
            a = f.stack_axes
            d["stack_axes"] = {"source": a.source, "order": a.order, "z": a.z, "c": a.c, "t": a.t}
        return d

    def to_dict(self):
        """The CLI's ``--json`` object for the same input and options: the same
        keys and values (numbers as Python ints and floats)."""
        r = self.proto
        if self.images:
            return self._aggregate_dict()
        file = self.file
        if r.facts.series_count > 1:  # named as the CLI names each series
            file = f"{file} [series {r.facts.series}]"
        d = {"file": file, "ok": True, "format": r.format, "width": r.width, "height": r.height,
             "channel_count": r.channel_count, "sample_type": self.sample_type, "engine": r.engine,
             "decoder": r.decoder, "decode_ms": _num(self.decode_ms), "compute_ms": _num(self.compute_ms),
             "warnings": list(r.warnings), "channels": [c.to_dict() for c in self.channels]}
        if r.HasField("device"):
            d["device"] = r.device
        if r.HasField("check_time"):
            d["check_ms"] = _num(_ms(r.check_time))
        if r.HasField("facts"):
            d["facts"] = self.facts
        if r.HasField("unique_colors"):
            d["unique_colors"] = r.unique_colors
        if r.HasField("luminance"):
            d["luminance"] = self.luminance.to_dict()
        if r.HasField("quality"):
            d["quality"] = self.quality
        if r.HasField("hashes"):
            d["hashes"] = self.hashes
        if len(r.background):  # as the CLI's --json writes it
            d["background"] = [_background_dict(m) for m in r.background]
        self._wholes_and_parts(d)
        if len(r.planes):
            d["planes"] = [p.to_dict() for p in self.planes]
        return d

    def _aggregate_dict(self):
        r = self.proto
        d = {"file": self.file, "ok": True, "aggregate": True, "images": self.images,
             "channel_count": r.channel_count, "sample_type": self.sample_type,
             "channels": [c.to_dict() for c in self.channels]}
        return self._wholes_and_parts(d)

    def _wholes_and_parts(self, d):
        """The summary, the joint histogram and the parts, as both kinds of answer write them."""
        r = self.proto
        if r.HasField("summary"):
            d["summary"] = self.summary.to_dict()
        if r.HasField("joint"):
            d["joint"] = _joint_dict(r.joint)
        if len(r.parts) or self._parts_asked:
            d["parts"] = [p.to_dict() for p in self.parts]
        return d

    def __repr__(self):
        return (f"Result({self.file!r}, {self.format} {self.width}x{self.height}x{self.channel_count} "
                f"{self.sample_type}, engine={self.engine!r})")
