"""imgstat.aio: 100 calls in flight on one event loop, each answer as the blocking client's."""
import asyncio
import os

import numpy as np

import imgstat
import imgstat.aio
from conftest import ROOT, comparable

SAMPLE = os.path.join(ROOT, "samples", "sample.png")


def test_a_hundred_calls_in_flight(server):
    rng = np.random.default_rng(6)
    inputs = [rng.integers(0, 256, (9 + i % 13, 11 + i % 7, 3), dtype=np.uint8) for i in range(99)]
    inputs.append(rng.integers(0, 65536, (700, 900), dtype=np.uint16))  # by region, on a worker thread

    async def main():
        async with imgstat.aio.Client(server.address) as client:
            results = await asyncio.gather(*(client.analyze(x, stats="all") for x in inputs))
            ordered = [r async for r in client.analyze_many([SAMPLE, b"junk", SAMPLE], errors="return")]
            try:
                await client.analyze(b"junk")
                raised = None
            except imgstat.Error as e:
                raised = e.code
            merged = await client.aggregate([SAMPLE, SAMPLE])
            return results, ordered, raised, merged

    results, ordered, raised, merged = asyncio.run(main())
    with imgstat.Client(server.address) as blocking:
        for x, r in zip(inputs, results):
            assert comparable(r.to_dict()) == comparable(blocking.analyze(x, stats="all").to_dict())
        assert comparable(ordered[0].to_dict()) == comparable(blocking.analyze(SAMPLE).to_dict())
    assert isinstance(ordered[1], imgstat.Error) and raised == "INVALID_ARGUMENT"
    assert merged[0].images == 2
