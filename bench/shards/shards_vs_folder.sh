#!/usr/bin/env bash
# A dataset in tar shards against the same files unpacked in a folder:
# N (default 10000) 500x375 JPEGs, in 10 shards (uncompressed tar, as
# WebDataset writes them; and zip, and gzip-compressed tar), `imgstat-client
# --aggregate` through one server (CPU engine unless ENGINE=cuda), best of 3
# each: rates, the ratio to the folder's (the target: 0.95x for the tars),
# the answers compared, and the client's and the server's peak memory
# (/usr/bin/time) on one shard of about 2 GB (2,000 members of 1 MB)
# against the same pass over a folder.
#   bench/shards/shards_vs_folder.sh SERVER_BIN CLIENT_BIN [N] [WORK]
set -euo pipefail
server=$1 client=$2 n=${3:-10000} work=${4:-/tmp/imgstat-shards-bench}
mkdir -p "$work/img"
if [ "$(ls "$work/img" | wc -l)" -ne "$n" ]; then
  rm -rf "$work"/img/* "$work"/shards "$work"/big
  /usr/bin/python3 "$(dirname "$0")/make_jpegs.py" "$work/img" "$n"
fi
if [ ! -d "$work/shards" ]; then
  mkdir -p "$work/shards"
  /usr/bin/python3 - "$work" <<'PY'
import os, sys, tarfile, zipfile
work = sys.argv[1]
names = sorted(os.listdir(f"{work}/img"))
for s in range(10):
    part = names[s::10]
    for suffix, mode in ((".tar", "w"), (".tar.gz", "w:gz")):
        with tarfile.open(f"{work}/shards/shard-{s:02d}{suffix}", mode) as t:
            for name in part:
                t.add(f"{work}/img/{name}", arcname=name)
    with zipfile.ZipFile(f"{work}/shards/shard-{s:02d}.zip", "w", compression=zipfile.ZIP_STORED) as z:
        for name in part:
            z.write(f"{work}/img/{name}", arcname=name)
PY
fi
log=$work/server.log
"$server" --listen 127.0.0.1:0 --engine "${ENGINE:-cpu}" --region-socket off 2>"$log" & pid=$!
trap 'kill $pid 2>/dev/null' EXIT
for _ in $(seq 100); do grep -q "listening on" "$log" && break; sleep 0.1; done
addr=127.0.0.1:$(grep -o "listening on [^ ]*" "$log" | grep -o "[0-9]*$")
best() {  # best wall time of 3, in seconds; the answer kept in $work/answer.$1
  local tag=$1 b=999
  shift
  for _ in 1 2 3; do
    local t0=$(date +%s.%N)
    "$client" --server "$addr" --aggregate --json --stats min_max,sum,stddev,histogram "$@" \
      | sed -E 's/"(decode|compute)_ms":[0-9.e+-]+,?//g' >"$work/answer.$tag"
    b=$(echo "$b $(date +%s.%N) $t0" | awk '{t=$2-$3; print (t<$1)?t:$1}')
  done
  echo "$b"
}
folder=$(best folder "$work/img")
tars=$(best tar "$work/shards/shard-{00..09}.tar")
zips=$(best zip "$work/shards/shard-{00..09}.zip")
gz=$(best gz "$work/shards/shard-{00..09}.tar.gz")
same() { cmp -s "$work/answer.folder" "$work/answer.$1" && echo "equal" || echo "DIFFERENT"; }
echo "$n JPEGs 500x375, 10 shards, --aggregate, ${ENGINE:-cpu} engine, $(nproc) cores:"
awk -v n="$n" -v f="$folder" -v t="$tars" -v z="$zips" -v g="$gz" -v st="$(same tar)" -v sz="$(same zip)" -v sg="$(same gz)" 'BEGIN {
  printf "  folder (the baseline)      %6.2f s  %6.0f images/s\n", f, n / f
  printf "  10 tar shards              %6.2f s  %6.0f images/s  %.2fx the folder  answer %s\n", t, n / t, f / t, st
  printf "  10 zip shards (stored)     %6.2f s  %6.0f images/s  %.2fx the folder  answer %s\n", z, n / z, f / z, sz
  printf "  10 tar.gz shards           %6.2f s  %6.0f images/s  %.2fx the folder  answer %s\n", g, n / g, f / g, sg }'

# Memory: the client's peak on one shard of about 2 GB (2,000 members of
# 1 MiB: random 1024x1024 PGMs) against the same pass over the folder.
[ "${BIG:-1}" = 1 ] || exit 0
if [ ! -f "$work/big/big.tar" ]; then
  mkdir -p "$work/big/img"
  /usr/bin/python3 - "$work/big" <<'PY'
import os, sys, tarfile
work = sys.argv[1]
for i in range(2000):
    with open(f"{work}/img/{i:05d}.pgm", "wb") as f:
        f.write(b"P5\n1024 1024\n255\n" + os.urandom(1 << 20))
with tarfile.open(f"{work}/big.tar", "w") as t:
    for i in range(2000):
        t.add(f"{work}/img/{i:05d}.pgm", arcname=f"{i:05d}.pgm")
PY
fi
peak() {  # the client's peak resident memory, MiB
  /usr/bin/time -f "%M" "$client" --server "$addr" --aggregate --stats min_max,sum "$@" 2>&1 >/dev/null | tail -1 |
    awk '{printf "%.0f", $1 / 1024}'
}
idle=$(/usr/bin/time -f "%M" "$client" --server "$addr" --health 2>&1 >/dev/null | tail -1 | awk '{printf "%.0f", $1 / 1024}')
echo "  client peak memory: idle (--health) $idle MiB, a 2 GiB folder $(peak "$work/big/img") MiB," \
  "the same as one 2 GiB tar $(peak "$work/big/big.tar") MiB"
# The other side: a server of its own for each pass, its peak when stopped.
server_peak() {
  /usr/bin/time -f "%M" -o "$work/server-peak" "$server" --listen 127.0.0.1:50197 --engine "${ENGINE:-cpu}" \
    >"$work/server-peak.log" 2>&1 &
  local pid=$!
  sleep 2
  "$client" --server 127.0.0.1:50197 "$@" >/dev/null 2>&1 || true
  pkill -TERM -P "$pid" -x imgstat-server || true
  wait "$pid" || true
  awk '{printf "%.0f", $1 / 1024}' "$work/server-peak"
}
echo "  server peak memory: idle (one --health) $(server_peak --health) MiB," \
  "the 2 GiB folder $(server_peak --aggregate --stats min_max,sum "$work/big/img") MiB," \
  "the 2 GiB tar $(server_peak --aggregate --stats min_max,sum "$work/big/big.tar") MiB"
