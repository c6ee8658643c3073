#!/usr/bin/env bash
# Issue 50's targets on this machine's CPU engine (imgstat-client --local,
# what a caller measures end to end) against the reference readers' users
# (baseline.py), in one run, files from page cache (each read once before):
#   bench/science/run.sh BUILD DIR [ROUNDS] [FITS_PLANES] [ZARR_PLANES]
# The table comes last: best of ROUNDS seconds each, and imgstat / baseline.
set -euo pipefail
build=$1 dir=$2 rounds=${3:-2} planes=${4:-64} zarr_planes=${5:-64}
here=$(dirname "$0")
/usr/bin/python3 "$here/write.py" "$dir" "$planes" "$zarr_planes"
cat "$dir/sky.fits" "$dir"/ct/* "$dir/brain.nii.gz" > /dev/null
find "$dir/cells.zarr" -type f -exec cat {} + > /dev/null
best() {  # best wall seconds of ROUNDS runs of a command
  local b=""
  for _ in $(seq "$rounds"); do
    local t0 t1
    t0=$(date +%s.%N); "$@" > /tmp/science-bench.out; t1=$(date +%s.%N)
    b=$(python3 -c "print(min(x for x in [$t1 - $t0, ${b:-1e9}]))")
  done
  tail -1 /tmp/science-bench.out | cut -c1-160 >&2
  echo "$b"
}
client=$build/client/imgstat-client
stats=(--stats min_max,sum,stddev,histogram)
# The page-cache read ceiling of the FITS file: one core reading it.
ceiling=$(best dd if="$dir/sky.fits" of=/dev/null bs=16M status=none)
fits_i=$(best "$client" --local --json "${stats[@]}" "$dir/sky.fits")
fits_b=$(best /usr/bin/python3 "$here/baseline.py" fits "$dir/sky.fits")
ct_i=$(best "$client" --local --json --dicom-series "${stats[@]}" "$dir/ct")
ct_b=$(best /usr/bin/python3 "$here/baseline.py" dicom "$dir/ct")
nii_i=$(best "$client" --local --json "${stats[@]}" "$dir/brain.nii.gz")
nii_b=$(best /usr/bin/python3 "$here/baseline.py" nifti "$dir/brain.nii.gz")
zarr_i=$(best "$client" --local --json "${stats[@]}" "$dir/cells.zarr")
zarr_b=$(best /usr/bin/python3 "$here/baseline.py" zarr "$dir/cells.zarr")
if /usr/bin/python3 -c "import dask.array" 2>/dev/null; then
  dask_b=$(best /usr/bin/python3 "$here/baseline.py" dask "$dir/cells.zarr")
else
  dask_b=0
fi
size=$(stat -c %s "$dir/sky.fits")
python3 - "$size" "$ceiling" "$fits_i" "$fits_b" "$ct_i" "$ct_b" "$nii_i" "$nii_b" "$zarr_i" "$zarr_b" "$dask_b" "$zarr_planes" <<'PY'
import sys
size, ceil, fi, fb, ci, cb, ni, nb, zi, zb, db, zp = map(float, sys.argv[1:])
print(f"{'case':<44} {'imgstat s':>10} {'baseline s':>11} {'ratio':>7}")
print(f"{'FITS 4096x4096 float32 NaN, %d planes' % round(size / 4096 / 4096 / 4):<44} {fi:>10.3f} {fb:>11.3f} {fi / fb:>7.3f}")
print(f"{'  (page-cache read by dd: %.2f GB/s; imgstat %.2f GB/s)' % (size / ceil / 1e9, size / fi / 1e9):<44}")
print(f"{'CT 500 DICOM 512x512 int16 HU, --dicom-series':<44} {ci:>10.3f} {cb:>11.3f} {ci / cb:>7.3f}")
print(f"{'NIfTI 256^3 float32 .nii.gz':<44} {ni:>10.3f} {nb:>11.3f} {ni / nb:>7.3f}")
print(f"{'OME-Zarr %d x 4096^2 uint16 Blosc zstd, zarr+numpy' % zp:<44} {zi:>10.3f} {zb:>11.3f} {zi / zb:>7.3f}")
if db > 0:
    print(f"{'  the same, dask.array (threads)':<44} {zi:>10.3f} {db:>11.3f} {zi / db:>7.3f}")
PY
