"""analyze_many in input order, as analyze answers each; aggregate as the
CLI's --aggregate (integers equal, floats within 1e-12 relative)."""
import math
import os

import numpy as np
import pytest

import imgstat
from conftest import ROOT, comparable, corpus_files

SAMPLE = os.path.join(ROOT, "samples", "sample.png")


@pytest.fixture(scope="module")
def client(server):
    with imgstat.Client(server.address) as c:
        yield c


def test_many_inputs_of_every_kind_come_back_in_order(client, server):
    rng = np.random.default_rng(1)
    arrays = [rng.integers(0, 256, (h, h + 1, 3), dtype=np.uint8) for h in range(1, 40)]
    files = corpus_files(r"\.(png|jpe?g)$")[:60] or [SAMPLE]
    inputs = []
    for i in range(max(len(arrays), len(files))):
        inputs.append(arrays[i % len(arrays)])
        inputs.append(files[i % len(files)])
    inputs.append(rng.integers(0, 256, (1200, 1000), dtype=np.uint8))  # a region among them
    calls_before = server.metric("imgstat_images_total", method="Analyze")
    many = list(client.analyze_many(inputs, jobs=8, errors="return"))
    assert len(many) == len(inputs)
    for x, got in zip(inputs, many):
        try:
            want = client.analyze(x)
        except imgstat.Error as e:
            assert isinstance(got, imgstat.Error) and got.code == e.code
            continue
        assert comparable(got.to_dict()) == comparable(want.to_dict())
    assert server.metric("imgstat_images_total", method="Analyze") - calls_before >= 2 * len(inputs)
    with imgstat.Client(server.address, shm=False) as remote:  # every input over the socket
        again = list(remote.analyze_many(inputs[:20] + inputs[-1:], errors="return"))
    for a, b in zip(again, many[:20] + many[-1:]):
        assert (comparable(a.to_dict()) == comparable(b.to_dict()) if not isinstance(b, imgstat.Error)
                else isinstance(a, imgstat.Error) and a.code == b.code)


def close_dicts(got, want, where=""):
    if isinstance(want, dict):
        assert set(got) == set(want), where
        for k in want:
            close_dicts(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            close_dicts(g, w, f"{where}[{i}]")
    elif isinstance(want, float) or isinstance(got, float):
        assert math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-300), f"{where}: {got} != {want}"
    else:
        assert got == want, where


def test_aggregate_answers_as_the_cli(client, cli, tmp_path):
    rng = np.random.default_rng(4)
    paths = []
    for i, (dtype, shape) in enumerate([(np.uint8, (30, 40, 3)), (np.uint8, (17, 5, 3)), (np.uint16, (9, 8)),
                                        (np.uint16, (33, 21)), (np.float32, (12, 12, 2)), (np.float32, (5, 50, 2)),
                                        (np.int16, (6, 7))]):
        a = rng.integers(0, 256, shape).astype(dtype) if dtype == np.uint8 else \
            rng.integers(0, 65536, shape).astype(dtype) if dtype == np.uint16 else \
            rng.integers(-32768, 32768, shape).astype(dtype) if dtype == np.int16 else \
            rng.normal(3, 2, shape).astype(dtype)
        paths.append(a)
    files = corpus_files(r"\.png$")[:40] or [SAMPLE]
    for options, args in [({}, []), (dict(stats="all", bins=64), ["--stats", "all", "--bins", "64"]),
                          (dict(range=(0, 1000), bins=10), ["--range", "0:1000", "--bins", "10"])]:
        want = cli("--aggregate", *args, *files)
        got = [r.to_dict() for r in client.aggregate(files, errors="skip", **options)]
        close_dicts(got, want)
    # Arrays of four kinds: each kind merged apart, against numpy.
    results = client.aggregate(paths, stats="min_max,sum,stddev,histogram")
    kinds = [(r.sample_type, r.channel_count, r.images) for r in results]
    assert kinds == [("uint8", 3, 2), ("uint16", 1, 2), ("float32", 2, 2), ("int16", 1, 1)]
    u8 = np.concatenate([paths[0].reshape(-1, 3), paths[1].reshape(-1, 3)]).astype(np.int64)
    for k, c in enumerate(results[0].channels):
        assert (c.count, c.min, c.max, c.sum) == (u8.shape[0], u8[:, k].min(), u8[:, k].max(), int(u8[:, k].sum()))
        assert list(c.histogram) == list(np.bincount(u8[:, k], minlength=256))
        assert math.isclose(c.stddev, float(np.std(u8[:, k].astype(np.float64))), rel_tol=1e-12)
    f = np.concatenate([paths[4].reshape(-1, 2), paths[5].reshape(-1, 2)]).astype(np.float64)
    for k, c in enumerate(results[2].channels):
        assert math.isclose(c.mean, float(f[:, k].mean()), rel_tol=1e-12)
        assert math.isclose(c.stddev, float(f[:, k].std()), rel_tol=1e-9)


def test_aggregate_by_label_answers_as_the_cli(client, cli, tmp_path):
    from PIL import Image
    rng = np.random.default_rng(8)
    images, labels = tmp_path / "images", tmp_path / "labels"
    images.mkdir()
    labels.mkdir()
    for i in range(6):
        h, w = rng.integers(5, 40, 2)
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(images / f"f{i}.png")
        Image.fromarray(rng.integers(0, 5, (h, w), dtype=np.uint8)).save(labels / f"f{i}.png")
    files = sorted(str(p) for p in images.iterdir())
    want = cli("--aggregate", "--labels", str(labels), "--ignore-label", "0", *files)
    got = [r.to_dict() for r in client.aggregate(files, labels=str(labels), ignore_label=0)]
    close_dicts(got, want)
    label_arrays = [np.asarray(Image.open(labels / os.path.basename(f))) for f in files]
    again = [r.to_dict() for r in client.aggregate(files, labels=label_arrays, ignore_label=0)]
    close_dicts(again, want)
