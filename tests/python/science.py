"""What the checks of scientific formats (FITS, NIfTI) share: the client's
JSON answers, refusals by status name, and one channel's statistics against
numpy over the values the reference reader gives."""
import json
import os
import subprocess
import sys

import numpy as np

from verdicts import close, equal, fail

TYPES = {"uint8": np.uint8, "int8": np.int8, "uint16": np.uint16, "int16": np.int16,
         "float32": np.float32, "float64": np.float64}


def answers(client_bin, where, *args):
    out = subprocess.run([client_bin, *where, "--json", *args], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        fail(f"imgstat-client {' '.join(args)} exited {out.returncode}: {out.stderr[-1000:]}")
        return []
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def refused(client_bin, where, path, code, what, *args):
    out = subprocess.run([client_bin, *where, *args, path], capture_output=True, text=True, timeout=600)
    if out.returncode == 0 or code not in out.stderr + out.stdout:
        fail(f"{what}: expected {code}, got exit {out.returncode}: {(out.stderr + out.stdout)[-600:]}")


def check_stats(ch, v, typ, what):
    x = v.ravel()
    finite = x[np.isfinite(x)]
    equal(ch["count"], int(finite.size), what + " count")
    if typ.startswith("float"):
        equal(ch.get("nan_count", 0), int(np.isnan(x).sum()), what + " NaN count")
        equal(ch.get("posinf_count", 0), int(np.isposinf(x).sum()), what + " +inf count")
        equal(ch.get("neginf_count", 0), int(np.isneginf(x).sum()), what + " -inf count")
    if finite.size == 0:
        return
    equal(ch["min"], finite.min().item(), what + " min")
    equal(ch["max"], finite.max().item(), what + " max")
    if typ.startswith("float"):
        exact = sum(sorted(finite.tolist(), key=abs))
        close(ch["sum"], exact, 1e-12, what + " sum")
    else:
        exact = int(finite.astype(np.int64).sum())
        equal(ch["sum"], exact, what + " sum")
    mean = exact / finite.size
    close(ch["mean"], mean, 1e-12, what + " mean")
    d = finite - mean
    close(ch["stddev"], float(np.sqrt((d * d).sum() / finite.size)), 1e-12 if d.any() else 0, what + " stddev")
    if not typ.startswith("float") and ch.get("histogram") is not None:
        info = np.iinfo(TYPES[typ])
        shift = 0 if info.bits == 8 else 8
        idx = (finite.astype(np.int64) - info.min) >> shift
        equal(ch["histogram"]["counts"], np.bincount(idx, minlength=256).tolist(), what + " histogram")




def command_line(doc):
    """(server binary, client binary, work folder made) from a check's arguments."""
    if len(sys.argv) != 4:
        raise SystemExit(doc)
    server_bin, client_bin, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    return server_bin, client_bin, work


def check_label_parts(got, values, labels, typ, what):
    """An answer's label parts (one a label present, ascending) against numpy over the values under each label."""
    parts = got[0].get("parts", []) if got else []
    equal([p.get("label") for p in parts], sorted(set(labels.ravel().tolist())), what + " labels")
    for p in parts:
        v = values[labels == p["label"]]
        check_stats(p["channels"][0], v.astype(np.float64) if typ.startswith("float") else v, typ,
                    f"{what} label {p['label']}")
