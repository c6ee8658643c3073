#!/usr/bin/env bash
# The README's callers from other services, each against a live server:
#   run.sh python|node|shell|cpp SERVER_BIN CLIENT_BIN WORK_DIR
# Each caller analyzes an encoded image (one call), a raw buffer (streamed)
# and a batch with one bad file; check.py holds every number it got to
# imgstat-client --local --json on the same inputs. Exit 77 (skipped)
# without the corpus.
set -euo pipefail
lang=$1 server_bin=$2 client_bin=$3 work=$4
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
corpus=${IMGSTAT_CORPUS:-$repo/../shared/corpus}
[ -d "$corpus/png" ] || { echo "no corpus at $corpus: skipped"; exit 77; }
python=/usr/bin/python3  # Debian's, which has python3-grpcio
mkdir -p "$work"
out=$(mktemp -d)
server_pid=
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$out"' EXIT

image=$corpus/png/skimage_coffee.png
batch=("$corpus/jpeg/derived_coffee_cmyk.jpg" "$corpus/bad/pngsuite_xcsn0g01.png" "$corpus/png/pngsuite_basn2c16.png")
# A mask (a disc) and a label image (a grid of 16-bit labels, 0 among them) of the image's size.
$python - "$image" "$out" <<'PY'
import sys
import numpy as np
from PIL import Image
w, h = Image.open(sys.argv[1]).size
y, x = np.mgrid[0:h, 0:w]
Image.fromarray(((x - w / 2) ** 2 + (y - h / 2) ** 2 < (min(w, h) / 3) ** 2).astype(np.uint8) * 255).save(sys.argv[2] + "/mask.png")
Image.fromarray((y // 50 * 1000 + x // 70).astype(np.uint16)).save(sys.argv[2] + "/labels.png")
PY
mask=$out/mask.png labels=$out/labels.png
# 3 MiB of 16-bit samples: several stream chunks.
head -c $((1024 * 768 * 2 * 2)) /dev/urandom >"$out/frame.raw"
layout=1024x768x2:uint16

# The log exists before the server starts: the loop below may read it
# before the server's shell has opened it.
: >"$out/server.log"
"$server_bin" --listen 127.0.0.1:0 --engine cpu --threads 2 >>"$out/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
  port=$(sed -n 's/.*listening on .*:\([0-9][0-9]*\)$/\1/p' "$out/server.log")
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { cat "$out/server.log"; exit 1; }
address=127.0.0.1:$port
# The Python and Node callers are given a list of servers (one server named
# twice, by address and by name): a list resolves and balances as one.
servers=127.0.0.1:$port,localhost:$port

case "$lang" in
  python)
    # The package as the README installs it, then the example.
    rm -rf "$work/venv"
    $python -m venv --system-site-packages "$work/venv"
    "$work/venv/bin/pip" install --no-index --quiet "$repo/client/python" 2>&1 | grep -v "^\[notice\]" || true
    "$work/venv/bin/python" "$repo/examples/python/imgstat_example.py" "$servers" "$image" \
      --raw "$out/frame.raw" "$layout" --batch "${batch[@]}" --shared "$out/frame.raw" "$layout" \
      --mask "$mask" --labels "$labels" >"$out/answers.jsonl" || [ $? -eq 1 ]
    ;;
  node)
    # npm install once per build folder; the example runs from there.
    cp "$repo/examples/node/package.json" "$repo/examples/node/imgstat_example.js" "$work/"
    [ -d "$work/node_modules/@grpc/grpc-js" ] || (cd "$work" && npm install --no-audit --no-fund --loglevel=error)
    IMGSTAT_PROTO_DIR=$repo/proto node "$work/imgstat_example.js" "$servers" "$image" \
      --raw "$out/frame.raw" "$layout" --mask "$mask" --labels "$labels" --batch "${batch[@]}" \
      >"$out/answers.jsonl" || [ $? -eq 1 ]
    ;;
  shell)
    export IMGSTAT_SERVER=$address
    {
      "$repo/examples/shell/imgstat_call.sh" analyze "$image" | sed '1s/^/#Analyze\n/'
      "$repo/examples/shell/imgstat_call.sh" stream-raw "$out/frame.raw" "$layout" | sed '1s/^/#AnalyzeStream\n/'
      "$repo/examples/shell/imgstat_call.sh" batch "${batch[@]}" | sed '1s/^/#AnalyzeBatch\n/'
      # An error is a gRPC status on stderr and exit status 1.
      if "$repo/examples/shell/imgstat_call.sh" analyze "${batch[1]}" 2>"$out/error.txt"; then exit 1; fi
      grep -q "gRPC status 3: PNG: could not decode" "$out/error.txt" || { cat "$out/error.txt"; exit 1; }
    } >"$out/answers.txt"
    ;;
  cpp)
    # Built with the project (examples/cpp): an encoded image, a raw frame through a region.
    "${IMGSTAT_CPP_EXAMPLE:?no C++ example built}" "$address" "$image" "$out/frame.raw" "$layout" "$mask" "$labels" \
      >"$out/answers.jsonl"
    ;;
  *) echo "unknown caller $lang"; exit 2 ;;
esac

# What imgstat-client says about the same inputs.
opts=(--local --json --stats all --percentiles 1,99)
{
  "$client_bin" "${opts[@]}" "$image"
  "$client_bin" "${opts[@]}" --raw "$layout" "$out/frame.raw"
  "$client_bin" "${opts[@]}" "${batch[@]}" || true
} >"$out/want.jsonl" 2>/dev/null
"$client_bin" "${opts[@]}" --mask "$mask" "$image" >"$out/want_mask.jsonl"
"$client_bin" "${opts[@]}" --labels "$labels" --ignore-label 0 "$image" >"$out/want_labels.jsonl"
# The calls each caller must have answered from.
case "$lang" in
  python) methods=Analyze,AnalyzeArray,AnalyzeMany,AnalyzeShared,AnalyzeMask,AnalyzeLabels ;;
  cpp) methods=Analyze,AnalyzeRegion,AnalyzeMask,AnalyzeLabels ;;
  *) methods=Analyze,AnalyzeStream,AnalyzeBatch,AnalyzeMask,AnalyzeLabels ;;
esac
if [ "$lang" = shell ]; then
  $python "$here/check.py" shell "$out/answers.txt" "$out/want.jsonl"
else
  $python "$here/check.py" json "$out/answers.jsonl" "$out/want.jsonl" "$methods" "$out/want_mask.jsonl" \
    "$out/want_labels.jsonl"
fi
