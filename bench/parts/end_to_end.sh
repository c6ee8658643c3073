#!/usr/bin/env bash
# Parts of one large photo end to end, through a server, against the whole
# image in the same run: an 8000x6000 RGB JPEG (photo-like, quality 90),
# a mask of about half its pixels (a 1-bit-like PNG), 192 labels (a 16-bit
# PNG of 500x500 blocks) and 16x16 tiles. Each question is the whole
# command (`imgstat-client --json`), median of R runs (default 7); the
# target (issue 52): every part kind at most 1.25x the whole image's time.
#   bench/parts/end_to_end.sh SERVER_BIN CLIENT_BIN [R] [WORK]
# ENGINE=cuda for the CUDA engine (the GPU decodes the JPEG where it can).
set -euo pipefail
server=$1 client=$2 runs=${3:-7} work=${4:-/tmp/imgstat-parts-e2e}
mkdir -p "$work"
if [ ! -s "$work/labels.png" ]; then
  "${PYTHON:-python3}" - "$work" <<'PY'
import sys, numpy as np, cv2
work = sys.argv[1]
h, w = 6000, 8000
rng = np.random.default_rng(7)
y, x = np.mgrid[0:h, 0:w].astype(np.float32)
base = 128 + 70 * np.sin(x / 90) * np.cos(y / 130) + rng.normal(0, 10, (h, w)).astype(np.float32)
bgr = np.clip(np.stack([base, np.roll(base, 37, 1) * 0.9 + 20, np.roll(base, 53, 0) * 0.8 + 30], -1), 0, 255).astype(np.uint8)
cv2.imwrite(f"{work}/photo.jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, 90])
mask = (((x - w / 2) ** 2 / (0.4 * w) ** 2 + (y - h / 2) ** 2 / (0.5 * h) ** 2) < 0.8).astype(np.uint8) * 255
cv2.imwrite(f"{work}/mask.png", mask)
labels = ((y // 500) * 16 + (x // 500)).astype(np.uint16)
cv2.imwrite(f"{work}/labels.png", labels)
print(f"mask keeps {np.count_nonzero(mask) / mask.size:.2f} of the pixels", file=sys.stderr)
PY
fi
log=$work/server.log
# REGIONS=1: the server takes files from this host as shared memory (its
# region socket); else they go as messages, as from another host.
if [ "${REGIONS:-0}" = 1 ]; then regions=(--region-socket "$work/regions.sock"); else regions=(--region-socket off); fi
"$server" --listen 127.0.0.1:0 --engine "${ENGINE:-cpu}" "${regions[@]}" 2>"$log" & pid=$!
trap 'kill $pid 2>/dev/null' EXIT
for _ in $(seq 300); do grep -q "listening on" "$log" && break; sleep 0.1; done
addr=127.0.0.1:$(grep -o "listening on [^ ]*" "$log" | grep -o "[0-9]*$")
median() {  # median wall time of $runs whole commands, in seconds
  for _ in $(seq "$runs"); do
    local t0=$(date +%s.%N)
    "$client" --server "$addr" --json "$@" "$work/photo.jpg" >/dev/null
    echo "$(date +%s.%N) $t0" | awk '{print $1-$2}'
  done | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}
"$client" --server "$addr" --json "$work/photo.jpg" >/dev/null  # warm: the first call starts what the server starts lazily
whole=$(median)
tiles=$(median --tiles 16x16)
mask=$(median --mask "$work/mask.png")
labels=$(median --labels "$work/labels.png")
decoder=$("$client" --server "$addr" --json --tiles 2x2 "$work/photo.jpg" | "${PYTHON:-python3}" -c 'import json,sys; d=json.load(sys.stdin); d=d[0] if isinstance(d,list) else d; print(d.get("decoder","?"))')
echo "8000x6000 RGB JPEG, ${ENGINE:-cpu} engine, $(nproc) cores, median of $runs whole commands (parts decoded by: $decoder):"
awk -v a="$whole" -v t="$tiles" -v m="$mask" -v l="$labels" 'BEGIN {
  printf "  %-28s %.3f s\n", "whole image (the baseline)", a
  printf "  %-28s %.3f s  %.2fx\n", "--tiles 16x16", t, t / a
  printf "  %-28s %.3f s  %.2fx\n", "--mask mask.png (half)", m, m / a
  printf "  %-28s %.3f s  %.2fx\n", "--labels labels.png (192)", l, l / a }'
