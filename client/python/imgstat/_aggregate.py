"""Client.aggregate: many inputs' statistics merged into what one analysis of
all their pixels would give, as the CLI's --aggregate merges them
(kernels/common/merge.cpp): integer images from their exact value counts,
float images by Chan's and Pebay's pairwise formulas, in float64 as the
engines merge. Integers are exact; floats agree with the CLI's to within
rounding of its long double steps."""
import math
from fractions import Fraction

import numpy as np

from ._errors import Error
from ._options import STATISTICS
from ._result import FLOAT_TYPES, SAMPLE_TYPE_NAMES, Result

_TYPE_BITS = {1: 8, 2: 16, 3: 8, 4: 16}
_TYPE_LO = {1: 0, 2: 0, 3: -128, 4: -32768}
_DENSE_JOINT_BINS = 65536


class _Request:
    def __init__(self, options):
        s = set(options.statistics) or {STATISTICS["all"]}
        every = STATISTICS["all"] in s
        self.min_max = every or STATISTICS["min_max"] in s
        self.sum = every or STATISTICS["sum"] in s
        self.stddev = every or STATISTICS["stddev"] in s
        self.histogram = every or STATISTICS["histogram"] in s
        self.distribution = every or STATISTICS["distribution"] in s
        self.shape = every or STATISTICS["shape"] in s
        self.summary = every or STATISTICS["summary"] in s
        self.robust = STATISTICS["robust"] in s  # not part of "all", as on the server
        clip = options.sigma_clip
        sigma = clip.sigma or 3.0
        self.sigma_lower, self.sigma_upper = clip.sigma_lower or sigma, clip.sigma_upper or sigma
        self.maxiters = clip.maxiters or 5
        self.centre_mean, self.spread_mad_std = clip.centre == 1, clip.spread == 1
        self.bins = options.bins or 256
        self.explicit = options.HasField("range")
        self.lo, self.hi = (options.range.lo, options.range.hi) if self.explicit else (0.0, 0.0)
        self.percentiles = list(options.percentiles)


PARTIAL_VERSION = 1  # proto Partial.version, as the CLI writes it
MAX_PARTIAL_BYTES = 8 << 30  # the CLI's kMaxPartialBytes: counts a partial may take to merge


def made_with(pb, o):
    """What a merge state depends on (proto Partial.made_with), as the CLI's
    made_with_of (client/aggregate.cpp) builds it: partials of the CLI and of
    Python merge with each other."""
    m = pb.Options()
    m.bins = o.bins or 256
    if o.HasField("range"):
        m.range.CopyFrom(o.range)
    m.colour_space = o.colour_space
    if o.HasField("joint"):
        m.joint.CopyFrom(o.joint)
    if o.HasField("planes"):
        m.planes.CopyFrom(o.planes)
        m.planes.each = False
    m.stored_values = o.stored_values
    if o.parts.HasField("labels"):
        m.parts.labels.SetInParent()
        if o.parts.labels.HasField("ignore"):
            m.parts.labels.ignore = o.parts.labels.ignore
    elif o.parts.HasField("mask"):
        m.parts.mask.alpha = o.parts.mask.alpha
    return m


def part_options(pb, options):
    """What each input's call asks for: its merge state, and a histogram only
    where one merges (an explicit range)."""
    r = _Request(options)
    o = pb.Options()
    o.CopyFrom(options)
    del o.statistics[:]
    o.statistics.append(STATISTICS["merge_state"])
    if r.histogram and r.explicit:
        o.statistics.append(STATISTICS["histogram"])
    del o.percentiles[:]
    return o


class _Floats:
    __slots__ = ("n", "nan", "posinf", "neginf", "min", "max", "sum", "comp", "mean", "m2", "m3", "m4")

    def __init__(self):
        self.n = self.nan = self.posinf = self.neginf = 0
        self.min = self.max = self.sum = self.comp = self.mean = self.m2 = self.m3 = self.m4 = 0.0

    @staticmethod
    def of(c):
        f, m = _Floats(), c.merge_state
        f.n, f.nan, f.posinf, f.neginf = m.count, c.nan_count, c.posinf_count, c.neginf_count
        f.min, f.max, f.sum, f.comp, f.mean, f.m2, f.m3, f.m4 = m.min, m.max, m.sum, m.sum_compensation, m.mean, m.m2, m.m3, m.m4
        return f

    def merge(self, b):
        # kernels/include/imgstat/float_moments.hpp, step for step in float64.
        self.nan += b.nan
        self.posinf += b.posinf
        self.neginf += b.neginf
        if b.n == 0:
            return
        if self.n == 0:
            for k in ("n", "min", "max", "sum", "comp", "mean", "m2", "m3", "m4"):
                setattr(self, k, getattr(b, k))
            return
        na, nb = float(self.n), float(b.n)
        n = na + nb
        delta = b.mean - self.mean
        d_n = delta / n
        d2 = delta * d_n * na * nb
        self.m4 += (b.m4 + d2 * d_n * d_n * (na * na - na * nb + nb * nb) + 6 * d_n * d_n * (na * na * b.m2 + nb * nb * self.m2)
                    + 4 * d_n * (na * b.m3 - nb * self.m3))
        self.m3 += b.m3 + d2 * d_n * (na - nb) + 3 * d_n * (na * b.m2 - nb * self.m2)
        self.mean += delta * (nb / n)
        self.m2 += b.m2 + d2
        self.n += b.n
        self.min = b.min if b.min < self.min else self.min
        self.max = b.max if b.max > self.max else self.max
        self._add(b.sum)
        self._add(b.comp)

    def _add(self, x):
        t = self.sum + x
        self.comp += (self.sum - t) + x if abs(self.sum) >= abs(x) else (x - t) + self.sum
        self.sum = t


def _zero(v):
    return 0.0 if v == 0 else v


def _set_shape(c, n, m2, m3, m4):
    if not m2 > 0:
        return
    var = m2 / n
    c.skewness = float(m3 / n / (var * np.sqrt(var)))
    c.kurtosis = float(m4 / n / (var * var) - 3)


def _rank(p, n):
    k = math.ceil(Fraction(p) * n / 100)
    return 1 if k < 1 else n if k > n else k


def _fill_ints(c, counts, lo_value, req, histogram=True):
    """ChannelStats c from value counts (uint64 numpy array) as
    kernels/common/moments.cpp and distribution.cpp finalize them."""
    nz = np.flatnonzero(counts)
    n = int(counts.sum(dtype=np.uint64))
    c.count = n
    bits = int(math.log2(len(counts)))
    if histogram and req.histogram:
        h = c.histogram
        if req.explicit:
            h.lo, h.hi = req.lo, req.hi
            bins = np.zeros(req.bins, dtype=np.uint64)
            width = req.hi - req.lo
            for i in nz:
                v = float(lo_value + int(i))
                if v < req.lo:
                    h.underflow += int(counts[i])
                elif v >= req.hi:
                    h.overflow += int(counts[i])
                else:
                    t = (v - req.lo) / width * req.bins
                    b = 0 if not t > 0 else req.bins - 1 if t >= req.bins else int(t)
                    bins[b] += counts[i]
        else:
            h.lo = float(lo_value)
            h.hi = h.lo + 2.0 ** bits
            bins = np.zeros(req.bins, dtype=np.uint64)
            np.add.at(bins, (nz.astype(np.uint64) * np.uint64(req.bins)) >> np.uint64(bits), counts[nz])
        h.counts.extend(int(v) for v in bins)
    if n == 0:
        return 0  # the CLI writes an empty channel's exact sum as 0
    values = lo_value + nz.astype(np.int64)
    k = counts[nz]
    total = sum(int(v) * int(w) for v, w in zip(values, k))
    sumsq = sum(int(v) * int(v) * int(w) for v, w in zip(values, k))
    if req.min_max:
        c.min, c.max = float(values[0]), float(values[-1])
    if req.sum:
        c.sum = float(total)
        if -(1 << 63) <= total < (1 << 63):
            c.sum_int = total
        c.mean = total / n
    if req.stddev:
        c.stddev = math.sqrt(n * sumsq - total * total) / n
    if req.distribution:
        cum = np.cumsum(k, dtype=np.uint64)

        def at(p):
            return float(values[int(np.searchsorted(cum, np.uint64(_rank(p, n))))])
        c.median = at(50)
        for p in req.percentiles:
            c.percentiles.add(p=p, value=at(p))
        c.mode = float(values[int(np.argmax(k))])
        prob = k.astype(np.longdouble) / np.longdouble(n)
        c.entropy = float(-(prob * np.log2(prob)).sum())
        c.bin_error = 0.0
    if req.robust:
        _fill_robust(c.robust, values, k, req)
    if req.shape:
        nd = np.longdouble(n)
        mean = np.longdouble(total) / nd
        d = values.astype(np.longdouble) - mean
        w = k.astype(np.longdouble)
        d2 = d * d
        _set_shape(c, nd, (w * d2).sum(), (w * d2 * d).sum(), (w * d2 * d2).sum())
    return total


_MAD_STD_SCALE = 1.482602218505602


def _fill_robust(r, values, k, req):
    """RobustStats r from the distinct values (ascending) and their counts,
    step for step as kernels/common/distribution.cpp's describe_robust (long
    double sums in the same order): the CLI's numbers to the bit."""
    v = values.astype(np.float64)
    w = k.astype(np.uint64)

    def count(a, b):
        return int(w[a:b + 1].sum(dtype=np.uint64))

    def mean(a, b, n):
        total = sum(int(x) * int(c) for x, c in zip(values[a:b + 1], w[a:b + 1]))
        return float(np.longdouble(total) / np.longdouble(n))

    def stddev(a, b, n):
        m = np.longdouble(mean(a, b, n))
        d = v[a:b + 1].astype(np.longdouble) - m
        terms = (w[a:b + 1].astype(np.longdouble) * d) * d
        return float(np.sqrt(np.cumsum(terms)[-1] / np.longdouble(n)))

    def at_rank(a, b, rank):
        return a + int(np.searchsorted(np.cumsum(w[a:b + 1], dtype=np.uint64), np.uint64(rank)))

    def median(a, b, n):
        if n % 2:
            return float(v[at_rank(a, b, n // 2 + 1)])
        return (float(v[at_rank(a, b, n // 2)]) + float(v[at_rank(a, b, n // 2 + 1)])) / 2

    def median_deviation(a, b, n, centre):
        dev = np.abs(v[a:b + 1] - centre)
        order = np.argsort(dev, kind="stable")
        cum = np.cumsum(w[a:b + 1][order], dtype=np.uint64)

        def kth(rank):
            return float(dev[order[int(np.searchsorted(cum, np.uint64(rank)))]])
        return kth(n // 2 + 1) if n % 2 else (kth(n // 2) + kth(n // 2 + 1)) / 2

    a, b, n = 0, len(v) - 1, count(0, len(v) - 1)
    r.mad = median_deviation(a, b, n, median(a, b, n))
    r.mad_std = r.mad * _MAD_STD_SCALE
    kept, rounds, empty = n, 0, False
    while req.maxiters < 0 or rounds < req.maxiters:
        rounds += 1
        centre = mean(a, b, kept) if req.centre_mean else median(a, b, kept)
        spread = (median_deviation(a, b, kept, median(a, b, kept)) * _MAD_STD_SCALE if req.spread_mad_std
                  else stddev(a, b, kept))
        lower = centre - spread * req.sigma_lower
        upper = centre
        upper += spread * req.sigma_upper
        r.lower_bound, r.upper_bound = lower, upper
        inside = np.flatnonzero((v[a:b + 1] >= lower) & (v[a:b + 1] <= upper))
        if inside.size == 0:
            empty = True
            break
        na, nb = a + int(inside[0]), a + int(inside[-1])
        now = count(na, nb)
        changed = now != kept
        a, b, kept = na, nb, now
        if not changed:
            break
    r.iterations = rounds
    if empty:
        r.count = 0
        r.mean = r.median = r.stddev = math.nan
        r.clipped_low = int(w[v < r.lower_bound].sum(dtype=np.uint64))
        r.clipped_high = n - r.clipped_low
        return
    r.count = kept
    r.clipped_low = count(0, a - 1) if a else 0
    r.clipped_high = count(b + 1, len(v) - 1) if b + 1 < len(v) else 0
    r.mean, r.median, r.stddev = mean(a, b, kept), median(a, b, kept), stddev(a, b, kept)


def _fill_floats(c, f, req, hist=None):
    if req.robust:
        raise Error("UNIMPLEMENTED", "robust statistics (sigma clipping) of float samples are computed for one whole "
                    "image at a time, not merged over images or parts (integer samples are)")
    c.count = f.n
    c.nan_count, c.posinf_count, c.neginf_count = f.nan, f.posinf, f.neginf
    if hist is not None:
        counts, under, over = hist
        c.histogram.counts.extend(int(v) for v in counts)
        c.histogram.lo, c.histogram.hi = req.lo, req.hi
        c.histogram.underflow, c.histogram.overflow = under, over
    if f.n == 0:
        return
    if req.min_max:
        c.min, c.max = _zero(f.min), _zero(f.max)
    total = f.sum + f.comp
    if req.sum:
        c.sum = total
        c.mean = total / float(f.n)
    if req.stddev:
        c.stddev = math.sqrt(max(0.0, f.m2) / float(f.n)) if math.isfinite(f.m2) else math.inf
    if req.shape and math.isfinite(f.m4):
        _set_shape(c, np.longdouble(f.n), np.longdouble(f.m2), np.longdouble(f.m3), np.longdouble(f.m4))


class _Merger:
    def __init__(self, sample_type, channels, req):
        self.type, self.channels, self.req = sample_type, channels, req
        self.float = sample_type in FLOAT_TYPES
        self.images = 0
        if self.float:
            self.moments = [_Floats() for _ in range(channels)]
            self.hist = [[np.zeros(req.bins, dtype=np.uint64), 0, 0] for _ in range(channels)]
        else:
            self.counts = [np.zeros(1 << _TYPE_BITS[sample_type], dtype=np.uint64) for _ in range(channels)]

    def add(self, channels, images=1):
        if len(channels) != self.channels:
            raise Error("INVALID_ARGUMENT", f"cannot merge: an image of {len(channels)} channels among images of "
                        f"{self.channels}")
        for c in channels:  # checked first: a refused image leaves no trace
            if not c.HasField("merge_state"):
                raise Error("INVALID_ARGUMENT", "cannot merge: a channel has no merge state")
            if not self.float and len(c.merge_state.value_counts) != len(self.counts[0]):
                raise Error("INVALID_ARGUMENT", "cannot merge: value counts of another sample type")
            if self.float and self.req.histogram and self.req.explicit and len(c.histogram.counts) != self.req.bins:
                raise Error("INVALID_ARGUMENT", f"cannot merge: a histogram of {len(c.histogram.counts)} bins")
        for i, c in enumerate(channels):
            if self.float:
                self.moments[i].merge(_Floats.of(c))
                if self.req.histogram and self.req.explicit:
                    h = self.hist[i]
                    h[0] += np.array(c.histogram.counts, dtype=np.uint64)
                    h[1] += c.histogram.underflow
                    h[2] += c.histogram.overflow
            else:
                self.counts[i] += np.array(c.merge_state.value_counts, dtype=np.uint64)
        self.images += images

    def put_state(self, out, names):
        """The merged state into out (repeated ChannelStats), as one image's answer carries it."""
        req = self.req
        for i, name in enumerate(names):
            c = out.add(name=name)
            if self.float:
                f, m = self.moments[i], c.merge_state
                c.count, c.nan_count, c.posinf_count, c.neginf_count = f.n, f.nan, f.posinf, f.neginf
                m.count, m.min, m.max, m.sum, m.sum_compensation = f.n, f.min, f.max, f.sum, f.comp
                m.mean, m.m2, m.m3, m.m4 = f.mean, f.m2, f.m3, f.m4
                if req.histogram and req.explicit:
                    h = self.hist[i]
                    c.histogram.counts.extend(int(v) for v in h[0])
                    c.histogram.underflow, c.histogram.overflow = int(h[1]), int(h[2])
                    c.histogram.lo, c.histogram.hi = req.lo, req.hi
            else:
                counts = self.counts[i]
                c.count = int(counts.sum(dtype=np.uint64))
                c.merge_state.value_counts.extend(counts.tolist())

    def fill(self, out_channels, names):
        """Fills the channels; returns the exact sums (None for floats)."""
        sums = []
        req = self.req
        for i, name in enumerate(names):
            c = out_channels.add(name=name)
            if self.float:
                _fill_floats(c, self.moments[i], req, self.hist[i] if req.histogram and req.explicit else None)
                sums.append(None)
            else:
                total = _fill_ints(c, self.counts[i], _TYPE_LO[self.type], req)
                sums.append(total if req.sum and total is not None else None)
        return sums

    def fill_summary(self, c):
        c.name = "all"
        if self.float:
            f = _Floats()
            for m in self.moments:
                f.merge(m)
            _fill_floats(c, f, self.req)
            return None
        total = _fill_ints(c, sum(self.counts[1:], self.counts[0].copy()), _TYPE_LO[self.type], self.req,
                           histogram=False)
        return total if self.req.sum else None


def _set_joint_counts(out, counts):
    if len(counts) <= _DENSE_JOINT_BINS:
        out.counts.extend(int(v) for v in counts)
    else:
        nz = np.flatnonzero(counts)
        out.nonzero_index.extend(int(i) for i in nz)
        out.nonzero_count.extend(int(counts[i]) for i in nz)


class Aggregation:
    """The CLI's Aggregation (client/aggregate.cpp): one group per kind of
    image (sample type, channels), in the order each was first met."""

    def __init__(self, pb, options):
        self.pb = pb
        self.req = _Request(options)
        self.colour = options.colour_space != 0
        self.groups = {}
        self.without_parts = 0
        self.labels_asked = options.HasField("parts") and options.parts.HasField("labels")
        self.made_with = made_with(pb, options)

    def _group(self, sample_type, names):
        key = (sample_type, len(names))
        g = self.groups.get(key)
        if g is None:
            if sample_type not in FLOAT_TYPES and sample_type not in _TYPE_BITS:
                raise Error("INVALID_ARGUMENT", f"cannot merge {SAMPLE_TYPE_NAMES.get(sample_type)} samples")
            g = self.groups[key] = {"type": sample_type, "names": list(names),
                                    "all": _Merger(sample_type, len(names), self.req),
                                    "labels": {}, "label_files": 0, "joint": None, "joint_counts": None}
        return g

    def to_partial(self):
        """The state merged so far (proto Partial; the CLI's Aggregation::partial)."""
        p = self.pb.Partial(version=PARTIAL_VERSION, images_without_parts=self.without_parts)
        p.made_with.CopyFrom(self.made_with)
        for g in self.groups.values():
            pg = p.groups.add(sample_type=g["type"], channel_names=g["names"], images=g["all"].images,
                              label_images=g["label_files"])
            if g["all"].images:
                g["all"].put_state(pg.channels, g["names"])
            for label in sorted(g["labels"]):
                m = g["labels"][label]
                m.put_state(pg.labels.add(label=label, images=m.images).channels, g["names"])
            if g["joint"] is not None:
                pg.joint.CopyFrom(g["joint"])
                _set_joint_counts(pg.joint, g["joint_counts"])
        return p

    def merge(self, p):
        """Another state (proto Partial) merged in; Error INVALID_ARGUMENT where it does not fit."""
        def refuse(why):
            raise Error("INVALID_ARGUMENT", "cannot merge the partial: " + why)
        if p.version != PARTIAL_VERSION:
            refuse(f"its version is {p.version}, and this package reads version {PARTIAL_VERSION}")
        if made_with(self.pb, p.made_with) != self.made_with:
            refuse("it was made with other options (histogram range or bins, colour space, joint histogram, planes, "
                   "stored values or parts) than these")
        size = 0
        for pg in p.groups:
            if pg.sample_type not in FLOAT_TYPES and pg.sample_type not in _TYPE_BITS:
                refuse(f"a group of {SAMPLE_TYPE_NAMES.get(pg.sample_type, pg.sample_type)} samples")
            if not 1 <= len(pg.channel_names) <= 4:
                refuse(f"a group of {len(pg.channel_names)} channels")
            bins = self.req.bins if pg.sample_type in FLOAT_TYPES else 1 << _TYPE_BITS[pg.sample_type]
            size += (1 + len(pg.labels)) * len(pg.channel_names) * bins * 8
            if size > MAX_PARTIAL_BYTES:
                refuse(f"its groups and labels would take more than {MAX_PARTIAL_BYTES >> 30} GiB to merge")
        for pg in p.groups:
            g = self._group(pg.sample_type, pg.channel_names)
            if pg.images:
                if pg.HasField("joint"):
                    self._add_joint(g, pg.joint)
                g["all"].add(pg.channels, pg.images)
            elif len(pg.channels):
                refuse("a group of no images with channels")
            for pl in pg.labels:
                if pl.images == 0:
                    refuse("a label of no images")
                m = g["labels"].get(pl.label)
                if m is None:
                    m = g["labels"][pl.label] = _Merger(g["type"], len(g["names"]), self.req)
                m.add(pl.channels, pl.images)
            g["label_files"] += pg.label_images
        self.without_parts += p.images_without_parts

    def add(self, r):
        if self.labels_asked and len(r.parts) == 0:
            self.without_parts += 1
            return
        named = r.channels if len(r.channels) else (r.parts[0].channels if len(r.parts) else r.channels)
        channels = r.channel_count if not self.colour else len(named)
        names = [c.name for c in named]
        if len(names) != channels:
            raise Error("INVALID_ARGUMENT", "the answer's channels do not match its channel count")
        if not 1 <= channels <= 4:
            raise Error("INVALID_ARGUMENT", f"an answer of {channels} channels")
        g = self._group(r.sample_type, names)
        if len(r.parts) == 0:
            g["all"].add(r.channels)
            if r.HasField("joint"):
                self._add_joint(g, r.joint)
            return
        for p in r.parts:
            if not p.HasField("label"):
                raise Error("INVALID_ARGUMENT", "only labelled parts are merged across files")
            m = g["labels"].get(p.label)
            if m is None:
                m = g["labels"][p.label] = _Merger(g["type"], channels, self.req)
            m.add(p.channels)
        g["label_files"] += 1

    def _add_joint(self, g, h):
        bins = int(np.prod(list(h.bins))) if len(h.bins) else 0
        if g["joint"] is None:
            j = self.pb.JointHistogram()
            j.CopyFrom(h)
            del j.counts[:], j.nonzero_index[:], j.nonzero_count[:]
            j.outside = 0
            g["joint"], g["joint_counts"] = j, np.zeros(bins, dtype=np.uint64)
        elif len(g["joint_counts"]) != bins:
            raise Error("INVALID_ARGUMENT", "joint histograms of different shapes cannot be merged")
        if len(h.counts):
            g["joint_counts"] += np.array(h.counts, dtype=np.uint64)
        if len(h.nonzero_index):
            np.add.at(g["joint_counts"], np.array(h.nonzero_index, dtype=np.int64), np.array(h.nonzero_count, dtype=np.uint64))
        g["joint"].outside += h.outside

    def results(self):
        pb, out = self.pb, []
        for g in self.groups.values():
            kind = SAMPLE_TYPE_NAMES[g["type"]]
            nc = len(g["names"])

            def title(images, suffix=""):
                return (f"all {images} {kind} image{'' if images == 1 else 's'} of {nc} "
                        f"channel{'' if nc == 1 else 's'}{suffix}")
            if g["labels"]:
                r = pb.AnalyzeResponse(format="aggregate", channel_count=nc, sample_type=g["type"], engine="merge")
                for label in sorted(g["labels"]):
                    p = r.parts.add(label=label)
                    g["labels"][label].fill(p.channels, g["names"])
                out.append(Result(r, title(g["label_files"], ", by label"), parts_asked=True, images=g["label_files"]))
            m = g["all"]
            if m.images == 0:
                continue
            r = pb.AnalyzeResponse(format="aggregate", channel_count=nc, sample_type=g["type"], engine="merge")
            sums = m.fill(r.channels, g["names"])
            if self.req.summary:
                sums.append(m.fill_summary(r.summary))
            if g["joint"] is not None:
                r.joint.CopyFrom(g["joint"])
                _set_joint_counts(r.joint, g["joint_counts"])
            out.append(Result(r, title(m.images), parts_asked=self.labels_asked, images=m.images, exact_sums=sums))
        return out
