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

// An explicit range the binning arithmetic can use: finite ends, lo < hi,
// and hi - lo and bins / (hi - lo) finite ([-1e308, 1e308) is not: its width
// overflows a double).
inline bool histogram_range_ok(double lo, double hi, uint32_t bins) {
  return std::isfinite(lo) && std::isfinite(hi) && lo < hi && std::isfinite(hi - lo) &&
         std::isfinite(static_cast<double>(bins) / (hi - lo));
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

  IMGSTAT_HD uint32_t exact(double v) const {
    if (!(width > 0)) return 0;
    return clamp(floor((v - lo) / width * static_cast<double>(bins)));
  }

  // A range found in float64 data can be wider than a double holds (beyond
  // about +-8.9e307): then hi - lo is infinite and operator() would put
  // everything in bin 0. Such a range is binned by exact_wide instead, which
  // halves everything first (exact for doubles that large) so that nothing
  // overflows. The engines test wide() once per block, outside their loops,
  // so that the common path stays as it is.
  IMGSTAT_HD bool wide() const { return width - width != 0; }
  IMGSTAT_HD uint32_t exact_wide(double v) const {
    return clamp(floor((v * 0.5 - lo * 0.5) / (hi * 0.5 - lo * 0.5) * static_cast<double>(bins)));
  }

  // Inlined where it is called: it runs once a sample in the CPU engine's
  // histogram loops, a call there costing as much as the binning.
#if !defined(__CUDACC__)
  __attribute__((always_inline))
#endif
  IMGSTAT_HD uint32_t operator()(double v) const {
    const double t = (v - lo) * scale;
    const double f = floor(t);
    const double frac = t - f;
    if (frac < kEdge || frac > 1.0 - kEdge || !(width > 0)) return exact(v);
    return clamp(f);
  }
};

}  // namespace imgstat
