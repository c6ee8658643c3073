"""Files of several planes through the package: planes=, Result.planes and
positions with their plane, as the CLI answers them."""
import numpy as np
import pytest

import imgstat
from conftest import comparable

tifffile = pytest.importorskip("tifffile")


@pytest.fixture(scope="module")
def client(server):
    with imgstat.Client(server.address) as c:
        yield c


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    rng = np.random.default_rng(490)
    pages = rng.integers(0, 65536, (6, 31, 47), dtype=np.uint16)
    path = tmp_path_factory.mktemp("planes") / "stack.tif"
    with tifffile.TiffWriter(path) as t:
        for page in pages:
            t.write(page, compression="zlib")
    return str(path), pages


def test_every_plane_counts_and_each_answers_as_the_cli(client, cli, stack):
    path, pages = stack
    whole = client.analyze(path, stats="min_max,sum,stddev,positions")
    assert whole.facts["planes"] == 6 and whole.planes == []
    gray = whole["Gray"]
    assert (gray.count, gray.min, gray.max, gray.sum) == (pages.size, pages.min(), pages.max(), int(pages.sum(dtype=np.int64)))
    assert gray.min_position == tuple(int(v) for v in np.unravel_index(pages.argmin(), pages.shape)[::-1])
    for planes, flag, chosen in ((True, [], range(6)), (range(2, 5), ["2-4"], range(2, 5)), (3, ["3"], [3]),
                                 ("4-", ["4-"], range(4, 6))):
        got = client.analyze(path, stats="min_max,sum,stddev,positions", planes=planes)
        assert [p.index for p in got.planes] == list(chosen)
        for p in got.planes:
            assert p["Gray"].sum == int(pages[p.index].sum(dtype=np.int64))
            assert p["Gray"].min_position == tuple(int(v) for v in np.unravel_index(pages[p.index].argmin(), pages[0].shape)[::-1])
        assert got["Gray"].sum == int(pages[list(chosen)].sum(dtype=np.int64))
        want = cli("--stats", "min_max,sum,stddev,positions", "--planes", *flag, path)[0]
        assert comparable(got.to_dict()) == comparable(want), planes


def test_planes_past_the_last_or_of_one_plane_are_refused(client, stack):
    path, _ = stack
    with pytest.raises(imgstat.Error) as e:
        client.analyze(path, planes=6)
    assert e.value.code == "INVALID_ARGUMENT" and "has 6 planes" in str(e.value)
    with pytest.raises(imgstat.Error) as e:
        client.analyze(np.zeros((4, 4), np.uint8), planes=1)
    assert e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(imgstat.Error):
        client.analyze(path, planes=range(3, 1))


def test_a_pyramids_level_is_its_pages_reduced_copies_as_the_cli(client, cli, tmp_path):
    rng = np.random.default_rng(491)
    full = rng.integers(0, 65536, (3, 40, 56), dtype=np.uint16)
    path = str(tmp_path / "pyramid.tif")
    with tifffile.TiffWriter(path) as t:
        for page in full:
            t.write(page, subifds=2)
            t.write(page[::2, ::2].copy(), subfiletype=1)
            t.write(page[::4, ::4].copy(), subfiletype=1)
    for level, pages in enumerate((full, full[:, ::2, ::2], full[:, ::4, ::4])):
        got = client.analyze(path, stats="min_max,sum", level=level)
        assert (got.width, got.height) == (pages.shape[2], pages.shape[1])
        assert (got.facts["levels"], got.facts["level"]) == (3, level)
        assert got["Gray"].sum == int(pages.sum(dtype=np.int64)) and got["Gray"].count == pages.size
        assert comparable(got.to_dict()) == comparable(cli("--stats", "min_max,sum", "--level", str(level), path)[0])
    with pytest.raises(imgstat.Error) as e:
        client.analyze(path, level=3)
    assert e.value.code == "INVALID_ARGUMENT" and "3 levels (0 to 2)" in str(e.value)
    with pytest.raises(imgstat.Error):
        client.analyze(path, level=-1)


def test_series_are_answered_apart_as_the_cli(client, cli, tmp_path):
    """Pages of different kinds are series (tifffile's generic series), each
    its own Result, never mixed; series=N alone; aggregate groups them by kind."""
    rng = np.random.default_rng(492)
    pages = [rng.integers(0, 65536, (12, 20), dtype=np.uint16), rng.integers(0, 256, (7, 9, 3), dtype=np.uint8),
             rng.integers(0, 65536, (12, 20), dtype=np.uint16)]
    path = str(tmp_path / "series.tif")
    with tifffile.TiffWriter(path) as t:
        for page in pages:
            t.write(page, photometric="rgb" if page.ndim == 3 else "minisblack", metadata=None)
    with tifffile.TiffFile(path) as t:
        series = [s.asarray() for s in t.series]
    assert len(series) == 2
    got = client.analyze(path, stats="min_max,sum")
    assert (got.facts["series_count"], got.facts["series"]) == (2, 0) and len(got.other_series) == 1
    assert got["Gray"].sum == int(series[0].sum(dtype=np.int64)) and got["Gray"].count == series[0].size
    rgb = got.other_series[0]
    assert (rgb.width, rgb.height, rgb.facts["series"]) == (9, 7, 1)
    assert [rgb[c].sum for c in "RGB"] == [int(series[1][..., k].sum(dtype=np.int64)) for k in range(3)]
    want = cli("--stats", "min_max,sum", path)
    assert [comparable(r.to_dict()) for r in [got] + got.other_series] == [comparable(w) for w in want]
    alone = client.analyze(path, stats="min_max,sum", series=1)
    assert alone.other_series == [] and alone.to_dict()["file"] == path + " [series 1]"
    assert comparable(alone.to_dict()) == comparable(cli("--stats", "min_max,sum", "--series", "1", path)[0])
    merged = client.aggregate([path, path], stats="min_max,sum")
    assert sorted((r.sample_type, r.images) for r in merged) == [("uint16", 2), ("uint8", 2)]
    with pytest.raises(imgstat.Error) as e:
        client.analyze(path, series=2)
    assert e.value.code == "INVALID_ARGUMENT" and "has 2 (0 to 1)" in str(e.value)


def test_tiles_of_a_volume_are_boxes_through_its_planes(client):
    rng = np.random.default_rng(492)
    vol = rng.integers(-32768, 32768, (9, 20, 26), dtype=np.int16)
    got = client.analyze(vol, axes="ZYX", stats="min_max,sum", tiles=(3, 2, 4))
    assert len(got.parts) == 24
    for p in got.parts:
        c, r, s = p.tile
        x, y, z, w, h, d = p.box
        assert (x, y, z) == (c * 26 // 3, r * 20 // 2, s * 9 // 4)
        assert (x + w, y + h, z + d) == ((c + 1) * 26 // 3, (r + 1) * 20 // 2, (s + 1) * 9 // 4)
        sub = vol[z:z + d, y:y + h, x:x + w]
        ch = p.channels[0]
        assert (ch.count, ch.min, ch.max, ch.sum) == (sub.size, sub.min(), sub.max(), int(sub.sum(dtype=np.int64)))
    same = client.analyze(vol, axes="ZYX", stats="min_max,sum", tiles="3x2x4")
    assert [p.to_dict() for p in same.parts] == [p.to_dict() for p in got.parts]
    with pytest.raises(imgstat.Error) as e:
        client.analyze(vol, axes="ZYX", tiles=(2, 2, 10))
    assert e.value.code == "INVALID_ARGUMENT" and "does not fit" in str(e.value)


def check_volume(got, vol, what):
    """got: an answer of a (planes, h, w, c) volume asked planes=True."""
    assert [p.index for p in got.planes] == list(range(vol.shape[0])), what
    for c, ch in enumerate(got.channels):
        x = vol[..., c]
        assert (ch.count, ch.min, ch.max) == (x.size, x.min(), x.max()), what
        if x.dtype.kind == "f":
            assert ch.sum == pytest.approx(float(np.sum(x, dtype=np.float64)), rel=1e-12), what
        else:
            assert ch.sum == int(x.sum(dtype=np.int64)), what
        z, y, xx = np.unravel_index(x.argmin(), x.shape)
        assert ch.min_position == (int(xx), int(y), int(z)), what
    for p in got.planes:
        for c, ch in enumerate(p.channels):
            x = vol[p.index, ..., c]
            assert (ch.count, ch.min, ch.max) == (x.size, x.min(), x.max()), f"{what} plane {p.index}"
            if x.dtype.kind != "f":
                assert ch.sum == int(x.sum(dtype=np.int64)), f"{what} plane {p.index}"


@pytest.mark.parametrize("axes", ["ZYX", "ZYXC", "CZYX", "YXZ", "TYX", None])
def test_volumes_with_their_axes_named(client, axes):
    rng = np.random.default_rng(491)
    vol = rng.integers(0, 65536, (5, 13, 17, 3), dtype=np.uint16)  # Z, Y, X, C
    if axes in (None, "ZYXC"):
        a, want = vol, vol
    elif axes in ("ZYX", "TYX"):
        a, want = vol[..., 0], vol[..., :1]
    elif axes == "CZYX":
        a, want = np.ascontiguousarray(vol.transpose(3, 0, 1, 2)), vol
    else:  # YXZ: a view with planes last
        a, want = vol[..., 0].transpose(1, 2, 0), vol[..., :1]
    got = client.analyze(a, axes=axes, stats="min_max,sum,positions", planes=True)
    assert (got.width, got.height) == (17, 13)
    check_volume(got, want, f"axes {axes}")


def test_a_float_volume_streamed_and_strided(client):
    rng = np.random.default_rng(492)
    # 8 MiB: more than one message, so streamed; every other row, so strided.
    big = rng.standard_normal((16, 512, 128, 2)).astype(np.float32)
    big[3, 6, 9, 1] = np.nan
    view = big[:, ::2]
    got = client.analyze(view, axes="ZYXC", stats="min_max,sum,positions", planes=True, range=(-8, 8))
    finite = np.where(np.isnan(view), np.inf, view)
    assert got.channels[1].nan_count == 1
    assert got.channels[0].sum == pytest.approx(float(view[..., 0].astype(np.float64).sum()), rel=1e-12)
    assert [p.index for p in got.planes] == list(range(16))
    assert got.planes[3].channels[1].nan_count == 1 and got.planes[4].channels[1].nan_count == 0
    assert got.channels[1].min == finite[..., 1].min()


def test_raw_depth_and_bad_axes(client, tmp_path):
    rng = np.random.default_rng(493)
    vol = rng.integers(0, 256, (4, 6, 9), dtype=np.uint8)
    path = tmp_path / "vol.raw"
    vol.tofile(path)
    got = client.analyze(str(path), raw=(9, 6, 1, 4, "uint8"), stats="sum", planes=True)
    assert [p["Gray"].sum for p in got.planes] == [int(p.sum()) for p in vol]
    assert got.facts["planes"] == 4
    for axes in ("ZYXQ", "ZZX", "ZY", "ZTYX"):
        with pytest.raises(imgstat.Error) as e:
            client.analyze(vol if len(axes) == 3 else vol[..., None], axes=axes)
        assert e.value.code == "INVALID_ARGUMENT" and "axes" in str(e.value)
    with pytest.raises(imgstat.Error) as e:
        client.analyze(vol, axes="ZYX", planes=2)
    assert e.value.code == "INVALID_ARGUMENT"


def label_reference(vol, labels):
    """Per label: voxel count, sum, min, max, first min position (x, y, z)
    and bounding box (x, y, z, w, h, d), gathered with numpy."""
    out = {}
    for k in np.unique(labels):
        m = labels == k
        z, y, x = np.nonzero(m)
        v = vol[m]
        first = np.argmin(np.where(m, vol, np.iinfo(vol.dtype).max).ravel())
        fz, fy, fx = np.unravel_index(first, vol.shape)
        out[int(k)] = (int(m.sum()), int(v.sum(dtype=np.int64)), int(v.min()), int(v.max()), (int(fx), int(fy), int(fz)),
                       (int(x.min()), int(y.min()), int(z.min()), int(x.max() - x.min() + 1),
                        int(y.max() - y.min() + 1), int(z.max() - z.min() + 1)))
    return out


def test_label_volumes_per_label_with_boxes(client, tmp_path):
    rng = np.random.default_rng(495)
    vol = rng.integers(0, 65536, (9, 23, 31), dtype=np.uint16)
    labels = np.zeros(vol.shape, np.uint16)
    for k in range(1, 40):  # blobs of their own extents, some of one voxel
        z, y, x = rng.integers(0, 9), rng.integers(0, 23), rng.integers(0, 31)
        dz, dy, dx = rng.integers(1, 4, 3)
        labels[z:z + dz, y:y + dy, x:x + dx] = k * 997 % 65536
    want = label_reference(vol, labels)
    path = tmp_path / "labels.raw"
    labels.tofile(path)
    with_array = client.analyze(vol, axes="ZYX", labels=labels, stats="min_max,sum,positions")
    # A float volume's view of the same labels, as a raw file of a depth (2-D maps: depth 1, z 0).
    assert [p.box for p in with_array.parts] == [want[k][5] for k in sorted(want)]
    flat = client.analyze(vol[4], labels=labels[4], stats="min_max,sum")
    assert all(p.box[2] == 0 and p.box[5] == 1 for p in flat.parts)
    got = with_array
    assert [p.label for p in got.parts] == sorted(want)
    for p in got.parts:
        count, total, lo, hi, first_min, box = want[p.label]
        ch = p.channels[0]
        assert (ch.count, ch.sum, ch.min, ch.max) == (count, total, lo, hi), p.label
        assert ch.min_position == first_min, p.label
        assert p.box == box, p.label


def test_a_mask_volume_is_the_foreground(client):
    rng = np.random.default_rng(496)
    vol = rng.normal(50, 20, (7, 19, 21)).astype(np.float32)
    mask = (rng.random(vol.shape) < 0.3).astype(np.uint8)
    got = client.analyze(vol, axes="ZYX", mask=mask, stats="min_max,sum")
    fg = vol[mask != 0].astype(np.float64)
    ch = got.channels[0]
    assert (ch.count, ch.min, ch.max) == (fg.size, fg.min(), fg.max())
    assert ch.sum == pytest.approx(fg.sum(), rel=1e-12)
    with pytest.raises(imgstat.Error) as e:
        client.analyze(vol, axes="ZYX", mask=mask[:6])
    assert e.value.code == "INVALID_ARGUMENT" and "planes" in str(e.value)
