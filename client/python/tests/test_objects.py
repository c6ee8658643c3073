"""Inputs named by URL and file objects answer as the same files do: a
server allowed to fetch (--fetch-allow) reads http(s) objects itself, one
that may not has the package read them; an s3:// name without fsspec says
what to install; file objects (open files, BytesIO) are read as bytes."""
import functools
import http.server
import io
import os
import shutil
import threading

import pytest

import imgstat
from conftest import ROOT, Server, comparable, corpus_files


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """An HTTP server on loopback over a folder of images: (base URL, folder, names)."""
    folder = tmp_path_factory.mktemp("store")
    names = []
    for i, path in enumerate([os.path.join(ROOT, "samples", "sample.png")] + corpus_files(r"\.(jpe?g|png)$")[:5]):
        name = f"{i:02d}-{os.path.basename(path)}"
        shutil.copy(path, folder / name)
        names.append(name)
    seen = []  # (path, User-Agent) of each GET: who read what

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            seen.append((self.path, self.headers.get("User-Agent", "")))
            super().do_GET()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(folder)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/", folder, names, seen
    httpd.shutdown()


@pytest.fixture(scope="module")
def fetching(store):
    s = Server("--fetch-allow", store[0])
    yield s
    s.stop()


def answers(client, names, **options):
    """Each input's --json object less its name, or its error's code (the corpus has bad files)."""
    out = []
    for r in client.analyze_many(names, errors="return", **options):
        if isinstance(r, imgstat.Error):
            out.append(r.code)  # (the message may name the object)
        else:
            out.append({k: v for k, v in comparable(r.to_dict()).items() if k != "file"})
    return out


def test_urls_answer_as_their_files_whoever_reads_them(server, fetching, store):
    base, folder, names, seen = store
    files = [str(folder / n) for n in names]
    urls = [base + n for n in names]
    with imgstat.Client(server.address) as plain, imgstat.Client(fetching.address) as fetches:
        assert list(fetches.server_info().fetch_allow) == [base]
        assert list(plain.server_info().fetch_allow) == []
        want = answers(plain, files, stats="all")
        for client in (plain, fetches):
            seen.clear()
            got = answers(client, urls, stats="all")
            # Read by the package where the server may not fetch, by the server where it may.
            readers = {agent.startswith("imgstat-python") for _, agent in seen}
            assert readers == {client is plain}, seen
            assert got == want
            assert any(isinstance(w, dict) for w in want)
            one = client.analyze(urls[0], stats="all").to_dict()
            assert one["file"] == urls[0]
        agg_files = plain.aggregate(files, errors="skip")
        for client in (plain, fetches):
            agg = client.aggregate(urls, errors="skip")
            assert [comparable(r.to_dict())["channels"] for r in agg] == \
                   [comparable(r.to_dict())["channels"] for r in agg_files]


def test_url_errors_name_the_object(server, store):
    base = store[0]
    with imgstat.Client(server.address) as client:
        with pytest.raises(imgstat.Error) as e:
            client.analyze(base + "no-such-image.png")
        assert e.value.code == "NOT_FOUND" and e.value.input == base + "no-such-image.png"
        try:
            import fsspec  # noqa: F401
        except ImportError:
            with pytest.raises(imgstat.Error) as e:
                client.analyze("s3://bucket/key.png")
            assert e.value.code == "FAILED_PRECONDITION" and "--fetch-allow" in e.value.message


def test_file_objects_answer_as_their_files(server, store):
    _, folder, names, _ = store
    path = str(folder / names[0])
    with imgstat.Client(server.address) as client:
        want = comparable(client.analyze(path, stats="all").to_dict())
        with open(path, "rb") as f:
            got = client.analyze(f, stats="all").to_dict()
        assert got["file"] == path
        assert comparable(got) == want
        with open(path, "rb") as f:
            buffer = io.BytesIO(f.read())
        assert comparable(client.analyze(buffer, name="in-memory", stats="all").to_dict()) == want
        with open(path, "r", encoding="latin-1") as f:
            with pytest.raises(imgstat.Error) as e:
                client.analyze(f)
            assert "rb" in e.value.message
