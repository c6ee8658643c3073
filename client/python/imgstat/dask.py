"""imgstat on Dask: the statistics of a Dask bag of inputs (paths, URLs,
shard members, arrays) or of a Dask array (a chunked volume from Zarr or
HDF5), computed on a ``distributed`` cluster whose workers each call an
imgstat server (their node's, or one they are given), merged exactly:

    import dask.bag as db, imgstat.dask
    results = imgstat.dask.aggregate(db.from_sequence(paths, npartitions=64))

Each partition (a bag's) or chunk (an array's) is analyzed into an
imgstat.Partial on a worker; the partials are merged in a tree (``split_every``
at a time) into one, whose ``result()`` is what ``Client.aggregate`` over
every input in one process gives: integer images equal to the last digit,
floats within rounding of the merge order. A task Dask runs again (a worker
lost) gives the same partial, and the tree takes each task's once: every
input is counted once.

``server``: None for ``$IMGSTAT_SERVER`` on each worker (else
localhost:50051: the server on the worker's own node; ``$IMGSTAT_TOKEN``
and ``$IMGSTAT_TLS_CA`` there too); an address; or a list
of addresses, each worker keeping to one of them (by its name: a
LocalCluster's workers 0, 1, ... take them in turn).
"""
from __future__ import annotations

import os
import threading
from typing import Any

_clients = {}
_clients_lock = threading.Lock()


def _address(server):
    if server is None:
        return os.environ.get("IMGSTAT_SERVER", "localhost:50051")
    if isinstance(server, str):
        return server
    servers = list(server)
    try:
        from distributed import get_worker
        name = get_worker().name  # a LocalCluster's are 0, 1, ...; else the address
    except (ImportError, ValueError):
        name = os.getpid()
    return servers[(name if isinstance(name, int) else sum(str(name).encode())) % len(servers)]


def _client(server):
    """This process's Client for the worker's server (one per address, kept).
    A worker's $IMGSTAT_TOKEN and $IMGSTAT_TLS_CA (a CA file) are used where
    set, as deploy/kubernetes/imgstat-dask.yaml sets them."""
    import imgstat
    address = _address(server)
    with _clients_lock:
        c = _clients.get(address)
        if c is None:
            c = _clients[address] = imgstat.Client(address, token=os.environ.get("IMGSTAT_TOKEN") or None,
                                                    tls_ca=os.environ.get("IMGSTAT_TLS_CA") or None)
        return c


def _merge(parts):
    """Partials' bytes merged into one aggregation (not pairwise: each state read once)."""
    from ._partial import Partial
    partials = [Partial.from_bytes(b) for b in parts]
    aggregation = partials[0]._aggregation()
    for p in partials:
        aggregation.merge(p.proto)
    return aggregation.to_partial().SerializeToString()


def _bag_partition(server, labels, options):
    def run(items):
        return _client(server).partial(list(items), labels=labels, **options).to_bytes()
    return run


def _chunk(block, server, axes, options):
    """One chunk of an array, analyzed as an array of those axes, as a partial's bytes."""
    import numpy as np

    from ._aggregate import Aggregation, part_options
    from ._inputs import prepare
    from .v1 import imgstat_pb2 as pb
    client = _client(server)
    asked = client._options(options)
    aggregation = Aggregation(pb, asked)
    aggregation.add(client._run(prepare(np.ascontiguousarray(block), axes=axes), part_options(pb, asked)))
    return aggregation.to_partial().SerializeToString()


def _tree(parts, split_every):
    from dask import delayed
    merge = delayed(lambda *p: _merge(p), pure=True)
    while len(parts) > 1:
        parts = [merge(*parts[i:i + split_every]) if len(parts[i:i + split_every]) > 1 else parts[i]
                 for i in range(0, len(parts), split_every)]
    return parts[0]


def partial(collection, server=None, *, labels=None, axes=None, split_every: int = 8, **options: Any):
    """A dask.delayed of the merged state's bytes (imgstat.Partial.to_bytes):
    a bag's inputs (``labels``: a folder of label images by name stem, as in
    Client.aggregate) or a Dask array's chunks (``axes`` names the array's
    axes, as in Client.analyze: "ZYX", "YXC", ...; without C each chunk is
    one channel). ``options`` as Client.aggregate's."""
    import dask.array as da
    import dask.bag as db
    from dask import delayed
    if split_every < 2:
        raise ValueError("split_every must be at least 2")
    if isinstance(collection, db.Bag):
        if axes is not None:
            raise ValueError("axes are for a Dask array's chunks")
        return collection.reduction(_bag_partition(server, labels, options), _merge, split_every=split_every)
    if isinstance(collection, da.Array):
        if labels is not None:
            raise ValueError("labels are for a bag's inputs")
        axes = axes or ("YX" if collection.ndim == 2 else "ZYX" if collection.ndim == 3 else None)
        if axes is None or len(axes) != collection.ndim:
            raise ValueError(f"axes must name the array's {collection.ndim} axes")
        chunk = delayed(_chunk, pure=True)
        parts = [chunk(b, server, axes, options) for b in collection.to_delayed().ravel()]
        return _tree(parts, split_every)
    raise TypeError(f"a dask.bag.Bag or dask.array.Array, not {type(collection).__name__}")


def aggregate(collection, server=None, *, labels=None, axes=None, split_every: int = 8, stats=None,
              percentiles=None, **options: Any):
    """Client.aggregate's answer over a bag's inputs or an array's chunks,
    computed on the current Dask scheduler (a distributed.Client's cluster
    where one is active): one Result per kind of image."""
    from ._partial import Partial
    state = partial(collection, server, labels=labels, axes=axes, split_every=split_every, stats=stats,
                    percentiles=percentiles, **options).compute()
    return Partial.from_bytes(state).result(stats=stats, percentiles=percentiles)
