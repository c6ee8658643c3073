#!/usr/bin/env bash
# Per-label statistics of a volume against scipy.ndimage, in the same run: a
# SIDE^3 TYPE (float32 or int16) volume and a uint16 label volume of 65,536 labels (blocks
# of 2,048 voxels, their numbers shuffled), made here as raw files; count,
# sum, mean, stddev, min, max and the bounding box of every label by
# scipy.ndimage (labels_baseline.py) and by imgstat-client --local (the CPU
# engine), from the page cache, each ROUNDS times, with wall time and peak memory.
#   labels.sh BUILD_DIR [SIDE] [ROUNDS] [TYPE]
set -euo pipefail
build=$(cd "$1" && pwd) side=${2:-512} rounds=${3:-3} type=${4:-float32}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 - "$work" "$side" "$type" <<'PY'
import sys
import numpy as np
work, side, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rng = np.random.default_rng(49)
if kind == "int16":  # CT-like: Hounsfield units
    rng.integers(-1024, 3000, (side, side, side), dtype=np.int16).tofile(f"{work}/vol.raw")
else:
    rng.standard_normal((side, side, side), dtype=np.float32).tofile(f"{work}/vol.raw")
bz, by, bx = max(1, side // 64), max(1, side // 32), max(1, side // 32)  # 64 x 32 x 32 blocks
ids = rng.permutation(65536).astype(np.uint16).reshape(64, 32, 32)
z, y, x = np.ogrid[0:side, 0:side, 0:side]
labels = ids[np.minimum(z // bz, 63), np.minimum(y // by, 31), np.minimum(x // bx, 31)]
labels.tofile(f"{work}/labels.raw")
PY
cat "$work"/*.raw >/dev/null  # into the page cache
echo "$(nproc) cores; ${side}^3 $type volume ($(du -m "$work/vol.raw" | cut -f1) MB), uint16 labels"
. "$here/measure.sh"
for r in $(seq "$rounds"); do
  measure "scipy.ndimage" /usr/bin/python3 "$here/labels_baseline.py" "$work/vol.raw" "$work/labels.raw" "$side" "$type"
  [ "$r" = 1 ] && grep baseline "$work/out"
  measure "imgstat --local (cpu)" "$build/client/imgstat-client" --local --raw "${side}x${side}x1x${side}:$type" \
    --labels "$work/labels.raw" --map-raw "${side}x${side}x1x${side}:uint16" --stats min_max,sum,stddev --json \
    "$work/vol.raw"
  [ "$r" = 1 ] && /usr/bin/python3 -c "
import json, sys
j = json.load(open(sys.argv[1]))
p = [p for p in j['parts'] if p['label'] == 7][0]
c = p['channels'][0]
print(f\"imgstat: {len(j['parts'])} labels, voxels of label 7 {c['count']}, sum {c['sum']:.6f}, min {c['min']:.6f}, max {c['max']:.6f}, box of label 7 {p['box']}\")" "$work/out"
done
