#!/usr/bin/env bash
# The container test: builds docker/Dockerfile, the file users build, with
# podman from local base images (no registry is reachable in CI), runs it as
# docs/deploy.md says (non-root, read-only root file system, TLS and a token from
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
  [ -f "$work/kube.yaml" ] && podman kube down "$work/kube.yaml" >/dev/null 2>&1
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
volumes=()
[ -x /usr/local/cuda/bin/nvcc ] && volumes=(-v "$(readlink -f /usr/local/cuda):/usr/local/cuda:ro")
# This machine's ccache, which its build of the same sources filled
# (scripts/build): the image compiles what that build did not.
cache=""
if command -v ccache >/dev/null && cache=$(ccache --get-config cache_dir 2>/dev/null) && mkdir -p "$cache"; then
  volumes+=(-v "$cache:/ccache" --build-arg CCACHE=1)
  CCACHE_DIR=$cache ccache --zero-stats >/dev/null
else
  cache=""
fi
# RUN_TESTS=0: the base is this machine's Debian 12, whose build ran the suite
# already; what is tested here is the image, not the code twice.
t=$(now)
podman build --format docker -f "$repo/docker/Dockerfile" \
  --build-arg BUILDER_IMAGE="$base" --build-arg RUNTIME_IMAGE="$base" --build-arg REQUIRE_NVJPEG=0 \
  --build-arg RUN_TESTS="${IMGSTAT_CONTAINER_RUN_TESTS:-0}" "${volumes[@]}" \
  -t "$tag" "$repo" >"$work/build.log" 2>&1 || { tail -40 "$work/build.log"; fail "podman build"; }
build_s=$(since "$t")
[ -n "$cache" ] && CCACHE_DIR=$cache ccache --show-stats 2>/dev/null | grep -iE "hits|misses" | sed 's/^/ccache: /' 
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
python3 "$repo/tests/container/check_results.py" "$corpus" "$work/results.jsonl" || fail "numbers differ from the corpus reference"

# The metrics count what was asked, refusals included.
curl -sf "http://$metrics_addr/metrics" >"$work/metrics.txt" || fail "no metrics on $metrics_addr"
# Images answered, in calls of their own or on the client's AnalyzeBatch lanes.
ok_calls=$(grep -E '^imgstat_images_total\{code="OK",method="Analyze(Batch)?"\} ' "$work/metrics.txt" | awk '{s += $2} END {print s + 0}')
refused=$(grep -E '^imgstat_requests_total\{code="UNAUTHENTICATED",method="GetServerInfo"\} ' "$work/metrics.txt" | awk '{print $2}')
want_ok=${#files[@]}
[ ! -e /dev/nvidiactl ] && want_ok=$((want_ok + 1))
[ "$ok_calls" = "$want_ok" ] || { grep -E 'imgstat_(requests|images)_total' "$work/metrics.txt"; fail "metrics count $ok_calls images answered, not $want_ok"; }
[ "$refused" = 1 ] || fail "metrics count $refused refused calls, not 1"
echo "metrics: $ok_calls images answered, $refused refused"

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
# The Kubernetes manifest's CPU variant, as written, under podman kube play:
# only what a single host needs changes (the local image, one replica, host
# ports on loopback), and the Secret volume becomes the same folder mounted
# from the host (podman 4.3 reads Secret volumes wrong).
kube_ports=$(python3 -c 'import socket
s=[socket.socket() for _ in range(3)]
[x.bind(("127.0.0.1", 0)) for x in s]
print(" ".join(str(x.getsockname()[1]) for x in s))')
read -r kube_grpc kube_health kube_metrics <<<"$kube_ports"
python3 - "$repo/deploy/kubernetes/imgstat-cpu.yaml" "$work/kube.yaml" "$tag" "$secrets" $kube_ports <<'PY' || fail "rendering the manifest"
import re, sys
src, dst, image, secrets, grpc, health, metrics = sys.argv[1:]
s = open(src).read()
def sub(old, new):
    global s
    assert old in s, old
    s = s.replace(old, new)
sub("registry.example.com/imgstat-server:0.1.0", image)
sub("replicas: 2", "replicas: 1")
for name, port, host in (("grpc", 50051, grpc), ("health", 50052, health), ("metrics", 9464, metrics)):
    sub(f"{{name: {name}, containerPort: {port}}}", f"{{name: {name}, containerPort: {port}, hostPort: {host}, hostIP: 127.0.0.1}}")
sub("secret: {secretName: imgstat, defaultMode: 0440}", f"hostPath: {{path: {secrets}, type: Directory}}")
open(dst, "w").write(s)
PY
t=$(now)
podman kube play "$work/kube.yaml" >"$work/kube.log" 2>&1 || { cat "$work/kube.log"; fail "podman kube play"; }
kube_container=$(podman ps --format '{{.Names}}' | grep -- '^imgstat-cpu-.*-imgstat-server$' | head -1)
[ -n "$kube_container" ] || { podman ps -a; fail "no container from podman kube play"; }
healthy=0
for _ in $(seq 120); do
  if "$client" --server "127.0.0.1:$kube_health" --timeout 2 --health >/dev/null 2>&1; then healthy=1; break; fi
  sleep 0.5
done
[ $healthy = 1 ] || { podman logs "$kube_container"; fail "the kube play pod never became healthy"; }
echo "kube play: healthy in $(since "$t") s ($kube_container)"
[ "$(podman inspect --format '{{.HostConfig.ReadonlyRootfs}} {{.Config.User}}' "$kube_container")" = "true 10001:10001" ] ||
  fail "the kube play container is not read-only as uid 10001"
"$client" --server "127.0.0.1:$kube_grpc" "${tls[@]}" --info --json >"$work/kube-info.json" || fail "GetServerInfo from the kube play pod"
python3 -c 'import json, sys
i = json.load(open(sys.argv[1]))
assert i["engine"]["kind"] == "cpu" and i["engine"]["threads"] == 4, i["engine"]
assert int(i["limits"]["max_decode_memory"]) == 4 << 30, i["limits"]' "$work/kube-info.json" ||
  fail "the pod does not run as the manifest says (cpu engine, 4 threads, 4 GiB of decode memory)"
"$client" --server "127.0.0.1:$kube_grpc" "${tls[@]}" --json "${files[@]/#/$corpus/}" >"$work/kube-results.jsonl" ||
  fail "imgstat-client against the kube play pod"
python3 "$repo/tests/container/check_results.py" "$corpus" "$work/kube-results.jsonl" || fail "kube play: numbers differ"
# Into a file first: under pipefail, grep -q leaving early fails curl (EPIPE).
{ curl -sf "http://127.0.0.1:$kube_metrics/metrics" >"$work/kube-metrics.txt" &&
  grep -q '^imgstat_calls_in_progress ' "$work/kube-metrics.txt"; } ||
  fail "the autoscaler's metric is not on the pod's metrics port"
podman kube down "$work/kube.yaml" >/dev/null 2>&1 || fail "podman kube down"
rm -f "$work/kube.yaml"
echo "kube play: the CPU variant served ${#files[@]} files from the host and went down"

echo "PASS: image $((size / 1048576)) MiB, build ${build_s} s"
