// libFuzzer: any bytes that sniff as FITS (or gzip of FITS), planned and
// decoded by cfitsio as imgstat drives it: every series (image HDU, tile
// compressed or not) and every plane through the streamed decoder into a
// sink that keeps one band. A clean answer or a clean error, whatever the
// headers declare; no allocation past the decode memory (scripts/sanitize's
// -malloc_limit_mb). Seeded with tests/fuzz/seeds' FITS files.
#include <algorithm>
#include <vector>

#include "decode/decode.hpp"
#include "decode/fits/fits.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace imgstat;
  if (!is_fits(data, size) && !is_gzip(data, size)) return 0;
  DecodeOptions options;
  options.max_pixels = fuzz::kMaxPixels;
  options.max_expanded_bytes = fuzz::kDecodeMemory / 2;
  options.max_planes = 64;
  fuzz::expect_clean([&] {
    const DecodePlan first = plan_decode(data, size, options);
    for (uint32_t s = 0; s < std::min<uint32_t>(first.series_count, 4); ++s) {
      DecodeOptions o = options;
      o.series = s;
      const DecodePlan plan = plan_decode(data, size, o);
      if (plan.band_memory_bytes > fuzz::kDecodeMemory || plan.memory_bytes > fuzz::kDecodeMemory) continue;
      std::vector<uint8_t> band;
      uint32_t rows = 0;
      RowSink sink;
      sink.begin = [&](uint32_t w, uint32_t h, uint32_t channels, SampleType type) {
        rows = std::max<uint32_t>(1, std::min<uint32_t>(h, 16));
        band.assign(size_t{rows} * w * channels * sample_size(type), 0);
        return RowBand{band.data(), rows};
      };
      sink.band = [&](const uint8_t*, uint32_t, uint32_t) { return RowBand{band.data(), rows}; };
      sink.plane = [](uint64_t) {};
      decode_in_bands(data, size, plan, o, sink);
    }
  });
  return 0;
}
