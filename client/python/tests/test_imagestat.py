"""imgstat.ImageStat.Stat against Pillow's ImageStat.Stat on the corpus' 8-bit images."""
import pytest

import imgstat
from imgstat import ImageStat
from conftest import corpus_files

PIL = pytest.importorskip("PIL")
from PIL import Image, ImageStat as PillowStat  # noqa: E402

ATTRIBUTES = ("extrema", "count", "sum", "sum2", "mean", "median", "rms", "var", "stddev")


def same(a, b):
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b or abs(a - b) <= 1e-12 * max(abs(a), abs(b))


def test_stat_is_pillows_on_every_8_bit_corpus_image(server):
    files = corpus_files()
    if not files:
        pytest.skip("no corpus")
    compared = 0
    with imgstat.Client(server.address) as client:
        for path in files:
            try:
                image = Image.open(path)
                image.load()
            except Exception:  # noqa: BLE001 (files Pillow cannot read are other tests' business)
                continue
            if image.mode not in ("L", "RGB", "RGBA", "LA"):
                continue
            want = PillowStat.Stat(image)
            got = ImageStat.Stat(image, client=client)
            for attr in ATTRIBUTES:
                assert same(getattr(got, attr), getattr(want, attr)), (path, attr)
            if image.mode in ("L", "RGB") and image.width > 2 and image.height > 2:
                mask = Image.new("L", image.size, 0)
                mask.paste(255, (0, 0, image.width // 2, image.height // 3 + 1))
                want, got = PillowStat.Stat(image, mask), ImageStat.Stat(image, mask, client=client)
                for attr in ATTRIBUTES:
                    assert same(getattr(got, attr), getattr(want, attr)), (path, "mask", attr)
            compared += 1
    assert compared >= 20
