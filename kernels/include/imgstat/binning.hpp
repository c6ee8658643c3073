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
// by RangeBinner::exact's halving.
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
  double width = 0;
  double scale = 0;
  uint32_t bins = 1;

  static constexpr double kEdge = 1e-9;

  IMGSTAT_HD static RangeBinner make(double lo, double hi, uint32_t bins) {
    RangeBinner b;
    b.lo = lo;
    b.hi = hi;
    b.width = hi - lo;
    b.bins = bins;
    b.scale = b.width > 0 ? static_cast<double>(bins) / b.width : 0.0;
    return b;
  }

  IMGSTAT_HD uint32_t clamp(double t) const {
    if (!(t > 0)) return 0;
    return t >= static_cast<double>(bins) ? bins - 1 : static_cast<uint32_t>(t);
  }

  // Where hi - lo (or v - lo) overflows a double, as for ranges wider than
  // about +-8.9e307, everything is halved first: exact, since no double that
  // large is subnormal when halved, and nothing overflows any more.
  IMGSTAT_HD uint32_t exact(double v) const {
    if (!(width > 0)) return 0;
    if (width - width != 0)  // infinite width
      return clamp(floor((v * 0.5 - lo * 0.5) / (hi * 0.5 - lo * 0.5) * static_cast<double>(bins)));
    return clamp(floor((v - lo) / width * static_cast<double>(bins)));
  }

  // An infinite width gives scale 0, so every sample takes exact()'s way;
  // an overflowing v - lo gives a NaN fraction, which does too.
  IMGSTAT_HD uint32_t operator()(double v) const {
    const double t = (v - lo) * scale;
    const double f = floor(t);
    const double frac = t - f;
    if (!(frac >= kEdge && frac <= 1.0 - kEdge) || !(width > 0)) return exact(v);
    return clamp(f);
  }
};

}  // namespace imgstat
