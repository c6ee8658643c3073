"""Archives in analyze_many and aggregate: each image member an input named
ARCHIVE:MEMBER, answered as the CLI answers the same archive and as the
files unpacked; brace ranges; members left out said; damaged archives and
members answered by status, the pass going on."""
import io
import os
import tarfile
import warnings
import zipfile

import pytest

import imgstat
from conftest import comparable, corpus_files
from test_many import close_dicts


@pytest.fixture(scope="module")
def client(server):
    with imgstat.Client(server.address) as c:
        yield c


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """(folder, [image names]): corpus images under WebDataset keys, a .json beside each."""
    folder = tmp_path_factory.mktemp("unpacked")
    names = []
    for k, src in enumerate(corpus_files()[::9][:24]):
        name = f"{k:06d}{os.path.splitext(src)[1].lower()}"
        (folder / name).write_bytes(open(src, "rb").read())
        (folder / f"{k:06d}.json").write_text('{"k": %d}' % k)
        names.append(name)
    return folder, names


def answered(client, folder, names):
    """The names whose files are answered (the corpus holds damaged files too)."""
    got = client.analyze_many([str(folder / n) for n in names], errors="return")
    return [n for n, r in zip(names, got) if not isinstance(r, imgstat.Error)]


def write(path, folder, names, mode):
    if str(path).endswith(".zip"):
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
            for n in names:
                z.write(folder / n, arcname=n)
    else:
        with tarfile.open(path, mode) as t:
            for n in names:
                t.add(folder / n, arcname=n)
    return str(path)


@pytest.mark.parametrize("suffix,mode", [(".tar", "w"), (".tar.gz", "w:gz"), (".tar.xz", "w:xz"), (".zip", None)])
def test_members_answer_as_their_files_and_as_the_cli(client, cli, dataset, tmp_path, suffix, mode):
    folder, names = dataset
    every = sorted(os.listdir(folder))
    archive = write(tmp_path / ("set" + suffix), folder, every, mode)
    with pytest.warns(UserWarning, match=f"{len(every) - len(names)} of its {len(every)} members left out"):
        got = list(client.analyze_many([archive], errors="return", stats="min_max,sum,stddev,histogram"))
    assert [r.input if isinstance(r, imgstat.Error) else r.file for r in got] == [f"{archive}:{n}" for n in names]
    files = list(client.analyze_many([str(folder / n) for n in names], errors="return",
                                     stats="min_max,sum,stddev,histogram"))
    by_cli = cli("--stats", "min_max,sum,stddev,histogram", archive)
    assert [o["file"] for o in by_cli] == [f"{archive}:{n}" for n in names]
    for member, file, line in zip(got, files, by_cli):
        if isinstance(file, imgstat.Error):
            assert isinstance(member, imgstat.Error) and member.code == file.code == line["code"]
            continue
        assert comparable(member.to_dict()) == comparable(file.to_dict()) == comparable(line)


def test_brace_ranges_extensions_and_aggregate_over_shards(client, cli, dataset, tmp_path):
    folder, names = dataset
    good = answered(client, folder, names)
    for s in range(3):
        write(tmp_path / f"shard-{s:03d}.tar", folder, good[s::3] + [f"{s:06d}.json"], "w")
    pattern = str(tmp_path / "shard-{000..002}.tar")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        order = [r.file for r in client.analyze_many([pattern])]
        assert order == [f"{tmp_path}/shard-{s:03d}.tar:{n}" for s in range(3) for n in good[s::3]]
        merged = client.aggregate([pattern], stats="min_max,sum,stddev,histogram")
    want = client.aggregate([str(folder / n) for n in good], stats="min_max,sum,stddev,histogram")
    by_cli = cli("--aggregate", "--stats", "min_max,sum,stddev,histogram", pattern)

    def kinds(dicts):  # each kind of image merged apart; the order first met differs
        return sorted(dicts, key=lambda d: (d["sample_type"], d["channel_count"]))
    merged = kinds([r.to_dict() for r in merged])
    assert len(merged) >= 2
    close_dicts(merged, kinds([r.to_dict() for r in want]))
    close_dicts(merged, kinds(by_cli))
    # extensions: the .json members only (as bytes they are no image: each an error, in order).
    with pytest.warns(UserWarning, match="left out"):
        only = list(client.analyze_many([str(tmp_path / "shard-000.tar")], extensions=[".json"], errors="return"))
    assert [e.input for e in only] == [f"{tmp_path}/shard-000.tar:000000.json"]


def test_damaged_archives_and_members_are_answered_and_the_pass_goes_on(client, dataset, tmp_path):
    folder, names = dataset
    sample = answered(client, folder, names)[0]
    cut = write(tmp_path / "cut.tar", folder, [sample], "w")
    big = io.BytesIO()
    with tarfile.open(fileobj=big, mode="w") as t:
        info = tarfile.TarInfo("large.png")
        info.size = 100000
        t.addfile(info, io.BytesIO(bytes(100000)))
    cut_member = str(tmp_path / "cut-member.tar")
    open(cut_member, "wb").write(big.getvalue()[:50000])
    bogus = tmp_path / "bogus.zip"
    bogus.write_bytes(b"not a zip at all")
    empty = tmp_path / "empty.tar"
    tarfile.open(empty, "w").close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = list(client.analyze_many([cut_member, str(bogus), str(empty), str(folder / sample)], errors="return"))
    assert [(g.code, g.input) for g in got[:3]] == [("DATA_LOSS", f"{cut_member}:large.png"),
                                                   ("INVALID_ARGUMENT", str(bogus)), ("INVALID_ARGUMENT", str(empty))]
    assert not isinstance(got[3], imgstat.Error)
    with pytest.raises(imgstat.Error, match="analyze_many or aggregate"):
        client.analyze(cut)


def test_the_asyncio_client_reads_archives_as_the_blocking_one(client, server, dataset, tmp_path):
    import asyncio

    import imgstat.aio
    folder, names = dataset
    archive = write(tmp_path / "set.zip", folder, names, None)

    async def main():
        async with imgstat.aio.Client(server.address) as c:
            return [r async for r in c.analyze_many([archive], errors="return", stats="min_max,sum")]

    got = asyncio.run(main())
    want = list(client.analyze_many([archive], errors="return", stats="min_max,sum"))
    assert [r.input if isinstance(r, imgstat.Error) else r.file for r in got] == [f"{archive}:{n}" for n in names]
    for a, b in zip(got, want):
        assert (a.code == b.code if isinstance(b, imgstat.Error) else comparable(a.to_dict()) == comparable(b.to_dict()))
