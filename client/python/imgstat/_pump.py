"""analyze_many's pump: an event loop on a thread of the client's own
carries small inputs on gRPC's asyncio API (about half the caller's CPU a
blocking call costs: no thread handoff per call, and the GIL is what bounds
a pass), as bytes built here; the rest take the blocking way on workers."""
from __future__ import annotations

import asyncio
import collections
import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import _channel
from ._errors import Error
from ._inputs import file_error, map_of, prepare
from ._options import parts_asked
from ._regions import Memory
from ._result import Result
from ._tuning import REGION_MIN_BYTES, STREAM_CHUNK, WORKER_THREADS


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


def message(job, opts, serialized, same_host):
    """A serialized AnalyzeRequest for an input that goes in one message,
    else None. Protobuf lets fields come in any order: the input's other
    fields, then its data, then the options (serialized once per options
    object, kept in `serialized`)."""
    if job.cuda is not None or job.url is not None or job.size > STREAM_CHUNK or \
            (job.size >= REGION_MIN_BYTES and same_host):
        return None  # (a URL is read, here or by the server, on a worker)
    side = map_of(opts)
    if side is not None and len(side.data) >= REGION_MIN_BYTES:
        return None  # its map goes apart (by region or streamed)
    if job.array is not None:
        a, layout = job.array
        if same_host and Memory.holding(a.__array_interface__["data"][0], a.nbytes) is not None:
            return None  # a shared array: read in place
        job.input.raw.CopyFrom(layout)
        data = np.ascontiguousarray(a).tobytes()
    elif job.path is not None:
        try:
            fd = os.open(job.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise file_error(job.path, e, job.name) from None
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


class Pump:
    """run_blocking(job, opts) answers an input that does not go in one message."""

    def __init__(self, transport, run_blocking):
        self._transport = transport
        self._run_blocking = run_blocking
        self._lock = threading.Lock()
        self._loop = None  # (loop, thread, channel, Analyze call)
        self._workers = None

    def close(self):
        if self._workers is not None:
            self._workers.shutdown(wait=True)
        if self._loop is None:
            return
        loop, thread, channel, _ = self._loop
        self._loop = None
        asyncio.run_coroutine_threadsafe(channel.close(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()

    def _started(self):
        with self._lock:
            if self._loop is None:
                import grpc.aio  # only where many inputs are analyzed
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="imgstat-aio", daemon=True)
                thread.start()
                transport = self._transport

                async def setup():
                    return _channel.make_channel(grpc.aio, transport.target, **transport.tls)
                channel = asyncio.run_coroutine_threadsafe(setup(), loop).result()
                self._loop = (loop, thread, channel, channel.unary_unary("/imgstat.v1.ImageStats/Analyze"))
            if self._workers is None:
                self._workers = ThreadPoolExecutor(max_workers=WORKER_THREADS, thread_name_prefix="imgstat")
            return self._loop

    def many(self, pairs, jobs, errors):
        """Results of (input, options) pairs in input order, `jobs` calls in
        flight (default: what keeps the server busy)."""
        if errors not in ("raise", "return"):
            raise ValueError("errors must be 'raise' or 'return'")
        window = jobs or self._transport.calls_to_fill()
        loop = self._started()[0]
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
        """On the event loop's thread: reads each input, keeps `window` calls
        in flight, and hands results over in input order, a list at a time."""
        loop = asyncio.get_running_loop()
        call = self._loop[3]
        transport = self._transport
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
                    job = prepare(x)
                    body = message(job, opts, serialized, transport.same_host)
                    if body is not None:
                        task = loop.create_task(transport.invoke_async(call, body, job.name, transport.deadline()))
                    else:
                        task = loop.run_in_executor(self._workers, self._run_blocking, job, opts)
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
