"""imgstat on asyncio: ``imgstat.aio.Client`` has the methods of
``imgstat.Client`` as coroutines, on gRPC's asyncio API.

    async with imgstat.aio.Client("localhost:50051") as client:
        results = await asyncio.gather(*(client.analyze(p) for p in paths))

Inputs sent in one message go on grpc.aio (a small file is read on the
loop); those that go through shared memory, stream, or come from a GPU run
on a worker thread with the blocking client's code, so the event loop never
waits on them.
"""
import asyncio

import grpc.aio

from . import _channel
from ._client import Client as _SyncClient
from ._errors import Error
from ._inputs import prepare
from ._shards import expand as expand_archives
from ._options import parts_asked
from ._pump import message
from ._result import Result


class Client:
    """The same arguments as imgstat.Client; use it inside a running event loop."""

    def __init__(self, target=None, **kwargs):
        # The blocking client prepares inputs and carries regions; this one's
        # own channel carries the calls made on the event loop.
        self._sync = _SyncClient(target, **kwargs)
        self.target = self._sync.target
        channel_args = {k: kwargs.get(k) for k in ("tls_ca", "tls_cert", "tls_key", "tls_server_name")}
        self._channel = _channel.make_channel(grpc.aio, self.target, insecure=kwargs.get("insecure", False),
                                              **channel_args)
        # Requests go as bytes the blocking client builds (imgstat.Client.analyze_many's way).
        self._analyze = self._channel.unary_unary("/imgstat.v1.ImageStats/Analyze")

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def close(self):
        await self._channel.close()
        await asyncio.to_thread(self._sync.close)

    async def server_info(self):
        return await asyncio.to_thread(self._sync.server_info)

    async def analyze(self, x, *, name=None, raw=None, stride=0, as_bytes=False, **options):
        """As imgstat.Client.analyze."""
        sync = self._sync
        transport = sync._transport
        opts = sync._options(options)
        job = prepare(x, name, raw, stride, as_bytes)
        body = message(job, opts, {}, transport.same_host)
        if body is not None:
            response = await transport.invoke_async(self._analyze, body, job.name, transport.deadline())
        else:
            response = await asyncio.to_thread(sync._run, job, opts)
        return Result(response, job.name, parts_asked(opts))

    async def analyze_many(self, inputs, *, jobs=None, errors="raise", extensions=None, **options):
        """An async iterator of results in input order, ``jobs`` calls in
        flight; archives stand for their members (imgstat.Client.analyze_many)."""
        if errors not in ("raise", "return"):
            raise ValueError("errors must be 'raise' or 'return'")
        window = jobs or await asyncio.to_thread(self._sync.calls_to_fill)
        pending = []
        for x in expand_archives(inputs, extensions, self._sync._list):
            pending.append(asyncio.ensure_future(self._one(x, options)))
            if len(pending) >= window:
                async for r in self._drain(pending[:1], errors):
                    yield r
                pending = pending[1:]
        async for r in self._drain(pending, errors):
            yield r

    async def _one(self, x, options):
        try:
            return await self.analyze(x, **options)
        except Error as e:
            return e

    @staticmethod
    async def _drain(tasks, errors):
        for t in tasks:
            r = await t
            if isinstance(r, Error) and errors == "raise":
                raise r
            yield r

    async def aggregate(self, inputs, labels=None, **kwargs):
        """As imgstat.Client.aggregate (it runs on a worker thread)."""
        inputs = list(inputs)
        return await asyncio.to_thread(self._sync.aggregate, inputs, labels, **kwargs)

    async def partial(self, inputs, labels=None, **kwargs):
        """As imgstat.Client.partial (it runs on a worker thread)."""
        inputs = list(inputs)
        return await asyncio.to_thread(self._sync.partial, inputs, labels, **kwargs)
