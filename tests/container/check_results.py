#!/usr/bin/python3
"""check_results.py CORPUS RESULTS.jsonl: every answer (imgstat-client --json)
holds its file's reference numbers: width, sample type, each channel's name,
min, max and histogram exactly, the mean within 1e-12."""
import json
import sys

corpus, results = sys.argv[1], sys.argv[2]
refs = {json.loads(l)["file"]: json.loads(l) for l in open(f"{corpus}/reference.jsonl")}
lines = open(results).read().splitlines()
assert lines, "no answers"
for line in lines:
    got = json.loads(line)
    want = refs[got["file"][len(corpus) + 1:]]["reference"]
    assert got["ok"] and got["width"] == want["width"] and got["sample_type"] == want["sample_type"], got["file"]
    for g, w in zip(got["channels"], want["stats"]):
        assert g["name"] == w["channel"] and g["min"] == w["min"] and g["max"] == w["max"], (got["file"], g["name"])
        assert g["histogram"]["counts"] == w["histogram"], (got["file"], g["name"])
        assert abs(g["mean"] - w["mean"]) <= 1e-12 * abs(w["mean"]), (got["file"], g["name"])
    print("ok", got["file"], got["engine"])
