"""stats="hashes" and imgstat.find_duplicates: imagehash's phash and the
pixels' hash per image, grouped as the CLI's --aggregate --duplicates groups."""
import numpy as np
import pytest

import imgstat

Image = pytest.importorskip("PIL.Image")
fftpack = pytest.importorskip("scipy.fftpack")


@pytest.fixture(scope="module")
def client(server):
    with imgstat.Client(server.address) as c:
        yield c


def picture(seed, h=120, w=160):
    r = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    a = np.stack([np.sin(xx / r.uniform(5, 30) + r.uniform(0, 6)) * 80 + 120,
                  np.cos(yy / r.uniform(5, 30) + r.uniform(0, 6)) * 60 + 100, (xx + yy) % 255], -1)
    for _ in range(4):
        y, x = r.integers(0, h - 30), r.integers(0, w - 30)
        a[y:y + 25, x:x + 25] = r.integers(0, 255, 3)
    return np.clip(a + r.normal(0, 5, a.shape), 0, 255).astype(np.uint8)


def phash(path):
    low = fftpack.dct(fftpack.dct(np.asarray(Image.open(path).convert("L").resize((32, 32), Image.LANCZOS)), axis=0),
                      axis=1)[:8, :8]
    return "%016x" % int("".join("1" if b else "0" for b in (low > np.median(low)).flatten()), 2)


def test_hashes_and_groups_as_imagehash_and_the_cli(client, cli, tmp_path):
    files = []
    for i in range(4):
        a = picture(i)
        for name, kw in ((f"p{i}.png", {}), (f"p{i}.bmp", {}), (f"p{i}.jpg", {"quality": 90})):
            files.append(str(tmp_path / name))
            Image.fromarray(a).save(files[-1], **kw)
    results = list(client.analyze_many(files, stats="min_max,hashes"))
    for r in results:
        assert r.hashes["phash"] == phash(r.file)
        assert len(r.hashes["pixels"]) == 32
        assert r.to_dict()["hashes"] == r.hashes
    by_name = {r.file: r.hashes for r in results}
    for i in range(4):
        assert by_name[str(tmp_path / f"p{i}.png")]["pixels"] == by_name[str(tmp_path / f"p{i}.bmp")]["pixels"]
        assert by_name[str(tmp_path / f"p{i}.png")]["pixels"] != by_name[str(tmp_path / f"p{i}.jpg")]["pixels"]
    groups = imgstat.find_duplicates(results)
    assert sorted(map(sorted, groups["exact"])) == sorted(sorted([str(tmp_path / f"p{i}.png"), str(tmp_path / f"p{i}.bmp")])
                                                          for i in range(4))
    want = [line for line in cli("--aggregate", "--duplicates", "--stats", "min_max", *files) if "dataset_duplicates" in line]
    assert sorted(map(sorted, groups["near"])) == sorted(map(sorted, want[0]["dataset_duplicates"]["near"]))
    assert sorted(map(sorted, groups["exact"])) == sorted(map(sorted, want[0]["dataset_duplicates"]["exact"]))
    for i in range(4):  # each picture's three files are near duplicates of each other
        assert any({str(tmp_path / f"p{i}.{e}") for e in ("png", "bmp", "jpg")} <= set(g) for g in groups["near"])


def test_find_duplicates_finds_every_pair_within_the_distance():
    rng = np.random.default_rng(5)
    base = [int(v) for v in rng.integers(0, 1 << 63, 300, dtype=np.int64)]
    items = []
    for i, b in enumerate(base):
        items.append((f"a{i}", {"pixels": f"{i:032x}", "phash": f"{b:016x}"}))
        flips = int(rng.integers(0, 7))
        v = b
        for bit in rng.choice(64, flips, replace=False):
            v ^= 1 << int(bit)
        items.append((f"b{i}", {"pixels": f"{i + 1000:032x}", "phash": f"{v:016x}"}))
    for distance in (0, 3, 6):
        got = imgstat.find_duplicates(items, distance)
        # Brute force: every pair within the distance, joined.
        parent = list(range(len(items)))

        def find(i):
            while parent[i] != i:
                i = parent[i]
            return i
        for i in range(len(items)):
            for j in range(i):
                if bin(int(items[i][1]["phash"], 16) ^ int(items[j][1]["phash"], 16)).count("1") <= distance:
                    parent[find(i)] = find(j)
        want = {}
        for i in range(len(items)):
            want.setdefault(find(i), []).append(items[i][0])
        assert sorted(map(sorted, got["near"])) == sorted(sorted(g) for g in want.values() if len(g) > 1)
        assert got["exact"] == []
    with pytest.raises(imgstat.Error):
        imgstat.find_duplicates(items, 17)
