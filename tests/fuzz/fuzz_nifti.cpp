// libFuzzer: any bytes that sniff as NIfTI-1 or -2 (or gzip of one), planned
// and decoded: libnifti reading the header, imgstat the voxels of
// every datatype and byte order, every plane through the streamed decoder into a
// sink that keeps one band. A clean answer or a clean error, whatever the
// headers declare; no allocation past the decode memory (scripts/sanitize's
// -malloc_limit_mb). Seeded with tests/fuzz/seeds' NIfTI files.
#include "decode/decode.hpp"
#include "decode/nifti/nifti.hpp"
#include "decode/inflate/gzip.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace imgstat;
  if (!is_nifti(data, size) && !is_gzip(data, size)) return 0;
  fuzz::decode_every_series(data, size, fuzz::science_options());
  return 0;
}
