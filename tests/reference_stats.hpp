// A straightforward, independent implementation of the statistics
// conventions, sample by sample in the plainest arithmetic, for the tests to
// check the engines against.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "imgstat/engine.hpp"

namespace imgstat::testing {

// Exact sum of doubles, correctly rounded (Shewchuk's algorithm, as Python's
// math.fsum).
inline double exact_sum(const std::vector<double>& xs) {
  std::vector<double> partials;
  for (double x : xs) {
    size_t i = 0;
    for (double y : partials) {
      if (std::abs(x) < std::abs(y)) std::swap(x, y);
      const double hi = x + y;
      const double lo = y - (hi - x);
      if (lo != 0.0) partials[i++] = lo;
      x = hi;
    }
    partials.resize(i);
    partials.push_back(x);
  }
  double hi = 0.0;
  if (!partials.empty()) {
    size_t n = partials.size();
    hi = partials[--n];
    while (n > 0) {
      const double x = hi, y = partials[--n];
      hi = x + y;
      const double lo = y - (hi - x);
      if (lo != 0.0) {
        if (n > 0 && ((lo < 0 && partials[n - 1] < 0) || (lo > 0 && partials[n - 1] > 0))) {
          const double y2 = lo * 2, x2 = hi + y2;
          if (y2 == x2 - hi) hi = x2;
        }
        break;
      }
    }
  }
  return hi;
}

inline double sample_at(const uint8_t* p, SampleType t) {
  switch (t) {
    case SampleType::kUint8: return *p;
    case SampleType::kInt8: return static_cast<int8_t>(*p);
    case SampleType::kUint16: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    case SampleType::kInt16: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case SampleType::kFloat32: { float v; std::memcpy(&v, p, 4); return v; }
    case SampleType::kFloat64: { double v; std::memcpy(&v, p, 8); return v; }
  }
  return 0;
}

struct RefChannel {
  uint64_t count = 0, nan = 0, posinf = 0, neginf = 0;
  double min = 0, max = 0, sum = 0, mean = 0, stddev = 0;
  double sum_abs = 0;  // sum of |x|: what a float sum's rounding error scales with
  __int128 sum_int = 0;
  std::vector<uint64_t> hist;
  double hist_lo = 0, hist_hi = 0;
  uint64_t underflow = 0, overflow = 0;
};

// Samples of channel c, finite ones only, in image order.
inline std::vector<double> channel_samples(const ImageView& img, uint32_t c, RefChannel* counts) {
  const Layout& l = img.layout;
  std::vector<double> out;
  const auto* base = static_cast<const uint8_t*>(img.data);
  const size_t ss = sample_size(l.type);
  for (uint64_t y = 0; y < l.height; ++y)
    for (uint64_t x = 0; x < l.width; ++x) {
      const double v = sample_at(base + y * l.stride() + (x * l.channels + c) * ss, l.type);
      if (std::isnan(v)) ++counts->nan;
      else if (std::isinf(v)) (v > 0 ? counts->posinf : counts->neginf)++;
      else out.push_back(v);
    }
  return out;
}

inline std::vector<RefChannel> reference_stats(const ImageView& img, uint32_t bins = 256,
                                               bool explicit_range = false, double lo = 0, double hi = 0) {
  std::vector<RefChannel> result;
  const SampleType t = img.layout.type;
  for (uint32_t c = 0; c < img.layout.channels; ++c) {
    RefChannel r;
    const std::vector<double> v = channel_samples(img, c, &r);
    r.count = v.size();
    r.hist.assign(bins, 0);
    if (!v.empty()) {
      r.min = *std::min_element(v.begin(), v.end());
      r.max = *std::max_element(v.begin(), v.end());
      r.sum = exact_sum(v);
      for (double x : v) r.sum_abs += std::abs(x);
      if (!is_float(t))
        for (double x : v) r.sum_int += static_cast<int64_t>(x);
      r.mean = r.sum / static_cast<double>(v.size());
      long double acc = 0;
      const long double mean = static_cast<long double>(r.sum) / v.size();
      for (double x : v) acc += (x - mean) * (x - mean);
      r.stddev = static_cast<double>(std::sqrt(acc / v.size()));
    }
    // Histogram, written from the stated rules.
    if (explicit_range) {
      r.hist_lo = lo;
      r.hist_hi = hi;
    } else if (is_float(t)) {
      r.hist_lo = v.empty() ? 0 : r.min;
      r.hist_hi = v.empty() ? 0 : r.max;
    } else {
      r.hist_lo = t == SampleType::kInt8 ? -128 : t == SampleType::kInt16 ? -32768 : 0;
      r.hist_hi = r.hist_lo + (sample_size(t) == 1 ? 256 : 65536);
    }
    for (double x : v) {
      if (explicit_range) {
        if (x < lo) { ++r.underflow; continue; }
        if (x >= hi) { ++r.overflow; continue; }
      }
      int64_t b;
      if (!explicit_range && !is_float(t)) {
        const int64_t offset = static_cast<int64_t>(x - r.hist_lo);
        b = (offset * bins) / static_cast<int64_t>(r.hist_hi - r.hist_lo);
      } else if (r.hist_hi == r.hist_lo) {
        b = 0;
      } else {
        b = static_cast<int64_t>(std::floor((x - r.hist_lo) / (r.hist_hi - r.hist_lo) * bins));
        b = std::min<int64_t>(b, bins - 1);
      }
      ++r.hist[b];
    }
    result.push_back(r);
  }
  return result;
}

}  // namespace imgstat::testing
