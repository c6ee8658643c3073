#!/usr/bin/env bash
# The container test: builds docker/Dockerfile, the file users build, with
# podman from local base images (no registry is reachable in CI), runs it
# with its port on 127.0.0.1, waits for its health check, analyzes corpus
# images from the host with imgstat-client and checks the numbers, stops it
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

# Started without --init: the server is PID 1 and must still stop on SIGTERM.
t=$(now)
# (podman cannot schedule health checks through systemd here and says so on
# stderr; the checks below run them by hand.)
podman run -d --name "$name" -p 127.0.0.1::50051 "$tag" >/dev/null 2>"$work/run.log" || { cat "$work/run.log"; fail "podman run"; }
addr=$(podman port "$name" 50051/tcp | head -1)
healthy=0
for _ in $(seq 120); do
  if podman healthcheck run "$name" >/dev/null 2>&1; then healthy=1; break; fi
  sleep 0.5
done
[ $healthy = 1 ] || { podman logs "$name"; fail "the health check never passed"; }
echo "start to healthy: $(since "$t") s, listening on $addr"
"$client" --server "$addr" --health | grep -qx SERVING || fail "health from the host"
[ "$(podman exec "$name" id -u)" = 10001 ] || fail "the server does not run as the imgstat user"
"$client" --server "$addr" --info >"$work/info.txt" || fail "GetServerInfo"
if [ ! -e /dev/nvidiactl ]; then  # no GPU here: the CPU engine, and the log says why
  grep -q 'kind: "cpu"' "$work/info.txt" || fail "GetServerInfo does not say cpu"
  said=0
  for _ in $(seq 20); do  # the log reaches podman through conmon, a moment later
    podman logs "$name" 2>&1 | grep -q "no GPU here" && { said=1; break; }
    sleep 0.25
  done
  [ $said = 1 ] || { podman logs "$name" 2>&1 | head -20; fail "the log does not say why the CPU engine runs"; }
  # Without a GPU (and without libnvjpeg in this base) JPEG is libjpeg-turbo's.
  "$client" --server "$addr" --json "$corpus/jpeg/ljt_testorig.jpg" | grep -q '"decoder":"libjpeg-turbo"' ||
    fail "a JPEG was not decoded by libjpeg-turbo on a machine without a GPU"
fi

files=(png/skimage_coffee.png png/pngsuite_basn2c16.png jpeg/ljt_testorig.jpg tiff/tiffrs_predictor-3-gray-f32.tif)
"$client" --server "$addr" --json "${files[@]/#/$corpus/}" >"$work/results.jsonl" || fail "imgstat-client"
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
