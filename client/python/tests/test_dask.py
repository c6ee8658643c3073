"""imgstat.dask on a distributed.LocalCluster of four worker processes and
two servers: a bag of files and a chunked Dask array (from Zarr too) give
Client.aggregate's answer in one process (integers equal in every field,
floats within rounding of the merge order), also when a worker is killed
mid-run and Dask runs its tasks again."""
import os
import signal
import time

import numpy as np
import pytest

import imgstat
from conftest import Server
from test_many import close_dicts

dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")
import dask.array as da  # noqa: E402
import dask.bag as db  # noqa: E402
import imgstat.dask  # noqa: E402


@pytest.fixture(scope="module")
def servers(server):
    other = Server()
    yield [server.address, other.address]
    other.stop()


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=4, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as c, distributed.Client(c) as client:
        yield client


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from PIL import Image
    rng = np.random.default_rng(71)
    folder = tmp_path_factory.mktemp("dask-files")
    paths = []
    for i in range(240):
        h, w = (int(v) for v in rng.integers(1, 40, 2))
        kind = i % 3
        if kind == 0:
            a, name = rng.integers(0, 256, (h, w, 3), dtype=np.uint8), f"f{i:04d}.png"
            Image.fromarray(a, "RGB").save(folder / name)
        elif kind == 1:
            a, name = rng.integers(0, 65536, (h, w), dtype=np.uint16), f"f{i:04d}.png"
            Image.fromarray(a).save(folder / name)
        else:
            a, name = (rng.normal(0, 3, (h, w))).astype(np.float32), f"f{i:04d}.tif"
            a.flat[0] = [np.nan, np.inf, 2.0][i % 3]
            Image.fromarray(a, "F").save(folder / name)
        paths.append(str(folder / name))
    return paths


def same(got, want):
    got = {(r.sample_type, r.channel_count): r.to_dict() for r in got}
    want = {(r.sample_type, r.channel_count): r.to_dict() for r in want}
    assert sorted(got) == sorted(want)
    for kind, w in want.items():
        if kind[0].startswith("float"):
            close_dicts(got[kind], w)
        else:
            assert got[kind] == w, kind


OPTIONS = dict(stats="all", range=(-10, 10), bins=64)


def test_a_bag_of_files_gives_the_aggregate_of_one_process(cluster, server, servers, files):
    with imgstat.Client(servers[0]) as client:
        want = client.aggregate(iter(files), **OPTIONS)  # a call a file, merged here
    calls = server.metric("imgstat_requests_total", method="Aggregate")
    bag = db.from_sequence(files, npartitions=24)
    same(imgstat.dask.aggregate(bag, servers, **OPTIONS), want)
    # Each partition is one Aggregate call (its files in a memfd the server maps).
    assert server.metric("imgstat_requests_total", method="Aggregate", code="OK") - calls >= 6
    same(imgstat.dask.aggregate(bag, servers[1], split_every=3, **OPTIONS), want)
    # Both servers were called: the workers (0 to 3) keep to one each, in turn.
    used = cluster.run(lambda: sorted(imgstat.dask._clients))
    assert {a for per_worker in used.values() for a in per_worker} == set(servers)


def test_a_worker_killed_mid_run_leaves_the_answer_exact(cluster, servers, files):
    with imgstat.Client(servers[0]) as client:
        want = client.aggregate(files * 3, **OPTIONS)
    bag = db.from_sequence(files * 3, npartitions=72)
    future = cluster.compute(imgstat.dask.partial(bag, servers, **OPTIONS))
    time.sleep(0.3)
    pids = cluster.run(os.getpid)
    victim = sorted(pids)[0]
    os.kill(pids[victim], signal.SIGKILL)  # its nanny starts another; Dask runs its tasks again
    got = imgstat.Partial.from_bytes(future.result(timeout=300))
    assert got.images == len(files) * 3
    same(got.result(stats="all"), want)


def test_a_chunked_volume_gives_the_statistics_of_the_whole(cluster, servers, tmp_path):
    zarr = pytest.importorskip("zarr")
    rng = np.random.default_rng(72)
    volume = rng.integers(0, 4096, (23, 61, 47), dtype=np.uint16)
    volume[5] = 4095  # a constant plane
    arrays = [da.from_array(volume, chunks=(5, 32, 20))]
    store = zarr.open(str(tmp_path / "volume.zarr"), mode="w", shape=volume.shape, chunks=(7, 30, 47),
                      dtype=volume.dtype)
    store[:] = volume
    arrays.append(da.from_zarr(str(tmp_path / "volume.zarr")))
    with imgstat.Client(servers[0]) as client:
        whole = client.analyze(volume, axes="ZYX", stats="all").to_dict()["channels"][0]
    for a in arrays:
        [r] = imgstat.dask.aggregate(a, servers, axes="ZYX", stats="all")
        c = r.to_dict()["channels"][0]
        v = volume.astype(np.int64)
        assert (c["count"], c["min"], c["max"], c["sum"]) == (v.size, v.min(), v.max(), int(v.sum()))
        assert c["histogram"] == whole["histogram"] and c["median"] == whole["median"]
        close_dicts({k: c[k] for k in ("mean", "stddev", "percentiles")},
                    {k: whole[k] for k in ("mean", "stddev", "percentiles")})
    floats = rng.normal(0, 1, (9, 40, 30)).astype(np.float32)
    floats[2, 3, 4] = np.nan
    [r] = imgstat.dask.aggregate(da.from_array(floats, chunks=(3, 20, 30)), servers[1], range=(-5, 5))
    c = r.to_dict()["channels"][0]
    finite = floats[np.isfinite(floats)].astype(np.float64)
    assert (c["count"], c["nan_count"]) == (finite.size, 1)
    assert c["histogram"]["counts"] == np.histogram(finite, bins=256, range=(-5, 5))[0].tolist()
    assert abs(c["mean"] - finite.mean()) <= 1e-12 * abs(finite).mean()


def test_what_is_not_a_dask_collection_is_refused():
    with pytest.raises(TypeError):
        imgstat.dask.partial([1, 2, 3])
    with pytest.raises(ValueError):
        imgstat.dask.partial(da.zeros((4, 4, 4, 4, 4)))
