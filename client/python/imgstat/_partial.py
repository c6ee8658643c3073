"""imgstat.Partial: many inputs' statistics merged, as state that merges
exactly with any other made with the same options, wherever it was made
(the CLI's --partial-out files are the same bytes' kind)."""
from __future__ import annotations

from ._aggregate import PARTIAL_VERSION, Aggregation
from ._errors import Error
from ._options import build_options
from .v1 import imgstat_pb2 as pb


class Partial:
    """The state of a merge (proto imgstat.v1.Partial): ``Client.partial``
    makes one, ``a + b`` (or ``a.merge(b)``, ``sum(partials)``) merges two in
    any order and grouping, ``to_bytes``/``from_bytes`` carry it between
    processes and machines, and ``result()`` gives what ``Client.aggregate``
    over all their inputs gives: integer images exactly (their value counts
    add), float images by the engines' pairwise moment merge. Its size is
    bounded by the kinds of image, labels and bins, not by the inputs."""

    __slots__ = ("proto",)

    def __init__(self, proto: pb.Partial):
        self.proto = proto

    @classmethod
    def from_bytes(cls, data: bytes) -> Partial:
        p = pb.Partial()
        try:
            p.ParseFromString(bytes(data))
        except Exception:
            raise Error("INVALID_ARGUMENT", "not a partial (imgstat.v1.Partial)") from None
        if p.version != PARTIAL_VERSION:
            raise Error("INVALID_ARGUMENT", f"a partial of version {p.version}; this package reads version "
                        f"{PARTIAL_VERSION}")
        return cls(p)

    def to_bytes(self) -> bytes:
        return self.proto.SerializeToString()

    @property
    def images(self) -> int:
        """How many images (and series) it holds, every kind together."""
        return sum(g.images + g.label_images for g in self.proto.groups) + self.proto.images_without_parts

    def _aggregation(self, stats=None, percentiles=None):
        o = pb.Options()
        o.CopyFrom(self.proto.made_with)
        asked = build_options(pb, None, stats=stats, percentiles=percentiles)
        o.statistics.extend(asked.statistics)
        o.percentiles.extend(asked.percentiles)
        return Aggregation(pb, o)

    def merge(self, other: Partial) -> Partial:
        """Both merged into a new Partial; Error INVALID_ARGUMENT where they were made with other options."""
        if not isinstance(other, Partial):
            return NotImplemented
        a = self._aggregation()
        a.merge(self.proto)
        a.merge(other.proto)
        return Partial(a.to_partial())

    __add__ = merge

    def __radd__(self, other):
        return self if other == 0 else NotImplemented  # sum(partials)

    def result(self, stats=None, percentiles=None) -> list:
        """The merged answers, as Client.aggregate gives them (one Result per
        kind of image); stats and percentiles as there."""
        a = self._aggregation(stats, percentiles)
        a.merge(self.proto)
        return a.results()

    def __repr__(self):
        return f"<imgstat.Partial: {self.images} images in {len(self.proto.groups)} kinds>"
