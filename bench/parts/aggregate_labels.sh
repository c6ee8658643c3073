#!/usr/bin/env bash
# A segmentation dataset's per-class statistics against its plain aggregate:
# N (default 1000) 500x375 RGB PNGs with 16-bit label PNGs of the same stem,
# `imgstat-client --aggregate` with and without `--labels DIR`, through one
# server (CPU engine unless ENGINE=cuda), best of 3 each, and the ratio of
# rates (the target: with labels at least 0.8x the rate without).
#   bench/parts/aggregate_labels.sh SERVER_BIN CLIENT_BIN [N] [WORK]
set -euo pipefail
server=$1 client=$2 n=${3:-1000} work=${4:-/tmp/imgstat-aggregate-labels}
mkdir -p "$work/img" "$work/labels"
if [ "$(ls "$work/img" | wc -l)" -ne "$n" ]; then
  rm -f "$work"/img/* "$work"/labels/*
  /usr/bin/python3 - "$work" "$n" <<'PY'
import sys, numpy as np
from PIL import Image
work, n = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(3)
for i in range(n):
    y, x = np.mgrid[0:375, 0:500]
    img = np.clip(128 + 80 * np.sin(x / (40 + i % 7)) * np.cos(y / 50) + rng.normal(0, 12, (375, 500)), 0, 255)
    rgb = np.stack([img, np.roll(img, 17, 1), np.roll(img, 31, 0)], -1).astype(np.uint8)
    Image.fromarray(rgb).save(f"{work}/img/{i:05d}.png")
    lab = rng.integers(0, 20, (375 // 25 + 1, 500 // 25 + 1)).repeat(25, 0).repeat(25, 1)[:375, :500].astype(np.uint16)
    Image.fromarray(lab).save(f"{work}/labels/{i:05d}.png")
PY
fi
log=$work/server.log
"$server" --listen 127.0.0.1:0 --engine "${ENGINE:-cpu}" --region-socket off 2>"$log" & pid=$!
trap 'kill $pid 2>/dev/null' EXIT
for _ in $(seq 100); do grep -q "listening on" "$log" && break; sleep 0.1; done
addr=127.0.0.1:$(grep -o "listening on [^ ]*" "$log" | grep -o "[0-9]*$")
best() {  # best wall time of 3, in seconds
  local b=999
  for _ in 1 2 3; do
    local t0=$(date +%s.%N)
    "$client" --server "$addr" --aggregate --json -j 8 --stats min_max,sum,stddev,histogram "$@" "$work"/img/*.png >/dev/null
    b=$(echo "$b $(date +%s.%N) $t0" | awk '{t=$2-$3; print (t<$1)?t:$1}')
  done
  echo "$b"
}
plain=$(best)
labelled=$(best --labels "$work/labels" --ignore-label 0)
echo "$n pairs, ${ENGINE:-cpu} engine, $(nproc) cores:"
awk -v n="$n" -v a="$plain" -v b="$labelled" 'BEGIN {
  printf "  --aggregate                  %.2f s  %.0f images/s\n", a, n / a
  printf "  --aggregate --labels DIR     %.2f s  %.0f images/s  (%.2fx the rate without labels)\n", b, n / b, a / b }'
