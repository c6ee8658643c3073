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

// The rest of the statistics, sample by sample from their definitions:
// sorting for percentiles, counting for mode and entropy, scanning for
// positions, a set for colours.
struct RefDescribed {
  double median = 0, mode = 0, entropy = 0, skewness = 0, kurtosis = 0;
  bool has_shape = false;
  std::vector<double> percentiles;  // of the integer p asked for
  uint64_t min_at = 0, max_at = 0;
  std::vector<double> sorted;  // the finite samples
};

// Integer percentiles only, so that the rank ceil(p n / 100) is exact here.
inline std::vector<RefDescribed> reference_described(const ImageView& img, const std::vector<int>& percentiles) {
  std::vector<RefDescribed> out;
  const Layout& l = img.layout;
  for (uint32_t c = 0; c < l.channels; ++c) {
    RefChannel counts;
    RefDescribed d;
    const std::vector<double> v = channel_samples(img, c, &counts);
    if (v.empty()) {
      out.push_back(d);
      continue;
    }
    const uint64_t n = v.size();
    d.sorted = v;
    std::sort(d.sorted.begin(), d.sorted.end());
    auto at_rank = [&](uint64_t p) {
      const uint64_t k = std::clamp<uint64_t>((p * n + 99) / 100, 1, n);
      return d.sorted[k - 1];
    };
    d.median = at_rank(50);
    for (int p : percentiles) d.percentiles.push_back(at_rank(static_cast<uint64_t>(p)));
    // Mode and entropy over the distinct values (integers only use these).
    uint64_t best = 0;
    long double h = 0;
    for (size_t i = 0; i < n;) {
      size_t j = i;
      while (j < n && d.sorted[j] == d.sorted[i]) ++j;
      if (j - i > best) {
        best = j - i;
        d.mode = d.sorted[i];
      }
      const long double p = static_cast<long double>(j - i) / n;
      h -= p * std::log2(p);
      i = j;
    }
    d.entropy = static_cast<double>(h);
    long double mean = 0;
    for (double x : v) mean += x;
    mean /= n;
    long double m2 = 0, m3 = 0, m4 = 0;
    for (double x : v) {
      const long double e = x - mean;
      m2 += e * e;
      m3 += e * e * e;
      m4 += e * e * e * e;
    }
    if (m2 > 0) {
      d.has_shape = true;
      const long double var = m2 / n;
      d.skewness = static_cast<double>(m3 / n / std::pow(var, 1.5L));
      d.kurtosis = static_cast<double>(m4 / n / (var * var) - 3);
    }
    // Positions: the first pixel, row-major, whose sample equals min / max.
    const double lo = d.sorted.front(), hi = d.sorted.back();
    bool found_lo = false, found_hi = false;
    const auto* base = static_cast<const uint8_t*>(img.data);
    for (uint64_t y = 0; y < l.height; ++y)
      for (uint64_t x = 0; x < l.width; ++x) {
        const double s = sample_at(base + y * l.stride() + (x * l.channels + c) * sample_size(l.type), l.type);
        if (!found_lo && s == lo) {
          found_lo = true;
          d.min_at = y * l.width + x;
        }
        if (!found_hi && s == hi) {
          found_hi = true;
          d.max_at = y * l.width + x;
        }
      }
    out.push_back(d);
  }
  return out;
}

// Distinct colours of an 8-bit image: gray values, or (R, G, B) triples.
inline uint64_t reference_unique_colors(const ImageView& img) {
  const Layout& l = img.layout;
  std::vector<bool> seen(1 << 24, false);
  uint64_t n = 0;
  const auto* base = static_cast<const uint8_t*>(img.data);
  for (uint64_t y = 0; y < l.height; ++y)
    for (uint64_t x = 0; x < l.width; ++x) {
      const uint8_t* p = base + y * l.stride() + x * l.channels;
      const uint32_t key = l.channels >= 3 ? p[0] + 256u * p[1] + 65536u * p[2] : p[0];
      if (!seen[key]) {
        seen[key] = true;
        ++n;
      }
    }
  return n;
}

// Rec. 709 luminance of pixel samples r, g, b, as luminance.hpp defines it.
inline double reference_luma(double r, double g, double b, SampleType t) {
  if (is_float(t)) return std::fma(0.0722, b, std::fma(0.7152, g, 0.2126 * r));
  const int64_t lo = t == SampleType::kInt8 ? -128 : t == SampleType::kInt16 ? -32768 : 0;
  const int64_t y = (13933 * (static_cast<int64_t>(r) - lo) + 46871 * (static_cast<int64_t>(g) - lo) +
                     4732 * (static_cast<int64_t>(b) - lo) + 32768) >> 16;
  return static_cast<double>(y + lo);
}

}  // namespace imgstat::testing
