// Test images (random, constant, chosen values; padded rows and unaligned
// starts on request) and the comparison of engine results with the reference.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "imgstat/engine.hpp"
#include "reference_stats.hpp"

namespace imgstat::testing {

struct TestImage {
  std::vector<uint8_t> storage;
  ImageView view;
};

inline std::string describe(const Layout& l) {
  return std::to_string(l.width) + "x" + std::to_string(l.height) + "x" + std::to_string(l.channels) + " " +
         to_string(l.type) + " stride " + std::to_string(l.stride());
}

inline bool representable(SampleType t, double v) {
  if (std::isnan(v) || std::isinf(v)) return is_float(t);
  switch (t) {
    case SampleType::kUint8: return v == std::floor(v) && v >= 0 && v <= 255;
    case SampleType::kInt8: return v == std::floor(v) && v >= -128 && v <= 127;
    case SampleType::kUint16: return v == std::floor(v) && v >= 0 && v <= 65535;
    case SampleType::kInt16: return v == std::floor(v) && v >= -32768 && v <= 32767;
    default: return true;
  }
}

inline void store(uint8_t* p, SampleType t, double v) {
  switch (t) {
    case SampleType::kUint8: *p = static_cast<uint8_t>(v); break;
    case SampleType::kInt8: *p = static_cast<uint8_t>(static_cast<int8_t>(v)); break;
    case SampleType::kUint16: { const uint16_t x = static_cast<uint16_t>(v); std::memcpy(p, &x, 2); break; }
    case SampleType::kInt16: { const int16_t x = static_cast<int16_t>(v); std::memcpy(p, &x, 2); break; }
    case SampleType::kFloat32: { const float x = static_cast<float>(v); std::memcpy(p, &x, 4); break; }
    case SampleType::kFloat64: std::memcpy(p, &v, 8); break;
  }
}

// An image whose samples come from value(sample index); padding and the bytes
// before an unaligned start are random, so that reading them shows.
template <class ValueFn>
TestImage make_image(std::mt19937_64& rng, uint64_t w, uint64_t h, uint32_t c, SampleType t, uint64_t pad,
                     size_t offset, ValueFn value) {
  TestImage img;
  Layout l{w, h, c, t, 0};
  if (pad) l.row_stride = l.row_bytes() + pad;
  img.storage.resize(offset + l.stride() * h + 16);
  for (auto& b : img.storage) b = static_cast<uint8_t>(rng());
  uint8_t* base = img.storage.data() + offset;
  const size_t ss = sample_size(t);
  uint64_t i = 0;
  for (uint64_t y = 0; y < h; ++y)
    for (uint64_t x = 0; x < w * c; ++x) store(base + y * l.stride() + x * ss, t, value(i++));
  img.view = ImageView{base, l};
  return img;
}

inline TestImage random_image(std::mt19937_64& rng, uint64_t w, uint64_t h, uint32_t c, SampleType t,
                              uint64_t pad, size_t offset, double nonfinite_fraction = 0) {
  std::uniform_real_distribution<double> unit(0, 1);
  return make_image(rng, w, h, c, t, pad, offset, [&](uint64_t) -> double {
    switch (t) {
      case SampleType::kUint8: return static_cast<double>(rng() % 256);
      case SampleType::kInt8: return static_cast<double>(static_cast<int64_t>(rng() % 256) - 128);
      case SampleType::kUint16: return static_cast<double>(rng() % 65536);
      case SampleType::kInt16: return static_cast<double>(static_cast<int64_t>(rng() % 65536) - 32768);
      default: break;
    }
    const double u = unit(rng);
    if (u < nonfinite_fraction / 2) return std::numeric_limits<double>::quiet_NaN();
    if (u < nonfinite_fraction * 3 / 4) return std::numeric_limits<double>::infinity();
    if (u < nonfinite_fraction) return -std::numeric_limits<double>::infinity();
    // Mostly moderate values, some far larger, some tiny: sums then need care.
    const double r = unit(rng);
    if (r < 0.05) return (unit(rng) - 0.3) * 1e7;
    if (r < 0.10) return unit(rng) * 1e-30;
    return unit(rng) * 1250 - 250;
  });
}

inline TestImage constant_image(uint64_t w, uint64_t h, uint32_t c, SampleType t, double value) {
  std::mt19937_64 rng(1);
  return make_image(rng, w, h, c, t, 0, 0, [&](uint64_t) { return value; });
}

inline TestImage image_of_values(std::mt19937_64& rng, uint64_t w, uint64_t h, uint32_t c, SampleType t,
                                 const std::vector<double>& values) {
  return make_image(rng, w, h, c, t, 3, 1, [&](uint64_t) { return values[rng() % values.size()]; });
}

inline void expect_close(double got, double want, double rel, const char* what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what;
    return;
  }
  EXPECT_LE(std::abs(got - want), rel * std::abs(want) + 1e-300) << what << ": got " << got << " want " << want;
}

inline void expect_matches_reference(const std::vector<ChannelStats>& got, const ImageView& img,
                                     uint32_t bins = 256, bool explicit_range = false, double lo = 0,
                                     double hi = 0) {
  const auto ref = reference_stats(img, bins, explicit_range, lo, hi);
  ASSERT_EQ(got.size(), ref.size());
  const bool flt = is_float(img.layout.type);
  for (size_t c = 0; c < ref.size(); ++c) {
    SCOPED_TRACE("channel " + std::to_string(c));
    const ChannelStats& g = got[c];
    const RefChannel& r = ref[c];
    EXPECT_EQ(g.count, r.count);
    EXPECT_EQ(g.nan_count, r.nan);
    EXPECT_EQ(g.posinf_count, r.posinf);
    EXPECT_EQ(g.neginf_count, r.neginf);
    if (r.count > 0) {
      EXPECT_EQ(g.min, r.min);
      EXPECT_EQ(g.max, r.max);
      if (flt) {
        // 1e-12 of the sum of magnitudes: for data of one sign that is 1e-12
        // of the sum itself; where signs cancel, no float64 summation short of
        // an exact one can promise more.
        EXPECT_LE(std::abs(g.sum - r.sum), 1e-12 * r.sum_abs) << "sum: got " << g.sum << " want " << r.sum;
        EXPECT_LE(std::abs(g.mean - r.mean), 1e-12 * r.sum_abs / r.count) << "mean: got " << g.mean;
        if (r.stddev < 1e150)
          expect_close(g.stddev, r.stddev, 1e-10, "stddev");
        else  // the sum of squares overflows float64
          EXPECT_EQ(g.stddev, std::numeric_limits<double>::infinity());
      } else {
        EXPECT_TRUE(g.has_sum_int);
        EXPECT_EQ(static_cast<__int128>(g.sum_int), r.sum_int);
        expect_close(g.mean, r.mean, 1e-15, "mean");
        expect_close(g.stddev, r.stddev, 1e-12, "stddev");
      }
    }
    EXPECT_EQ(g.histogram.counts, r.hist);
    EXPECT_EQ(g.histogram.lo, r.hist_lo);
    EXPECT_EQ(g.histogram.hi, r.hist_hi);
    EXPECT_EQ(g.histogram.underflow, r.underflow);
    EXPECT_EQ(g.histogram.overflow, r.overflow);
  }
}

inline void expect_matches_reference(Engine& engine, const ImageView& img, uint32_t bins = 256,
                                     bool explicit_range = false, double lo = 0, double hi = 0) {
  StatsRequest request;
  request.hist.bins = bins;
  request.hist.explicit_range = explicit_range;
  request.hist.lo = lo;
  request.hist.hi = hi;
  expect_matches_reference(engine.analyze(img, request).channels, img, bins, explicit_range, lo, hi);
}

// Two engines' answers for one channel: integers bit for bit, float sums
// within 1e-12 relative, every count, histogram, order statistic and
// position exact.
inline void expect_same_channel(const ChannelStats& a, const ChannelStats& b, SampleType t) {
  EXPECT_EQ(a.count, b.count);
  EXPECT_EQ(a.nan_count, b.nan_count);
  EXPECT_EQ(a.posinf_count, b.posinf_count);
  EXPECT_EQ(a.neginf_count, b.neginf_count);
  EXPECT_EQ(a.min, b.min);
  EXPECT_EQ(a.max, b.max);
  if (is_float(t)) {
    EXPECT_LE(std::abs(a.sum - b.sum), 1e-12 * std::abs(b.sum) + 1e-300) << a.sum << " vs " << b.sum;
    EXPECT_LE(std::abs(a.mean - b.mean), 1e-12 * std::abs(b.mean) + 1e-300);
    EXPECT_LE(std::abs(a.stddev - b.stddev), 1e-10 * b.stddev + 1e-300);
  } else {  // bit for bit
    EXPECT_EQ(a.sum_int, b.sum_int);
    EXPECT_EQ(a.has_sum_int, b.has_sum_int);
    EXPECT_EQ(a.mean, b.mean);
    EXPECT_EQ(a.stddev, b.stddev);
  }
  EXPECT_EQ(a.histogram.counts, b.histogram.counts);
  EXPECT_EQ(a.histogram.lo, b.histogram.lo);
  EXPECT_EQ(a.histogram.hi, b.histogram.hi);
  EXPECT_EQ(a.histogram.underflow, b.histogram.underflow);
  EXPECT_EQ(a.histogram.overflow, b.histogram.overflow);
  // Order statistics come from counts both engines make exactly.
  EXPECT_EQ(a.has_distribution, b.has_distribution);
  EXPECT_EQ(a.median, b.median);
  EXPECT_EQ(a.percentiles, b.percentiles);
  EXPECT_EQ(a.mode, b.mode);
  EXPECT_EQ(a.entropy, b.entropy);
  EXPECT_EQ(a.bin_error, b.bin_error);
  EXPECT_EQ(a.has_shape, b.has_shape);
  if (is_float(t) && a.has_shape && b.has_shape) {
    EXPECT_NEAR(a.skewness, b.skewness, 1e-8 * (1 + std::abs(b.skewness)));
    EXPECT_NEAR(a.kurtosis, b.kurtosis, 1e-8 * (3 + std::abs(b.kurtosis)));
  } else {
    EXPECT_EQ(a.skewness, b.skewness);
    EXPECT_EQ(a.kurtosis, b.kurtosis);
  }
  EXPECT_EQ(a.has_positions, b.has_positions);
  EXPECT_EQ(a.min_at, b.min_at);
  EXPECT_EQ(a.max_at, b.max_at);
}

// Every quality measure to the bit (engines and paths must agree).
inline void expect_same_quality(const QualityStats& a, const QualityStats& b) {
  EXPECT_EQ(a.laplacian_variance, b.laplacian_variance);
  EXPECT_EQ(a.rms_contrast, b.rms_contrast);
  EXPECT_EQ(a.has_colourfulness, b.has_colourfulness);
  EXPECT_EQ(a.colourfulness, b.colourfulness);
  EXPECT_EQ(a.share_at_min, b.share_at_min);
  EXPECT_EQ(a.share_at_max, b.share_at_max);
  EXPECT_EQ(a.has_cleanvision, b.has_cleanvision);
  const auto &x = a.cleanvision, &y = b.cleanvision;
  EXPECT_EQ(x.brightness, y.brightness);
  EXPECT_EQ(x.brightness_percentiles, y.brightness_percentiles);
  EXPECT_EQ(x.blurriness, y.blurriness);
  EXPECT_EQ(x.blurriness_grayscale_std, y.blurriness_grayscale_std);
  EXPECT_EQ(x.blurry_score, y.blurry_score);
  EXPECT_EQ(x.entropy, y.entropy);
  EXPECT_EQ(x.size, y.size);
  EXPECT_EQ(x.is_grayscale_issue, y.is_grayscale_issue);
  EXPECT_EQ(x.is_dark_issue, y.is_dark_issue);
  EXPECT_EQ(x.is_light_issue, y.is_light_issue);
  EXPECT_EQ(x.is_blurry_issue, y.is_blurry_issue);
  EXPECT_EQ(x.is_low_information_issue, y.is_low_information_issue);
}

inline void expect_same_stats(const Result& g, const Result& c, SampleType t) {
  ASSERT_EQ(g.channels.size(), c.channels.size());
  for (size_t i = 0; i < g.channels.size(); ++i) {
    SCOPED_TRACE("channel " + std::to_string(i));
    expect_same_channel(g.channels[i], c.channels[i], t);
  }
  EXPECT_EQ(g.has_unique_colors, c.has_unique_colors);
  EXPECT_EQ(g.unique_colors, c.unique_colors);
  EXPECT_EQ(g.has_summary, c.has_summary);
  if (g.has_summary && c.has_summary) {
    SCOPED_TRACE("summary");
    expect_same_channel(g.summary, c.summary, t);
  }
  EXPECT_EQ(g.has_luminance, c.has_luminance);
  if (g.has_luminance && c.has_luminance) {
    SCOPED_TRACE("luminance");
    expect_same_channel(g.luminance, c.luminance, luminance_type(t));
  }
}

// Every statistic at once, with the percentiles the reference can check.
inline StatsRequest everything(const std::vector<int>& percentiles = {0, 1, 25, 50, 75, 99, 100}) {
  StatsRequest r;
  r.distribution = r.shape = r.positions = r.unique_colors = r.luminance = r.summary = true;
  for (int p : percentiles) r.percentiles.push_back(p);
  return r;
}

// The distribution, shape, positions, colours and luminance of `got` (an
// analysis with everything()) against the reference: exact for integer
// samples; for floats the stated half-bin bound on median, percentiles and
// mode, float64 rounding on shape.
inline void expect_described(const Result& got, const ImageView& img,
                             const std::vector<int>& percentiles = {0, 1, 25, 50, 75, 99, 100}) {
  const auto ref = reference_described(img, percentiles);
  const bool flt = is_float(img.layout.type);
  ASSERT_EQ(got.channels.size(), ref.size());
  for (size_t c = 0; c < ref.size(); ++c) {
    SCOPED_TRACE("channel " + std::to_string(c));
    const ChannelStats& g = got.channels[c];
    const RefDescribed& r = ref[c];
    if (r.sorted.empty()) {
      EXPECT_FALSE(g.has_distribution);
      EXPECT_FALSE(g.has_positions);
      continue;
    }
    ASSERT_TRUE(g.has_distribution);
    ASSERT_EQ(g.percentiles.size(), percentiles.size());
    EXPECT_TRUE(g.has_positions);
    EXPECT_EQ(g.min_at, r.min_at);
    EXPECT_EQ(g.max_at, r.max_at);
    EXPECT_EQ(g.has_shape, r.has_shape);
    if (g.has_shape && r.has_shape) {
      EXPECT_NEAR(g.skewness, r.skewness, (flt ? 1e-7 : 1e-12) * (1 + std::abs(r.skewness)));
      EXPECT_NEAR(g.kurtosis, r.kurtosis, (flt ? 1e-7 : 1e-12) * (3 + std::abs(r.kurtosis)));
    }
    if (!flt) {
      EXPECT_EQ(g.median, r.median);
      for (size_t i = 0; i < percentiles.size(); ++i) {
        EXPECT_EQ(g.percentiles[i].first, percentiles[i]);
        EXPECT_EQ(g.percentiles[i].second, r.percentiles[i]) << "p" << percentiles[i];
      }
      EXPECT_EQ(g.mode, r.mode);
      EXPECT_NEAR(g.entropy, r.entropy, 1e-12 * (1 + r.entropy));
      EXPECT_EQ(g.bin_error, 0);
      continue;
    }
    // Floats: within the stated bound of the exact order statistic.
    const double lo = r.sorted.front(), hi = r.sorted.back();
    const double bound = (hi - lo) / 131072 * (1 + 1e-9) + 1e-300;
    EXPECT_LE(g.bin_error, bound);
    EXPECT_NEAR(g.median, r.median, bound);
    for (size_t i = 0; i < percentiles.size(); ++i) EXPECT_NEAR(g.percentiles[i].second, r.percentiles[i], bound);
    EXPECT_GE(g.mode, lo);
    EXPECT_LE(g.mode, hi);
  }
  if (sample_size(img.layout.type) == 1) {
    ASSERT_TRUE(got.has_unique_colors);
    EXPECT_EQ(got.unique_colors, reference_unique_colors(img));
  } else {
    EXPECT_FALSE(got.has_unique_colors);
  }
  // The summary: every sample of every channel.
  ASSERT_TRUE(got.has_summary);
  uint64_t all = 0;
  for (const RefDescribed& r : ref) all += r.sorted.size();
  EXPECT_EQ(got.summary.count, all);
  // The luminance against a plane built here from the definition.
  const Layout& l = img.layout;
  EXPECT_EQ(got.has_luminance, l.channels >= 3);
  if (l.channels >= 3) {
    const SampleType yt = luminance_type(l.type);
    std::vector<uint8_t> plane(l.pixels() * sample_size(yt));
    const auto* base = static_cast<const uint8_t*>(img.data);
    const size_t ss = sample_size(l.type);
    for (uint64_t y = 0; y < l.height; ++y)
      for (uint64_t x = 0; x < l.width; ++x) {
        const uint8_t* px = base + y * l.stride() + x * l.channels * ss;
        store(plane.data() + (y * l.width + x) * sample_size(yt), yt,
              reference_luma(sample_at(px, l.type), sample_at(px + ss, l.type), sample_at(px + 2 * ss, l.type), l.type));
      }
    const ImageView yview{plane.data(), Layout{l.width, l.height, 1, yt, 0}};
    const auto yref = reference_stats(yview);
    EXPECT_EQ(got.luminance.count, yref[0].count);
    EXPECT_EQ(got.luminance.min, yref[0].min);
    EXPECT_EQ(got.luminance.max, yref[0].max);
    EXPECT_EQ(got.luminance.histogram.counts, yref[0].hist);
  }
}

}  // namespace imgstat::testing
