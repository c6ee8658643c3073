"""The connection to imgstat servers, as the CLI makes one: the channel and
its token, deadlines, retries of UNAVAILABLE, the server's info, and the
calls themselves (one message, a stream, a region)."""
from __future__ import annotations

import asyncio
import os
import threading
import time

import grpc

from . import _channel
from ._errors import Error
from ._tuning import (ATTEMPTS, CALLS_PER_THREAD, DEFAULT_CALLS, DEFAULT_TIMEOUT, FIRST_BACKOFF, MAX_CALLS,
                      MESSAGE_ENVELOPE, STREAM_CHUNK)
from .v1 import imgstat_pb2 as pb
from .v1 import imgstat_pb2_grpc as rpc


def _failure(e, name):
    code = e.code()
    return Error(code.name if code else "UNKNOWN", e.details() or "", name)


class Transport:
    """target, TLS, token, timeout and shm as imgstat.Client takes them."""

    def __init__(self, target, *, token, tls, timeout, shm):
        self.target = target or os.environ.get("IMGSTAT_SERVER") or _channel.DEFAULT_TARGET
        self.tls = tls
        try:
            self.channel = _channel.make_channel(grpc, self.target, **tls)
        except ValueError as e:
            raise Error("INVALID_ARGUMENT", str(e)) from None
        self.stub = rpc.ImageStatsStub(self.channel)
        token = _channel.resolve_token(token)
        self.metadata = (("authorization", "Bearer " + token),) if token else None
        self.timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
        # Regions can be had only from a server on this host, and one server.
        self.same_host = (shm and _channel.is_loopback(self.target)
                          and not _channel.names_several_servers(self.target))
        self.servers = max(1, len(_channel.target_addresses(self.target)))
        self._lock = threading.Lock()
        self._info = None
        self._info_error = None

    def close(self):
        self.channel.close()

    # --- deadlines and retries ------------------------------------------
    def deadline(self):
        return time.monotonic() + self.timeout if self.timeout > 0 else None

    @staticmethod
    def call_timeout(deadline):
        if deadline is None:
            return None
        return max(0.001, deadline - time.monotonic())

    def invoke(self, fn, name, deadline=None):
        """fn(timeout) with the CLI's retries of UNAVAILABLE; gRPC errors become Error."""
        if deadline is None:
            deadline = self.deadline()
        backoff = FIRST_BACKOFF
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return fn(self.call_timeout(deadline))
            except grpc.RpcError as e:
                late = deadline is not None and time.monotonic() + backoff >= deadline
                if e.code() == grpc.StatusCode.UNAVAILABLE and attempt < ATTEMPTS and not late:
                    time.sleep(backoff)
                    backoff *= 2
                    continue
                raise _failure(e, name) from None

    async def invoke_async(self, call, body, name, deadline):
        """A grpc.aio call of a serialized request, with the same retries."""
        backoff = FIRST_BACKOFF
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return await call(body, timeout=self.call_timeout(deadline), metadata=self.metadata)
            except grpc.RpcError as e:
                late = deadline is not None and time.monotonic() + backoff >= deadline
                if e.code() == grpc.StatusCode.UNAVAILABLE and attempt < ATTEMPTS and not late:
                    await asyncio.sleep(backoff)
                    backoff *= 2
                    continue
                raise _failure(e, name) from None

    # --- the server -----------------------------------------------------
    def server_info(self):
        with self._lock:
            if self._info is not None:
                return self._info
        info = self.invoke(lambda t: self.stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=t,
                                                              metadata=self.metadata), self.target)
        with self._lock:
            self._info = info
        return info

    def list_objects(self, prefix):
        """ListObjects: the names under an s3:// prefix, as the server lists them."""
        def listing(t):
            names = []
            for page in self.stub.ListObjects(pb.ListObjectsRequest(prefix=prefix), timeout=t, metadata=self.metadata):
                names += [o.name for o in page.objects]
            return names
        return self.invoke(listing, prefix)

    def known_info(self):
        """The server's info, or None when it cannot be had (defaults apply)."""
        if self._info is None and self._info_error is None:
            try:
                self.server_info()
            except Error as e:
                self._info_error = e
        return self._info

    def in_one_message(self, job, opts, size):
        """As the CLI decides: small inputs go in one message, and raw ones
        that ask for the luminance (a stream does not compute it) while
        they fit the server's message limit."""
        if size <= STREAM_CHUNK:
            return True
        if job.input.kind not in (pb.INPUT_KIND_RAW, pb.INPUT_KIND_BYTES):
            return False
        if pb.STATISTIC_LUMINANCE not in opts.statistics and pb.STATISTIC_ALL not in opts.statistics:
            return False
        info = self.known_info()
        limit = info.limits.max_message_bytes if info is not None and info.limits.max_message_bytes else 4 << 20
        return size + MESSAGE_ENVELOPE <= limit

    def calls_to_fill(self):
        """Calls in flight that keep the server busy: four for each of its
        engine's threads, within its max_concurrent (the CLI's default -j)."""
        info = self.known_info()
        calls = DEFAULT_CALLS
        if info is not None and info.engine.threads > 0:
            calls = CALLS_PER_THREAD * info.engine.threads
            if info.limits.max_concurrent > 0:
                calls = min(calls, info.limits.max_concurrent)
        return max(DEFAULT_CALLS, min(MAX_CALLS, calls * self.servers))

    # --- calls ----------------------------------------------------------
    def analyze(self, request, name, deadline):
        return self.invoke(lambda t: self.stub.Analyze(request, timeout=t, metadata=self.metadata), name, deadline)

    def unary(self, job, opts, deadline):
        """The job's Input, its data set, in one message."""
        return self.analyze(pb.AnalyzeRequest(input=job.input, options=opts), job.name, deadline)

    def stream(self, job, opts, total, chunks, deadline, map_data=None):
        """The job's bytes streamed after a header, a map's after them."""
        def messages():
            yield pb.AnalyzeStreamRequest(header=pb.StreamHeader(input=job.input, options=opts, total_bytes=total,
                                                                 map_bytes=len(map_data) if map_data else 0))
            for block in chunks():
                yield pb.AnalyzeStreamRequest(chunk=block)
            if map_data:
                view = memoryview(map_data)
                for i in range(0, len(view), STREAM_CHUNK):
                    yield pb.AnalyzeStreamRequest(chunk=bytes(view[i:i + STREAM_CHUNK]))
        return self.invoke(lambda t: self.stub.AnalyzeStream(messages(), timeout=t, metadata=self.metadata),
                           job.name, deadline)

    def in_region(self, job, opts, region_id, offset, length, deadline):
        """The job's Input read from a registered region."""
        request = pb.AnalyzeRequest(input=job.input, options=opts)
        request.input.region.region_id = region_id
        if offset:
            request.input.region.offset = offset
        if length:
            request.input.region.length = length
        return self.analyze(request, job.name, deadline)

    def register(self, ticket, name, cuda=None, pageable=False):
        request = pb.RegisterRegionRequest(ticket=ticket, name=name[:200], pageable=pageable)
        if cuda is not None:
            request.cuda.CopyFrom(cuda)
        return self.invoke(lambda t: self.stub.RegisterRegion(request, timeout=t, metadata=self.metadata),
                           name).region_id

    def unregister(self, region_id):
        try:
            self.stub.UnregisterRegion(pb.UnregisterRegionRequest(region_id=region_id), timeout=10,
                                       metadata=self.metadata)
        except grpc.RpcError:
            pass  # it goes anyway when the region socket closes
