#!/usr/bin/python3
"""imgstat-client --aggregate against numpy over all pixels at once.

    check.py SERVER_BIN CLIENT_BIN CORPUS WORK [IMAGES]

Two datasets, each through one live server:
- the corpus's 8-bit RGB PNGs (every PNG its reference decodes to uint8 x 3),
  decoded here by Pillow and checked against the reference's own sums first;
- IMAGES generated files (default 10,000) of three kinds: uint8 RGB PNGs,
  uint16 gray PNGs and float32 gray TIFFs with NaN and Inf among them, of
  random sizes from 1x1 up, with one histogram range for all (--range).
Integers must be equal (count, min, max, sum, histogram, median, percentiles,
mode); mean, stddev, entropy within 1e-12 relative, float sums within 1e-12
of the sum of magnitudes, skewness and kurtosis within 1e-9.
Then partials: 1,500 of the generated files in three slices, each --partial-out,
merged flat and as a tree in another order (--merge), equal to the one
pass (integer kinds in every field); other options, garbage and another
version refused. Then --resume: stopped by SIGTERM, killed, run to the end:
equal again.
"""
import json
import math
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from live_server import start_server  # noqa: E402

try:
    import numpy as np
    from PIL import Image
except ImportError as e:  # scripts/install-deps installs python3-numpy and python3-pil
    print("skipped:", e)
    sys.exit(77)

PERCENTILES = [0, 1, 5, 25, 50, 75, 95, 99, 100]
RANGE = (-8.0, 8.0)  # the float histogram's explicit range
BINS = 256
failures = []


def fail(what):
    failures.append(what)
    print("FAIL:", what)


def close(got, want, rel, what):
    if got is None or not (abs(got - want) <= rel * abs(want) + 1e-300):
        fail(f"{what}: got {got!r}, numpy {want!r}")


def equal(got, want, what):
    if got != want:
        fail(f"{what}: got {str(got)[:200]}, numpy {str(want)[:200]}")


def aggregate(client_bin, server, files, work, extra=()):
    out = subprocess.run([client_bin, "--server", server, "--aggregate", "--json", "-j", "8",
                          "--percentiles", ",".join(str(p) for p in PERCENTILES), *extra, *files],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"imgstat-client exited {out.returncode}: {out.stderr[-2000:]}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def entropy(counts):
    n = counts.sum()
    p = counts[counts > 0] / n
    return float(-(p * np.log2(p)).sum())


def range_histogram(got, x, what):
    """The histogram over RANGE by docs/conventions.md's float64 formula, under- and overflow."""
    lo, hi = RANGE
    inside = x[(x >= lo) & (x < hi)]
    bins = np.floor((inside - lo) / (hi - lo) * BINS).astype(np.int64)
    want = np.bincount(np.minimum(bins, BINS - 1), minlength=BINS)
    h = got["histogram"]
    equal(h["counts"], [int(v) for v in want], what + " histogram")
    equal(h["underflow"], int((x < lo).sum()), what + " underflow")
    equal(h["overflow"], int((x >= hi).sum()), what + " overflow")


def check_integer_channel(got, x, type_lo, bits, what, ranged):
    """x: int64 samples of one channel (or of all channels, the summary)."""
    n = x.size
    equal(got["count"], n, what + " count")
    equal(got["min"], int(x.min()), what + " min")
    equal(got["max"], int(x.max()), what + " max")
    exact_sum = int(x.sum(dtype=np.int64))
    equal(got["sum"], exact_sum, what + " sum")
    close(got["mean"], exact_sum / n, 1e-12, what + " mean")
    xf = x.astype(np.float64)
    mean = math.fsum(xf) / n
    d = xf - mean
    var = math.fsum(d * d) / n
    close(got["stddev"], math.sqrt(var), 1e-12, what + " stddev")
    values = np.bincount(x - type_lo, minlength=1 << bits)
    if ranged:
        range_histogram(got, x.astype(np.float64), what)
    elif got.get("histogram") is not None:
        want = np.bincount((x - type_lo) >> (bits - 8), minlength=BINS)
        equal(got["histogram"]["counts"], [int(v) for v in want], what + " histogram")
    equal(got["median"], int(np.percentile(x, 50, method="inverted_cdf")), what + " median")
    equal([p["value"] for p in got["percentiles"]],
          [int(np.percentile(x, p, method="inverted_cdf")) for p in PERCENTILES], what + " percentiles")
    equal(got["mode"], int(np.argmax(values)) + type_lo, what + " mode")
    close(got["entropy"], entropy(values), 1e-12, what + " entropy")
    m2, m3, m4 = (math.fsum(d ** k) / n for k in (2, 3, 4))
    if m2 > 0:
        close(got["skewness"], m3 / m2 ** 1.5, 1e-9, what + " skewness")
        close(got["kurtosis"], m4 / m2 ** 2 - 3, 1e-9, what + " kurtosis")


def check_float_channel(got, x, what, histogram):
    finite = x[np.isfinite(x)].astype(np.float64)
    n = finite.size
    equal(got["count"], n, what + " count")
    equal(got["nan_count"], int(np.isnan(x).sum()), what + " nan")
    equal(got["posinf_count"], int(np.isposinf(x).sum()), what + " +inf")
    equal(got["neginf_count"], int(np.isneginf(x).sum()), what + " -inf")
    equal(got["min"], float(finite.min()), what + " min")
    equal(got["max"], float(finite.max()), what + " max")
    exact = math.fsum(finite)
    sum_abs = math.fsum(np.abs(finite))
    if abs(got["sum"] - exact) > 1e-12 * sum_abs:
        fail(f"{what} sum: got {got['sum']!r}, exact {exact!r}")
    if abs(got["mean"] - exact / n) > 1e-12 * sum_abs / n:
        fail(f"{what} mean: got {got['mean']!r}, exact {exact / n!r}")
    mean = exact / n
    d = finite - mean
    m2, m3, m4 = (math.fsum(d ** k) / n for k in (2, 3, 4))
    close(got["stddev"], math.sqrt(m2), 1e-12, what + " stddev")
    close(got["skewness"], m3 / m2 ** 1.5, 1e-9, what + " skewness")
    close(got["kurtosis"], m4 / m2 ** 2 - 3, 1e-9, what + " kurtosis")
    if histogram:
        range_histogram(got, finite, what)


def check_group(got, arrays, kind, what, ranged):
    """arrays: each image as H x W x C (or H x W) numpy array in reported channel order."""
    channels = 1 if arrays[0].ndim == 2 else arrays[0].shape[2]
    flat = np.concatenate([a.reshape(-1, channels) for a in arrays])
    equal(got["images"], len(arrays), what + " images")
    equal(got["channel_count"], channels, what + " channels")
    for c in range(channels):
        if kind == "float32":
            check_float_channel(got["channels"][c], flat[:, c], f"{what} channel {c}", histogram=ranged)
        else:
            lo, bits = (0, 8) if kind == "uint8" else (0, 16)
            check_integer_channel(got["channels"][c], flat[:, c].astype(np.int64), lo, bits, f"{what} channel {c}",
                                  ranged)
    if kind != "float32":
        lo, bits = (0, 8) if kind == "uint8" else (0, 16)
        # The summary has no histogram.
        check_integer_channel(got["summary"], flat.reshape(-1).astype(np.int64), lo, bits, what + " all", False)


def corpus_rgb_pngs(corpus):
    files, arrays = [], []
    for line in open(os.path.join(corpus, "reference.jsonl")):
        entry = json.loads(line)
        ref = entry.get("reference")
        if not (entry["file"].startswith("png/") and ref and ref["sample_type"] == "uint8" and ref["channels"] == 3):
            continue
        a = np.asarray(Image.open(os.path.join(corpus, entry["file"])).convert("RGB"))
        sums = [int(a[:, :, c].sum(dtype=np.int64)) for c in range(3)]
        if sums != [s["sum"] for s in ref["stats"]]:
            raise SystemExit(f"Pillow decodes {entry['file']} otherwise than the reference: {sums}")
        files.append(os.path.join(corpus, entry["file"]))
        arrays.append(a)
    return files, arrays


def generate(work, count):
    rng = np.random.default_rng(23)
    kinds = {"uint8": [], "uint16": [], "float32": []}
    files = {k: [] for k in kinds}
    for i in range(count):
        kind = ("uint8", "uint16", "float32")[i % 3]
        w, h = (int(v) for v in rng.integers(1, 48, 2))
        if i < 3:
            w = h = 1  # single pixels
        if kind == "uint8":
            a = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            if i % 7 == 0:
                a[:] = rng.integers(0, 256)  # constant images
            path = os.path.join(work, f"gen-{i:05d}.png")
            Image.fromarray(a, "RGB").save(path)
        elif kind == "uint16":
            a = rng.integers(0, 65536, (h, w), dtype=np.uint16)
            if i % 11 == 0:
                a[:] = 65535
            path = os.path.join(work, f"gen-{i:05d}.png")
            Image.fromarray(a).save(path)
        else:
            a = (rng.standard_normal((h, w)) * 3 + rng.normal(0, 2)).astype(np.float32)
            if i % 5 == 0:
                a.flat[rng.integers(0, a.size)] = rng.choice([np.nan, np.inf, -np.inf])
            path = os.path.join(work, f"gen-{i:05d}.tif")
            Image.fromarray(a, "F").save(path)
        kinds[kind].append(a)
        files[kind].append(path)
    return files, kinds


def run_client(client_bin, *args, timeout=600):
    return subprocess.run([client_bin, *args], capture_output=True, text=True, timeout=timeout)


def lines(out):
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def check_same(got, want, kinds, what):
    """--merge's or --resume's answers against the one pass's: integer kinds equal in every field, float
    kinds against numpy (their moments merged in another order round otherwise)."""
    by_type = {g["sample_type"]: g for g in got}
    equal(sorted(by_type), sorted(g["sample_type"] for g in want), what + ": kinds of image")
    for g in want:
        kind = g["sample_type"]
        if kind not in by_type:
            continue
        if kind.startswith("float"):
            check_group(by_type[kind], kinds[kind], kind, f"{what} {kind}", ranged=True)
        else:
            equal(by_type[kind], g, f"{what} {kind}: every field as the one pass's")


def check_partials(client_bin, address, files, kinds, want, work):
    """--partial-out over three unequal slices, merged flat and as a tree, equal to one pass; refusals."""
    ranged = ["--range", f"{RANGE[0]}:{RANGE[1]}"]
    per = ["--percentiles", ",".join(str(p) for p in PERCENTILES)]
    everything = sorted(f for k in files for f in files[k])
    cuts = [0, len(everything) // 7, len(everything) // 2, len(everything)]
    parts = []
    for k in range(3):
        path = os.path.join(work, f"slice-{k}.partial")
        out = run_client(client_bin, "--server", address, "--aggregate", "-j", "8", *ranged, "--partial-out", path,
                         *everything[cuts[k]:cuts[k + 1]])
        equal(out.returncode, 0, f"--partial-out slice {k}: {out.stderr[-300:]}")
        parts.append(path)
    out = run_client(client_bin, "--merge", "--json", *per, *parts)
    equal(out.returncode, 0, f"--merge: {out.stderr[-300:]}")
    check_same(lines(out), want, kinds, "--merge of three slices")
    tree = os.path.join(work, "slices-0-1.partial")
    out = run_client(client_bin, "--merge", "--partial-out", tree, parts[1], parts[0])
    equal(out.returncode, 0, f"--merge --partial-out: {out.stderr[-300:]}")
    out = run_client(client_bin, "--merge", "--json", *per, parts[2], tree)
    check_same(lines(out), want, kinds, "--merge as a tree, in another order")
    # Refused: other options, not a partial, another version.
    other = os.path.join(work, "other-range.partial")
    run_client(client_bin, "--server", address, "--aggregate", "--range", "0:1", "--partial-out", other, everything[2])
    out = run_client(client_bin, "--merge", parts[0], other)
    equal((out.returncode, "made with other options" in out.stderr), (1, True), f"--merge of other options: {out.stderr[-300:]}")
    for name, data, says in (("garbage.partial", b"\xff" * 64, "not a partial"),
                             ("future.partial", b"\x08\x02", "its version is 2")):
        path = os.path.join(work, name)
        with open(path, "wb") as f:
            f.write(data)
        out = run_client(client_bin, "--merge", parts[0], path)
        equal((out.returncode, says in out.stderr), (1, True), f"--merge of {name}: {out.stderr[-300:]}")
    print(f"partials: {len(everything)} images in three slices, merged flat and as a tree: compared")


def check_resume(client_bin, address, files, kinds, want, work):
    """--resume stopped by SIGTERM (its state saved), then killed outright (SIGKILL: the last state saved
    stands), then run to the end: the answers of one pass, each input counted once."""
    import signal
    import time
    state = os.path.join(work, "pass.state")
    if os.path.exists(state):
        os.remove(state)
    args = [client_bin, "--server", address, "--aggregate", "--json", "-j", "1", "--range", f"{RANGE[0]}:{RANGE[1]}",
            "--percentiles", ",".join(str(p) for p in PERCENTILES), "--resume", state,
            *sorted(f for k in files for f in files[k])]
    stopped = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for _ in range(600):  # the state is written as the pass begins (its handler of SIGTERM set)
        if os.path.exists(state):
            break
        time.sleep(0.05)
    stopped.send_signal(signal.SIGTERM)
    _, err = stopped.communicate(timeout=600)
    equal((stopped.returncode, "stopped after" in err), (130, True), f"--resume stopped by SIGTERM: {err[-300:]}")
    killed = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3.0)  # past a periodic save
    killed.kill()
    killed.communicate(timeout=600)
    out = subprocess.run(args, capture_output=True, text=True, timeout=600)
    equal(out.returncode, 0, f"--resume to the end: {out.stderr[-300:]}")
    check_same(lines(out), want, kinds, "--resume after a stop and a kill")
    print(f"resume: stopped, killed and resumed: compared ({err.strip()[-120:]})")


def main():
    server_bin, client_bin, corpus, work = sys.argv[1:5]
    count = int(sys.argv[5]) if len(sys.argv) > 5 else 10000
    os.makedirs(work, exist_ok=True)
    server, address = start_server(server_bin, work)
    try:
        files, arrays = corpus_rgb_pngs(corpus)
        groups = aggregate(client_bin, address, files, work)
        equal(len(groups), 1, "corpus: kinds of image")
        check_group(groups[0], arrays, "uint8", f"corpus ({len(files)} RGB PNGs)", ranged=False)
        print(f"corpus: {len(files)} 8-bit RGB PNGs, {sum(a.size for a in arrays) // 3} pixels: compared")

        gen_dir = os.path.join(work, "generated")
        os.makedirs(gen_dir, exist_ok=True)
        files, kinds = generate(gen_dir, count)
        groups = aggregate(client_bin, address, [gen_dir], work, ["--range", f"{RANGE[0]}:{RANGE[1]}"])
        by_type = {g["sample_type"]: g for g in groups}
        equal(sorted(by_type), ["float32", "uint16", "uint8"], "generated: kinds of image")
        for kind in ("uint8", "uint16", "float32"):
            if kind in by_type:
                check_group(by_type[kind], kinds[kind], kind, f"generated {kind}", ranged=True)
        print(f"generated: {count} images in 3 kinds: compared")
        # Partials and --resume over 1,500 of them (500 of each kind), against one pass over the same.
        files = {k: v[:500] for k, v in files.items()}
        kinds = {k: v[:500] for k, v in kinds.items()}
        subset = aggregate(client_bin, address, sorted(f for k in files for f in files[k]), work,
                           ["--range", f"{RANGE[0]}:{RANGE[1]}"])
        check_partials(client_bin, address, files, kinds, subset, work)
        check_resume(client_bin, address, files, kinds, subset, work)
    finally:
        server.terminate()
        server.wait(timeout=30)
    if failures:
        print(f"{len(failures)} differences")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
