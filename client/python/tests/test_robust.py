"""stats="robust": astropy's sigma_clipped_stats of 8- and 16-bit images,
per call and merged by aggregate() as the CLI's --aggregate merges them."""
import math

import numpy as np
import pytest

import imgstat

from conftest import corpus_files


@pytest.fixture(scope="module")
def client(server):
    with imgstat.Client(server.address) as c:
        yield c


def clipped(x, sigma=3, maxiters=5, cenfunc="median", stdfunc="std"):
    """sigma_clipped_stats' kept samples, in numpy (astropy's own loop)."""
    kept = x.astype(np.float64)
    for _ in range(maxiters if maxiters is not None else 1 << 30):
        centre = np.mean(kept) if cenfunc == "mean" else np.median(kept)
        if stdfunc == "mad_std":
            spread = np.median(np.abs(kept - np.median(kept))) * 1.482602218505602
        else:
            spread = np.std(kept)
        nxt = kept[(kept >= centre - sigma * spread) & (kept <= centre + sigma * spread)]
        if nxt.size == kept.size:
            break
        kept = nxt
    return kept


@pytest.mark.parametrize("clip", [None, dict(sigma=2, maxiters=None), dict(sigma=2.5, cenfunc="mean", stdfunc="mad_std", maxiters=8)])
def test_robust_statistics_of_arrays_as_numpy(client, clip):
    rng = np.random.default_rng(53)
    for dtype, lo, hi in ((np.uint8, 0, 255), (np.uint16, 0, 65535), (np.int16, -32768, 32767)):
        a = np.clip(rng.normal((lo + hi) / 2, (hi - lo) / 50, (83, 59)), lo, hi).astype(dtype)
        a[rng.random(a.shape) < 0.03] = hi
        a[rng.random(a.shape) < 0.01] = lo
        r = client.analyze(a, stats="robust", **({} if clip is None else {"sigma_clip": clip}))
        got = r.channels[0].robust
        kept = clipped(a, **(clip or {}))
        assert got["count"] == kept.size
        assert got["median"] == float(np.median(kept))
        assert math.isclose(got["mean"], float(np.mean(kept)), rel_tol=1e-12)
        assert math.isclose(got["stddev"], float(np.std(kept)), rel_tol=1e-12)
        x = a.astype(np.float64).ravel()
        assert got["mad"] == float(np.median(np.abs(x - np.median(x))))
        assert got["clipped_low"] + got["clipped_high"] + got["count"] == a.size
        assert r.to_dict()["channels"][0]["robust"] == got


def test_robust_aggregate_answers_as_the_cli_to_the_bit(client, cli):
    files = corpus_files(r"\.png$")[:30]
    for options, args in [(dict(stats="robust"), ["--stats", "robust"]),
                          (dict(stats="min_max,robust", sigma_clip=dict(sigma=2, maxiters=None)),
                           ["--stats", "min_max,robust", "--sigma", "2", "--maxiters", "-1"])]:
        want = cli("--aggregate", *args, *files)
        got = [r.to_dict() for r in client.aggregate(files, errors="skip", **options)]
        robust = [(c["name"], c.get("robust")) for g in got for c in g["channels"]]
        assert robust == [(c["name"], c.get("robust")) for w in want for c in w["channels"]]
        assert any(q for _, q in robust)


def test_robust_statistics_of_float_arrays_leave_nan_out(client):
    rng = np.random.default_rng(13)
    a = rng.normal(50, 2, (41, 37)).astype(np.float32)
    a[rng.random(a.shape) < 0.04] = 900
    a[rng.random(a.shape) < 0.02] = np.nan
    a[0, 0] = -np.inf
    got = client.analyze(a, stats="robust").channels[0].robust
    x = a[np.isfinite(a)].astype(np.float64)
    kept = clipped(x)
    assert got["count"] == kept.size and got["clipped_high"] > 0
    assert got["median"] == float(np.median(kept))
    assert math.isclose(got["mean"], float(np.mean(kept)), rel_tol=1e-12)
    assert math.isclose(got["stddev"], float(np.std(kept)), rel_tol=1e-12)
    assert got["mad"] == float(np.median(np.abs(x - np.median(x))))


def test_robust_statistics_refused_clearly(client):
    with pytest.raises(imgstat.Error) as e:
        client.aggregate([np.zeros((4, 4), np.float32) + 1] * 2, stats="robust")
    assert e.value.code == "UNIMPLEMENTED" and "float" in str(e.value)
    for bad in (dict(sigma=-1), dict(maxiters=0), dict(cenfunc="mode"), dict(sigmas=3)):
        with pytest.raises(imgstat.Error) as e:
            client.analyze(np.zeros((4, 4), np.uint8), stats="robust", sigma_clip=bad)
        assert e.value.code == "INVALID_ARGUMENT"
