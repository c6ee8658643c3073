#include "cpu/float_bins.hpp"

#include <cmath>
#include <cstring>

namespace imgstat::cpu {

void float_bins_scalar(const uint8_t* p, uint64_t n, const RangeBinner& b, bool explicit_range, uint64_t* lanes,
                       uint64_t* under, uint64_t* over) {
  const RangeBinner binner = b;  // a copy: the counts' stores cannot change it
  uint32_t lane = 0;
  for (uint64_t i = 0; i < n; ++i) {
    float t;
    std::memcpy(&t, p + 4 * i, 4);
    const double v = static_cast<double>(t);
    if (!std::isfinite(v)) continue;
    if (explicit_range) {
      if (v < binner.lo) {
        ++*under;
        continue;
      }
      if (v >= binner.hi) {
        ++*over;
        continue;
      }
    }
    ++lanes[binner(v) * kFloatBinLanes + lane];
    lane = (lane + 1) % kFloatBinLanes;
  }
}

void float_bins(const uint8_t* p, uint64_t n, const RangeBinner& b, bool explicit_range, uint64_t* lanes,
                uint64_t* under, uint64_t* over) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2)
    float_bins_avx2(p, n, b, explicit_range, lanes, under, over);
  else
    float_bins_scalar(p, n, b, explicit_range, lanes, under, over);
}

}  // namespace imgstat::cpu
