#!/usr/bin/env bash
# The container test: builds docker/Dockerfile, the file users build, with
# podman from local base images (no registry is reachable in CI), runs it as
# the README says (non-root, read-only root file system, TLS and a token from
# a mounted folder) with its ports on 127.0.0.1, waits for its health check,
# analyzes corpus images from the host with imgstat-client over TLS and checks
# the numbers, is refused without the token, scrapes the metrics, stops it
# with SIGTERM, and removes everything it made. Exits 77 (skipped) only where
# no container engine can be had.
#
#   tests/container/run.sh CLIENT CORPUS_DIR
set -uo pipefail
client=$1
corpus=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }

[ "${IMGSTAT_SKIP_CONTAINER_TEST:-0}" = 1 ] && skip "IMGSTAT_SKIP_CONTAINER_TEST=1"
if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v debootstrap >/dev/null \
   || ! command -v bc >/dev/null; then
  [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null || skip "no podman here, and installing it needs root and apt-get"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc debootstrap bc >/dev/null 2>&1 \
    || skip "podman, runc or debootstrap could not be installed"
fi

work=/var/tmp/imgstat-container-test.$$
name=imgstat-test-$$
tag=localhost/imgstat-server:test-$$
base=localhost/imgstat-test-debian:bookworm-$$
mkdir -p "$work"
# This sandbox's limits (see shared/notes/containers.md): runc, not crun, and
# rlimits within the hard limits.
cat >"$work/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
CONF
cat >"$work/storage.conf" <<CONF
[storage]
driver = "overlay"
graphroot = "$work/storage"
runroot = "$work/run"
CONF
export CONTAINERS_CONF=$work/containers.conf CONTAINERS_STORAGE_CONF=$work/storage.conf
cleanup() {
  podman rm -f -t 0 "$name" >/dev/null 2>&1
  podman rmi -f "$tag" "$base" >/dev/null 2>&1
  podman image prune -f >/dev/null 2>&1
  grep -o "$work/[^ ]*" /proc/mounts | sort -r | xargs -r umount -l 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# A Debian 12 base for both stages, from Debian's archive.
t=$(now)
debootstrap --variant=minbase bookworm "$work/rootfs" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 \
  || { tail -5 "$work/debootstrap.log"; fail "debootstrap"; }
tar -C "$work/rootfs" -c . | podman import - "$base" >/dev/null || fail "podman import"
rm -rf "$work/rootfs"
echo "base image: $(since "$t") s"

# The CUDA toolkit of this machine stands in for the devel image's.
cuda=()
[ -x /usr/local/cuda/bin/nvcc ] && cuda=(-v "$(readlink -f /usr/local/cuda):/usr/local/cuda:ro")
t=$(now)
podman build --format docker -f "$repo/docker/Dockerfile" \
  --build-arg BUILDER_IMAGE="$base" --build-arg RUNTIME_IMAGE="$base" --build-arg REQUIRE_NVJPEG=0 "${cuda[@]}" \
  -t "$tag" "$repo" >"$work/build.log" 2>&1 || { tail -40 "$work/build.log"; fail "podman build"; }
build_s=$(since "$t")
size=$(podman image inspect --format '{{.Size}}' "$tag")
echo "build: ${build_s} s, image $((size / 1048576)) MiB"
grep -E "tests passed|copied .* libraries" "$work/build.log"

# All interfaces and no TLS: the image refuses to start, and says why.
podman run --rm "$tag" >"$work/plain.log" 2>&1 && fail "the image started plaintext on all interfaces"
grep -q "refusing plaintext on 0.0.0.0:50051" "$work/plain.log" || { cat "$work/plain.log"; fail "no reason given"; }

# The secrets, as an operator mounts them: readable by uid 10001, read-only.
secrets=$work/secrets
bash "$repo/tests/tls/make-certs" "$secrets" || fail "make-certs"
token=container-test-token-$$-0123456789
echo "$token ci" >"$secrets/tokens"
chmod 644 "$secrets/tokens"

# Started without --init: the server is PID 1 and must still stop on SIGTERM.
t=$(now)
# (podman cannot schedule health checks through systemd here and says so on
# stderr; the checks below run them by hand.)
podman run -d --name "$name" --read-only -p 127.0.0.1::50051 -p 127.0.0.1::50052 -p 127.0.0.1::9464 \
  -v "$secrets:/run/secrets/imgstat:ro" \
  -e IMGSTAT_TLS_CERT=/run/secrets/imgstat/server.pem -e IMGSTAT_TLS_KEY=/run/secrets/imgstat/server.key \
  -e IMGSTAT_AUTH_TOKEN_FILE=/run/secrets/imgstat/tokens \
  "$tag" >/dev/null 2>"$work/run.log" || { cat "$work/run.log"; fail "podman run"; }
addr=$(podman port "$name" 50051/tcp | head -1)
health_addr=$(podman port "$name" 50052/tcp | head -1)
metrics_addr=$(podman port "$name" 9464/tcp | head -1)
tls=(--tls-ca "$secrets/ca.pem" --tls-server-name imgstat.test)
healthy=0
for _ in $(seq 120); do
  if podman healthcheck run "$name" >/dev/null 2>&1; then healthy=1; break; fi
  sleep 0.5
done
[ $healthy = 1 ] || { podman logs "$name"; fail "the health check never passed"; }
echo "start to healthy: $(since "$t") s, listening on $addr"
"$client" --server "$health_addr" --health | grep -qx SERVING || fail "health from the host"
[ "$(podman exec "$name" id -u)" = 10001 ] || fail "the server does not run as the imgstat user"
[ "$(podman inspect --format '{{.HostConfig.ReadonlyRootfs}}' "$name")" = true ] || fail "the root is not read-only"
podman exec "$name" sh -c 'touch /opt/imgstat/x' 2>/dev/null && fail "the root file system is writable"
# Plaintext to a TLS port, and TLS without the token, are refused.
"$client" --server "$addr" --insecure --info >/dev/null 2>&1 && fail "plaintext was accepted"
"$client" --server "$addr" "${tls[@]}" --info 2>"$work/refused.txt" >/dev/null && fail "a call without the token was accepted"
grep -q UNAUTHENTICATED "$work/refused.txt" || { cat "$work/refused.txt"; fail "no UNAUTHENTICATED without the token"; }
export IMGSTAT_TOKEN=$token
"$client" --server "$addr" "${tls[@]}" --info >"$work/info.txt" || fail "GetServerInfo"
if [ ! -e /dev/nvidiactl ]; then  # no GPU here: the CPU engine, and the log says why
  grep -q 'kind: "cpu"' "$work/info.txt" || fail "GetServerInfo does not say cpu"
  said=0
  for _ in $(seq 20); do  # the log reaches podman through conmon, a moment later
    podman logs "$name" 2>&1 | grep -q "no GPU here" && { said=1; break; }
    sleep 0.25
  done
  [ $said = 1 ] || { podman logs "$name" 2>&1 | head -20; fail "the log does not say why the CPU engine runs"; }
  # Without a GPU (and without libnvjpeg in this base) JPEG is libjpeg-turbo's.
  "$client" --server "$addr" "${tls[@]}" --json "$corpus/jpeg/ljt_testorig.jpg" | grep -q '"decoder":"libjpeg-turbo"' ||
    fail "a JPEG was not decoded by libjpeg-turbo on a machine without a GPU"
fi

files=(png/skimage_coffee.png png/pngsuite_basn2c16.png jpeg/ljt_testorig.jpg tiff/tiffrs_predictor-3-gray-f32.tif)
"$client" --server "$addr" "${tls[@]}" --json "${files[@]/#/$corpus/}" >"$work/results.jsonl" || fail "imgstat-client"
python3 - "$corpus" "$work/results.jsonl" <<'PY' || fail "numbers differ from the corpus reference"
import json, sys
corpus, results = sys.argv[1], sys.argv[2]
refs = {json.loads(l)["file"]: json.loads(l) for l in open(f"{corpus}/reference.jsonl")}
for line in open(results):
    got = json.loads(line)
    want = refs[got["file"][len(corpus) + 1:]]["reference"]
    assert got["ok"] and got["width"] == want["width"] and got["sample_type"] == want["sample_type"], got["file"]
    for g, w in zip(got["channels"], want["stats"]):
        assert g["name"] == w["channel"] and g["min"] == w["min"] and g["max"] == w["max"], (got["file"], g["name"])
        assert g["histogram"]["counts"] == w["histogram"], (got["file"], g["name"])
        assert abs(g["mean"] - w["mean"]) <= 1e-12 * abs(w["mean"]), (got["file"], g["name"])
    print("ok", got["file"], got["engine"])
PY

# The metrics count what was asked, refusals included.
curl -sf "http://$metrics_addr/metrics" >"$work/metrics.txt" || fail "no metrics on $metrics_addr"
ok_calls=$(grep -E '^imgstat_requests_total\{code="OK",method="Analyze"\} ' "$work/metrics.txt" | awk '{print $2}')
refused=$(grep -E '^imgstat_requests_total\{code="UNAUTHENTICATED",method="GetServerInfo"\} ' "$work/metrics.txt" | awk '{print $2}')
want_ok=${#files[@]}
[ ! -e /dev/nvidiactl ] && want_ok=$((want_ok + 1))
[ "$ok_calls" = "$want_ok" ] || { grep imgstat_requests "$work/metrics.txt"; fail "metrics count $ok_calls Analyze calls, not $want_ok"; }
[ "$refused" = 1 ] || fail "metrics count $refused refused calls, not 1"
echo "metrics: $ok_calls Analyze OK, $refused refused"

t=$(now)
podman stop -t 20 "$name" >/dev/null 2>>"$work/run.log" || fail "podman stop"
stop_s=$(since "$t")
code=$(podman inspect --format '{{.State.ExitCode}}' "$name")
echo "stop on SIGTERM: ${stop_s} s, exit code ${code}"
[ "$code" = 0 ] || { podman logs "$name"; fail "exit code $code"; }
[ "$(echo "$stop_s < 5" | bc)" = 1 ] || fail "stopping took ${stop_s} s"
# The log reaches podman through conmon a moment after the process ends.
seen=0
for _ in $(seq 20); do
  podman logs "$name" 2>&1 | grep -q "SIGTERM received" && { seen=1; break; }
  sleep 0.25
done
[ $seen = 1 ] || { podman logs "$name"; fail "the server did not log SIGTERM"; }
echo "PASS: image $((size / 1048576)) MiB, build ${build_s} s"
