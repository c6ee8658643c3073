#!/usr/bin/python3
"""--report FILE.html, opened in a real browser (headless Chromium).

    check.py CLIENT_BIN WORK

A dataset made here (photos of noise and shapes, a dark one, a flat gray
one, copies in other formats and re-encodings) through
imgstat-client --local --aggregate --duplicates --stats ...,quality
--report: Chromium loads the file offline (no network: every image is a data
URI) with no console message; its DOM has every section (the summary, the
dataset statistics with the normalization means and stds equal to the
merged answer's, a histogram per kind, the measures' distributions, the
flagged images with the dark and flat ones among them, the duplicate groups
with thumbnails); a screenshot is taken and is not blank.
"""
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from verdicts import equal, fail, finish  # noqa: E402

try:
    import numpy as np
    from PIL import Image
except ImportError as e:
    print("skipped:", e)
    sys.exit(77)
browser = shutil.which("chromium") or shutil.which("chromium-browser")
if not browser:  # scripts/install-deps installs chromium
    print("skipped: no chromium")
    sys.exit(77)

client_bin, work = sys.argv[1:3]
os.makedirs(work, exist_ok=True)
rng = np.random.default_rng(11)
files = []
for i in range(6):
    a = np.clip(rng.normal(120, 40, (90, 120, 3)) + np.linspace(0, 60, 120)[None, :, None], 0, 255).astype(np.uint8)
    a[10:40, 20:60] = rng.integers(0, 255, 3)
    path = os.path.join(work, f"photo{i}.png")
    Image.fromarray(a).save(path)
    files.append(path)
Image.fromarray(a).save(os.path.join(work, "photo5-copy.bmp"))
Image.fromarray(a).save(os.path.join(work, "photo5-again.jpg"), quality=90)
Image.fromarray(np.full((90, 120, 3), 8, np.uint8)).save(os.path.join(work, "dark.png"))
Image.fromarray(np.full((90, 120, 3), 128, np.uint8)).save(os.path.join(work, "flat.png"))
files += [os.path.join(work, n) for n in ("photo5-copy.bmp", "photo5-again.jpg", "dark.png", "flat.png")]

report = os.path.join(work, "report.html")
out = subprocess.run([client_bin, "--local", "--json", "--aggregate", "--duplicates", "--report", report, "--stats",
                      "min_max,sum,stddev,histogram,quality", *files], capture_output=True, text=True, timeout=300)
if out.returncode != 0:
    fail(f"--report: exit {out.returncode}: {out.stderr[:300]}")
    finish("")
lines = [json.loads(line) for line in out.stdout.splitlines()]
merged = [line for line in lines if "channels" in line][0]
html = open(report, encoding="utf-8").read()
if re.search(r"""(src|href)=["']?(https?:|//)""", html):
    fail("the report refers to something outside itself")

profile = os.path.join(work, "chromium-profile")
common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=" + profile, "--enable-logging=stderr",
          "--v=0", "--window-size=1200,2400"]
dom = subprocess.run([*common, "--dump-dom", "file://" + report], capture_output=True, text=True, timeout=120)
shot = os.path.join(work, "report.png")
screen = subprocess.run([*common, "--screenshot=" + shot, "file://" + report], capture_output=True, text=True, timeout=120)
for run in (dom, screen):
    console = [line for line in run.stderr.splitlines() if "CONSOLE" in line]
    if console:
        fail(f"console messages: {console[:3]}")
page = dom.stdout
for section in ("summary", "statistics", "measures", "issues", "duplicates"):
    if f'id="{section}"' not in page:
        fail(f"the page has no {section} section")
equal(page.count('class="hist"'), 1, "one histogram per kind of image")
means = re.search(r"mean = \[([^\]]*)\]", page)
stds = re.search(r"std = \[([^\]]*)\]", page)
if not means or not stds:
    fail("no normalization means and stds")
else:
    for got, c in zip(means.group(1).split(","), merged["channels"]):
        if abs(float(got) - c["mean"] / 255) > 1e-8:
            fail(f"normalization mean {got} of {c['name']}: the merged mean / 255 is {c['mean'] / 255}")
    for got, c in zip(stds.group(1).split(","), merged["channels"]):
        if abs(float(got) - c["stddev"] / 255) > 1e-8:
            fail(f"normalization std {got} of {c['name']}: the merged stddev / 255 is {c['stddev'] / 255}")
flagged = page[page.find('id="issues"'):page.find('id="duplicates"')]
for name in ("dark.png", "flat.png"):
    if name not in flagged:
        fail(f"{name} is not among the images flagged")
dups = page[page.find('id="duplicates"'):]
for name in ("photo5.png", "photo5-copy.bmp", "photo5-again.jpg"):
    if name not in dups:
        fail(f"{name} is not in a duplicate group")
equal(len(re.findall(r'<img src="data:image/bmp;base64,', page)) >= 5, True, "thumbnails as data URIs")
if not os.path.exists(shot):
    fail("no screenshot")
else:
    pixels = np.asarray(Image.open(shot).convert("L"))
    if pixels.min() > 200:
        fail("the screenshot is blank")
finish(f"report: every section in Chromium, {len(re.findall('<img ', page))} thumbnails, screenshot {shot}")
