#!/usr/bin/env python3
"""Holds a caller's answers to imgstat-client's (--local --json) for the same
inputs: every count, sum, extreme, order statistic and the summary exact,
bad files refused with INVALID_ARGUMENT. Exit 0 when all agree."""
import json
import re
import sys


def want_by_file(path):
    out = {}
    for line in open(path):
        j = json.loads(line)
        out[j["file"]] = j
    return out


def number(v):
    return float(v) if v is not None else None


def compare_channel(where, got, want, errors):
    checks = [("count", int), ("min", number), ("max", number), ("mean", number), ("stddev", number),
              ("median", number), ("mode", number), ("entropy", number), ("skewness", number), ("kurtosis", number)]
    for key, conv in checks:
        if want.get(key) is None:
            continue
        g = got.get(key)
        if g is None or conv(g) != conv(want[key]):
            errors.append(f"{where} {key}: got {g}, want {want[key]}")
    want_sum = want.get("sum")
    # Proto JSON (sum_int, a string) or the CLI's (sum, an exact integer).
    got_sum = got.get("sum_int", got.get("sum") if isinstance(got.get("sum"), int) else None)
    if want_sum is not None and isinstance(want_sum, int) and (got_sum is None or int(got_sum) != want_sum):
        errors.append(f"{where} sum: got {got_sum}, want {want_sum}")
    # proto3 JSON leaves out zero values of plain (not optional) fields.
    gp = [(float(p.get("p", 0)), float(p.get("value", 0))) for p in got.get("percentiles", [])]
    wp = [(float(p["p"]), float(p["value"])) for p in want.get("percentiles", [])]
    if gp != wp:
        errors.append(f"{where} percentiles: got {gp}, want {wp}")
    for key in ("min_position", "max_position"):
        if key not in want:
            continue
        # The CLI names a position's plane only in a file of several.
        position = {"x": 0, "y": 0, "plane": 0} | {k: int(v) for k, v in (got.get(key) or {}).items()}
        if position != {"plane": 0} | want[key]:
            errors.append(f"{where} {key}: got {got.get(key)}, want {want[key]}")


def check_json(answers, want, methods, parts_want):
    """parts_want: the CLI's answer for each parts method (AnalyzeMask, AnalyzeLabels)."""
    errors, seen = [], set()
    for line in open(answers):
        a = json.loads(line)
        w = parts_want.get(a["method"]) or want.get(a["file"]) or next(w for f, w in want.items() if f.endswith(".raw"))
        seen.add((a["method"], a["file"]))
        if "error" in a:
            if w["ok"] or a["error"]["code"] != w["code"]:
                errors.append(f"{a['file']}: error {a['error']}, want {w.get('code')}")
            continue
        r = a["response"]
        for i, (g, c) in enumerate(zip(r["channels"], w["channels"])):
            compare_channel(f"{a['method']} {a['file']} channel {i}", g, c, errors)
        if len(r["channels"]) != len(w["channels"]):
            errors.append(f"{a['file']}: {len(r['channels'])} channels, want {len(w['channels'])}")
        for key in ("summary", "luminance"):
            if key in w:
                compare_channel(f"{a['method']} {a['file']} {key}", r.get(key, {}), w[key], errors)
        got_parts, want_parts = r.get("parts", []), w.get("parts", [])
        if len(got_parts) != len(want_parts):
            errors.append(f"{a['method']} {a['file']}: {len(got_parts)} parts, want {len(want_parts)}")
        for g, p in zip(got_parts, want_parts):
            if int(g.get("label", 0)) != p["label"]:  # proto3 JSON writes int64 as a string
                errors.append(f"{a['method']} {a['file']}: label {g.get('label')}, want {p['label']}")
            for i, (gc, wc) in enumerate(zip(g["channels"], p["channels"])):
                compare_channel(f"{a['method']} {a['file']} label {p['label']} channel {i}", gc, wc, errors)
        if "unique_colors" in w and int(r.get("unique_colors", -1)) != w["unique_colors"]:
            errors.append(f"{a['file']} unique_colors: got {r.get('unique_colors')}, want {w['unique_colors']}")
    for method in methods:
        if not any(m == method for m, _ in seen):
            errors.append(f"no answer from {method}")
    return errors


def check_shell(answers, want):
    """The shell caller prints protobuf text: every sum_int, in order, and the batch's error code."""
    text = open(answers).read()
    got_sums = [int(v) for v in re.findall(r"^\s*sum_int: (-?\d+)$", text, re.M)]
    errors = []
    sections = re.split(r"^#(\w+)$", text, flags=re.M)[1:]
    methods = sections[0::2]
    if methods != ["Analyze", "AnalyzeStream", "AnalyzeBatch"]:
        errors.append(f"sections {methods}")
    want_sums = []
    for w in want.values():
        if w["ok"]:
            want_sums += [c["sum"] for c in w["channels"]] + ([w["luminance"]["sum"]] if "luminance" in w else []) + [w["summary"]["sum"]]
    if sorted(got_sums) != sorted(want_sums):
        errors.append(f"sums {sorted(got_sums)} want {sorted(want_sums)}")
    if "code: 3" not in text:
        errors.append("the bad file's INVALID_ARGUMENT (code: 3) is missing")
    return errors


def main():
    kind, answers, want_path = sys.argv[1:4]
    methods = sys.argv[4].split(",") if len(sys.argv) > 4 else ["Analyze", "AnalyzeStream", "AnalyzeBatch"]
    want = want_by_file(want_path)
    parts_want = {}
    for method, path in zip(["AnalyzeMask", "AnalyzeLabels"], sys.argv[5:7]):
        parts_want[method] = json.loads(open(path).readline())
    errors = check_json(answers, want, methods, parts_want) if kind == "json" else check_shell(answers, want)
    for e in errors:
        print(e)
    print(f"{len(errors)} differences")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
