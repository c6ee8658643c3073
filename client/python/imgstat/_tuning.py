"""Everything the package tunes, in one place (the CLI's counterparts named)."""
import os

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
WORKER_THREADS = 16            # analyze_many's inputs that take the blocking way
OBJECT_MAX_BYTES = 2 << 30     # an object read here (not by the server): the most held at once
# Aggregate messages gather inputs up to this many bytes (a larger input goes
# alone): a fresh 4 MiB buffer a message cost 4x the CPU of 1 MiB ones,
# whose memory is reused (bench/NOTES.md).
AGGREGATE_MESSAGE = 1 << 20
# From a server on this host, an Aggregate call's inputs are read into a kept
# memfd of up to this many bytes, which the server maps.
AGGREGATE_REGION = 64 << 20
# A pass's files on Aggregate calls go in contiguous slices that shrink as
# the pass goes (OpenMP's schedule(guided)), each 1/(AGGREGATE_GUIDED x
# calls) of the files left, at least AGGREGATE_SLICE_WINDOWS of the server's
# windows, at most AGGREGATE_SLICE_FILES: the calls end together (as the
# CLI's kAggregateGuided, kAggregateSliceWindows, kAggregateSliceFiles).
AGGREGATE_GUIDED = 2
AGGREGATE_SLICE_WINDOWS = 2
AGGREGATE_SLICE_FILES = 1024
# Inputs in a row, at least, that go on Aggregate calls among inputs that
# take a call each (a shard's members, large files): each run waits for the
# one before it (as the CLI's kAggregateRunFiles).
AGGREGATE_RUN = 32
