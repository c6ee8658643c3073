// libFuzzer: any bytes that sniff as FITS (or gzip of FITS), planned and
// decoded by cfitsio as imgstat drives it: every series (image HDU, tile
// compressed or not) and every plane through the streamed decoder into a
// sink that keeps one band. A clean answer or a clean error, whatever the
// headers declare; no allocation past the decode memory (scripts/sanitize's
// -malloc_limit_mb). Seeded with tests/fuzz/seeds' FITS files.
#include "decode/decode.hpp"
#include "decode/fits/fits.hpp"
#include "decode/inflate/gzip.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace imgstat;
  if (!is_fits(data, size) && !is_gzip(data, size)) return 0;
  fuzz::decode_every_series(data, size, fuzz::science_options());
  return 0;
}
