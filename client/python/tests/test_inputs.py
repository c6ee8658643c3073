"""Every kind of input answers what the CLI answers for the same pixels:
Result.to_dict() equals the CLI's --json object, timings aside."""
import io
import os

import numpy as np
import pytest

import imgstat
from conftest import ROOT, comparable, corpus_files

SAMPLE = os.path.join(ROOT, "samples", "sample.png")
MASK = os.path.join(ROOT, "samples", "sample-mask.png")
LABELS = os.path.join(ROOT, "samples", "sample-labels.png")


@pytest.fixture(scope="module")
def client(server):
    with imgstat.Client(server.address) as c:
        yield c


def test_a_path_and_its_bytes_answer_as_the_cli(client, cli, tmp_path):
    files = [SAMPLE] + [f for f in corpus_files(r"\.(jpe?g|tiff?|bmp|webp)$")][:12]
    for path in files:
        want = cli(path)[0]
        if not want["ok"]:
            with pytest.raises(imgstat.Error) as e:
                client.analyze(path)
            assert e.value.code == want["code"]
            continue
        got = client.analyze(path).to_dict()
        assert got["file"] == path
        assert comparable(got) == comparable(want), path
        with open(path, "rb") as f:
            assert comparable(client.analyze(f.read()).to_dict()) == comparable(want), path


def test_every_statistic_and_option_answers_as_the_cli(client, cli):
    cases = [
        (dict(stats="all", percentiles=[1, 50, 99.5]), ["--stats", "all", "--percentiles", "1,50,99.5"]),
        (dict(stats=["min_max", "histogram"], bins=17, range=(10, 200)),
         ["--stats", "min_max,histogram", "--bins", "17", "--range", "10:200"]),
        (dict(colour_space="hsv", joint="H,S:30,32"), ["--colour-space", "hsv", "--joint", "H,S:30,32"]),
        (dict(roi=[(0, 0, 10, 10), (5, 7, 3, 2)]), ["--roi", "0,0,10,10", "--roi", "5,7,3,2"]),
        (dict(tiles="3x2"), ["--tiles", "3x2"]),
        (dict(mask=MASK), ["--mask", MASK]),
        (dict(labels=LABELS, ignore_label=0), ["--labels", LABELS, "--ignore-label", "0"]),
        (dict(decoder="cpu", stats="positions,unique_colors,luminance"),
         ["--decoder", "cpu", "--stats", "positions,unique_colors,luminance"]),
    ]
    for options, args in cases:
        want = cli(*args, SAMPLE)[0]
        assert want["ok"], (args, want)
        assert comparable(client.analyze(SAMPLE, **options).to_dict()) == comparable(want), args


def test_arrays_and_pil_images_answer_as_the_cli_does_for_the_same_raw_bytes(client, cli, tmp_path):
    rng = np.random.default_rng(7)
    cases = [
        rng.integers(0, 256, (37, 53, 3), dtype=np.uint8),
        rng.integers(0, 65536, (64, 31), dtype=np.uint16),
        rng.integers(-128, 128, (5, 7, 2), dtype=np.int8),
        rng.integers(-32768, 32768, (11, 13, 4), dtype=np.int16),
        rng.normal(0, 1e3, (17, 19, 3)).astype(np.float32),
        rng.normal(5, 1, (1, 1)).astype(np.float64),
        rng.integers(0, 256, (700, 800, 3), dtype=np.uint8),  # 1.6 MB: a region on this host
    ]
    names = {np.uint8: "uint8", np.uint16: "uint16", np.int8: "int8", np.int16: "int16", np.float32: "float32",
             np.float64: "float64"}
    for a in cases:
        path = tmp_path / "frame.raw"
        path.write_bytes(a.tobytes())
        c = a.shape[2] if a.ndim == 3 else 1
        spec = f"{a.shape[1]}x{a.shape[0]}x{c}:{names[a.dtype.type]}"
        want = cli("--raw", spec, "--stats", "all", str(path))[0]
        assert want["ok"], want
        assert comparable(client.analyze(a, stats="all").to_dict()) == comparable(want), spec
        raw = client.analyze(str(path), raw=(a.shape[1], a.shape[0], c, names[a.dtype.type]), stats="all")
        assert comparable(raw.to_dict()) == comparable(want), spec
    from PIL import Image
    image = Image.open(SAMPLE)
    a = np.asarray(image.convert("RGB"))
    path = tmp_path / "sample.raw"
    path.write_bytes(a.tobytes())
    want = cli("--raw", f"{a.shape[1]}x{a.shape[0]}x3:uint8", str(path))[0]
    assert comparable(client.analyze(image.convert("RGB")).to_dict()) == comparable(want)


def test_masks_and_labels_as_arrays_answer_as_their_files(client, cli):
    from PIL import Image
    mask = np.asarray(Image.open(MASK))
    labels = np.asarray(Image.open(LABELS))
    want = cli("--mask", MASK, SAMPLE)[0]
    assert comparable(client.analyze(SAMPLE, mask=mask).to_dict()) == comparable(want)
    assert comparable(client.analyze(SAMPLE, mask=mask.astype(bool)).to_dict()) == comparable(want)
    want = cli("--labels", LABELS, SAMPLE)[0]
    assert comparable(client.analyze(SAMPLE, labels=labels).to_dict()) == comparable(want)
    assert comparable(client.analyze(SAMPLE, labels=labels.astype(np.int32)).to_dict()) == comparable(want)


def test_result_attributes_are_the_answer(client):
    r = client.analyze(SAMPLE, stats="all")
    d = r.to_dict()
    assert (r.width, r.height, r.channel_count, r.sample_type) == (d["width"], d["height"], d["channel_count"], "uint8")
    for c, dc in zip(r.channels, d["channels"]):
        assert (c.name, c.count, c.min, c.max, c.sum, c.mean) == (dc["name"], dc["count"], dc["min"], dc["max"],
                                                                 dc["sum"], dc["mean"])
        assert isinstance(c.sum, int) and isinstance(c.min, int)
        assert c.histogram.dtype == np.uint64 and list(c.histogram) == dc["histogram"]["counts"]
        assert len(c.histogram_edges) == len(c.histogram) + 1
        assert c.median == dc["median"] and c.percentiles == {p["p"]: p["value"] for p in dc["percentiles"]}
    assert r["R"].name == "R"
    assert r.facts["bit_depth"] == 8


def test_big_inputs_stream_to_a_remote_server_and_go_by_region_here(server, cli, tmp_path):
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (2000, 3001, 1), dtype=np.uint8)  # 6 MB: past one 4 MiB message
    path = tmp_path / "big.raw"
    path.write_bytes(a.tobytes())
    want = comparable(cli("--raw", "3001x2000x1:uint8", str(path))[0])
    with imgstat.Client(server.address, shm=False) as remote:
        before = server.metric("imgstat_requests_total", method="AnalyzeStream")
        assert comparable(remote.analyze(a).to_dict()) == want
        assert comparable(remote.analyze(a.tobytes(), raw=(3001, 2000, 1, "uint8")).to_dict()) == want
        assert comparable(remote.analyze(str(path), raw=(3001, 2000, 1, "uint8")).to_dict()) == want
        assert server.metric("imgstat_requests_total", method="AnalyzeStream") - before == 3


def test_masks_and_labels_past_the_message_limit_by_region_here_and_streamed_to_a_remote_server(server, client, cli,
                                                                                                 tmp_path):
    rng = np.random.default_rng(5)
    h, w = 6000, 6000
    image = rng.integers(0, 256, (h, w), dtype=np.uint8)
    labels = ((np.arange(h)[:, None] // 700) * 9 + np.arange(w)[None, :] // 700).astype(np.uint16)  # 72 MB
    mask = (rng.random((h, w)) < 0.3).view(np.uint8)
    image_file, labels_file, mask_file = (tmp_path / n for n in ("image.raw", "labels.raw", "mask.raw"))
    image.tofile(image_file)
    labels.tofile(labels_file)
    mask.tofile(mask_file)
    want_labels = comparable(cli("--raw", f"{w}x{h}x1:uint8", str(image_file), "--labels", str(labels_file),
                                 "--map-raw", f"{w}x{h}x1:uint16")[0])
    want_mask = comparable(cli("--raw", f"{w}x{h}x1:uint8", str(image_file), "--mask", str(mask_file),
                               "--map-raw", f"{w}x{h}x1:uint8")[0])
    counts = np.bincount(labels.reshape(-1))
    assert [p["label"] for p in want_labels["parts"]] == np.nonzero(counts)[0].tolist()
    assert want_mask["channels"][0]["count"] == int(mask.sum())
    before = server.metric("imgstat_requests_total", method="AnalyzeStream")
    with imgstat.Client(server.address, shm=False) as remote:
        for c in (client, remote):
            assert comparable(c.analyze(image, labels=labels).to_dict()) == want_labels
            assert comparable(c.analyze(image, mask=mask).to_dict()) == want_mask
            assert comparable(c.analyze(image, mask=mask.astype(bool)).to_dict()) == want_mask
    # Over the socket the maps follow their images in streams; here they go by region.
    assert server.metric("imgstat_requests_total", method="AnalyzeStream") - before == 3


def test_float_images_answer_as_the_cli_to_the_last_bit(server, client, cli, tmp_path):
    """Floats' moments are rounded sums: the package and the CLI must give
    the same bits whatever path each takes (a region, one message, a stream,
    a decoder's bands), so every float compares with ==."""
    files = corpus_files(r"\.(tiff?|exr|hdr|pfm)$")
    assert any(f.endswith((".tif", ".tiff")) for f in files)
    for path in files:
        want = cli("--stats", "all", path)[0]
        if not want["ok"] or not want["sample_type"].startswith("float"):
            continue
        assert comparable(client.analyze(path, stats="all").to_dict()) == comparable(want), path
        with open(path, "rb") as f:
            assert comparable(client.analyze(f.read(), stats="all").to_dict()) == comparable(want), path
    rng = np.random.default_rng(11)
    for a, spec in ((rng.normal(3, 2, (1100, 1500, 3)).astype(np.float32), "1500x1100x3:float32"),  # 19.8 MB
                    (rng.lognormal(0, 3, (900, 1000)), "1000x900x1:float64"),                      # 7.2 MB
                    (rng.normal(0, 1e3, (17, 19, 3)).astype(np.float32), "19x17x3:float32")):
        path = tmp_path / "frame.raw"
        path.write_bytes(a.tobytes())
        for args in ([], ["--no-shm"]):
            want = comparable(cli(*args, "--raw", spec, "--stats", "all", str(path))[0])
            with imgstat.Client(server.address, shm=not args) as c:
                assert comparable(c.analyze(a, stats="all").to_dict()) == want, (spec, args)
                w, h, ch, t = spec.replace(":", "x").split("x")
                raw = c.analyze(str(path), raw=(int(w), int(h), int(ch), t), stats="all")
                assert comparable(raw.to_dict()) == want, (spec, args)
