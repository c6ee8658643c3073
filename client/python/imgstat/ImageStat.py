"""Pillow's ``ImageStat.Stat``, computed by an imgstat server, for code moving
from Pillow:

    from imgstat import ImageStat
    stat = ImageStat.Stat(image_or_path_or_array, mask=None)
    stat.mean, stat.stddev, stat.extrema, stat.median

Each attribute is a list with one entry per band, as Pillow's. For 8-bit
images every attribute is Pillow's own definition over the same 256-value
histogram, so the numbers are Pillow's (``median`` is Pillow's: the first
value whose running count passes half the count, rounded down; ``var`` is
the population variance; ``extrema`` of a band with no pixel under the
mask is Pillow's (255, 0)).

Where they differ: Pillow works on 8-bit bands and bins 16-bit and float
images into 256 bins before these statistics; imgstat does not. For
16-bit, signed and float images ``extrema``, ``count``, ``sum`` (exact for
integers) and ``mean`` are the exact ones, ``median`` is the exact
median (the lower middle), ``sum2`` is derived from the exact sum and the
standard deviation (exact to float64 rounding), and NaN and infinities
are left out. Palette images are analyzed as their RGB(A) colours, as
imgstat decodes palette files, not as palette indices as Pillow does.
Paths are decoded by the server (OpenCV's conventions, docs/conventions.md);
pass a PIL image to measure exactly the pixels Pillow decoded.
"""
import math

_default = None


def _client():
    global _default
    if _default is None:
        from ._client import Client
        _default = Client()
    return _default


class Stat:
    """Pillow's ImageStat.Stat. ``client``: the imgstat.Client to ask (default:
    one to ``$IMGSTAT_SERVER``, else localhost:50051)."""

    def __init__(self, image_or_list, mask=None, *, client=None):
        if isinstance(image_or_list, list):  # Pillow's form: a histogram, 256 per band
            self.h = list(image_or_list)
            self._eight = True
            self._result = None
            return
        client = client or _client()
        options = {"stats": ["min_max", "sum", "stddev", "histogram", "distribution"], "bins": 256,
                   "percentiles": []}
        if mask is not None:
            options["mask"] = mask
        result = client.analyze(image_or_list, **options)
        self._result = result
        self._eight = result.sample_type == "uint8"
        self.h = []
        if self._eight:
            for c in result.channels:
                self.h.extend(int(v) for v in c.histogram)

    @property
    def bands(self):
        return range(len(self.h) // 256) if self._eight else range(len(self._result.channels))

    def _each(self, f8, other):
        if self._eight:
            return [f8(self.h[i * 256:(i + 1) * 256]) for i in self.bands]
        return [other(c) for c in self._result.channels]

    @property
    def extrema(self):
        def minmax(h):
            nz = [i for i in range(256) if h[i]]
            return (nz[0], nz[-1]) if nz else (255, 0)
        return self._each(minmax, lambda c: (c.min, c.max))

    @property
    def count(self):
        return self._each(sum, lambda c: c.count)

    @property
    def sum(self):
        return self._each(lambda h: sum(i * h[i] for i in range(256)), lambda c: c.sum if c.count else 0)

    @property
    def sum2(self):
        def other(c):
            if not c.count:
                return 0
            return c.stddev ** 2 * c.count + c.sum * c.sum / c.count
        return self._each(lambda h: sum(i * i * h[i] for i in range(256)), other)

    @property
    def mean(self):
        return [s / n if n else 0.0 for s, n in zip(self.sum, self.count)] if self._eight else \
            [c.mean for c in self._result.channels]

    @property
    def median(self):
        def pillow(h):
            half, s = sum(h) // 2, 0
            for j in range(256):
                s += h[j]
                if s > half:
                    return j
            return 255
        return self._each(pillow, lambda c: c.median)

    @property
    def rms(self):
        return [math.sqrt(s2 / n) if n else 0.0 for s2, n in zip(self.sum2, self.count)]

    @property
    def var(self):
        if not self._eight:
            return [c.stddev ** 2 if c.count else 0.0 for c in self._result.channels]
        return [(s2 - (s ** 2.0) / n) / n if n else 0.0 for s, s2, n in zip(self.sum, self.sum2, self.count)]

    @property
    def stddev(self):
        return [math.sqrt(v) for v in self.var]


Global = Stat  # Pillow's alias
