// Histogram bin rules, shared by the CPU engine and CUDA device code so both
// put every sample in the same bin.
#pragma once

#include <cmath>
#include <cstdint>

#include "imgstat/types.hpp"

namespace imgstat {

// Integer types, automatic range [type_lo, type_lo + 2^bits): the bin of
// offset = v - type_lo. Exact integer arithmetic: with 256 bins this is the
// corpus rule (uint8 v, uint16 v >> 8, int8 v + 128, int16 (v + 32768) >> 8).
IMGSTAT_HD uint32_t type_range_bin(uint32_t offset, uint32_t bins, uint32_t bits) {
  return static_cast<uint32_t>((static_cast<uint64_t>(offset) * bins) >> bits);
}

// An explicit range the binning arithmetic can use: finite ends, lo < hi, and
// bins / (hi - lo) finite (a range narrower than bins * 2^-1024 is not).
// Ranges whose width overflows, such as [-1e308, 1e308), are binned exactly
// by RangeBinner's halving.
inline bool histogram_range_ok(double lo, double hi, uint32_t bins) {
  return std::isfinite(lo) && std::isfinite(hi) && lo < hi && std::isfinite(static_cast<double>(bins) / (hi - lo));
}

// Equal-width bins over [lo, hi]:
//   bin = min(bins - 1, floor((v - lo) / (hi - lo) * bins))  in float64,
// all in bin 0 when hi == lo. The caller has already sent v < lo (and, for an
// explicit range, v >= hi) to underflow and overflow.
//
// operator() multiplies by a precomputed bins / (hi - lo) instead of dividing;
// the two forms differ by a few ulp of the bin coordinate (< 1e-10 for 65536
// bins), so the fast form is trusted except within kEdge of a bin edge, where
// the division form decides. The result is always the division form's.
struct RangeBinner {
  double lo = 0;
  double hi = 0;
  double width = 0;  // of the scaled range: (hi - lo) * k
  double scale = 0;
  double k = 1;      // 1, or 1/2 where hi - lo overflows (float64 ranges beyond +-8.9e307)
  double lo_k = 0;   // lo * k
  uint32_t bins = 1;

  static constexpr double kEdge = 1e-9;

  // Halving is exact (no float64 that large is subnormal when halved), so
  // (v*k - lo*k) / ((hi - lo)*k) is the division form's value, without the
  // overflow that would put every sample in bin 0.
  IMGSTAT_HD static RangeBinner make(double lo, double hi, uint32_t bins) {
    RangeBinner b;
    b.lo = lo;
    b.hi = hi;
    const double w = hi - lo;
    b.k = w - w == 0 ? 1.0 : 0.5;  // w - w is NaN when w is infinite
    b.lo_k = lo * b.k;
    b.width = hi * b.k - b.lo_k;
    b.bins = bins;
    b.scale = b.width > 0 ? static_cast<double>(bins) / b.width : 0.0;
    return b;
  }

  IMGSTAT_HD uint32_t clamp(double t) const {
    if (!(t > 0)) return 0;
    return t >= static_cast<double>(bins) ? bins - 1 : static_cast<uint32_t>(t);
  }

  IMGSTAT_HD uint32_t exact(double v) const {
    if (!(width > 0)) return 0;
    return clamp(floor((v * k - lo_k) / width * static_cast<double>(bins)));
  }

  IMGSTAT_HD uint32_t operator()(double v) const {
    const double t = (v * k - lo_k) * scale;
    const double f = floor(t);
    const double frac = t - f;
    if (frac < kEdge || frac > 1.0 - kEdge || !(width > 0)) return exact(v);
    return clamp(f);
  }
};

}  // namespace imgstat
