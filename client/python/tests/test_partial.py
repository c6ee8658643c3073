"""imgstat.Partial: partials made apart (in Python and by the CLI's
--partial-out) merge, in any grouping and order, into aggregate()'s answer
over all their inputs; their bytes travel; other options and garbage are
refused."""
import os

import numpy as np
import pytest

import imgstat
from conftest import corpus_files
from test_many import SAMPLE, close_dicts


@pytest.fixture(scope="module")
def client(server):
    with imgstat.Client(server.address) as c:
        yield c


def inputs_of_four_kinds(rng):
    out = []
    for i in range(24):
        kind = i % 4
        h, w = (int(v) for v in rng.integers(1, 30, 2))
        if kind == 0:
            out.append(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        elif kind == 1:
            out.append(rng.integers(0, 65536, (h, w), dtype=np.uint16))
        elif kind == 2:
            a = rng.normal(0, 3, (h, w)).astype(np.float32)
            a.flat[0] = [np.nan, np.inf, 1.5][i % 3]
            out.append(a)
        else:
            out.append(np.full((h, w), -7 * i, dtype=np.int16))  # constant images
    return out


def by_kind(results):
    return {(r.sample_type, r.channel_count): r.to_dict() for r in results}


def test_partials_merge_into_the_aggregate_of_all(client):
    rng = np.random.default_rng(61)
    files = [f for f in corpus_files(r"\.png$") if "/bad/" not in f][:12]
    inputs = inputs_of_four_kinds(rng) + (files or [SAMPLE])
    options = dict(range=(-10, 10), bins=32, stats="all")
    want = by_kind(client.aggregate(inputs, **options))
    slices = [inputs[:3], inputs[3:17], inputs[17:]]
    parts = [client.partial(s, **options) for s in slices]
    assert sum(p.images for p in parts) == len(inputs)
    for merged in (parts[0] + parts[1] + parts[2], parts[2] + (parts[0] + parts[1]), sum(reversed(parts))):
        got = by_kind(merged.result(stats="all"))
        assert sorted(got) == sorted(want)
        for kind, w in want.items():
            if kind[0].startswith("float"):
                close_dicts(got[kind], w)  # moments merged in another order: within rounding
            else:
                assert got[kind] == w, kind  # integers: every field equal
    again = imgstat.Partial.from_bytes(parts[1].to_bytes())
    assert by_kind(again.result()) == by_kind(parts[1].result())


def test_partials_of_the_cli_and_of_python_merge(client, cli, tmp_path):
    rng = np.random.default_rng(62)
    paths = []
    for i in range(10):
        from PIL import Image
        h, w = (int(v) for v in rng.integers(1, 40, 2))
        path = tmp_path / f"i{i}.png"
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8) if i % 2 else
                        rng.integers(0, 65536, (h, w), dtype=np.uint16)).save(path)
        paths.append(str(path))
    want = cli("--aggregate", *paths)
    made_by_cli = tmp_path / "cli.partial"
    cli("--aggregate", "--partial-out", str(made_by_cli), *paths[:4])
    from_cli = imgstat.Partial.from_bytes(made_by_cli.read_bytes())
    merged = from_cli + client.partial(paths[4:])
    close_dicts([r.to_dict() for r in merged.result()], want)
    # The other way: Python's partial read by the CLI's --merge.
    made_by_python = tmp_path / "python.partial"
    made_by_python.write_bytes(client.partial(paths[4:]).to_bytes())
    close_dicts(cli("--merge", str(made_by_cli), str(made_by_python)), want)


def test_partials_by_label_merge(client, tmp_path):
    rng = np.random.default_rng(63)
    images = [rng.integers(0, 256, (20, 30, 3), dtype=np.uint8) for _ in range(6)]
    labels = [rng.integers(0, 4, (20, 30), dtype=np.uint8) for _ in range(6)]
    want = by_kind(client.aggregate(images, labels=labels, ignore_label=0))
    merged = client.partial(images[:2], labels=labels[:2], ignore_label=0) + \
        client.partial(images[2:], labels=labels[2:], ignore_label=0)
    assert by_kind(merged.result()) == want
    with pytest.raises(imgstat.Error) as e:  # labels with another ignored label: other options
        merged + client.partial(images[:1], labels=labels[:1], ignore_label=1)
    assert e.value.code == "INVALID_ARGUMENT" and "other options" in str(e.value)


def test_partials_refuse_what_does_not_fit(client):
    a = client.partial([np.arange(12, dtype=np.float32).reshape(3, 4)], range=(0, 1))
    b = client.partial([np.arange(12, dtype=np.float32).reshape(3, 4)], range=(0, 2))
    with pytest.raises(imgstat.Error) as e:
        a + b
    assert e.value.code == "INVALID_ARGUMENT"
    for garbage in (b"\xff" * 32, b"\x08\x02"):
        with pytest.raises(imgstat.Error) as e:
            imgstat.Partial.from_bytes(garbage)
        assert e.value.code == "INVALID_ARGUMENT"


@pytest.mark.parametrize("shm", [True, False])
def test_a_list_of_files_merges_on_the_server_as_a_call_each(server, shm, tmp_path, monkeypatch):
    """A list of small files goes on the server's Aggregate call (one
    Partial back); an iterator of the same takes a call each and merges
    here. Every field equal, kinds in the order their first files came, a
    damaged file raised by name or left out."""
    import imgstat._on_server
    monkeypatch.setattr(imgstat._on_server, "AGGREGATE_REGION", 512 << 10)  # several calls, one memfd after another
    client = imgstat.Client(server.address, shm=shm)
    files = [r.file for r in client.analyze_many(
        [f for f in corpus_files(r"\.(png|jpe?g|gif)$") if "/bad/" not in f][:48], errors="return")
        if not isinstance(r, imgstat.Error)]  # the corpus's refused ones (lossless JPEG) out
    if len(files) < 8:
        pytest.skip("no corpus")
    assert client._transport.server_info().limits.aggregate_inputs > 0
    assert (client._regions.socket() is not None) == shm  # the files' bytes in a memfd, or in the messages
    files = files + files[::-1]
    on_server = [r.to_dict() for r in client.aggregate(files, stats="all")]
    one_each = [r.to_dict() for r in client.aggregate(iter(files), stats="all")]
    assert len(on_server) >= 3
    assert on_server == one_each
    parts = [client.partial(files[:7]), client.partial(files[7:])]
    assert [r.to_dict() for r in (parts[0] + parts[1]).result(stats="all")] == on_server
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)
    with pytest.raises(imgstat.Error) as e:
        client.aggregate(files[:5] + [str(broken)] + files[5:])
    assert e.value.input == str(broken)
    assert e.value.code == "INVALID_ARGUMENT"
    skipped = [r.to_dict() for r in client.aggregate(files[:5] + [str(broken)] + files[5:], stats="all",
                                                     errors="skip")]
    assert skipped == on_server
    client.close()


def test_a_shard_and_a_large_file_among_files_take_a_call_each_in_their_places(server, tmp_path):
    """Among a list of small files, a shard (its members) and a file larger
    than a region's threshold take a call each, in their places, and the
    runs of files around them still go on Aggregate calls: the answer of a
    call each, every field, kinds in the order their first inputs came."""
    import tarfile

    from PIL import Image

    from imgstat._tuning import REGION_MIN_BYTES
    client = imgstat.Client(server.address)
    assert client._transport.same_host  # where a large file takes a region of its own
    rng = np.random.default_rng(7)
    small = []
    for i in range(80):
        p = tmp_path / f"{i:03d}.png"
        Image.fromarray(rng.integers(0, 256, (5 + i % 7, 3 + i % 11, 3), dtype=np.uint8)).save(p)
        small.append(str(p))
    member = tmp_path / "grey16.png"
    Image.fromarray(rng.integers(0, 65536, (9, 13), dtype=np.uint16)).save(member)
    shard = tmp_path / "shard.tar"
    with tarfile.open(shard, "w") as t:
        t.add(member, arcname="grey16.png")
        t.add(small[0], arcname="again.png")
    large = tmp_path / "large.png"
    Image.fromarray(rng.integers(0, 256, (700, 700, 3), dtype=np.uint8)).save(large)
    assert os.path.getsize(large) >= REGION_MIN_BYTES
    inputs = small[:40] + [str(shard)] + small[40:45] + [str(large)] + small[45:]
    before = open(server.log_path).read().count(" info Aggregate ")
    mixed = [r.to_dict() for r in client.aggregate(inputs, stats="all")]
    on_calls = open(server.log_path).read().count(" info Aggregate ") - before
    one_each = [r.to_dict() for r in client.aggregate(iter(inputs), stats="all")]
    assert mixed == one_each
    assert [g["sample_type"] for g in mixed] == ["uint8", "uint16"]  # the shard's 16-bit member second
    assert sum(g["images"] for g in mixed) == len(inputs) + 1
    assert on_calls == 40 + 35  # the run of 5 between the shard and the large file a call each
    client.close()


def test_a_long_list_goes_on_several_calls_in_shrinking_slices_each_file_once(server, tmp_path):
    """A list long enough for several Aggregate calls at once is cut into
    slices that shrink as the pass goes (so the calls end together): each
    file is merged once, the answer is a call each's, a 16-bit kind met late
    comes second, and errors="raise" names the first bad file in input
    order although a later slice may fail first."""
    import re
    from collections import Counter

    from PIL import Image
    client = imgstat.Client(server.address)
    rng = np.random.default_rng(11)
    inputs = []
    for i in range(300):
        p = tmp_path / f"{i:03d}.png"
        if i in (120, 260):
            p.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(rng.integers(0, 256, 40, dtype=np.uint8)))
        elif i == 200:
            Image.fromarray(rng.integers(0, 65536, (7, 9), dtype=np.uint16)).save(p)
        else:
            Image.fromarray(rng.integers(0, 256, (3 + i % 5, 2 + i % 13, 3), dtype=np.uint8)).save(p)
        inputs.append(str(p))
    before = len(open(server.log_path).read())
    on_calls = [r.to_dict() for r in client.aggregate(inputs, errors="skip")]
    log = open(server.log_path).read()[before:]
    one_each = [r.to_dict() for r in client.aggregate(iter(inputs), errors="skip")]
    assert on_calls == one_each
    assert [g["sample_type"] for g in on_calls] == ["uint8", "uint16"]
    assert sum(g["images"] for g in on_calls) == 298
    merged = re.findall(r" info Aggregate id=(\w+) item=\"\d+\" peer=\S+ input=\"([^\"]+)\"", log)
    assert sorted(name for _, name in merged) == sorted(inputs)  # each once, the two bad ones too
    per_call = list(Counter(call for call, _ in merged).values())  # in the order the calls first answered
    assert len(per_call) >= 4
    assert max(per_call) > 2 * min(per_call)  # the first slices larger than the last
    with pytest.raises(imgstat.Error) as e:
        client.aggregate(inputs)
    assert e.value.input == inputs[120]
    client.close()


def test_the_shrinking_slices_reuse_their_calls_memory(server, tmp_path):
    """A same-host server reads a slice's files from a memfd the client
    registered once: slices of a tenth the bytes of the first reuse the
    memfds of the first (a fresh memfd a slice was made, passed and
    registered each time, and cost the caller more CPU than its files)."""
    from PIL import Image
    rng = np.random.default_rng(12)
    inputs = []
    for i in range(300):
        p = tmp_path / f"{i:03d}.png"
        Image.fromarray(rng.integers(0, 256, (80, 80 + i % 3, 3), dtype=np.uint8)).save(p)  # ~19 KB of noise
        inputs.append(str(p))
    with imgstat.Client(server.address) as client:
        before = {m: server.metric("imgstat_requests_total", method=m) for m in ("RegisterRegion", "Aggregate")}
        got = [r.to_dict() for r in client.aggregate(inputs)]
        calls = server.metric("imgstat_requests_total", method="Aggregate") - before["Aggregate"]
        registered = server.metric("imgstat_requests_total", method="RegisterRegion") - before["RegisterRegion"]
    assert calls >= 4  # several slices, the first about 1.4 MB, the last about 0.3 MB
    assert 1 <= registered <= 2  # a memfd for each call at once, none a slice
    with imgstat.Client(server.address) as client:
        assert got == [r.to_dict() for r in client.aggregate(iter(inputs))]  # a call a file
