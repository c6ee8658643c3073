"""imgstat.Client: the CLI's calls from Python (client/calls.cpp is the
model): one input in one message, large ones streamed, and on the server's
own host shared memory instead of the socket."""
from __future__ import annotations

import collections
import os
import queue
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Iterator, Union

import grpc
import numpy as np

from . import _channel
from ._errors import Error
from ._options import ANALYZE_OPTIONS, SAMPLE_TYPES, build_options, is_path, parts_asked
from ._regions import Cuda, Memory, RegionSocket, copy_into
from ._result import Result
from .v1 import imgstat_pb2 as pb
from .v1 import imgstat_pb2_grpc as rpc

# What analyze takes: a path, encoded bytes, a numpy array (or anything
# numpy.asarray takes), a PIL image, or an object with __cuda_array_interface__.
ImageLike = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, np.ndarray, Any]

# Everything tunable in one place.
STREAM_CHUNK = 4 << 20         # larger inputs stream in pieces of this (the CLI's kStreamChunk)
REGION_MIN_BYTES = 1 << 20     # below it, the region calls cost more than the socket saves
MESSAGE_ENVELOPE = 64 << 10    # a request's bytes beside its data (the CLI's kEnvelope)
ATTEMPTS = 5                   # calls that end UNAVAILABLE: at most this many tries in all,
FIRST_BACKOFF = 0.1            # the first pause doubling each time (seconds)
DEFAULT_TIMEOUT = 120.0        # the CLI's --timeout: a hung server does not hang the caller
CALLS_PER_THREAD = 4           # calls in flight per server engine thread (analyze_many's default)
DEFAULT_CALLS, MAX_CALLS = 16, 256
SCRATCH_IDLE = 4               # copies of arrays: memfds kept registered for the next call
SCRATCH_IDLE_BYTES = 2 << 30
COPY_THREADS = min(8, os.cpu_count() or 1)
CUDA_REGIONS = 16              # GPU allocations kept registered (most recently used)

_SAMPLE = {np.dtype(np.uint8): 1, np.dtype(np.uint16): 2, np.dtype(np.int8): 3, np.dtype(np.int16): 4,
           np.dtype(np.float32): 5, np.dtype(np.float64): 6}
_LABEL_SAMPLE = {np.dtype(np.uint8): 1, np.dtype(np.uint16): 2, np.dtype(np.uint32): 7, np.dtype(np.int32): 8}
_STATUS = {c.value[0]: c.name for c in grpc.StatusCode}


def _varint(n):
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag, payload):
    """A length-delimited protobuf field: tag byte, length, bytes."""
    return b"".join((bytes((tag,)), _varint(len(payload)), payload))


def _bad(message, name=None):
    return Error("INVALID_ARGUMENT", message, name)


class _Job:
    """One input, ready to send: its Input (no data yet) and where its bytes are."""
    __slots__ = ("name", "input", "data", "path", "size", "array", "cuda")

    def __init__(self, name, kind):
        self.name = name
        self.input = pb.Input(kind=kind, name=name if len(name) < 256 else name[:255])
        self.data = self.path = self.array = self.cuda = None
        self.size = 0


def _layout(a, name, labels=False):
    """(array, RawLayout) for an H x W or H x W x C array of a type servers take."""
    if a.dtype == np.bool_:
        a = a.view(np.uint8)
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    types = _LABEL_SAMPLE if labels else _SAMPLE
    if a.dtype not in types:
        raise _bad(f"arrays of {a.dtype} are not analyzed: {', '.join(str(t) for t in types)}", name)
    if a.ndim == 2:
        (h, w), c = a.shape, 1
    elif a.ndim == 3 and 1 <= a.shape[2] <= 4:
        h, w, c = a.shape
    else:
        raise _bad(f"an array of shape {a.shape}: images are H x W or H x W x C with C 1 to 4", name)
    if h == 0 or w == 0:
        raise _bad(f"an array of shape {a.shape} has no pixel", name)
    if h >= 1 << 32 or w >= 1 << 32:
        raise _bad(f"an array of shape {a.shape} is past 2^32 rows or columns", name)
    return a, pb.RawLayout(width=w, height=h, channels=c, sample_type=types[a.dtype])


def _rows(shape, strides, itemsize):
    """(row stride, bytes spanned) when rows are packed samples at a positive
    stride, as RawLayout takes them; None otherwise."""
    h, w = shape[0], shape[1]
    c = shape[2] if len(shape) == 3 else 1
    row = w * c * itemsize
    if strides is None:
        return 0, h * row
    if strides[1] != c * itemsize or (len(shape) == 3 and strides[2] != itemsize and c > 1):
        return None
    if h == 1:
        return 0, row
    if strides[0] < row:
        return None
    return (0 if strides[0] == row else strides[0]), (h - 1) * strides[0] + row


def _map_of(options):
    """The mask or label image Input of a request's parts, or None."""
    if not options.HasField("parts"):
        return None
    parts = options.parts
    if parts.HasField("mask") and parts.mask.HasField("image"):
        return parts.mask.image
    if parts.HasField("labels"):
        return parts.labels.image
    return None


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
        self.target = target or os.environ.get("IMGSTAT_SERVER") or _channel.DEFAULT_TARGET
        self._tls = dict(tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, tls_server_name=tls_server_name,
                         insecure=insecure)
        self._aio_state = None
        try:
            self._channel = _channel.make_channel(grpc, self.target, tls_ca=tls_ca, tls_cert=tls_cert,
                                                  tls_key=tls_key, tls_server_name=tls_server_name, insecure=insecure)
        except ValueError as e:
            raise Error("INVALID_ARGUMENT", str(e)) from None
        self._stub = rpc.ImageStatsStub(self._channel)
        token = _channel.resolve_token(token)
        self._metadata = (("authorization", "Bearer " + token),) if token else None
        self.timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
        self._same_host = (shm and _channel.is_loopback(self.target)
                           and not _channel.names_several_servers(self.target))
        self._servers = max(1, len(_channel.target_addresses(self.target)))
        self._lock = threading.Lock()
        self._info = None
        self._info_error = None
        self._region_socket = None
        self._region_tried = False
        self._forgotten = []
        self._scratch = []          # idle Memory objects, registered
        self._cuda_regions = collections.OrderedDict()  # IPC handle bytes -> region id, the latest last
        self._pool = None
        self._closed = False

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
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self._aio_close()
        with self._lock:
            scratch, self._scratch = self._scratch, []
        for m in scratch:
            entry = m.registered.pop(id(self), None)
            if entry:
                self._forgotten.append(entry[1])
        self._flush_forgotten()
        if self._region_socket is not None:
            self._region_socket.close()  # the server drops every region it passed
        self._channel.close()

    def _executor(self):
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="imgstat")
            return self._pool

    # --- the server -----------------------------------------------------
    def _call_timeout(self, deadline):
        if deadline is None:
            return None
        return max(0.001, deadline - time.monotonic())

    def _deadline(self):
        return time.monotonic() + self.timeout if self.timeout > 0 else None

    def server_info(self) -> "pb.ServerInfo":
        """GetServerInfo: the server's version, engine, limits and region
        socket (an imgstat.v1.ServerInfo), asked once."""
        with self._lock:
            if self._info is not None:
                return self._info
        info = self._invoke(lambda t: self._stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=t,
                                                                metadata=self._metadata), self.target)
        with self._lock:
            self._info = info
        return info

    def _known_info(self):
        """The server's info, or None when it cannot be had (defaults apply)."""
        if self._info is None and self._info_error is None:
            try:
                self.server_info()
            except Error as e:
                self._info_error = e
        return self._info

    def _in_one_message(self, job, opts, size):
        """As the CLI decides: small inputs go in one message, and raw ones
        that ask for the luminance (a stream does not compute it) while
        they fit the server's message limit."""
        if size <= STREAM_CHUNK:
            return True
        if job.input.kind not in (pb.INPUT_KIND_RAW, pb.INPUT_KIND_BYTES):
            return False
        if pb.STATISTIC_LUMINANCE not in opts.statistics and pb.STATISTIC_ALL not in opts.statistics:
            return False
        info = self._known_info()
        limit = info.limits.max_message_bytes if info is not None and info.limits.max_message_bytes else 4 << 20
        return size + MESSAGE_ENVELOPE <= limit

    def calls_to_fill(self) -> int:
        """Calls in flight that keep the server busy: four for each of its
        engine's threads, within its max_concurrent (the CLI's default -j)."""
        info = self._known_info()
        calls = DEFAULT_CALLS
        if info is not None and info.engine.threads > 0:
            calls = CALLS_PER_THREAD * info.engine.threads
            if info.limits.max_concurrent > 0:
                calls = min(calls, info.limits.max_concurrent)
        return max(DEFAULT_CALLS, min(MAX_CALLS, calls * self._servers))

    def _invoke(self, fn, name, deadline=None):
        """fn(timeout) with the CLI's retries of UNAVAILABLE; gRPC errors become Error."""
        if deadline is None:
            deadline = self._deadline()
        backoff = FIRST_BACKOFF
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return fn(self._call_timeout(deadline))
            except grpc.RpcError as e:
                code = e.code()
                late = deadline is not None and time.monotonic() + backoff >= deadline
                if code == grpc.StatusCode.UNAVAILABLE and attempt < ATTEMPTS and not late:
                    time.sleep(backoff)
                    backoff *= 2
                    continue
                raise Error(code.name if code else "UNKNOWN", e.details() or "", name) from None

    # --- regions ----------------------------------------------------------
    def _regions(self):
        """The region socket connection, or None when regions cannot be had
        (another host, regions off, another mount namespace)."""
        if not self._same_host:
            return None
        with self._lock:
            if self._region_tried:
                return self._region_socket
        info = self._known_info()
        sock = None
        if info is not None and info.region_socket:
            try:
                sock = RegionSocket(info.region_socket)
            except OSError:
                sock = None
        with self._lock:
            if not self._region_tried:
                self._region_tried, self._region_socket = True, sock
            elif sock is not None:
                sock.close()
            return self._region_socket

    def forget(self, region_id):
        """A region whose memory is gone: given back at the next call."""
        self._forgotten.append(region_id)

    def _flush_forgotten(self):
        while self._forgotten:
            try:
                region_id = self._forgotten.pop()
            except IndexError:  # another thread took the last one
                return
            try:
                self._stub.UnregisterRegion(pb.UnregisterRegionRequest(region_id=region_id), timeout=10,
                                            metadata=self._metadata)
            except grpc.RpcError:
                pass  # it goes anyway when the region socket closes

    def _register(self, ticket, name, cuda=None):
        request = pb.RegisterRegionRequest(ticket=ticket, name=name[:200])
        if cuda is not None:
            request.cuda.CopyFrom(cuda)
        return self._invoke(lambda t: self._stub.RegisterRegion(request, timeout=t, metadata=self._metadata),
                            name).region_id

    def _region_of(self, memory, name):
        entry = memory.registered.get(id(self))
        if entry is not None and entry[0]() is self:  # (an id is reused once its client is gone)
            return entry[1]
        sock = self._regions()
        if sock is None:
            return None
        try:
            ticket = sock.pass_fd(memory.fd)
        except OSError:
            return None
        region_id = self._register(ticket, name)
        memory.registered[id(self)] = (weakref.ref(self), region_id)
        return region_id

    def _take_scratch(self, nbytes):
        with self._lock:
            fits = [m for m in self._scratch if nbytes <= m.size <= 2 * nbytes + (1 << 20)]
            if fits:
                best = min(fits, key=lambda m: m.size)
                self._scratch.remove(best)
                return best
        return Memory(-(-nbytes // (1 << 20)) * (1 << 20), "imgstat-copy")

    def _give_scratch(self, memory):
        with self._lock:
            self._scratch.append(memory)
            while len(self._scratch) > SCRATCH_IDLE or sum(m.size for m in self._scratch) > SCRATCH_IDLE_BYTES:
                old = self._scratch.pop(0)
                entry = old.registered.pop(id(self), None)
                if entry:
                    self._forgotten.append(entry[1])

    # --- inputs ----------------------------------------------------------
    def _side_input(self, x, labels):
        """A mask or label image as an Input carried in the request."""
        job = self._prepare(x, None, None, 0, False, labels=labels)
        if job.array is not None:
            a, layout = job.array
            job.input.raw.CopyFrom(layout)
            job.input.data = np.ascontiguousarray(a).tobytes()
        elif job.path is not None:
            try:
                with open(job.path, "rb") as f:
                    job.input.data = f.read()
            except OSError as e:
                raise Error("INVALID_ARGUMENT", f"{job.path}: {e.strerror}", job.name) from None
        elif job.cuda is not None:
            raise _bad("masks and label images are not taken from GPU memory", job.name)
        else:
            job.input.data = bytes(job.data)
        return job.input

    def _options(self, options):
        unknown = set(options) - set(ANALYZE_OPTIONS)
        if unknown:
            raise TypeError(f"unknown option{'s' if len(unknown) > 1 else ''}: {', '.join(sorted(unknown))}")
        return build_options(pb, self._side_input, **options)

    def _prepare(self, x, name, raw, stride, as_bytes, labels=False):
        kind = 3 if as_bytes else 2 if raw is not None else 1
        if is_path(x):
            path = os.fspath(x)
            job = _Job(name or path, kind)
            try:
                st = os.stat(path)
            except OSError as e:
                raise Error("NOT_FOUND" if isinstance(e, FileNotFoundError) else "INVALID_ARGUMENT",
                            f"{path}: {e.strerror}", job.name) from None
            job.path, job.size = path, st.st_size
        elif isinstance(x, (bytes, bytearray, memoryview)):
            job = _Job(name or "<bytes>", kind)
            job.data = memoryview(x).cast("B") if not isinstance(x, bytes) else x
            job.size = len(job.data)
        elif hasattr(x, "__cuda_array_interface__"):
            job = _Job(name or "<cuda array>", 2)
            job.cuda = x.__cuda_array_interface__
        else:
            if hasattr(x, "getbands") and hasattr(x, "mode"):  # a PIL image
                x = _pil_array(x)
                name = name or "<PIL image>"
            try:
                a = np.asarray(x)
            except (ValueError, TypeError) as e:
                raise _bad(f"not an image, a path or an array: {e}", name or "<array>") from None
            job = _Job(name or "<array>", 2)
            job.array = _layout(a, job.name, labels)
            job.size = job.array[0].nbytes
            return job
        if raw is not None:
            w, h, c, t = raw
            if t not in SAMPLE_TYPES:
                raise _bad(f"raw: unknown sample type {t!r} ({', '.join(SAMPLE_TYPES)})", job.name)
            job.input.raw.CopyFrom(pb.RawLayout(width=w, height=h, channels=c, sample_type=SAMPLE_TYPES[t],
                                                row_stride=stride))
        return job

    # --- calls -------------------------------------------------------------
    def analyze(self, x: ImageLike, *, name: str | None = None, raw: tuple[int, int, int, str] | None = None,
                stride: int = 0, as_bytes: bool = False, **options: Any) -> Result:
        """Statistics of one input: a path, encoded bytes, a numpy array (H x W
        or H x W x C; uint8, uint16, int8, int16, float32 or float64; any
        strides), a PIL image, or a GPU array (``__cuda_array_interface__``)
        on a GPU of the server's host.

        Options are the CLI's: ``stats`` (names or a list: min_max, sum,
        stddev, histogram, distribution, shape, positions, unique_colors,
        luminance, summary, all), ``bins``, ``range=(lo, hi)``,
        ``percentiles``, ``decoder`` ("auto", "cpu", "gpu"),
        ``allow_truncated``, ``colour_space``, ``joint`` ("H,S:30,32") and
        ``joint_range``; parts: ``roi`` ((x, y, w, h) or a list of them),
        ``tiles`` ((columns, rows) or "CxR"), ``mask`` (an image as any
        input, or "alpha"), ``labels`` (an image as any input, arrays of
        uint8, uint16, uint32 or int32), ``ignore_label``, ``max_labels``.
        ``raw=(width, height, channels, "uint16")`` (with ``stride``) reads a
        path or bytes as raw pixels, ``as_bytes=True`` as bytes (a 1 x N
        uint8 image); ``name`` names the input in results and the server's log.

        Returns a Result; raises imgstat.Error.
        """
        opts = self._options(options)
        job = self._prepare(x, name, raw, stride, as_bytes)
        return Result(self._run(job, opts), job.name, parts_asked(opts))

    def _run(self, job, opts, deadline=None):
        """The AnalyzeResponse for a job: by region, in one message or streamed."""
        if self._forgotten:
            self._flush_forgotten()
        if deadline is None:
            deadline = self._deadline()
        side = _map_of(opts)
        if side is not None and len(side.data) >= REGION_MIN_BYTES:
            return self._run_with_map(job, opts, deadline)
        if job.cuda is not None:
            return self._run_cuda(job, opts, deadline)
        if job.array is not None:
            return self._run_array(job, opts, deadline)
        if job.path is not None:
            if job.size >= REGION_MIN_BYTES and self._regions() is not None:
                response = self._run_file_region(job, opts, deadline)
                if response is not None:
                    return response
            if self._in_one_message(job, opts, job.size):
                try:
                    with open(job.path, "rb") as f:
                        job.input.data = f.read()
                except OSError as e:
                    raise Error("INVALID_ARGUMENT", f"{job.path}: {e.strerror}", job.name) from None
                return self._unary(job, opts, deadline)

            def chunks():
                with open(job.path, "rb") as f:
                    while True:
                        block = f.read(STREAM_CHUNK)
                        if not block:
                            return
                        yield block
            return self._stream(job, opts, job.size, chunks, deadline)
        data = job.data
        if len(data) >= REGION_MIN_BYTES and self._regions() is not None:
            response = self._run_copied(job, opts, np.frombuffer(data, dtype=np.uint8), deadline)
            if response is not None:
                return response
        if self._in_one_message(job, opts, len(data)):
            job.input.data = bytes(data)
            return self._unary(job, opts, deadline)
        view = memoryview(data)
        return self._stream(job, opts, len(data),
                            lambda: (bytes(view[i:i + STREAM_CHUNK]) for i in range(0, len(view), STREAM_CHUNK)),
                            deadline)

    def _run_with_map(self, job, opts, deadline):
        """A mask or label image of a megabyte or more: to a server on this
        host in a region of its own, else streamed after the input
        (StreamHeader.map_bytes), never inside the request (a message's limit)."""
        opts = pb.Options.FromString(opts.SerializeToString())
        side = _map_of(opts)
        payload = side.data
        side.ClearField("data")
        if self._regions() is not None:
            memory = self._take_scratch(len(payload))
            try:
                copy_into(np.ndarray((len(payload),), np.uint8, buffer=memory), np.frombuffer(payload, np.uint8),
                          COPY_THREADS, memory.fresh)
                memory.fresh = False
                region_id = self._region_of(memory, job.name)
                if region_id is not None:
                    side.region.region_id = region_id
                    side.region.length = len(payload)
                    return self._run(job, opts, deadline)
            finally:
                self._give_scratch(memory)
        if job.cuda is not None:
            raise Error("FAILED_PRECONDITION", "a GPU array goes to a server on its own host, by CUDA IPC; "
                        f"{self.target} is not one (or offers no regions): copy it to the host first", job.name)
        total, chunks = self._input_chunks(job)
        return self._stream(job, opts, total, chunks, deadline, map_data=payload)

    def _input_chunks(self, job):
        """(bytes, a function giving them in pieces) of a job's input on the host."""
        if job.array is not None:
            a, layout = job.array
            job.input.raw.CopyFrom(layout)
            flat = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
            return flat.nbytes, lambda: (flat[i:i + STREAM_CHUNK].tobytes() for i in range(0, flat.nbytes, STREAM_CHUNK))
        if job.path is not None:
            def chunks():
                try:
                    with open(job.path, "rb") as f:
                        while True:
                            block = f.read(STREAM_CHUNK)
                            if not block:
                                return
                            yield block
                except OSError as e:
                    raise Error("INVALID_ARGUMENT", f"{job.path}: {e.strerror}", job.name) from None
            return job.size, chunks
        view = memoryview(job.data)
        return len(view), lambda: (bytes(view[i:i + STREAM_CHUNK]) for i in range(0, len(view), STREAM_CHUNK))

    def _unary(self, job, opts, deadline):
        request = pb.AnalyzeRequest(input=job.input, options=opts)
        return self._invoke(lambda t: self._stub.Analyze(request, timeout=t, metadata=self._metadata),
                            job.name, deadline)

    def _stream(self, job, opts, total, chunks, deadline, map_data=None):
        def messages():
            yield pb.AnalyzeStreamRequest(header=pb.StreamHeader(input=job.input, options=opts, total_bytes=total,
                                                                 map_bytes=len(map_data) if map_data else 0))
            for block in chunks():
                yield pb.AnalyzeStreamRequest(chunk=block)
            if map_data:
                view = memoryview(map_data)
                for i in range(0, len(view), STREAM_CHUNK):
                    yield pb.AnalyzeStreamRequest(chunk=bytes(view[i:i + STREAM_CHUNK]))
        return self._invoke(lambda t: self._stub.AnalyzeStream(messages(), timeout=t, metadata=self._metadata),
                            job.name, deadline)

    def _run_in_memory(self, job, opts, memory, offset, length, deadline):
        region_id = self._region_of(memory, job.name)
        if region_id is None:
            return None
        request = pb.AnalyzeRequest(input=job.input, options=opts)
        request.input.region.region_id = region_id
        request.input.region.offset = offset
        request.input.region.length = length
        return self._invoke(lambda t: self._stub.Analyze(request, timeout=t, metadata=self._metadata),
                            job.name, deadline)

    def _run_copied(self, job, opts, a, deadline):
        """a copied, packed, into a kept memfd and analyzed there; None when
        regions cannot be had."""
        memory = self._take_scratch(a.nbytes)
        try:
            copy_into(np.ndarray(a.shape, a.dtype, buffer=memory), a, COPY_THREADS, memory.fresh)
            memory.fresh = False
            return self._run_in_memory(job, opts, memory, 0, a.nbytes, deadline)
        finally:
            self._give_scratch(memory)

    def _run_file_region(self, job, opts, deadline):
        """The file itself, read by the server (no copy here), as the CLI sends one."""
        sock = self._regions()
        try:
            fd = os.open(job.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            ticket = sock.pass_fd(fd)
        except OSError:
            return None
        finally:
            os.close(fd)
        region_id = self._register(ticket, job.name)
        try:
            request = pb.AnalyzeRequest(input=job.input, options=opts)
            request.input.region.region_id = region_id
            return self._invoke(lambda t: self._stub.Analyze(request, timeout=t, metadata=self._metadata),
                                job.name, deadline)
        finally:
            self.forget(region_id)
            self._flush_forgotten()

    def _run_array(self, job, opts, deadline):
        a, layout = job.array
        job.input.raw.CopyFrom(layout)
        if self._regions() is not None:
            rows = _rows(a.shape, a.strides, a.itemsize)
            if rows is not None:
                stride, span = rows
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
        packed = np.ascontiguousarray(a)
        if self._in_one_message(job, opts, packed.nbytes):
            job.input.data = packed.tobytes()
            return self._unary(job, opts, deadline)
        flat = packed.reshape(-1).view(np.uint8)
        return self._stream(job, opts, flat.nbytes,
                            lambda: (flat[i:i + STREAM_CHUNK].tobytes() for i in range(0, flat.nbytes, STREAM_CHUNK)),
                            deadline)

    def _run_cuda(self, job, opts, deadline):
        cai = job.cuda
        dtype = np.dtype(cai["typestr"])
        shape = tuple(cai["shape"])
        _, layout = _layout(np.empty((1,) * len(shape) if len(shape) != 3 else (1, 1, shape[2]), dtype), job.name)
        layout.height, layout.width = shape[0], shape[1]
        if shape[0] == 0 or shape[1] == 0:
            raise _bad(f"a GPU array of shape {shape} has no pixel", job.name)
        rows = _rows(shape, cai.get("strides"), dtype.itemsize)
        if rows is None:
            raise _bad("a GPU array's rows must be packed samples (a row stride is fine): copy it first", job.name)
        stride, span = rows
        if self._regions() is None:
            raise Error("FAILED_PRECONDITION", "a GPU array goes to a server on its own host, by CUDA IPC; "
                        f"{self.target} is not one (or offers no regions): copy it to the host first", job.name)
        pointer = cai["data"][0]
        stream = cai.get("stream")
        try:
            if stream is not None:  # the producer's work on it is done before the server reads
                Cuda.synchronize(stream, pointer)
            base, size, handle = Cuda.allocation(pointer)
        except OSError as e:
            raise Error("FAILED_PRECONDITION", str(e), job.name) from None
        with self._lock:
            region_id = self._cuda_regions.get(handle)
            if region_id is not None:
                self._cuda_regions.move_to_end(handle)
        if region_id is None:
            ticket = self._regions().pass_fd(None)
            region_id = self._register(ticket, job.name, pb.CudaIpcMemory(handle=handle, size=size))
            with self._lock:
                self._cuda_regions[handle] = region_id
                # The server's mapping keeps a freed allocation alive: the
                # oldest registrations go back (a new allocation has a new handle).
                while len(self._cuda_regions) > CUDA_REGIONS:
                    self.forget(self._cuda_regions.popitem(last=False)[1])
        job.input.raw.CopyFrom(layout)
        job.input.raw.row_stride = stride
        request = pb.AnalyzeRequest(input=job.input, options=opts)
        request.input.region.region_id = region_id
        request.input.region.offset = pointer - base
        request.input.region.length = span
        return self._invoke(lambda t: self._stub.Analyze(request, timeout=t, metadata=self._metadata),
                            job.name, deadline)

    # --- the event loop that carries analyze_many's small inputs -------------
    def _aio(self):
        """(loop, stub) on a thread of this client's own: gRPC's asyncio API
        costs the caller about half the CPU a call of the blocking API does
        (no thread handoff per call), and the GIL is what bounds a pass."""
        with self._lock:
            if self._aio_state is None:
                import asyncio
                import grpc.aio
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="imgstat-aio", daemon=True)
                thread.start()

                async def setup():
                    channel = _channel.make_channel(grpc.aio, self.target, **self._tls)
                    return channel, rpc.ImageStatsStub(channel)
                channel, stub = asyncio.run_coroutine_threadsafe(setup(), loop).result()
                self._aio_state = (loop, thread, channel, stub)
            return self._aio_state[0], self._aio_state[3]

    def _aio_close(self):
        if self._aio_state is None:
            return
        import asyncio
        loop, thread, channel, _ = self._aio_state
        self._aio_state = None
        asyncio.run_coroutine_threadsafe(channel.close(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()

    # --- many inputs -------------------------------------------------------
    def analyze_many(self, inputs: Iterable[ImageLike], *, jobs: int | None = None, errors: str = "raise",
                     **options: Any) -> Iterator[Result | Error]:
        """Results of many inputs, in input order, as an iterator, with ``jobs``
        calls in flight (default: what keeps the server busy, as the CLI's
        -j), carried by gRPC's asyncio API on a thread of the client's own.
        errors="raise" raises an input's Error where its result would
        come; errors="return" puts the Error there instead."""
        opts = self._options(options)
        return self._many(((x, opts) for x in inputs), jobs, errors)

    def _many(self, pairs, jobs, errors):
        if errors not in ("raise", "return"):
            raise ValueError("errors must be 'raise' or 'return'")
        import asyncio
        window = jobs or self.calls_to_fill()
        loop, _ = self._aio()
        out = queue.SimpleQueue()
        stop = threading.Event()
        asyncio.run_coroutine_threadsafe(self._pump(iter(pairs), window, out, stop), loop)
        try:
            while True:
                batch = out.get()
                if batch is None:
                    return
                if isinstance(batch, BaseException):
                    raise batch
                for r in batch:
                    if isinstance(r, Error) and errors == "raise":
                        raise r
                    yield r
        finally:
            stop.set()  # a caller that stops reading stops the pass

    async def _pump(self, pairs, window, out, stop):
        """analyze_many on the event loop's thread: reads each input, keeps
        `window` calls in flight, and hands results over in input order, a
        list at a time. Inputs sent in one message go as bytes built here
        (the options serialized once); the rest (regions, streams, GPU
        arrays) run on worker threads with the blocking code."""
        import asyncio
        loop = asyncio.get_running_loop()
        call = self._aio_state[2].unary_unary("/imgstat.v1.ImageStats/Analyze")
        pending = collections.deque()
        serialized = {}

        def hand_over():
            ready = []
            while pending and pending[0][2].done():
                name, parts, task = pending.popleft()
                e = task.exception()
                if e is None:
                    ready.append(Result(task.result(), name, parts))
                elif isinstance(e, Error):
                    ready.append(e)
                else:
                    ready.append(Error("INTERNAL", f"{type(e).__name__}: {e}", name))
            if ready:
                out.put(ready)
        try:
            for x, opts in pairs:
                if stop.is_set():
                    break
                parts = parts_asked(opts)
                try:
                    job = self._prepare(x, None, None, 0, False)
                    body = self._message(job, opts, serialized)
                    if body is not None:
                        task = loop.create_task(self._aio_call(call, body, job.name, self._deadline()))
                    else:
                        task = loop.run_in_executor(self._executor(), self._run, job, opts)
                    pending.append((job.name, parts, task))
                except Error as e:
                    task = loop.create_future()
                    task.set_exception(e)
                    pending.append((e.input, parts, task))
                if len(pending) >= window:
                    await asyncio.wait((pending[0][2],))
                    hand_over()
            while pending:
                await asyncio.wait((pending[0][2],))
                hand_over()
        except BaseException as e:  # noqa: BLE001 (the caller's iterator failed: it is theirs to see)
            out.put(e)
        finally:
            out.put(None)

    def _message(self, job, opts, serialized):
        """A serialized AnalyzeRequest for an input that goes in one message,
        else None. Protobuf lets fields come in any order: the input's other
        fields, then its data, then the options."""
        if job.cuda is not None or job.size > STREAM_CHUNK or (job.size >= REGION_MIN_BYTES and self._same_host):
            return None
        side = _map_of(opts)
        if side is not None and len(side.data) >= REGION_MIN_BYTES:
            return None  # its map goes apart (_run_with_map)
        if job.array is not None:
            a, layout = job.array
            if self._same_host and Memory.holding(a.__array_interface__["data"][0], a.nbytes) is not None:
                return None  # a shared array: read in place
            job.input.raw.CopyFrom(layout)
            data = np.ascontiguousarray(a).tobytes()
        elif job.path is not None:
            try:
                fd = os.open(job.path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError as e:
                raise Error("NOT_FOUND" if isinstance(e, FileNotFoundError) else "INVALID_ARGUMENT",
                            f"{job.path}: {e.strerror}", job.name) from None
            try:
                data = os.read(fd, job.size + 1)
            except OSError as e:
                raise Error("INVALID_ARGUMENT", f"{job.path}: {e.strerror}", job.name) from None
            finally:
                os.close(fd)
            if len(data) > job.size:  # it grew since: whatever it holds now, the blocking way
                return None
        else:
            data = bytes(job.data)
        cached = serialized.get(id(opts))
        if cached is None or cached[0] is not opts:  # (kept with its object: an id is reused once freed)
            cached = serialized[id(opts)] = (opts, _field(0x12, opts.SerializeToString()))
        options = cached[1]
        head = job.input.SerializeToString()
        return _field(0x0A, b"".join((head, _field(0x12, data)))) + options

    async def _aio_call(self, call, body, name, deadline):
        import asyncio
        backoff = FIRST_BACKOFF
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return await call(body, timeout=self._call_timeout(deadline), metadata=self._metadata)
            except grpc.RpcError as e:
                code = e.code()
                late = deadline is not None and time.monotonic() + backoff >= deadline
                if code == grpc.StatusCode.UNAVAILABLE and attempt < ATTEMPTS and not late:
                    await asyncio.sleep(backoff)
                    backoff *= 2
                    continue
                raise Error(code.name if code else "UNKNOWN", e.details() or "", name) from None

    def aggregate(self, inputs: Iterable[ImageLike], labels: str | os.PathLike | Iterable[ImageLike] | None = None, *,
                  jobs: int | None = None, errors: str = "raise", **options: Any) -> list[Result]:
        """The CLI's --aggregate: the statistics of all the inputs' pixels
        together, integers exact; one Result per kind of image (sample type
        and channels), in the order each kind was first met. labels: a label
        image per input (an iterable as long as inputs), or a folder whose
        file of the same name stem is each input's: then each label's pixels
        over every input. errors="skip" leaves failed inputs out."""
        from ._aggregate import Aggregation, part_options
        if labels is not None:
            options = dict(options, labels=b"\0")  # a placeholder: each input's own below
        user = self._options(options)
        per_call = part_options(pb, user)
        aggregation = Aggregation(pb, user)

        def with_labels():
            if labels is None:
                for x in inputs:
                    yield x, per_call
                return
            if is_path(labels) and os.path.isdir(labels):
                stems = collections.defaultdict(list)
                for entry in os.scandir(labels):
                    if entry.is_file():
                        stems[os.path.splitext(entry.name)[0]].append(entry.path)
                pairs = []
                for x in inputs:
                    stem = os.path.splitext(os.path.basename(os.fspath(x)))[0]
                    found = stems.get(stem, [])
                    if len(found) != 1:
                        raise _bad(f"{'no' if not found else 'several'} label files named {stem}.* in {labels}",
                                   os.fspath(x))
                    pairs.append((x, found[0]))
            else:
                pairs = zip(inputs, labels)
            for x, label_image in pairs:
                o = pb.Options()
                o.CopyFrom(per_call)
                o.parts.labels.image.CopyFrom(self._side_input(label_image, True))
                yield x, o

        skip = errors == "skip"
        for r in self._many(with_labels(), jobs, "return" if skip else errors):
            if isinstance(r, Error):
                continue
            aggregation.add(r.proto)
        return aggregation.results()


def _pil_array(image):
    """A PIL image's pixels as imgstat decodes files: palette images expanded
    to RGB(A), 1-bit ones as 0 and 255, CMYK as it is (4 channels)."""
    mode = image.mode
    if mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    elif mode == "PA":
        image = image.convert("RGBA")
    elif mode == "1":
        image = image.convert("L")
    elif mode == "I;16B":
        return np.asarray(image).astype(np.uint16)
    elif mode == "I":
        a = np.asarray(image)
        if a.min(initial=0) >= 0 and a.max(initial=0) < 65536:
            return a.astype(np.uint16)
        raise _bad("PIL mode I images of values past 16 bits: pass a numpy array of a type servers take")
    return np.asarray(image)
