#!/usr/bin/env bash
# A dataset in an S3-protocol store on loopback (s3rver, as tests/objects
# runs it): N (default 2000) 500x375 JPEGs as objects, `imgstat-client
# --aggregate` over their s3:// names through one server (CPU engine unless
# ENGINE=cuda), best of 3 each:
#   curl                 every object fetched to /dev/null, 16 at once (the baseline: the store's pace)
#   server fetches       a server started with --fetch-allow reads them; the client sends names
#   client fetches       the client reads them and sends their bytes
#   folder               the same files on disk
#   shards in the bucket the same files in 10 uncompressed tar shards as objects, read by the client
#   shards, server reads the client lists the shards, the fetching server reads each member's range
#   curl over the shards the shards fetched to /dev/null, 10 at once (their baseline)
# Rates in MB/s and images/s, the ratio to curl's bytes/s (issue #51's
# target: 0.9x for the server's fetch), and the answers compared with the
# folder's.
#   bench/objects/fetch_vs_curl.sh SERVER_BIN CLIENT_BIN [N] [WORK]
set -euo pipefail
server=$1 client=$2 n=${3:-2000} work=${4:-/tmp/imgstat-objects-bench}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work/img" "$work/npm"
if [ "$(ls "$work/img" | wc -l)" -ne "$n" ]; then
  rm -rf "$work"/img/*
  /usr/bin/python3 "$here/../shards/make_jpegs.py" "$work/img" "$n"
fi
cp "$here/../../tests/objects/package.json" "$here/../../tests/objects/package-lock.json" "$work/npm/"
[ -d "$work/npm/node_modules/s3rver" ] || (cd "$work/npm" && npm ci --no-audit --no-fund --loglevel=error)
port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
s3port=$(port)
rm -rf "$work/s3"
mkdir -p "$work/s3"
node --openssl-legacy-provider "$work/npm/node_modules/s3rver/bin/s3rver.js" -d "$work/s3" -a 127.0.0.1 -p "$s3port" \
  --silent --configure-bucket bench >/dev/null 2>&1 & s3pid=$!
pids=($s3pid)
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$s3port) 2>/dev/null && break; sleep 0.1; done
/usr/bin/python3 - "$work/img" "$s3port" <<'PY'
import http.client, os, sys
folder, port = sys.argv[1], int(sys.argv[2])
c = http.client.HTTPConnection("127.0.0.1", port)
for name in sorted(os.listdir(folder)):
    data = open(os.path.join(folder, name), "rb").read()
    c.request("PUT", f"/bench/img/{name}", body=data, headers={"Content-Length": str(len(data))})
    r = c.getresponse(); r.read()
    assert r.status == 200, (name, r.status)
import io, tarfile
names = sorted(os.listdir(folder))
for k in range(10):
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as t:
        for name in names[k::10]:
            t.add(os.path.join(folder, name), arcname=name)
    body = data.getvalue()
    c.request("PUT", f"/bench/shards/shard-{k:02d}.tar", body=body, headers={"Content-Length": str(len(body))})
    r = c.getresponse(); r.read()
    assert r.status == 200, (k, r.status)
PY
bytes=$(du -sb "$work/img" | cut -f1)
names=()
for f in $(ls "$work/img"); do names+=("s3://bench/img/$f"); done
for f in $(ls "$work/img"); do printf 'url = "http://127.0.0.1:%s/bench/img/%s"\noutput = "/dev/null"\n' "$s3port" "$f"; done >"$work/curl.cfg"
for k in 00 01 02 03 04 05 06 07 08 09; do printf 'url = "http://127.0.0.1:%s/bench/shards/shard-%s.tar"\noutput = "/dev/null"\n' "$s3port" "$k"; done >"$work/curl-shards.cfg"
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1 AWS_ENDPOINT_URL_S3=http://127.0.0.1:$s3port
start() {  # a server with these flags; its address in $addr
  local log=$work/server-$1.log
  shift
  "$server" --listen 127.0.0.1:0 --engine "${ENGINE:-cpu}" --region-socket off "$@" 2>"$log" & pids+=($!)
  for _ in $(seq 100); do grep -q "listening on" "$log" && break; sleep 0.1; done
  addr=127.0.0.1:$(grep -o "listening on [^ ]*" "$log" | grep -o "[0-9]*$")
}
start fetching --fetch-allow s3://bench/
fetching=$addr
start plain
plain=$addr
best() {  # best wall time of 3 of the command after the tag; output to $work/answer.TAG
  local tag=$1 b=999
  shift
  for _ in 1 2 3; do
    local t0=$(date +%s.%N)
    "$@" | sed -E 's/"(decode|compute)_ms":[0-9.e+-]+,?//g' >"$work/answer.$tag"
    b=$(echo "$b $(date +%s.%N) $t0" | awk '{t=$2-$3; print (t<$1)?t:$1}')
  done
  echo "$b"
}
stats=(--aggregate --json --stats min_max,sum,stddev,histogram)
c=$(best curl curl --no-progress-meter --parallel --parallel-max 16 -K "$work/curl.cfg")
s=$(best server "$client" --server "$fetching" "${stats[@]}" "${names[@]}")
l=$(best client "$client" --server "$plain" "${stats[@]}" "${names[@]}")
f=$(best folder "$client" --server "$plain" "${stats[@]}" "$work/img")
cs=$(best curlshards curl --no-progress-meter --parallel --parallel-max 10 -K "$work/curl-shards.cfg")
sh=$(best shards "$client" --server "$plain" "${stats[@]}" "s3://bench/shards/shard-{00..09}.tar")
sf=$(best shardsfetch "$client" --server "$fetching" "${stats[@]}" "s3://bench/shards/shard-{00..09}.tar")
same() { cmp -s "$work/answer.folder" "$work/answer.$1" && echo "equal" || echo "DIFFERENT"; }
echo "$n JPEGs, $bytes bytes, s3rver on loopback, $(nproc) cores, engine ${ENGINE:-cpu}, $(date -u +%Y-%m-%d)"
echo "$c $s $l $f $n $bytes $(same server) $(same client)" | awk '{
  c = $1; s = $2; l = $3; f = $4; n = $5; mb = $6 / 1e6
  printf "  curl, 16 at once (baseline)  %6.2f s  %7.1f MB/s  %6.0f objects/s\n", c, mb / c, n / c
  printf "  server fetches               %6.2f s  %7.1f MB/s  %6.0f images/s  %.2fx curl  answer %s\n", s, mb / s, n / s, c / s, $7
  printf "  client fetches               %6.2f s  %7.1f MB/s  %6.0f images/s  %.2fx curl  answer %s\n", l, mb / l, n / l, c / l, $8
  printf "  folder on disk               %6.2f s  %7.1f MB/s  %6.0f images/s\n", f, mb / f, n / f }'
echo "$cs $sh $f $n $bytes $(same shards) $sf $(same shardsfetch)" | awk '{
  c = $1; s = $2; f = $3; n = $4; mb = $5 / 1e6; sf = $7
  printf "  curl over 10 tar shards      %6.2f s  %7.1f MB/s\n", c, mb / c
  printf "  shards in the bucket         %6.2f s  %7.1f MB/s  %6.0f images/s  %.2fx curl  %.2fx the folder  answer %s\n", s, mb / s, n / s, c / s, f / s, $6
  printf "  shards, server reads ranges  %6.2f s  %7.1f MB/s  %6.0f images/s  %.2fx curl  %.2fx the folder  answer %s\n", sf, mb / sf, n / sf, c / sf, f / sf, $8 }'
