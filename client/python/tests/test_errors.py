"""Failures raise imgstat.Error with the gRPC status name and the server's reason."""
import os
import socket

import numpy as np
import pytest

import imgstat
from conftest import ROOT, Server

SAMPLE = os.path.join(ROOT, "samples", "sample.png")


def test_bad_bytes_a_missing_file_and_bad_options(server):
    with imgstat.Client(server.address) as client:
        with pytest.raises(imgstat.Error) as e:
            client.analyze(b"\x89PNG\r\n\x1a\n not really a png")
        assert e.value.code == "INVALID_ARGUMENT" and e.value.message and e.value.input == "<bytes>"
        with pytest.raises(imgstat.Error) as e:
            client.analyze(os.path.join(ROOT, "no-such-file.png"))
        assert e.value.code == "NOT_FOUND"
        with pytest.raises(imgstat.Error) as e:
            client.analyze(SAMPLE, bins=0x20000)
        assert e.value.code == "INVALID_ARGUMENT"
        with pytest.raises(imgstat.Error) as e:
            client.analyze(SAMPLE, roi=(0, 0, 100000, 1))
        assert e.value.code == "INVALID_ARGUMENT"
        with pytest.raises(imgstat.Error) as e:
            client.analyze(np.zeros((3, 3, 7), np.uint8))
        assert e.value.code == "INVALID_ARGUMENT"
        with pytest.raises(TypeError):
            client.analyze(SAMPLE, binz=3)
        for x in (ROOT, {"not": "an image"}, [[1, 2], [3]]):
            with pytest.raises(imgstat.Error) as e:
                client.analyze(x)
            assert e.value.code == "INVALID_ARGUMENT", x
        out = list(client.analyze_many([ROOT, SAMPLE], errors="return"))
        assert isinstance(out[0], imgstat.Error) and out[0].code == "INVALID_ARGUMENT" and out[1].width > 0
        # The server keeps serving, and many inputs carry their own errors.
        out = list(client.analyze_many([SAMPLE, b"junk", SAMPLE], errors="return"))
        assert isinstance(out[1], imgstat.Error) and out[1].code == "INVALID_ARGUMENT"
        assert out[0].to_dict()["channels"] == out[2].to_dict()["channels"]
        with pytest.raises(imgstat.Error):
            list(client.analyze_many([SAMPLE, b"junk"]))


def test_a_server_that_is_down_is_unavailable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with imgstat.Client(f"127.0.0.1:{port}", timeout=3) as client:
        with pytest.raises(imgstat.Error) as e:
            client.analyze(SAMPLE)
        assert e.value.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED")


def test_a_wrong_or_missing_token_is_unauthenticated(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret-token-of-alice alice\n")
    guarded = Server("--auth-token-file", str(tokens))
    try:
        with imgstat.Client(guarded.address, token="wrong") as client:
            with pytest.raises(imgstat.Error) as e:
                client.analyze(SAMPLE)
            assert e.value.code == "UNAUTHENTICATED"
        with imgstat.Client(guarded.address, token="") as client:
            with pytest.raises(imgstat.Error) as e:
                client.analyze(SAMPLE)
            assert e.value.code == "UNAUTHENTICATED"
        with imgstat.Client(guarded.address, token="s3cret-token-of-alice") as client:
            assert client.analyze(SAMPLE).width > 0
            assert [r.width for r in client.analyze_many([SAMPLE] * 5)] == [client.analyze(SAMPLE).width] * 5
        os.environ["IMGSTAT_TOKEN"] = "s3cret-token-of-alice\n"
        try:
            with imgstat.Client(guarded.address) as client:
                assert client.analyze(SAMPLE).width > 0
        finally:
            del os.environ["IMGSTAT_TOKEN"]
    finally:
        guarded.stop()


def test_a_token_limited_to_analyze_still_gets_analyze_many_answered(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("only-analyze-token-of-bob bob Analyze,GetServerInfo\n")
    guarded = Server("--auth-token-file", str(tokens), regions=False)
    try:
        with imgstat.Client(guarded.address, token="only-analyze-token-of-bob") as client:
            results = list(client.analyze_many([SAMPLE] * 20))
            assert len(results) == 20 and all(r.width == results[0].width for r in results)
            # A list merged on the server is refused this token: a call a file, the same answer.
            merged = client.aggregate([SAMPLE] * 20)
            assert [c.count for c in merged[0].channels] == [20 * results[0].width * results[0].height] * \
                len(results[0].channels)
        assert guarded.metric("imgstat_images_total", method="Analyze") >= 40
        assert guarded.metric("imgstat_requests_total", method="Aggregate", code="PERMISSION_DENIED") == 1
    finally:
        guarded.stop()
