#!/usr/bin/env bash
# imgstat-load against a real server: each mode for a few seconds (or as
# given), corpus files with a share of hostile inputs; fails on any
# unexpected status or, with MAX_RSS_GROWTH, on RSS growth after warm-up.
# Usage: run.sh SERVER_BIN LOAD_BIN CORPUS [SECONDS] [CALLERS] [MODES]
set -euo pipefail
server_bin=$1 load_bin=$2 corpus=$3 seconds=${4:-4} callers=${5:-8} modes=${6:-"unary stream batch"}
log=$(mktemp)
"$server_bin" --listen 127.0.0.1:0 --engine "${IMGSTAT_TEST_ENGINE:-cpu}" >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -f "$log"' EXIT
port=""
for _ in $(seq 200); do
  port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
  [ -n "$port" ] && break
  sleep 0.05
done
[ -n "$port" ] || { cat "$log"; exit 1; }
warmup=$(awk "BEGIN { print ($seconds > 20) ? 10 : $seconds / 4 }")
for mode in $modes; do
  "$load_bin" --server "127.0.0.1:$port" --mode "$mode" --callers "$callers" --seconds "$seconds" --warmup "$warmup" \
    --files "$corpus" --max-file-bytes 4000000 --bad-share 0.1 --server-pid "$pid" \
    ${MAX_RSS_GROWTH:+--max-rss-growth "$MAX_RSS_GROWTH"}
done
echo "server peak RSS: $(awk '/VmHWM/ { printf "%.0f MiB", $2 / 1024 }' /proc/$pid/status)"
kill -TERM $pid
wait $pid
