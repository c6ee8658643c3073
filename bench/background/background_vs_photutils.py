#!/usr/bin/python3
"""Background meshes of one frame: imgstat against photutils in the same run.
A 4096x4096 float32 FITS frame (a sky of 1000 +- 5 with a gradient, 400
sources, 1% NaN), Background2D's defaults with box 64, best of R (default 3):

- photutils: Background2D(data, 64) and its background_mesh and
  background_rms_mesh over the array already in memory (the file read apart,
  not timed), and with the full-size background and background_rms maps;
- imgstat-client --local --background 64 (the whole command: the process,
  reading the file, the meshes, JSON out), and with --background-map
  (both maps interpolated and written as a float32 FITS);
- imgstat-client --local --stats min_max alone: the command without meshes;
- a whole python script as a caller runs it: start, imports, reading the
  file with astropy, the meshes, JSON out;
- a night's frames (8 of them, each the frame shifted by its index): one
  imgstat-client command over the files against one python process reading
  each with astropy and making its meshes (imports before the clock), so
  that neither pays its start once a frame.

The meshes' largest relative difference from photutils' is printed (boxes
left out are filled with ties broken row-major, photutils' k-d tree its own
way: see tests/background/check.py); the table last.

    background_vs_photutils.py CLIENT_BIN [R] [WORK]
"""
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np
from astropy.io import fits
from photutils.background import Background2D

warnings.simplefilter("ignore")
client = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
work = sys.argv[3] if len(sys.argv) > 3 else "/tmp/imgstat-background-bench"
os.makedirs(work, exist_ok=True)
rng = np.random.default_rng(2026)
n = 4096
frame = (1000 + 5 * rng.standard_normal((n, n)) + np.linspace(0, 40, n)[None, :]).astype(np.float32)
for _ in range(400):
    y, x = rng.integers(0, n, 2)
    frame[max(0, y - 5):y + 5, max(0, x - 5):x + 5] += 300
frame[rng.random(frame.shape) < 0.01] = np.nan
path = os.path.join(work, "frame.fits")
fits.writeto(path, frame, overwrite=True)
data = fits.getdata(path).astype(np.float64)
night = []
for k in range(8):
    night.append(os.path.join(work, f"night-{k}.fits"))
    fits.writeto(night[-1], frame + np.float32(k), overwrite=True)


def best(fn):
    times, out = [], None
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def meshes():
    b = Background2D(data, 64)
    return b, b.background_mesh, b.background_rms_mesh


def maps():
    b = Background2D(data, 64)
    return b.background, b.background_rms


def command(*args):
    out = subprocess.run([client, "--local", "--json", *args, path], capture_output=True, text=True, check=True)
    return out.stdout


SCRIPT = f"""
import json, warnings
warnings.simplefilter("ignore")
from astropy.io import fits
from photutils.background import Background2D
b = Background2D(fits.getdata({path!r}).astype(float), 64)
print(json.dumps([b.background_mesh.tolist(), b.background_rms_mesh.tolist()]))
"""
t_script, _ = best(lambda: subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, check=True))
t_mesh, (b, bm, rm) = best(meshes)
t_maps, _ = best(maps)
t_base, _ = best(lambda: command("--stats", "min_max"))
t_ours, text = best(lambda: command("--stats", "min_max", "--background", "64"))
t_ours_maps, _ = best(lambda: command("--stats", "min_max", "--background", "64", "--background-map",
                                      os.path.join(work, "map.fits")))


def night_python():
    for p in night:
        b = Background2D(fits.getdata(p).astype(float), 64)
        _ = b.background_mesh, b.background_rms_mesh


t_night_py, _ = best(night_python)
t_night, _ = best(lambda: subprocess.run([client, "--local", "--json", "--stats", "min_max", "--background", "64",
                                          *night], capture_output=True, check=True))
got = json.loads(text)["background"][0]
rel = max(float(np.max(np.abs(np.array(got[k]) - want) / np.abs(want)))
          for k, want in (("background", bm), ("background_rms", rm)))
print(f"meshes {got['rows']}x{got['columns']}, {got['boxes_excluded']} boxes left out "
      f"(photutils {int(b.nboxes_tot) - len(b._box_idx)}); largest relative difference {rel:.2g}")
print(f"{'pass':62s} {'seconds':>8s} {'of photutils':>13s}")
rows = [("photutils Background2D, meshes (array in memory)", t_mesh, t_mesh),
        ("python: import, read the FITS, Background2D meshes, JSON out", t_script, t_script),
        ("photutils Background2D, meshes and both full-size maps", t_maps, t_maps),
        ("imgstat --local, the command without --background", t_base, t_mesh),
        ("imgstat --local --background 64 (meshes, JSON)", t_ours, t_mesh),
        ("  the same against the whole python script", t_ours, t_script),
        ("  its meshes alone (less the command without them)", t_ours - t_base, t_mesh),
        ("imgstat --local --background 64 --background-map (FITS)", t_ours_maps, t_maps),
        (f"python, one process: {len(night)} frames read, Background2D meshes", t_night_py, t_night_py),
        (f"imgstat --local --background 64, one command, {len(night)} frames", t_night, t_night_py)]
for name, t, ref in rows:
    print(f"{name:62s} {t:8.3f} {t / ref:13.3f}")
