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


def test_shards_by_url_answer_as_the_same_shards_on_disk(server, fetching, store):
    """A tar (streamed as it comes) and a zip at an http:// URL, and a brace
    range of them, answer as the same shards on disk, member by member and
    aggregated; read by the package even where the server may fetch (a
    member is no object of its own); a missing shard is NOT_FOUND."""
    import tarfile
    import zipfile
    base, folder, names, seen = store
    tar_path, zip_path = str(folder / "shard-0.tar"), str(folder / "shard-1.zip")
    with tarfile.open(tar_path, "w") as t:
        for n in names[::2]:
            t.add(str(folder / n), n)
        info = tarfile.TarInfo("000000.json")
        info.size = 2
        t.addfile(info, io.BytesIO(b"{}"))
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as z:
        for n in names[1::2]:
            z.write(str(folder / n), n)
    tar_gz = str(folder / "shard-2.tar.gz")
    with tarfile.open(tar_gz, "w:gz") as t:
        for n in names:
            t.add(str(folder / n), n)
    local = [tar_path, zip_path, tar_gz]
    urls = [base + os.path.basename(p) for p in local]

    def by_member(client, inputs):
        out = {}
        for r in client.analyze_many(inputs, errors="return", stats="all"):
            if isinstance(r, imgstat.Error):
                out[r.input.rsplit("/", 1)[-1]] = r.code
            else:
                d = r.to_dict()
                out[d["file"].rsplit("/", 1)[-1]] = comparable(d)
        return out

    with imgstat.Client(server.address) as plain, imgstat.Client(fetching.address) as fetches:
        with pytest.warns(UserWarning, match="left out"):
            want = by_member(plain, local)
        assert len(want) == 2 * len(names)
        assert any(isinstance(v, dict) for v in want.values())
        for client in (plain, fetches):
            seen.clear()
            with pytest.warns(UserWarning, match="left out"):
                assert by_member(client, urls) == want
            assert {p for p, _ in seen} == {"/" + os.path.basename(p) for p in local}  # each shard read once, here
            assert all(agent.startswith("imgstat-python") for _, agent in seen)
        with pytest.warns(UserWarning, match="left out"):
            braced = by_member(plain, [base + "shard-{0..0}.tar"])
        assert braced == {k: v for k, v in want.items() if k.startswith("shard-0.tar:")}
        a = plain.aggregate(urls[1:], errors="skip")
        b = plain.aggregate(local[1:], errors="skip")
        assert [comparable(r.to_dict())["channels"] for r in a] == [comparable(r.to_dict())["channels"] for r in b]
        got = list(plain.analyze_many([base + "shard-9.tar"], errors="return"))
        assert len(got) == 1 and isinstance(got[0], imgstat.Error) and got[0].code == "NOT_FOUND"


class _FakeS3(http.server.BaseHTTPRequestHandler):
    """Path-style S3 over a folder: GET /bucket/key, and ListObjectsV2 in
    pages of two keys (signatures not checked: the real store's are, in
    tests/objects)."""
    folder = None

    def log_message(self, *args):
        pass

    def do_GET(self):
        import urllib.parse
        from xml.sax.saxutils import escape
        path, _, query = self.path.partition("?")
        bucket, _, key = urllib.parse.unquote(path[1:]).partition("/")
        q = urllib.parse.parse_qs(query)
        if "list-type" in q:
            prefix = q.get("prefix", [""])[0]
            keys = sorted(os.path.relpath(os.path.join(d, f), self.folder).replace(os.sep, "/")
                          for d, _, files in os.walk(self.folder) for f in files)
            keys = [k for k in keys if k.startswith(prefix)]
            start = int(q.get("continuation-token", ["0"])[0])
            page = keys[start:start + 2]
            more = start + 2 < len(keys)
            body = ("<ListBucketResult>" + "".join(
                f"<Contents><Key>{escape(k)}</Key><Size>{os.path.getsize(os.path.join(self.folder, k))}</Size></Contents>"
                for k in page) + f"<IsTruncated>{'true' if more else 'false'}</IsTruncated>" +
                (f"<NextContinuationToken>{start + 2}</NextContinuationToken>" if more else "") +
                "</ListBucketResult>").encode()
        else:
            try:
                with open(os.path.join(self.folder, key), "rb") as f:
                    body = f.read()
            except OSError:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_s3_prefixes_and_patterns_listed_by_a_server_that_may_fetch_them(server, store, monkeypatch):
    """A server whose --fetch-allow covers a prefix lists it (ListObjects) and
    reads its objects: the package names prefixes and patterns as the CLI
    does, with neither credentials nor s3fs, and gets the files' answers;
    what is no image is said left out; a prefix no server may list is an
    Error saying what to do."""
    _, folder, names, _ = store
    handler = type("Handler", (_FakeS3,), {"folder": str(folder)})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    with open(folder / "notes.txt", "w") as f:
        f.write("no image\n")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{httpd.server_address[1]}")
    fetching = Server("--fetch-allow", "s3://bucket/")
    try:
        with imgstat.Client(server.address) as plain, imgstat.Client(fetching.address) as fetches:
            files = [str(folder / n) for n in names]
            want = {n: a for n, a in zip(names, answers(plain, files, stats="all"))}
            with pytest.warns(UserWarning, match=r"\d+ objects left out, not images"):
                got = [r.to_dict()["file"] for r in fetches.analyze_many(["s3://bucket/"], errors="return")
                       if not isinstance(r, imgstat.Error)]
            assert sorted(got) == sorted("s3://bucket/" + n for n in names if not isinstance(want[n], str))
            pngs = sorted(n for n in names if n.endswith(".png"))
            assert answers(fetches, ["s3://bucket/*.png"], stats="all") == [want[n] for n in pngs]
            agg = fetches.aggregate(["s3://bucket/*.png"], errors="skip")
            agg_files = plain.aggregate([str(folder / n) for n in pngs], errors="skip")
            assert [comparable(r.to_dict())["channels"] for r in agg] == \
                   [comparable(r.to_dict())["channels"] for r in agg_files]
            missing = list(fetches.analyze_many(["s3://bucket/no-such/"], errors="return"))
            assert len(missing) == 1 and missing[0].code == "NOT_FOUND"
            try:
                import s3fs  # noqa: F401
            except ImportError:
                refused = list(plain.analyze_many(["s3://bucket/"], errors="return"))
                assert len(refused) == 1 and refused[0].code == "FAILED_PRECONDITION"
                assert "--fetch-allow" in refused[0].message
    finally:
        fetching.stop()
        httpd.shutdown()
        os.remove(folder / "notes.txt")
