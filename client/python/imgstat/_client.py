"""imgstat.Client: the CLI's calls from Python (client/remote.cpp is the
model): one input in one message, large ones streamed, and on the server's
own host shared memory instead of the socket. The connection is
_transport's, the regions _registrations', analyze_many's pump _pump's;
here each input takes its way to the server."""
from __future__ import annotations

import collections
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Iterator

import numpy as np

from ._errors import Error
from ._inputs import ImageLike, bad, layout, map_of, prepare, rows, side_input
from ._on_server import aggregate_on_server, guided_slices, runs_for_server
from ._objects import covered, list_objects_here, read_object
from ._options import ANALYZE_OPTIONS, build_options, is_path, parts_asked
from ._pump import Pump
from ._regions import Cuda, Memory, copy_into
from ._registrations import Registrations
from ._result import Result
from ._shards import expand as expand_archives
from ._shards import is_shard
from ._transport import Transport
from ._tuning import (AGGREGATE_GUIDED, AGGREGATE_SLICE_FILES, AGGREGATE_SLICE_WINDOWS, COPY_THREADS,
                      REGION_MIN_BYTES)
from .v1 import imgstat_pb2 as pb

__all__ = ["Client", "ImageLike"]


def _no_cuda_ipc(target, name):
    return Error("FAILED_PRECONDITION", "a GPU array goes to a server on its own host, by CUDA IPC; "
                 f"{target} is not one (or offers no regions): copy it to the host first", name)


class Client:
    """A connection to imgstat servers, as the CLI makes one.

    target: what the CLI's ``--server`` takes: ``host:port``, a comma-separated
    list of servers (calls go to each in turn), ``dns:///name:port`` (every
    address it resolves to), ``unix:/path``; default ``$IMGSTAT_SERVER``, else
    ``localhost:50051``. TLS unless the target is loopback or ``insecure`` is
    set (``tls_ca``, ``tls_cert``/``tls_key`` for mutual TLS,
    ``tls_server_name``); ``token`` (default ``$IMGSTAT_TOKEN``) is sent as a
    bearer token. ``timeout`` bounds each input's calls, retries included
    (None: the CLI's 120 s; 0: no limit). ``shm=False`` sends everything over
    the socket even to a server on this host.

    Thread-safe; a context manager (``close()`` on exit).
    """

    def __init__(self, target: str | None = None, *, token: str | None = None, tls_ca: str | None = None,
                 tls_cert: str | None = None, tls_key: str | None = None, tls_server_name: str | None = None,
                 insecure: bool = False, timeout: float | None = None, shm: bool = True) -> None:
        tls = dict(tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, tls_server_name=tls_server_name,
                   insecure=insecure)
        self._transport = Transport(target, token=token, tls=tls, timeout=timeout, shm=shm)
        self.target = self._transport.target
        self._regions = Registrations(self._transport)
        self._pump = Pump(self._transport, self._run)
        self._aggregate_refused = False  # the server or the token refused Aggregate: a call an input
        self._closed = False

    @property
    def timeout(self) -> float:
        return self._transport.timeout

    # --- lifetime -------------------------------------------------------
    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        """Gives back this client's regions and closes its connections."""
        if self._closed:
            return
        self._closed = True
        self._pump.close()
        self._regions.close()
        self._transport.close()

    # --- the server -----------------------------------------------------
    def server_info(self) -> "pb.ServerInfo":
        """GetServerInfo: the server's version, engine, limits and region
        socket (an imgstat.v1.ServerInfo), asked once."""
        return self._transport.server_info()

    def calls_to_fill(self) -> int:
        """Calls in flight that keep the server busy: four for each of its
        engine's threads, within its max_concurrent (the CLI's default -j)."""
        return self._transport.calls_to_fill()

    def forget(self, region_id):
        """A region whose memory is gone: given back at the next call."""
        self._regions.forget(region_id)

    def _options(self, options, axes=None):
        unknown = set(options) - set(ANALYZE_OPTIONS)
        if unknown:
            raise TypeError(f"unknown option{'s' if len(unknown) > 1 else ''}: {', '.join(sorted(unknown))}")
        if axes is None:
            return build_options(pb, side_input, **options)
        # A volume's mask or label volume: the same axes, without channels.
        map_axes = axes.upper().replace("C", "")
        return build_options(pb, lambda x, labels: side_input(x, labels, map_axes), **options)

    # --- calls -------------------------------------------------------------
    def analyze(self, x: ImageLike, *, name: str | None = None, raw: tuple | None = None,
                stride: int = 0, as_bytes: bool = False, axes: str | None = None, **options: Any) -> Result:
        """Statistics of one input: a path, encoded bytes, a numpy array (H x W
        or H x W x C; uint8, uint16, int8, int16, float32 or float64; any
        strides), a PIL image, or a GPU array (``__cuda_array_interface__``)
        on a GPU of the server's host; a URL (``https://``, ``http://``,
        ``s3://``: read by the server where its --fetch-allow covers it,
        else here) or a file object.

        Options are the CLI's: ``stats`` (names or a list: min_max, sum,
        stddev, histogram, distribution, shape, positions, unique_colors,
        luminance, summary, all), ``bins``, ``range=(lo, hi)``,
        ``percentiles``, ``decoder`` ("auto", "cpu", "gpu"),
        ``allow_truncated``, ``colour_space``, ``joint`` ("H,S:30,32") and
        ``joint_range``; parts: ``roi`` ((x, y, w, h) or a list of them),
        ``tiles`` ((columns, rows) or "CxR"; of a stack (columns, rows, slabs) or "CxRxS"), ``mask`` (an image as any
        input, or "alpha"), ``labels`` (an image as any input, arrays of
        uint8, uint16, uint32 or int32; each label with its ``box``; of a
        volume, a volume of its axes without C), ``ignore_label``, ``max_labels``;
        files of several planes (multi-page TIFF) are answered for all their
        planes together, and with ``planes`` (True, an int, a range or
        "A-B") for each plane apart too (``Result.planes``), of those chosen;
        ``level`` chooses a TIFF pyramid's level (0: full resolution).
        A file of several series (a TIFF's pages of different sizes or
        samples, an OME-TIFF's images) is answered series by series, never
        mixed: the Result is series 0's and ``Result.other_series`` holds
        the rest; ``series=N`` answers series N alone (a FITS file's image
        HDUs are its series). DICOM files answer modality values (Hounsfield
        units for CT); ``stored_values=True`` the values as stored; a
        folder of DICOM files is its series as volumes (the CLI's
        ``--dicom-series``), and so is a list of DICOM files' paths; a
        Zarr store's folder is one input, and a NIfTI pair's .hdr is sent
        with its .img.
        A volume or stack is an array with its ``axes`` named in order: Z
        (or T) for planes, Y, X and C (``axes="ZYX"``, ``"ZYXC"``,
        ``"CZYX"``, ``"TYX"``; a 4-D array without names is ZYXC), answered
        as a file of several planes.
        ``raw=(width, height, channels, "uint16")`` (with ``stride``; a
        depth before the type for a stack) reads a path or bytes as raw pixels, ``as_bytes=True`` as bytes (a 1 x N
        uint8 image); ``name`` names the input in results and the server's log.

        Returns a Result; raises imgstat.Error.
        """
        opts = self._options(options, axes)
        job = prepare(x, name, raw, stride, as_bytes, axes=axes)
        return Result(self._run(job, opts), job.name, parts_asked(opts))

    def analyze_many(self, inputs: Iterable[ImageLike], *, jobs: int | None = None, errors: str = "raise",
                     extensions: Iterable[str] | None = None, **options: Any) -> Iterator[Result | Error]:
        """Results of many inputs, in input order, as an iterator, with ``jobs``
        calls in flight (default: what keeps the server busy, as the CLI's
        -j), carried by gRPC's asyncio API on a thread of the client's own.
        errors="raise" raises an input's Error where its result would
        come; errors="return" puts the Error there instead.
        A path naming an archive (a tar shard, compressed or not, or a zip;
        WebDataset's brace ranges, "shard-{000..099}.tar", name many) stands
        for its image members, each an input named ARCHIVE:MEMBER, read in
        order as the pass takes them; ``extensions`` (".jpg", ".seg.png")
        chooses other members. Members left out are said by a warning."""
        opts = self._options(options)
        return self._pump.many(((x, opts) for x in expand_archives(inputs, extensions, self._list)), jobs, errors)

    def aggregate(self, inputs: Iterable[ImageLike], labels: str | os.PathLike | Iterable[ImageLike] | None = None, *,
                  jobs: int | None = None, errors: str = "raise", extensions: Iterable[str] | None = None,
                  **options: Any) -> list[Result]:
        """The CLI's --aggregate: the statistics of all the inputs' pixels
        together, integers exact; one Result per kind of image (sample type
        and channels), in the order each kind was first met. labels: a label
        image per input (an iterable as long as inputs), or a folder whose
        file of the same name stem is each input's: then each label's pixels
        over every input. errors="skip" leaves failed inputs out. Archives
        stand for their members, as in analyze_many."""
        return self._aggregation(inputs, labels, jobs, errors, extensions, options).results()

    def partial(self, inputs: Iterable[ImageLike], labels: str | os.PathLike | Iterable[ImageLike] | None = None, *,
                jobs: int | None = None, errors: str = "raise", extensions: Iterable[str] | None = None,
                **options: Any):
        """As aggregate, but the merged state itself: an imgstat.Partial
        that merges exactly with others made with the same options (here,
        in other processes, by the CLI's --partial-out), and whose
        result() is aggregate()'s answer over all their inputs."""
        from ._partial import Partial
        return Partial(self._aggregation(inputs, labels, jobs, errors, extensions, options).to_partial())

    def _aggregation(self, inputs, labels, jobs, errors, extensions, options):
        from ._aggregate import Aggregation, part_options
        if labels is not None:
            options = dict(options, labels=b"\0")  # a placeholder: each input's own below
        user = self._options(options)
        if user.HasField("background"):
            raise Error("INVALID_ARGUMENT", "background meshes are each image's own: ask analyze() or analyze_many(), "
                                            "not a merge over images")
        per_call = part_options(pb, user)
        aggregation = Aggregation(pb, user)
        skip = errors == "skip"

        def one_each(pairs):
            for r in self._pump.many(pairs, jobs, "return" if skip else errors):
                if isinstance(r, Error):
                    continue
                for one in [r] + r.other_series:  # each series joins its kind
                    aggregation.add(one.proto)

        if labels is not None:
            def with_labels():
                for x, label_image in _label_pairs(inputs, labels):
                    o = pb.Options()
                    o.CopyFrom(per_call)
                    o.parts.labels.image.CopyFrom(side_input(label_image, True))
                    yield x, o
            one_each(with_labels())
            return aggregation

        def each_of(some):
            return ((x, per_call) for x in expand_archives(some, extensions, self._list))

        runs = None
        if isinstance(inputs, (list, tuple)) and len(inputs) > 1 and not self._aggregate_refused:
            runs = runs_for_server(self._transport, inputs)
        if runs is None:
            one_each(each_of(inputs))
            return aggregation
        # Runs in input order: those of small files on Aggregate calls (one
        # Partial a slice, merged here), the rest a call an input.
        for start, end, listed in runs:
            if listed is not None and not self._aggregate_refused:
                try:
                    partials = self._on_server(listed, user, errors)
                except Error as e:
                    # A server or a token that refuses the call itself: a call an input, as before.
                    if e.input != self._transport.target or e.code not in ("UNIMPLEMENTED", "PERMISSION_DENIED"):
                        raise
                    self._aggregate_refused = True
                else:
                    for partial in partials:
                        aggregation.merge(partial)
                    continue
            one_each(each_of(inputs[start:end]))
        return aggregation

    def _on_server(self, jobs, user, errors):
        """The server's partials of the jobs, in order: contiguous slices of
        them, shrinking as the pass goes, on as many Aggregate calls at once
        as keep its engine busy (each holds --batch-window inputs at once),
        so that merging the partials in order meets each kind of image where
        the inputs first have it."""
        window = max(1, self._transport.known_info().limits.batch_window)
        calls = -(-self._transport.calls_to_fill() // window)
        calls = max(1, min(calls, len(jobs) // 64 or 1))
        if calls == 1:
            return aggregate_on_server(self._transport, self._regions, jobs, user, errors)
        slices = guided_slices(len(jobs), AGGREGATE_GUIDED * calls, AGGREGATE_SLICE_WINDOWS * window,
                               AGGREGATE_SLICE_FILES)
        with ThreadPoolExecutor(max_workers=calls, thread_name_prefix="imgstat-aggregate") as pool:
            futures = [pool.submit(aggregate_on_server, self._transport, self._regions, jobs[a:b], user, errors)
                       for a, b in slices]
            try:
                return [p for f in futures for p in f.result()]  # the first slice's failure first
            except BaseException:
                for f in futures:
                    f.cancel()
                raise

    def _list(self, prefix):
        """The names under an s3:// prefix: listed by the server where its
        --fetch-allow covers the prefix (with its credentials), else here
        through fsspec and s3fs."""
        if covered(prefix, self._transport.server_info().fetch_allow):
            return self._transport.list_objects(prefix)
        return list_objects_here(prefix)

    # --- each input's way ----------------------------------------------------
    def _run(self, job, opts, deadline=None):
        """The AnalyzeResponse for a job: by region, in one message or streamed."""
        self._regions.flush()
        if deadline is None:
            deadline = self._transport.deadline()
        if job.url is not None and job.data is None:
            if covered(job.url, self._transport.server_info().fetch_allow):
                job.input.url = job.url
                return self._transport.unary(job, opts, deadline)
            job.data = read_object(job.url, max(1.0, deadline - time.monotonic()) if deadline else None)
            job.size = len(job.data)
        side = map_of(opts)
        if side is not None and len(side.data) >= REGION_MIN_BYTES:
            return self._run_with_map(job, opts, deadline)
        if job.cuda is not None:
            return self._run_cuda(job, opts, deadline)
        if job.array is not None:
            return self._run_array(job, opts, deadline)
        if job.path is not None:
            if job.size >= REGION_MIN_BYTES and self._regions.socket() is not None:
                response = self._run_file_region(job, opts, deadline)
                if response is not None:
                    return response
        elif len(job.data) >= REGION_MIN_BYTES and self._regions.socket() is not None:
            response = self._run_copied(job, opts, np.frombuffer(job.data, dtype=np.uint8), deadline)
            if response is not None:
                return response
        return self._run_on_socket(job, opts, deadline)

    def _run_on_socket(self, job, opts, deadline, map_data=None):
        """In one message where it fits, else streamed (a map's bytes after the input's)."""
        total, chunks = job.chunks()
        if map_data is None and self._transport.in_one_message(job, opts, total):
            if job.array is not None:
                job.input.data = np.ascontiguousarray(job.array[0]).tobytes()
            elif job.path is not None:
                job.input.data = job.read_file()
            else:
                job.input.data = bytes(job.data)
            return self._transport.unary(job, opts, deadline)
        return self._transport.stream(job, opts, total, chunks, deadline, map_data=map_data)

    def _run_with_map(self, job, opts, deadline):
        """A mask or label image of a megabyte or more: to a server on this
        host in a region of its own, else streamed after the input
        (StreamHeader.map_bytes), never inside the request (a message's limit)."""
        opts = pb.Options.FromString(opts.SerializeToString())
        side = map_of(opts)
        payload = side.data
        side.ClearField("data")
        if self._regions.socket() is not None:
            memory = self._regions.take_scratch(len(payload))
            try:
                copy_into(np.ndarray((len(payload),), np.uint8, buffer=memory), np.frombuffer(payload, np.uint8),
                          COPY_THREADS, memory.fresh)
                memory.fresh = False
                region_id = self._regions.of_memory(memory, job.name)
                if region_id is not None:
                    side.region.region_id = region_id
                    side.region.length = len(payload)
                    return self._run(job, opts, deadline)
            finally:
                self._regions.give_scratch(memory)
        if job.cuda is not None:
            raise _no_cuda_ipc(self.target, job.name)
        return self._run_on_socket(job, opts, deadline, map_data=payload)

    def _run_in_memory(self, job, opts, memory, offset, length, deadline):
        region_id = self._regions.of_memory(memory, job.name)
        if region_id is None:
            return None
        return self._transport.in_region(job, opts, region_id, offset, length, deadline)

    def _run_copied(self, job, opts, a, deadline):
        """a copied, packed, into a kept memfd and analyzed there; None when
        regions cannot be had."""
        memory = self._regions.take_scratch(a.nbytes)
        try:
            copy_into(np.ndarray(a.shape, a.dtype, buffer=memory), a, COPY_THREADS, memory.fresh)
            memory.fresh = False
            return self._run_in_memory(job, opts, memory, 0, a.nbytes, deadline)
        finally:
            self._regions.give_scratch(memory)

    def _run_file_region(self, job, opts, deadline):
        """The file itself, read by the server (no copy here), as the CLI sends one."""
        region_id = self._regions.of_file(job.path, job.name)
        if region_id is None:
            return None
        try:
            return self._transport.in_region(job, opts, region_id, 0, 0, deadline)
        finally:
            self._regions.forget(region_id)
            self._regions.flush()

    def _run_array(self, job, opts, deadline):
        a, shape = job.array
        job.input.raw.CopyFrom(shape)
        if self._regions.socket() is not None:
            packed_rows = rows(a.shape, a.strides, a.itemsize)
            if packed_rows is not None:
                stride, span = packed_rows
                address = a.__array_interface__["data"][0]
                memory = Memory.holding(address, span)
                if memory is not None:  # a shared_array, or a view of one: nothing copied
                    job.input.raw.row_stride = stride
                    response = self._run_in_memory(job, opts, memory, address - memory.address, span, deadline)
                    if response is not None:
                        return response
                    job.input.raw.row_stride = 0
            if a.nbytes >= REGION_MIN_BYTES:
                response = self._run_copied(job, opts, a, deadline)
                if response is not None:
                    return response
        return self._run_on_socket(job, opts, deadline)

    def _run_cuda(self, job, opts, deadline):
        cai = job.cuda
        dtype = np.dtype(cai["typestr"])
        shape = tuple(cai["shape"])
        _, raw = layout(np.empty((1,) * len(shape) if len(shape) != 3 else (1, 1, shape[2]), dtype), job.name)
        raw.height, raw.width = shape[0], shape[1]
        if shape[0] == 0 or shape[1] == 0:
            raise bad(f"a GPU array of shape {shape} has no pixel", job.name)
        packed_rows = rows(shape, cai.get("strides"), dtype.itemsize)
        if packed_rows is None:
            raise bad("a GPU array's rows must be packed samples (a row stride is fine): copy it first", job.name)
        stride, span = packed_rows
        if self._regions.socket() is None:
            raise _no_cuda_ipc(self.target, job.name)
        pointer = cai["data"][0]
        stream = cai.get("stream")
        try:
            if stream is not None:  # the producer's work on it is done before the server reads
                Cuda.synchronize(stream, pointer)
            base, size, handle = Cuda.allocation(pointer)
        except OSError as e:
            raise Error("FAILED_PRECONDITION", str(e), job.name) from None
        region_id = self._regions.of_cuda(handle, size, job.name)
        job.input.raw.CopyFrom(raw)
        job.input.raw.row_stride = stride
        return self._transport.in_region(job, opts, region_id, pointer - base, span, deadline)


def _label_pairs(inputs, labels):
    """(input, its label image): labels as an iterable beside inputs, or a
    folder whose file of the input's name stem is its own."""
    if not (is_path(labels) and os.path.isdir(labels)):
        return zip(inputs, labels)
    stems = collections.defaultdict(list)
    for entry in os.scandir(labels):
        if entry.is_file():
            stems[os.path.splitext(entry.name)[0]].append(entry.path)
    pairs = []
    for x in inputs:
        stem = os.path.splitext(os.path.basename(os.fspath(x)))[0]
        found = stems.get(stem, [])
        if len(found) != 1:
            raise bad(f"{'no' if not found else 'several'} label files named {stem}.* in {labels}", os.fspath(x))
        pairs.append((x, found[0]))
    return pairs
