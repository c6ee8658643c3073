"""Files of several planes through the package: planes=, Result.planes and
positions with their plane, as the CLI answers them."""
import numpy as np
import pytest

import imgstat
from conftest import comparable

tifffile = pytest.importorskip("tifffile")


@pytest.fixture(scope="module")
def client(server):
    with imgstat.Client(server.address) as c:
        yield c


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    rng = np.random.default_rng(490)
    pages = rng.integers(0, 65536, (6, 31, 47), dtype=np.uint16)
    path = tmp_path_factory.mktemp("planes") / "stack.tif"
    with tifffile.TiffWriter(path) as t:
        for page in pages:
            t.write(page, compression="zlib")
    return str(path), pages


def test_every_plane_counts_and_each_answers_as_the_cli(client, cli, stack):
    path, pages = stack
    whole = client.analyze(path, stats="min_max,sum,stddev,positions")
    assert whole.facts["planes"] == 6 and whole.planes == []
    gray = whole["Gray"]
    assert (gray.count, gray.min, gray.max, gray.sum) == (pages.size, pages.min(), pages.max(), int(pages.sum(dtype=np.int64)))
    assert gray.min_position == tuple(int(v) for v in np.unravel_index(pages.argmin(), pages.shape)[::-1])
    for planes, flag, chosen in ((True, [], range(6)), (range(2, 5), ["2-4"], range(2, 5)), (3, ["3"], [3]),
                                 ("4-", ["4-"], range(4, 6))):
        got = client.analyze(path, stats="min_max,sum,stddev,positions", planes=planes)
        assert [p.index for p in got.planes] == list(chosen)
        for p in got.planes:
            assert p["Gray"].sum == int(pages[p.index].sum(dtype=np.int64))
            assert p["Gray"].min_position == tuple(int(v) for v in np.unravel_index(pages[p.index].argmin(), pages[0].shape)[::-1])
        assert got["Gray"].sum == int(pages[list(chosen)].sum(dtype=np.int64))
        want = cli("--stats", "min_max,sum,stddev,positions", "--planes", *flag, path)[0]
        assert comparable(got.to_dict()) == comparable(want), planes


def test_planes_past_the_last_or_of_one_plane_are_refused(client, stack):
    path, _ = stack
    with pytest.raises(imgstat.Error) as e:
        client.analyze(path, planes=6)
    assert e.value.code == "INVALID_ARGUMENT" and "has 6 planes" in str(e.value)
    with pytest.raises(imgstat.Error) as e:
        client.analyze(np.zeros((4, 4), np.uint8), planes=1)
    assert e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(imgstat.Error):
        client.analyze(path, planes=range(3, 1))
