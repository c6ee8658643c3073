#!/usr/bin/env bash
# deploy/kubernetes checked against Kubernetes' schemas and the server:
#   run.sh SERVER_BIN WORK_DIR
# Installs the checker's npm packages into WORK_DIR (once), scrapes a live
# server's metrics for the autoscaler's metric name, checks every manifest,
# then checks that broken copies are refused (a check that passes everything
# proves nothing).
set -euo pipefail
server_bin=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
mkdir -p "$work"
cp "$here/package.json" "$here/package-lock.json" "$here/check.mjs" "$work/"
[ -d "$work/node_modules/kubernetes-models" ] || (cd "$work" && npm ci --no-audit --no-fund --loglevel=error)

"$server_bin" --help >"$work/help.txt"
# The log exists before the server starts: the loop below may read it
# before the server's shell has opened it (a red run under load).
: >"$work/server.log"
"$server_bin" --listen 127.0.0.1:0 --engine cpu --threads 1 --region-socket off \
  --metrics-listen 127.0.0.1:0 >"$work/server.log" 2>&1 &
server_pid=$!
trap 'kill $server_pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  port=$(sed -n 's#.*metrics on http://[^:]*:\([0-9]*\)/metrics.*#\1#p' "$work/server.log")
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { cat "$work/server.log"; exit 1; }
curl -sf "http://127.0.0.1:$port/metrics" >"$work/metrics.txt"

manifests=("$repo"/deploy/kubernetes/*.yaml)
node "$work/check.mjs" "$work/help.txt" "$work/metrics.txt" "${manifests[@]}"

# Each broken copy must be refused, saying why.
broken() {  # NAME SED_EXPRESSION EXPECTED_WORDS [MANIFEST]
  local manifest=${4:-${manifests[0]}}
  sed "$2" "$manifest" >"$work/broken-$1.yaml"
  cmp -s "$manifest" "$work/broken-$1.yaml" && { echo "FAIL: the $1 edit changed nothing"; exit 1; }
  if out=$(node "$work/check.mjs" "$work/help.txt" "$work/metrics.txt" "$work/broken-$1.yaml"); then
    echo "FAIL: $1 passed the check"; exit 1
  fi
  grep -q "$3" <<<"$out" || { echo "FAIL: $1 refused without saying \"$3\": $out"; exit 1; }
  echo "refused as it should be: $1"
}
broken replicas 's/replicas: 2/replicas: two/' 'replicas must be integer'
broken probe-port 's/grpc: {port: 50052}/grpc: {port: 50053}/' 'does not open'
broken env-name 's/IMGSTAT_MAX_CONNECTION_AGE/IMGSTAT_MAX_CONNECTION_AGES/' 'reads no such variable'
broken threads 's/IMGSTAT_THREADS, value: "\([0-9]*\)"/IMGSTAT_THREADS, value: "99"/' 'is not the cores requested'
broken metric 's/name: imgstat_calls_in_progress/name: imgstat_calls_in_flight/' 'not one the server exports'
broken selector 's/matchLabels: {app.kubernetes.io\/name: [a-z-]*,/matchLabels: {app.kubernetes.io\/name: other,/' 'misses its pods'
broken probe-kind 's/grpc: {port: 50052}/grpc: {prot: 50052}/' 'must have required property port'
dask=$repo/deploy/kubernetes/imgstat-dask.yaml
broken node-local '/internalTrafficPolicy: Local/d' 'not headless' "$dask"
broken worker-selector 's/matchLabels: {app.kubernetes.io\/name: dask, app.kubernetes.io\/component: worker}/matchLabels: {app.kubernetes.io\/name: dask, app.kubernetes.io\/component: workers}/' 'selector misses its pods' "$dask"
broken daemonset-env 's/IMGSTAT_SPOOL_DIR, value/IMGSTAT_SPOOL_DIRS, value/' 'reads no such variable' "$dask"
echo PASS
