"""stats="quality": sharpness, contrast, colourfulness, exposure and
cleanvision's issues of arrays and files, as OpenCV and numpy compute them
and as the CLI's --json answers them."""
import math

import numpy as np
import pytest

import imgstat

from conftest import corpus_files

cv2 = pytest.importorskip("cv2")


@pytest.fixture(scope="module")
def client(server):
    with imgstat.Client(server.address) as c:
        yield c


def test_quality_of_arrays_as_opencv_and_numpy(client):
    rng = np.random.default_rng(14)
    for shape, dtype in (((61, 97, 3), np.uint8), ((40, 33), np.uint8), ((29, 31, 3), np.uint16)):
        top = np.iinfo(dtype).max
        a = rng.integers(0, top + 1, shape, dtype=dtype)
        a[0, :3] = 0
        a[-1, -2:] = top
        q = client.analyze(a, stats="quality").quality
        grey = cv2.cvtColor(a, cv2.COLOR_RGB2GRAY) if a.ndim == 3 else a
        assert math.isclose(q["laplacian_variance"], float(cv2.Laplacian(grey, cv2.CV_64F).var()), rel_tol=1e-12)
        assert math.isclose(q["rms_contrast"], float(grey.astype(np.float64).std() / top), rel_tol=1e-12)
        planes = [a[..., i] for i in range(a.shape[2])] if a.ndim == 3 else [a]
        assert q["share_at_min"] == [float(np.mean(p == 0)) for p in planes]
        assert q["share_at_max"] == [float(np.mean(p == top)) for p in planes]
        if a.ndim == 3:
            r, g, b = (a[..., i].astype(np.int64) for i in range(3))
            rg, yb = r - g, 0.5 * (r + g) - b
            want = np.sqrt(rg.var() + yb.var()) + 0.3 * np.sqrt(rg.mean() ** 2 + yb.mean() ** 2)
            assert math.isclose(q["colourfulness"], float(want), rel_tol=1e-12)
        else:
            assert "colourfulness" not in q
        assert ("cleanvision" in q) == (dtype == np.uint8)
        if dtype == np.uint8:
            assert q["cleanvision"]["is_grayscale_issue"] == (a.ndim == 2)
            assert math.isclose(q["cleanvision"]["aspect_ratio"], min(shape[0] / shape[1], shape[1] / shape[0]))


def test_quality_of_files_answers_as_the_cli(client, cli):
    files = corpus_files(r"\.(png|jpg)$")[:12]
    want = {d["file"]: d for d in cli("--stats", "quality", *files)}
    for f in files:
        if not want[f]["ok"]:
            continue
        got = client.analyze(f, stats="quality")
        assert got.to_dict()["quality"] == want[f]["quality"], f
        assert got.quality == want[f]["quality"]


def test_quality_of_floats_is_refused_clearly(client):
    with pytest.raises(imgstat.Error) as e:
        client.analyze(np.zeros((5, 7), np.float32), stats="quality")
    assert e.value.code == "UNIMPLEMENTED" and "8- and 16-bit" in str(e.value)


def test_dataset_verdicts_as_the_cli(client, cli, tmp_path):
    """imgstat.dataset_quality over per-image results: the CLI's
    --aggregate --stats quality dataset_quality line, field for field."""
    import cv2
    files = corpus_files(r"\.(png|jpg)$")[:40]
    dark = tmp_path / "dark.png"
    cv2.imwrite(str(dark), np.full((40, 300, 3), 5, np.uint8))  # dark, and of an odd aspect ratio
    files.append(str(dark))
    results = [r for r in client.analyze_many(files, stats="min_max,quality", errors="return")
               if not isinstance(r, imgstat.Error)]
    mine = imgstat.dataset_quality(results)
    lines = cli("--aggregate", "--stats", "min_max,quality", *files)
    want = [line["dataset_quality"] for line in lines if "dataset_quality" in line][0]
    assert mine == want
    assert mine["issues"]["dark"] >= 1 and str(dark) in mine["flagged"]["dark"]
