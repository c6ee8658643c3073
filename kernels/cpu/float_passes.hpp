// The two passes over float samples: moments (and, with an explicit range,
// the histogram in the same sweep), then the histogram over [min, max].
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "common/moments.hpp"
#include "imgstat/binning.hpp"

namespace imgstat::cpu {

// Per-channel bins of one thread, with explicit-range underflow and overflow.
struct Bins {
  std::vector<uint64_t> counts;
  uint64_t underflow = 0;
  uint64_t overflow = 0;
};

template <class T, uint32_t C>
class FloatCounter {
 public:
  // Blocks bound the error of the plain double sums inside them; blocks are
  // merged with compensation (sum) and Chan's formula (mean, m2).
  static constexpr uint64_t kBlockPixels = 2048;

  // binners: null for pass 1 alone; else one per channel, with explicit set
  // when out-of-range samples go to underflow and overflow.
  FloatCounter(const RangeBinner* binners, bool explicit_range, uint32_t bins, bool moments)
      : binners_(binners), explicit_(explicit_range), moments_(moments) {
    if (binners_)
      for (auto& b : bins_) b.counts.assign(bins, 0);
  }

  void add(const uint8_t* p, uint64_t pixels) {
    while (pixels > 0) {
      const uint64_t n = std::min(pixels, kBlockPixels);
      if (moments_) block_moments(p, n);
      if (binners_) block_bins(p, n);
      p += n * C * sizeof(T);
      pixels -= n;
    }
  }

  FloatMoments& moments(uint32_t c) { return m_[c]; }
  Bins& bins(uint32_t c) { return bins_[c]; }

 private:
  static T load(const uint8_t* p, uint64_t i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    return v;
  }

  void block_moments(const uint8_t* p, uint64_t n) {
    for (uint32_t c = 0; c < C; ++c) {
      // Shift by a sample of this block: sums of (v - shift) and its square
      // keep their precision when the mean is far from zero.
      double shift = 0;
      for (uint64_t i = 0; i < n; ++i) {
        const double v = static_cast<double>(load(p, i * C + c));
        if (std::isfinite(v)) {
          shift = v;
          break;
        }
      }
      FloatMoments b;
      b.min = std::numeric_limits<double>::infinity();
      b.max = -std::numeric_limits<double>::infinity();
      double s1 = 0, s2 = 0, s3 = 0, s4 = 0, sum = 0;
      for (uint64_t i = 0; i < n; ++i) {
        const double v = static_cast<double>(load(p, i * C + c));
        if (std::isfinite(v)) {
          ++b.n;
          sum += v;
          const double d = v - shift;
          const double d2 = d * d;
          s1 += d;
          s2 += d2;
          s3 += d2 * d;
          s4 += d2 * d2;
          b.min = v < b.min ? v : b.min;
          b.max = v > b.max ? v : b.max;
        } else if (std::isnan(v)) {
          ++b.nan;
        } else if (v > 0) {
          ++b.posinf;
        } else {
          ++b.neginf;
        }
      }
      const FloatMoments bm = moments_from_shifted(b.n, shift, s1, s2, s3, s4, b.min, b.max, sum);
      b.sum = bm.sum;
      b.mean = bm.mean;
      b.m2 = bm.m2;
      b.m3 = bm.m3;
      b.m4 = bm.m4;
      merge(m_[c], b);
    }
  }

  void block_bins(const uint8_t* p, uint64_t n) {
    for (uint32_t c = 0; c < C; ++c) {
      const RangeBinner& binner = binners_[c];
      const bool wide = binner.wide();  // float64 data spanning more than a double
      Bins& out = bins_[c];
      for (uint64_t i = 0; i < n; ++i) {
        const double v = static_cast<double>(load(p, i * C + c));
        if (!std::isfinite(v)) continue;
        if (explicit_) {
          if (v < binner.lo) {
            ++out.underflow;
            continue;
          }
          if (v >= binner.hi) {
            ++out.overflow;
            continue;
          }
        }
        ++out.counts[wide ? binner.exact_wide(v) : binner(v)];
      }
    }
  }

  const RangeBinner* binners_;
  bool explicit_;
  bool moments_;
  FloatMoments m_[C];
  Bins bins_[C];
};

}  // namespace imgstat::cpu
