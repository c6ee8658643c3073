#!/usr/bin/python3
"""imgstat-client's parts (--roi, --mask, --labels, --tiles, --aggregate
--labels DIR) through a live server against numpy over the same pixels.

    check.py SERVER_BIN CLIENT_BIN WORK [PAIRS]

A segmentation-like dataset of PAIRS (default 200) RGB uint8 PNGs with
16-bit label PNGs of the same name stem (0 is the background, ignored), of
random sizes; per file --labels, --mask and --tiles against numpy, then
--aggregate --labels DIR against numpy over every file's pixels of each
label, and the table and CSV forms of parts. Integers must be equal (count,
min, max, sum, histogram); mean and stddev within 1e-12 relative.
"""
import csv
import io
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from live_server import start_server  # noqa: E402
from verdicts import close, equal, fail, finish  # noqa: E402

try:
    import numpy as np
    from PIL import Image
except ImportError as e:  # scripts/install-deps installs python3-numpy and python3-pil
    print("skipped:", e)
    sys.exit(77)

def client(client_bin, server, *args):
    out = subprocess.run([client_bin, "--server", server, *args], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"imgstat-client {' '.join(args[:6])} exited {out.returncode}: {out.stderr[-2000:]}")
    return out.stdout


def check_channels(got, pixels, what):
    """got: a part's channels; pixels: an (n, 3) uint8 array of its pixels."""
    equal(len(got), 3, what + " channels")
    for c, ch in enumerate(got):
        x = pixels[:, c].astype(np.int64)
        w = f"{what} channel {ch['name']}"
        equal(ch["count"], int(x.size), w + " count")
        if x.size == 0:
            equal(ch["min"], None, w + " min of nothing")
            continue
        equal(ch["min"], int(x.min()), w + " min")
        equal(ch["max"], int(x.max()), w + " max")
        equal(ch["sum"], int(x.sum()), w + " sum")
        close(ch["mean"], float(x.sum()) / x.size, 1e-12, w + " mean")
        d = x - x.sum() / x.size
        close(ch["stddev"], float(np.sqrt((d * d).sum() / x.size)), 1e-12, w + " stddev")
        if ch.get("histogram") is not None:
            equal(ch["histogram"]["counts"], np.bincount(x, minlength=256).tolist(), w + " histogram")


def check_large_maps(client_bin, address, work, rng):
    """Label images past the 64 MiB message limit, raw and encoded (an
    uncompressed 16-bit TIFF), by region (the default on this host) and over
    the socket (--no-shm: streamed after the image)."""
    h, w = 6000, 6000
    gray = rng.integers(0, 256, (h, w), dtype=np.uint8)
    lab = ((np.arange(h)[:, None] // 700) * 9 + np.arange(w)[None, :] // 700).astype(np.uint16)  # 81 labels
    img_file, raw_map, tif_map = (os.path.join(work, n) for n in ("big-gray.raw", "big-labels.raw", "big-labels.tif"))
    gray.tofile(img_file)
    lab.tofile(raw_map)
    Image.fromarray(lab).save(tif_map)  # uncompressed: 72 MB
    for path in (raw_map, tif_map):
        if os.path.getsize(path) <= 64 << 20:
            fail(f"{path} is not past the message limit")
    flat, labels = gray.reshape(-1).astype(np.int64), lab.reshape(-1)
    counts = np.bincount(labels)
    sums = np.bincount(labels, weights=flat)
    present = np.nonzero(counts)[0].tolist()
    for mode in ([], ["--no-shm"]):
        for map_file, map_raw in ((raw_map, ["--map-raw", f"{w}x{h}x1:uint16"]), (tif_map, [])):
            what = f"a {os.path.getsize(map_file) >> 20} MiB {'raw' if map_raw else 'TIFF'} label image{' over the socket' if mode else ''}"
            r = json.loads(client(client_bin, address, *mode, "--json", "--raw", f"{w}x{h}x1:uint8", img_file, "--labels",
                                  map_file, *map_raw, "--stats", "min_max,sum"))
            equal([p["label"] for p in r["parts"]], present, what + ": labels")
            for p in r["parts"]:
                ch = p["channels"][0]
                equal((ch["count"], ch["sum"]), (int(counts[p["label"]]), int(sums[p["label"]])), f"{what}: label {p['label']}")
    for f in (img_file, raw_map, tif_map):
        os.remove(f)


def main():
    server_bin, client_bin, work = sys.argv[1:4]
    pairs = int(sys.argv[4]) if len(sys.argv) > 4 else 200
    img_dir, lab_dir = os.path.join(work, "img"), os.path.join(work, "labels")
    for d in (img_dir, lab_dir):
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(d):
            os.remove(os.path.join(d, f))
    rng = np.random.default_rng(7)
    images, labels = [], []
    for i in range(pairs):
        h, w = int(rng.integers(1, 90)), int(rng.integers(1, 120))
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        # Classes in blobs, some absent from a file; 65535 near the type's maximum.
        lab = (rng.integers(0, 6, (h // 8 + 1, w // 8 + 1)).repeat(8, 0).repeat(8, 1)[:h, :w]).astype(np.uint16)
        lab[lab == 5] = 65535
        name = f"{i:05d}"
        Image.fromarray(img).save(os.path.join(img_dir, name + ".png"))
        Image.fromarray(lab).save(os.path.join(lab_dir, name + ".png"))  # 16-bit gray
        images.append(img)
        labels.append(lab)
    server, address = start_server(server_bin, work)
    try:
        files = [os.path.join(img_dir, f"{i:05d}.png") for i in range(pairs)]
        # Per file, the label folder paired by name stem, 0 ignored.
        out = client(client_bin, address, "--json", "-j", "8", "--labels", lab_dir, "--ignore-label", "0",
                     "--stats", "min_max,sum,stddev,histogram", *files)
        ignored_only = 0
        for i, line in enumerate(out.splitlines()):
            r = json.loads(line)
            present = [v for v in np.unique(labels[i]).tolist() if v != 0]
            ignored_only += not present
            equal([p["label"] for p in r["parts"]], present, f"file {i} labels")  # [] where every pixel is 0
            for p in r["parts"]:
                check_channels(p["channels"], images[i][labels[i] == p["label"]], f"file {i} label {p['label']}")
        if not ignored_only:
            fail("no file whose every pixel is the ignored label: the generator should make some")
        # A mask (the label image: nonzero), and tiles by the floor formula.
        for i in range(0, pairs, max(1, pairs // 20)):
            lab_file = os.path.join(lab_dir, f"{i:05d}.png")
            r = json.loads(client(client_bin, address, "--json", "--mask", lab_file, "--stats",
                                  "min_max,sum,stddev,histogram", files[i]))
            check_channels(r["channels"], images[i][labels[i] != 0], f"file {i} masked")
            h, w = labels[i].shape
            cols, rows = min(w, 3), min(h, 2)
            r = json.loads(client(client_bin, address, "--json", "--tiles", f"{cols}x{rows}", "--stats",
                                  "min_max,sum,stddev,histogram", files[i]))
            equal(len(r["parts"]), cols * rows, f"file {i} tiles")
            for p in r["parts"]:
                c, rr = p["tile"]
                x0, x1 = c * w // cols, (c + 1) * w // cols
                y0, y1 = rr * h // rows, (rr + 1) * h // rows
                equal(p["roi"], [x0, y0, x1 - x0, y1 - y0], f"file {i} tile {c},{rr} roi")
                check_channels(p["channels"], images[i][y0:y1, x0:x1].reshape(-1, 3), f"file {i} tile {c},{rr}")
        # The dataset's per-class statistics.
        agg = [json.loads(line) for line in client(client_bin, address, "--json", "--aggregate", "-j", "8", "--labels",
                                                       lab_dir, "--ignore-label", "0", "--stats",
                                                       "min_max,sum,stddev,histogram", *files).splitlines()]
        equal(len(agg), 1, "aggregate answers")
        every_img = np.concatenate([im.reshape(-1, 3) for im in images])
        every_lab = np.concatenate([lab.reshape(-1) for lab in labels])
        present = [v for v in np.unique(every_lab).tolist() if v != 0]
        equal([p["label"] for p in agg[0]["parts"]], present, "aggregate labels")
        for p in agg[0]["parts"]:
            check_channels(p["channels"], every_img[every_lab == p["label"]], f"aggregate label {p['label']}")
        # The same by label from two partials (--partial-out, --merge): every field equal.
        partials = []
        for k, half in enumerate((files[: len(files) // 3], files[len(files) // 3:])):
            partials.append(os.path.join(os.path.dirname(lab_dir), f"half-{k}.partial"))
            client(client_bin, address, "--aggregate", "--labels", lab_dir, "--ignore-label", "0", "--partial-out",
                   partials[-1], *half)
        merged = [json.loads(line) for line in client(client_bin, address, "--json", "--merge", "--stats",
                                                          "min_max,sum,stddev,histogram", *partials).splitlines()]
        equal(merged, agg, "aggregate by label from two partials")
        for path in partials:
            os.remove(path)
        # A file without its label image is an error naming it; the rest are answered.
        os.remove(os.path.join(lab_dir, "00000.png"))
        out = subprocess.run([client_bin, "--server", address, "--json", "--labels", lab_dir, files[0], files[1]],
                             capture_output=True, text=True, timeout=60)
        equal(out.returncode, 1, "exit status with a label file missing")
        if "no label file named 00000.*" not in out.stderr:
            fail("the missing label file is not named: " + out.stderr[-500:])
        # Rectangles and tiles are not the same part in every file: a usage error, before any call.
        for kind in (["--tiles", "2x2"], ["--roi", "0,0,4,4"]):
            out = subprocess.run([client_bin, "--server", address, "--aggregate", *kind, *files[:2]],
                                 capture_output=True, text=True, timeout=60)
            equal(out.returncode, 2, f"exit status of --aggregate {kind[0]}")
            if "--aggregate merges whole images, masks and labels" not in out.stderr:
                fail(f"--aggregate {kind[0]} is not refused as a usage error: " + out.stderr[-500:])
        # CSV: a row per part and channel, the part in its column; the table names each part.
        rows = list(csv.DictReader(io.StringIO(client(client_bin, address, "--csv", "--tiles", "2x1", "--stats",
                                                      "min_max", files[1]))))
        equal([r["part"] for r in rows[:3]], ["", "", ""], "CSV rows of the whole image")
        equal([r["part"] for r in rows[3:]][::3], [f"tile 0,0 (0,0,{images[1].shape[1] // 2},{images[1].shape[0]})",
                                               f"tile 1,0 ({images[1].shape[1] // 2},0,"
                                               f"{images[1].shape[1] - images[1].shape[1] // 2},{images[1].shape[0]})"],
              "CSV part column")
        table = client(client_bin, address, "--roi", "0,0,1,1", files[1])
        if "roi 0,0,1,1" not in table:
            fail("the table does not name the rectangle: " + table[:500])
        check_large_maps(client_bin, address, work, rng)
    finally:
        server.terminate()
        server.wait(timeout=30)
    finish(f"parts of {pairs} image/label pairs equal numpy's")


if __name__ == "__main__":
    main()
