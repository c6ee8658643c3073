#!/usr/bin/env bash
# copy-closure.sh DEST PROGRAM|MODULE.so...: copies the programs to DEST/bin,
# the modules they load at run time (OpenCV's codecs) to DEST/lib, and the
# shared libraries both need to DEST/lib, with an rpath to find them there.
# The C library, the C++ runtime and the NVIDIA driver stay out: the runtime
# image (or the container toolkit) provides them, matched to its system.
set -euo pipefail
dest=$1
shift
system='^(linux-vdso|ld-linux|libc|libm|libpthread|libdl|librt|libresolv|libutil|libgcc_s|libstdc\+\+|libcuda|libnvidia-)\.so'
mkdir -p "$dest/bin" "$dest/lib"
for prog in "$@"; do
  if [[ $prog == *.so ]]; then
    cp "$prog" "$dest/lib/"
    patchelf --force-rpath --set-rpath '$ORIGIN' "$dest/lib/$(basename "$prog")"
  else
    cp "$prog" "$dest/bin/"
    patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$dest/bin/$(basename "$prog")"
  fi
  ldd "$prog" | awk '/=> \// {print $1, $3}' | while read -r soname path; do
    [[ $soname =~ $system ]] && continue
    [ -e "$dest/lib/$soname" ] || cp -L "$path" "$dest/lib/$soname"
  done
done
# A library's own RUNPATH would hide the program's rpath from its lookups.
for lib in "$dest"/lib/*; do
  if readelf -d "$lib" | grep -q RUNPATH; then patchelf --set-rpath '$ORIGIN' "$lib"; fi
done
strip --strip-unneeded "$dest"/bin/* 2>/dev/null || true
echo "copied $(ls "$dest/lib" | wc -l) libraries, $(du -sh "$dest" | cut -f1) in all"
