#!/usr/bin/env bash
# An animation's statistics frame by frame against what a Pillow user runs,
# in the same run: a FRAMES-frame WxH animated GIF (default 200 of 640x480),
# made here with Pillow (moving shapes over a gradient, one adaptive palette a
# frame); Pillow's ImageSequence + ImageStat per frame (gif_baseline.py)
# and imgstat-client --local --planes (the CPU engine), from the page cache,
# each ROUNDS times, with wall time and peak memory.
#   gif.sh BUILD_DIR [FRAMES] [WIDTH] [HEIGHT] [ROUNDS]
set -euo pipefail
build=$(cd "$1" && pwd) frames=${2:-200} width=${3:-640} height=${4:-480} rounds=${5:-3}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 - "$work/anim.gif" "$frames" "$width" "$height" <<'PY'
import sys
import numpy as np
from PIL import Image
path, n, w, h = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(49)
y, x = np.mgrid[0:h, 0:w]
frames = []
for i in range(n):
    f = np.stack([(x * 255 // w + i) % 256, (y * 255 // h + 2 * i) % 256, ((x + y) // 4 + 3 * i) % 256], -1)
    for k in range(6):  # shapes that move
        cx, cy = (37 * k + 5 * i) % w, (23 * k + 3 * i) % h
        f[max(0, cy - 30):cy + 30, max(0, cx - 40):cx + 40] = rng.integers(0, 256, 3)
    frames.append(Image.fromarray(f.astype(np.uint8)).quantize(256))
frames[0].save(path, save_all=True, append_images=frames[1:], duration=40, loop=0)
PY
cat "$work/anim.gif" >/dev/null  # into the page cache
echo "$(nproc) cores; $(du -m "$work/anim.gif" | cut -f1) MB, $frames frames of ${width}x${height}"
. "$here/measure.sh"
for r in $(seq "$rounds"); do
  measure "Pillow ImageSequence+Stat" /usr/bin/python3 "$here/gif_baseline.py" "$work/anim.gif"
  [ "$r" = 1 ] && grep baseline "$work/out"
  measure "imgstat --local --planes" "$build/client/imgstat-client" --local --planes --stats min_max,sum,stddev,histogram \
    --json "$work/anim.gif"
  [ "$r" = 1 ] && /usr/bin/python3 -c "
import json, sys
j = json.load(open(sys.argv[1]))
print('imgstat:', len(j['planes']), 'frames, sums', [c['sum'] for c in j['channels']])" "$work/out"
done
