// Where the quality pass (agent/quality.cuh) leaves its counts: one array
// of unsigned long long (signed sums as two's complement), read back by the
// host (cuda/quality.cpp).
#pragma once

#include <cstdint>

#include "common/quality.hpp"
#include "common/xxh3_long.hpp"

namespace imgstat::cuda {

constexpr uint32_t kQualitySums = 8;  // grey, grey^2, Laplacian, its square, R-G, its square, R+G-2B, its square
constexpr uint32_t kQualityUnequalAt = kQualitySums;  // pixels whose R, G and B differ
constexpr uint32_t kQualityHistAt = kQualityUnequalAt + 1;
constexpr uint32_t kQualityBucketsAt = kQualityHistAt + 3 * 256;
constexpr uint32_t kQualityCountsSize = kQualityBucketsAt + kBrightnessBuckets;

// The brightness buckets whose pixels' colours are gathered (at most 14:
// two ranks for each of seven percentiles).
struct WantedBuckets {
  uint32_t bucket[kBrightnessRanks];
  unsigned long long first[kBrightnessRanks];   // the rank of each one's first pixel
  unsigned long long pixels[kBrightnessRanks];  // in each
  uint32_t count;
};
struct BrightnessRanks {
  unsigned long long rank[kBrightnessRanks];
};

// One thumbnail's pass of PIL's resampling on the device: its plan's
// coefficients there (bounds and taps of each pass), the horizontal pass's
// rows (rows x xsize of `bands`), the thumbnail (ysize x xsize); blocks: of
// a launch shared with other work, this pass's (0: none).
struct ThumbnailPass {
  const int* h_bounds = nullptr;
  const int32_t* h_k = nullptr;
  const int* v_bounds = nullptr;
  const int32_t* v_k = nullptr;
  int h_ksize = 0, v_ksize = 0;
  int first_row = 0, rows = 0, xsize = 0, ysize = 0;
  uint8_t* rows_out = nullptr;
  uint8_t* out = nullptr;
  uint32_t blocks = 0;
};

// The counting pass's share of a launch: counts (kQualityBucketsAt,
// zeroed) and, three channels, the brightness buckets (kBrightnessBuckets,
// zeroed); strips of columns by bands of band_rows rows, a block each.
// out null: none.
struct QualityCountsPass {
  unsigned long long* out = nullptr;
  unsigned long long* buckets = nullptr;
  uint32_t strips = 0, bands = 0, band_rows = 0, blocks = 0;
};

// The pixel hash of an input longer than kXxh3LongAfter bytes
// (common/xxh3_long.hpp): the secret and the input's header on the device,
// each piece's additions (xxh3_pieces(len) x kXxh3Lanes) into adds, which
// the host chains. len 0: none.
struct PixelHashPass {
  PixelHashInput input;
  uint64_t len = 0;
  const uint8_t* secret = nullptr;
  unsigned long long* adds = nullptr;
  uint32_t blocks = 0;
};

// The colours that come back with the counts (all of them where they are
// few, as in photos: about a hundred of a 500x375 image's pixels); more
// take a second round trip.
constexpr uint32_t kColoursFirstBack = 1 << 12;

}  // namespace imgstat::cuda
