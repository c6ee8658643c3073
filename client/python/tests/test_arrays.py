"""Arrays of every dtype and layout against numpy over the same samples, and
shared memory: a same-host array goes by region, a remote one does not, and
a shared_array is read in place, changes included."""
import math

import numpy as np
import pytest

import imgstat
from conftest import Server, non_loopback_address

DTYPES = [np.uint8, np.uint16, np.int8, np.int16, np.float32, np.float64]


@pytest.fixture(scope="module")
def client(server):
    with imgstat.Client(server.address) as c:
        yield c


def random_array(rng, dtype, shape):
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, int(info.max) + 1, shape, dtype=dtype)
    a = rng.normal(0, 1000, shape).astype(dtype)
    return a


def check(result, a, what):
    """Each channel of result against numpy over a (H x W or H x W x C)."""
    channels = a.reshape(a.shape[0], a.shape[1], -1)
    assert result.width == a.shape[1] and result.height == a.shape[0], what
    for k, c in enumerate(result.channels):
        x = channels[:, :, k].ravel()
        finite = x[np.isfinite(x)] if x.dtype.kind == "f" else x
        assert c.count == finite.size, what
        if np.issubdtype(a.dtype, np.integer):
            v = finite.astype(np.int64)
            assert (c.min, c.max, c.sum) == (int(v.min()), int(v.max()), int(v.sum())), what
            exact = sum(int(t) for t in v)
            assert c.sum == exact
            assert math.isclose(c.mean, exact / v.size, rel_tol=1e-12), what
            assert math.isclose(c.stddev, float(np.std(v.astype(np.float64))), rel_tol=1e-9, abs_tol=1e-12), what
            if a.dtype == np.uint8:
                assert list(c.histogram) == list(np.bincount(v, minlength=256)), what
        else:
            f = finite.astype(np.float64)
            assert (c.min, c.max) == (float(f.min()), float(f.max())), what
            assert math.isclose(c.sum, math.fsum(f), rel_tol=1e-12, abs_tol=1e-9), what
            assert math.isclose(c.stddev, float(np.std(f)), rel_tol=1e-9), what
            assert c.nan_count == int(np.isnan(x).sum())
            assert c.posinf_count == int(np.isposinf(x).sum()) and c.neginf_count == int(np.isneginf(x).sum())


def test_every_dtype_and_odd_sizes_against_numpy(client):
    rng = np.random.default_rng(11)
    for dtype in DTYPES:
        for shape in [(1, 1), (1, 1, 3), (7, 13), (31, 97, 3), (2, 3, 4), (101, 1, 2), (64, 64, 1)]:
            a = random_array(rng, dtype, shape)
            check(client.analyze(a, stats="min_max,sum,stddev,histogram"), a, f"{np.dtype(dtype)} {shape}")
    const = np.full((19, 23, 3), 77, np.uint8)
    check(client.analyze(const), const, "constant")
    extremes = np.array([[0, 65535], [65535, 0]], np.uint16)
    check(client.analyze(extremes), extremes, "extremes")
    for dtype in (np.float32, np.float64):
        a = random_array(rng, dtype, (29, 31, 2))
        a[3, 4, 0], a[5, 6, 1], a[7, 8, 0] = np.nan, np.inf, -np.inf
        check(client.analyze(a), a, f"{np.dtype(dtype)} with NaN and Inf")


def test_strided_and_non_contiguous_arrays_against_numpy(client):
    rng = np.random.default_rng(5)
    base = random_array(rng, np.uint16, (120, 150, 4))
    views = {
        "crop": base[10:90, 7:140, :3],
        "every other column": base[:, ::2, 0],
        "reversed rows": base[::-1, :, 1],
        "reversed columns": base[:, ::-1],
        "transposed": base[:, :, 2].T,
        "one channel of four": base[..., 3],
        "fortran order": np.asfortranarray(base[..., :3]),
    }
    raw = bytearray(b"\0" + base[..., 0].tobytes())
    views["unaligned"] = np.frombuffer(raw, dtype=np.dtype("<u2"), offset=1).reshape(120, 150)
    views["big-endian"] = base[..., 0].astype(">u2")
    for what, a in views.items():
        check(client.analyze(a), a, what)
    big = random_array(rng, np.float32, (600, 700, 3))  # 5 MB: by region here, strided
    check(client.analyze(big[::2, 1:, :2]), big[::2, 1:, :2], "large strided")


def test_shapes_and_types_servers_do_not_take_raise_invalid_argument(client):
    # A 4-D array is a volume of channels (ZYXC): 1 to 4 of them, as an image's.
    for bad in (np.zeros((2, 3, 5), np.uint8), np.zeros((4,), np.uint8), np.zeros((2, 2, 2, 5), np.uint8),
                np.zeros((2, 2, 2, 2, 2), np.uint8),
                np.zeros((0, 5), np.uint8), np.zeros((3, 3), np.int64), np.zeros((3, 3), np.complex64)):
        with pytest.raises(imgstat.Error) as e:
            client.analyze(bad)
        assert e.value.code == "INVALID_ARGUMENT", bad.shape


def test_a_same_host_array_goes_by_region_and_a_remote_one_does_not(server):
    rng = np.random.default_rng(2)
    a = rng.integers(0, 256, (1024, 1024, 2), dtype=np.uint8)  # 2 MiB
    with imgstat.Client(server.address) as here:
        before = server.metric("imgstat_requests_total", method="RegisterRegion")
        check(here.analyze(a), a, "same host")
        check(here.analyze(a[:, :, 1]), a[:, :, 1], "same host, again")
        registered = server.metric("imgstat_requests_total", method="RegisterRegion") - before
        assert registered == 1  # the copy's memfd is kept for the next array
    address = non_loopback_address()
    if address is None:
        pytest.skip("no address but loopback here")
    remote = Server("--insecure", listen="0.0.0.0:0")
    try:
        with imgstat.Client(f"{address}:{remote.port}", insecure=True) as there:
            check(there.analyze(a), a, "another host")
        assert remote.metric("imgstat_requests_total", method="RegisterRegion") == 0
        assert remote.metric("imgstat_requests_total", method="Analyze") == 1
    finally:
        remote.stop()


def test_a_shared_array_is_read_in_place_and_its_changes_are_seen(server):
    with imgstat.Client(server.address) as client:
        s = imgstat.shared_array((300, 400, 3), np.uint16)
        assert s.shape == (300, 400, 3) and s.dtype == np.uint16 and not s.any()
        s[:] = np.random.default_rng(9).integers(0, 65536, s.shape, dtype=np.uint16)
        before = server.metric("imgstat_requests_total", method="RegisterRegion")
        check(client.analyze(s), s, "shared")
        s[10:20, 30:40, 1] = 65535
        s[0, 0, 0] = 0
        check(client.analyze(s), s, "shared, changed")
        crop = s[50:250, 100:300, 1:]  # rows at a stride: still in place
        check(client.analyze(crop), crop, "a view of it")
        small = imgstat.shared_array((2, 3), np.float64)
        small[:] = [[1.5, -2, 3], [4, 5, np.nan]]
        check(client.analyze(small), small, "small shared")
        registered = server.metric("imgstat_requests_total", method="RegisterRegion") - before
        assert registered == 2  # one per shared array, none per call
        in_flight = server.metric("imgstat_requests_total", method="UnregisterRegion")
        del s, crop, small
        import gc
        gc.collect()
        client.analyze(np.zeros((2, 2), np.uint8))  # gives back the regions of arrays gone
        assert server.metric("imgstat_requests_total", method="UnregisterRegion") - in_flight == 2
