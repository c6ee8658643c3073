// What the fuzz targets share: one analyzer on the CPU engine with small
// limits, and the rule that only imgstat::Error may come out.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <google/protobuf/stubs/logging.h>

#include "core/analyzer.hpp"
#include "decode/decode.hpp"

namespace imgstat::fuzz {

// The targets' limits. The pixel limit is high enough that the decode
// memory binds first: scripts/sanitize runs each target with libFuzzer's
// -malloc_limit_mb a little above kDecodeMemory, so that any single
// allocation past what the budget allows (a size from a file or a request
// that reached the allocator unchecked) fails the run.
inline constexpr uint64_t kMaxPixels = uint64_t{1} << 26;
inline constexpr uint64_t kDecodeMemory = uint64_t{64} << 20;

inline const Analyzer& analyzer() {
  static const Analyzer* a = [] {
    google::protobuf::SetLogHandler(nullptr);  // invalid UTF-8 in a name is expected here
    Limits l;
    l.max_pixels = kMaxPixels;
    l.max_input_bytes = uint64_t{1} << 24;
    l.max_decode_memory = kDecodeMemory;
    l.queue_timeout_seconds = 0.01;
    return new Analyzer(std::shared_ptr<Engine>(make_cpu_engine(1)), l);
  }();
  return *a;
}

// imgstat::Error is the one way a request may fail; anything else (another
// exception) is a bug the fuzzer reports, as it does crashes.
template <class Fn>
void expect_clean(Fn&& fn) {
  try {
    fn();
  } catch (const Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    std::abort();
  }
}

// A plan's chosen planes (a stack: TIFF pages, an animation's frames)
// through the streamed decoder into a sink that keeps one band, as the
// analyzer's stream takes them; a plan of one plane, not at all.
inline void decode_stack(const uint8_t* data, size_t size, const DecodePlan& plan, const DecodeOptions& options) {
  if (plan.chosen_planes() < 2 || plan.band_memory_bytes > kDecodeMemory) return;
  std::vector<uint8_t> band;
  uint32_t rows = 0;
  RowSink sink;
  sink.begin = [&](uint32_t w, uint32_t h, uint32_t channels, SampleType type) {
    rows = std::max<uint32_t>(1, std::min<uint32_t>(h, plan.band_rows ? plan.band_rows : 16));
    band.assign(size_t{rows} * w * channels * sample_size(type), 0);
    return RowBand{band.data(), rows};
  };
  sink.band = [&](const uint8_t*, uint32_t, uint32_t) { return RowBand{band.data(), rows}; };
  sink.plane = [](uint64_t) {};
  decode_in_bands(data, size, plan, options, sink);
}

// Every series of a file (up to 4) and every chosen plane through the
// streamed decoder into a sink that keeps one band; what the budget would
// refuse is not decoded. Only imgstat::Error may come out.
// The options the scientific formats' targets decode with: the pixel limit,
// half the decode memory for what a file inflates, 64 planes.
inline DecodeOptions science_options() {
  DecodeOptions options;
  options.max_pixels = kMaxPixels;
  options.max_expanded_bytes = kDecodeMemory / 2;
  options.max_planes = 64;
  return options;
}

inline void decode_every_series(const uint8_t* data, size_t size, const DecodeOptions& options) {
  expect_clean([&] {
    const DecodePlan first = plan_decode(data, size, options);
    for (uint32_t s = 0; s < std::min<uint32_t>(first.series_count, 4); ++s) {
      DecodeOptions o = options;
      o.series = s;
      const DecodePlan plan = plan_decode(data, size, o);
      if (plan.band_memory_bytes > kDecodeMemory || plan.memory_bytes > kDecodeMemory) continue;
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
}

}  // namespace imgstat::fuzz
