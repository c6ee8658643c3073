#!/usr/bin/env bash
# A stack's statistics against what a tifffile user runs, in the same run:
# a PAGES-page WxH uint16 TIFF (default 1,000 pages of 512x512: 512 MB),
# uncompressed, made here; its statistics by tifffile.imread + numpy
# (baseline.py) and by imgstat-client --local (the CPU engine), each from
# the page cache, each ROUNDS times, with their wall time and peak memory.
#   run.sh BUILD_DIR [PAGES] [SIZE] [ROUNDS]
set -euo pipefail
build=$(cd "$1" && pwd) pages=${2:-1000} size=${3:-512} rounds=${4:-3}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 - "$work/stack.tif" "$pages" "$size" <<'PY'
import sys
import numpy as np
import tifffile
path, pages, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(49)
# One series of pages, as a microscope's z-stack is written.
stack = rng.integers(0, 4096, (pages, size, size), dtype=np.uint16)
tifffile.imwrite(path, stack, bigtiff=stack.nbytes > 3 << 30, rowsperstrip=64)
PY
cat "$work/stack.tif" >/dev/null  # into the page cache
echo "$(nproc) cores; $(du -m "$work/stack.tif" | cut -f1) MB, $pages pages of ${size}x${size} uint16"
. "$here/measure.sh"
for r in $(seq "$rounds"); do
  measure "tifffile + numpy" /usr/bin/python3 "$here/baseline.py" "$work/stack.tif"
  [ "$r" = 1 ] && grep baseline "$work/out"
  measure "imgstat --local (cpu)" "$build/client/imgstat-client" --local --stats min_max,sum,stddev,histogram "$work/stack.tif"
  [ "$r" = 1 ] && grep -E "Gray|planes" "$work/out" | head -2
done
measure "idle imgstat --local" "$build/client/imgstat-client" --local --stats min_max "$here/../../samples/sample.png"
