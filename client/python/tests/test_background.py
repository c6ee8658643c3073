"""background=...: photutils' Background2D meshes of arrays and files, its
keywords and names, as the CLI's --background answers them."""
import warnings

import numpy as np
import pytest

import imgstat

photutils_background = pytest.importorskip("photutils.background")
SigmaClip = pytest.importorskip("astropy.stats").SigmaClip


@pytest.fixture(scope="module")
def client(server):
    with imgstat.Client(server.address) as c:
        yield c


def sky(shape, seed):
    rng = np.random.default_rng(seed)
    a = 500 + 4 * rng.standard_normal(shape) + np.linspace(0, 30, shape[1])[None, :]
    for _ in range(12):  # sources, clipped; some boxes left out
        y, x = rng.integers(0, shape[0]), rng.integers(0, shape[1])
        a[max(0, y - 6):y + 6, max(0, x - 6):x + 6] += 400
    a = a.astype(np.float32)
    a[rng.random(shape) < 0.02] = np.nan
    return a


@pytest.mark.parametrize("spec, theirs", [
    (48, {}),
    (dict(box_size=(30, 50), filter_size=(5, 3), bkg_estimator="median", exclude_percentile=30),
     dict(filter_size=(5, 3), bkg_estimator=photutils_background.MedianBackground(), exclude_percentile=30)),
    (dict(box_size=40, filter_size=1, sigma_clip=dict(sigma=2.5, maxiters=4), bkg_estimator="mean"),
     dict(filter_size=1, sigma_clip=SigmaClip(sigma=2.5, maxiters=4), bkg_estimator=photutils_background.MeanBackground())),
])
def test_meshes_of_an_array_as_photutils(client, spec, theirs):
    a = sky((211, 263), 7)
    r = client.analyze(a, stats="min_max", background=spec)
    (got,) = r.background
    box = spec if isinstance(spec, int) else spec["box_size"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        b = photutils_background.Background2D(a.astype(np.float64), box, **theirs)
    assert got["channel"] == "Gray"
    assert got["background_mesh"].shape == tuple(b.nboxes)
    excluded = np.ones(b.nboxes, bool)
    excluded[b._mesh_idx] = False
    assert (got["excluded"] == excluded).all()
    kept = ~excluded  # filled boxes: photutils' k-d tree breaks ties its own way (tests/background/check.py)
    if np.array_equal(np.atleast_1d(theirs.get("filter_size", 3)), [1]):
        np.testing.assert_allclose(got["background_mesh"][kept], b.background_mesh[kept], rtol=1e-12)
        np.testing.assert_allclose(got["background_rms_mesh"][kept], b.background_rms_mesh[kept], rtol=1e-12)
    elif not excluded.any():
        np.testing.assert_allclose(got["background_mesh"], b.background_mesh, rtol=1e-12)
        np.testing.assert_allclose(got["background_rms_mesh"], b.background_rms_mesh, rtol=1e-12)
    assert got["box_size"] == tuple(np.broadcast_to(box, 2))


def test_rgb_channels_named_and_as_the_cli(client, cli, tmp_path):
    rng = np.random.default_rng(3)
    rgb = np.clip(rng.normal((40, 120, 210), 9, (70, 90, 3)), 0, 255).astype(np.uint8)
    r = client.analyze(rgb, stats="min_max", background=dict(box_size=(14, 18)))
    assert [m["channel"] for m in r.background] == ["R", "G", "B"]
    for c, m in enumerate(r.background):
        assert abs(m["background_median"] - np.median(rgb[:, :, c])) < 10  # each channel its own sky
    import cv2
    png = tmp_path / "rgb.png"
    cv2.imwrite(str(png), rgb[:, :, ::-1])
    mine = client.analyze(str(png), stats="min_max", background=dict(box_size=(14, 18))).to_dict()["background"]
    want = cli("--stats", "min_max", "--background", "18x14", str(png))[0]["background"]
    assert mine == want


def test_background_refused_where_it_does_not_apply(client):
    a = sky((64, 64), 1)
    with pytest.raises(imgstat.Error) as e:
        client.analyze(a, background=dict(box_size=65))
    assert e.value.code == "INVALID_ARGUMENT" and "background boxes" in str(e.value)
    with pytest.raises(imgstat.Error) as e:
        client.analyze(a, background=dict(box_size=8, filter_size=2))
    assert e.value.code == "INVALID_ARGUMENT" and "odd" in str(e.value)
    with pytest.raises(imgstat.Error) as e:
        client.analyze(a, background=8, tiles=(2, 2))
    assert e.value.code == "UNIMPLEMENTED"
    with pytest.raises(imgstat.Error) as e:
        client.aggregate([a, a], background=8)
    assert e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(imgstat.Error):
        client.analyze(a, background=dict(box=8))
    assert client.analyze(a, stats="min_max").channels[0].count > 0  # still serving
