"""A list of small inputs merged by the server itself (the Aggregate call):
each input's bytes go in messages of many inputs, and one Partial comes
back, so that neither side pays a call an input nor the caller parses and
merges every answer. What a Dask partition of files takes; inputs that
cannot go whole in a message (large files, arrays, objects the server does
not fetch, GPU memory, a shard's members) keep the way of a call each, in
their places among the runs that go on the calls."""
from __future__ import annotations

import os

import grpc

from ._errors import Error
from ._inputs import file_error, prepare
from ._pump import _field, _varint
from ._transport import _failure
from ._regions import _populate
from ._shards import is_shard
from ._tuning import AGGREGATE_MESSAGE, AGGREGATE_REGION, AGGREGATE_RUN, REGION_MIN_BYTES, STREAM_CHUNK
from .v1 import imgstat_pb2 as pb


def runs_for_server(transport, inputs):
    """The inputs in runs, in order, as (start, end, jobs): a run of inputs
    that can each go whole in an Aggregate message (all of them, or at least
    AGGREGATE_RUN among others) has their Jobs, every other input (and a
    shorter run among them) None, to take a call each. None where the server has no Aggregate call or no run
    goes on it."""
    info = transport.known_info()
    if info is None or info.limits.aggregate_inputs == 0:
        return None  # a server from before the Aggregate call
    jobs = [_job_for_server(transport, x) for x in inputs]
    runs, start = [], 0
    while start < len(jobs):
        end = start + 1
        while end < len(jobs) and (jobs[end] is None) == (jobs[start] is None):
            end += 1
        whole = start == 0 and end == len(jobs)
        listed = jobs[start:end] if jobs[start] is not None and (end - start >= AGGREGATE_RUN or whole) else None
        if listed is None and runs and runs[-1][2] is None:
            runs[-1] = (runs[-1][0], end, None)  # one run a call an input
        else:
            runs.append((start, end, listed))
        start = end
    return runs if any(r[2] is not None for r in runs) else None


def _job_for_server(transport, x):
    """x's Job where it can go whole in an Aggregate message, else None."""
    if is_shard(x):
        return None  # its members, each its own input
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
    return job


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


def _region_messages(jobs, user_options, per_message, failed, memory, region_id):
    """As _messages, each input's bytes read into the memfd (its place the
    sum of those before it) and named by region: only the names travel."""
    view = memoryview(memory)
    if memory.fresh:  # its pages made in one call, not a fault each
        _populate(memory.address, sum(j.size for j in jobs))
        memory.fresh = False
    pieces = [_field(0x0A, user_options.SerializeToString())]
    offset, count = 0, 0
    for i, job in enumerate(jobs):
        try:
            if job.path is None:
                view[offset:offset + job.size] = job.data
            else:
                _read_into(job, view[offset:offset + job.size])
            ref = pb.RegionRef(region_id=region_id, offset=offset, length=job.size).SerializeToString()
        except Error as e:
            failed[i] = e
            ref = b""
        if job.size == 0:
            ref = b""  # nothing to name: sent as an input of no bytes, refused as such
        pieces.append(_field(0x12, job.input.SerializeToString() + (_field(0x2A, ref) if ref else b"")))
        offset += job.size
        count += 1
        if count >= per_message:
            yield b"".join(pieces)
            pieces, count = [], 0
    if pieces:
        yield b"".join(pieces)


def _read_into(job, into):
    try:
        fd = os.open(job.path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise file_error(job.path, e, job.name) from None
    try:
        if os.fstat(fd).st_size != job.size:
            raise Error("INVALID_ARGUMENT", f"{job.path}: its size changed while the pass read it", job.name)
        done = 0
        while done < job.size:
            n = os.readv(fd, [into[done:]])
            if n <= 0:
                raise Error("INVALID_ARGUMENT", f"{job.path}: its size changed while the pass read it", job.name)
            done += n
    except OSError as e:
        raise Error("INVALID_ARGUMENT", f"{job.path}: {e.strerror}", job.name) from None
    finally:
        os.close(fd)


def guided_slices(count, share, least, most):
    """(start, end) of contiguous slices of count inputs, each about 1/share
    of those left, at least least (where that many are left), at most most
    (the CLI's guided_slices, client/slices.cpp)."""
    most = max(1, most)
    least = min(max(1, least), most)
    out, start = [], 0
    while start < count:
        end = start + min(max((count - start) // max(1, share), least), most, count - start)
        out.append((start, end))
        start = end
    return out


def _by_bytes(jobs, budget):
    """Contiguous runs of jobs of at most budget bytes together (at least one each)."""
    start, size = 0, 0
    for i, job in enumerate(jobs):
        if i > start and size + job.size > budget:
            yield start, jobs[start:i]
            start, size = i, 0
        size += job.size
    if start < len(jobs):
        yield start, jobs[start:]


def _call(transport, messages, count):
    info = transport.known_info()
    call = transport.channel.stream_unary("/imgstat.v1.ImageStats/Aggregate", request_serializer=None,
                                          response_deserializer=pb.AggregateResponse.FromString)
    # Each input keeps the timeout a call of its own would have, a window of them at a time.
    windows = -(-count // max(1, info.limits.batch_window))
    timeout = transport.timeout * windows if transport.timeout > 0 else None
    try:
        return call(messages, timeout=timeout, metadata=transport.metadata)
    except grpc.RpcError as e:
        raise _failure(e, transport.target) from None


def aggregate_on_server(transport, regions, jobs, user_options, errors):
    """The server's Partials (protos, in order) of the jobs: their bytes in
    the calls' messages, or, from a server on this host, read into a kept
    memfd that it maps (AGGREGATE_REGION bytes a call, one call after
    another), so that no byte crosses the socket. A failed input raises its
    Error where errors is "raise" (the first in input order), else it is
    left out, as the pass a call an input leaves it."""
    per_message = max(1, transport.known_info().limits.aggregate_inputs)
    failed, failures, partials = {}, [], []
    rest = 0  # the jobs from here on go as bytes
    if regions is not None and regions.socket() is not None:
        for start, group in _by_bytes(jobs, AGGREGATE_REGION):
            memory = regions.take_scratch(max(1, sum(j.size for j in group)), larger=True)
            try:
                region_id = regions.of_memory(memory, "imgstat-aggregate", pageable=True)
                if region_id is None:  # the socket took no memfd: the bytes go in the messages
                    break
                here = {}
                response = _call(transport, _region_messages(group, user_options, per_message, here, memory,
                                                             region_id), len(group))
            finally:
                regions.give_scratch(memory)
            failed.update((start + i, e) for i, e in here.items())
            failures += [(start + f.index, f) for f in response.failures]
            partials.append(response.partial)
            rest = start + len(group)
    if rest < len(jobs):
        here = {}
        response = _call(transport, _messages(jobs[rest:], user_options, per_message, here), len(jobs) - rest)
        failed.update((rest + i, e) for i, e in here.items())
        failures += [(rest + f.index, f) for f in response.failures]
        partials.append(response.partial)
    if errors == "raise":
        first = min(((i, f) for i, f in failures if i not in failed), default=None, key=lambda x: x[0])
        mine = min(failed.items(), default=None, key=lambda x: x[0])
        if mine is not None and (first is None or mine[0] < first[0]):
            raise mine[1]
        if first is not None:
            i, f = first
            raise Error(_status_name(f.error.code), f.error.message, jobs[i].name if i < len(jobs) else f.name)
    return partials


def _status_name(code):
    for c in grpc.StatusCode:
        if c.value[0] == code:
            return c.name
    return "UNKNOWN"
