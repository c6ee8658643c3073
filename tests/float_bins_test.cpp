// The float histogram's lane counter (kernels/cpu/float_bins.hpp) against
// RangeBinner applied to each sample: both copies (baseline and AVX2, where
// the CPU has it) give every bin, underflow and overflow the reference's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cpu/float_bins.hpp"

namespace imgstat::cpu {
namespace {

struct Counts {
  std::vector<uint64_t> bins;
  uint64_t under = 0, over = 0;
  bool operator==(const Counts& o) const { return bins == o.bins && under == o.under && over == o.over; }
};

Counts reference(const std::vector<float>& v, const RangeBinner& b, bool explicit_range) {
  Counts c{std::vector<uint64_t>(b.bins), 0, 0};
  for (float f : v) {
    const double x = f;
    if (!std::isfinite(x)) continue;
    if (explicit_range && x < b.lo) { ++c.under; continue; }
    if (explicit_range && x >= b.hi) { ++c.over; continue; }
    ++c.bins[b(x)];
  }
  return c;
}

using Binner = void (*)(const uint8_t*, uint64_t, const RangeBinner&, bool, uint64_t*, uint64_t*, uint64_t*);

Counts counted(Binner f, const std::vector<float>& v, size_t offset, const RangeBinner& b, bool explicit_range) {
  // The samples copied to `offset` bytes past an aligned start: unaligned loads.
  std::vector<uint8_t> bytes(v.size() * 4 + offset + 16);
  if (!v.empty()) std::memcpy(bytes.data() + offset, v.data(), v.size() * 4);
  std::vector<uint64_t> lanes(size_t{b.bins} * kFloatBinLanes);
  Counts c{std::vector<uint64_t>(b.bins), 0, 0};
  f(bytes.data() + offset, v.size(), b, explicit_range, lanes.data(), &c.under, &c.over);
  for (uint32_t k = 0; k < b.bins; ++k)
    for (uint32_t j = 0; j < kFloatBinLanes; ++j) c.bins[k] += lanes[k * kFloatBinLanes + j];
  return c;
}

TEST(FloatBins, EveryCopyAsTheBinnerOnEachSample) {
  std::mt19937_64 rng(2026);
  std::vector<Binner> copies = {&float_bins, &float_bins_scalar};
  if (__builtin_cpu_supports("avx2")) copies.push_back(&float_bins_avx2);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  struct Range { double lo, hi; uint32_t bins; };
  const Range ranges[] = {{975.0, 1615.0, 256}, {0.0, 1.0, 10}, {-3.5, 7.25, 4096}, {5.0, 5.0, 256},
                          {-1e30, 1e30, 256}, {0.0, 1e-30, 7}, {-2.0, 2.0, 1}};
  for (const Range& r : ranges)
    for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{4}, size_t{5}, size_t{4099}, size_t{20011}})
      for (int kind = 0; kind < 4; ++kind) {
        const RangeBinner b = RangeBinner::make(r.lo, r.hi, r.bins);
        std::vector<float> v(n);
        std::uniform_real_distribution<double> in(r.lo, r.hi + (r.hi - r.lo) * 1e-3);
        std::normal_distribution<double> sky((r.lo + r.hi) / 2, (r.hi - r.lo) / 50 + 1e-40);
        for (size_t i = 0; i < n; ++i) {
          switch (kind) {
            case 0: v[i] = static_cast<float>(in(rng)); break;       // across the range and past its end
            case 1: v[i] = static_cast<float>(sky(rng)); break;      // few bins, consecutive samples alike
            case 2: {  // exactly on the edges of bins, and the range's ends
              const double k = static_cast<double>(rng() % (r.bins + 1));
              v[i] = static_cast<float>(r.lo + (r.hi - r.lo) * k / r.bins);
              break;
            }
            default: {  // non-finite, the float extremes, outside the range
              const float odd[] = {nan, inf, -inf, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                                   static_cast<float>(r.lo) - 1, static_cast<float>(r.hi) + 1, static_cast<float>(r.lo),
                                   static_cast<float>(r.hi), 0.0f, -0.0f, std::numeric_limits<float>::denorm_min()};
              v[i] = rng() % 3 ? static_cast<float>(in(rng)) : odd[rng() % (sizeof odd / sizeof odd[0])];
            }
          }
        }
        for (bool explicit_range : {false, true}) {
          const Counts want = reference(v, b, explicit_range);
          for (size_t offset : {size_t{0}, size_t{1}, size_t{6}})
            for (size_t k = 0; k < copies.size(); ++k) {
              SCOPED_TRACE("range [" + std::to_string(r.lo) + ", " + std::to_string(r.hi) + ") of " +
                           std::to_string(r.bins) + ", " + std::to_string(n) + " samples, kind " +
                           std::to_string(kind) + (explicit_range ? ", explicit" : "") + ", offset " +
                           std::to_string(offset) + ", copy " + std::to_string(k));
              EXPECT_TRUE(counted(copies[k], v, offset, b, explicit_range) == want);
            }
        }
      }
}

}  // namespace
}  // namespace imgstat::cpu
