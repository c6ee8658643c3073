// libFuzzer: any bytes that sniff as a tar (several files as one input),
// planned and decoded as what it holds: libarchive indexing the members;
// a Zarr store (.zarray, .zattrs and the multiscales read, each chunk
// inflated by its codec: Blosc, zstd, zlib, gzip, LZ4), a NIfTI pair, a
// DICOM series (slices grouped and ordered); every series and plane
// through the streamed decoder into a sink that keeps one band. A clean answer or a clean error,
// whatever the metadata declares; no allocation past the decode memory
// (scripts/sanitize's -malloc_limit_mb). Seeded with tests/fuzz/seeds'
// small stores, a pair and a series (made with zarr-python, nibabel and
// pydicom, tarred by Python's tarfile).
#include "decode/decode.hpp"
#include "decode/tar/tar.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace imgstat;
  if (!is_tar(data, size)) return 0;
  fuzz::decode_every_series(data, size, fuzz::science_options());
  return 0;
}
