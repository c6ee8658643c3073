"""A list of small inputs merged by the server itself (the Aggregate call):
each input's bytes go in messages of many inputs, and one Partial comes
back, so that neither side pays a call an input nor the caller parses and
merges every answer. What a Dask partition of files takes; inputs that
cannot go whole in a message (large files, arrays, objects the server does
not fetch, GPU memory) keep the way of a call each."""
from __future__ import annotations

import os

import grpc

from ._errors import Error
from ._inputs import file_error, prepare
from ._transport import _failure
from ._tuning import AGGREGATE_MESSAGE, REGION_MIN_BYTES, STREAM_CHUNK
from .v1 import imgstat_pb2 as pb


def _varint(n):
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag, payload):
    return b"".join((bytes((tag,)), _varint(len(payload)), payload))


def jobs_for_server(transport, inputs):
    """The inputs' Jobs where every one can go whole in an Aggregate message
    and the server takes that call; else None (the pass takes a call an input)."""
    info = transport.known_info()
    if info is None or info.limits.aggregate_inputs == 0:
        return None  # a server from before the Aggregate call
    jobs = []
    for x in inputs:
        try:
            job = prepare(x)
        except Error:
            return None  # named by the other way, in its place
        if job.cuda is not None or job.array is not None or job.size > STREAM_CHUNK or \
                (job.size >= REGION_MIN_BYTES and transport.same_host):
            return None
        if job.url is not None and job.data is None:
            return None
        if job.path is None and job.data is None:
            return None
        jobs.append(job)
    return jobs


def _data(job):
    if job.path is None:
        return bytes(job.data)
    try:
        fd = os.open(job.path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise file_error(job.path, e, job.name) from None
    try:
        return os.read(fd, job.size + 1)  # more than it had: it grew since (refused below)
    except OSError as e:
        raise Error("INVALID_ARGUMENT", f"{job.path}: {e.strerror}", job.name) from None
    finally:
        os.close(fd)


def _messages(jobs, user_options, per_message, failed):
    """AggregateRequest messages as bytes: the options first, then inputs in
    messages of up to AGGREGATE_MESSAGE bytes (or one input) and per_message inputs, each file's
    bytes copied once (into its message). A file that cannot be read here is
    kept in `failed` by its place (sent without bytes)."""
    pieces = [_field(0x0A, user_options.SerializeToString())]
    size, count = len(pieces[0]), 0
    for i, job in enumerate(jobs):
        try:
            data = _data(job)
            if job.path is not None and len(data) > job.size:
                raise Error("INVALID_ARGUMENT", f"{job.path}: it grew while the pass read it", job.name)
        except Error as e:
            failed[i] = e
            data = b""
        # Input{kind, name, data} inside AggregateRequest.inputs, written as its pieces.
        head = job.input.SerializeToString() + b"\x12" + _varint(len(data))
        outer = b"\x12" + _varint(len(head) + len(data))
        one = len(outer) + len(head) + len(data)
        if count and (size + one > AGGREGATE_MESSAGE or count >= per_message):
            yield b"".join(pieces)
            pieces, size, count = [], 0, 0
        pieces += (outer, head, data)
        size += one
        count += 1
    if pieces:
        yield b"".join(pieces)


def aggregate_on_server(transport, jobs, user_options, errors):
    """The server's Partial (proto) of the jobs. A failed input raises its
    Error where errors is "raise" (the first in input order), else it is
    left out, as the pass a call an input leaves it."""
    info = transport.known_info()
    per_message = max(1, info.limits.aggregate_inputs)
    call = transport.channel.stream_unary("/imgstat.v1.ImageStats/Aggregate", request_serializer=None,
                                          response_deserializer=pb.AggregateResponse.FromString)
    failed = {}
    try:
        # Each input keeps the timeout a call of its own would have, a window of them at a time.
        windows = -(-len(jobs) // max(1, info.limits.batch_window))
        timeout = transport.timeout * windows if transport.timeout > 0 else None
        response = call(_messages(jobs, user_options, per_message, failed), timeout=timeout,
                        metadata=transport.metadata)
    except grpc.RpcError as e:
        raise _failure(e, transport.target) from None
    if errors == "raise":
        first = None
        for f in response.failures:
            if f.index not in failed and (first is None or f.index < first.index):
                first = f
        errs = sorted(failed.items())
        if errs and (first is None or errs[0][0] < first.index):
            raise errs[0][1]
        if first is not None:
            raise Error(_status_name(first.error.code), first.error.message,
                        jobs[first.index].name if first.index < len(jobs) else first.name)
    return response.partial


def _status_name(code):
    for c in grpc.StatusCode:
        if c.value[0] == code:
            return c.name
    return "UNKNOWN"
