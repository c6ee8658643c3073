// Many images merged from their merge states (imgstat-client --aggregate)
// against one analysis of all their pixels at once: integer samples to the
// bit, float sums within 1e-12 of the sum of magnitudes. The parts come from
// the CPU engine everywhere and from the CUDA engine where a GPU is; the
// whole is always the CPU engine's.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>

#include "imgstat/engine.hpp"
#include "imgstat/merge.hpp"
#include "test_images.hpp"

namespace imgstat::testing {
namespace {

class MergeTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    whole_ = make_cpu_engine();
    parts_ = GetParam() == "cpu" ? make_cpu_engine() : make_cuda_engine(EngineOptions{}, &why_not_);
    if (!parts_) GTEST_SKIP() << "no " << GetParam() << " engine here: " << why_not_;
  }
  std::unique_ptr<Engine> whole_, parts_;
  std::string why_not_;
};

const SampleType kAllTypes[] = {SampleType::kUint8,  SampleType::kUint16,  SampleType::kInt8,
                                SampleType::kInt16,  SampleType::kFloat32, SampleType::kFloat64};

// The images' pixels one after another, packed: one image of 1 x N pixels.
TestImage concatenated(const std::vector<TestImage>& images) {
  TestImage all;
  const Layout& first = images.front().view.layout;
  uint64_t pixels = 0;
  for (const TestImage& img : images) pixels += img.view.layout.pixels();
  all.storage.reserve(pixels * first.pixel_bytes() + 16);
  for (const TestImage& img : images) {
    const Layout& l = img.view.layout;
    for (uint64_t y = 0; y < l.height; ++y) {
      const auto* row = static_cast<const uint8_t*>(img.view.data) + y * l.stride();
      all.storage.insert(all.storage.end(), row, row + l.row_bytes());
    }
  }
  all.view = ImageView{all.storage.data(), Layout{pixels, 1, first.channels, first.type, 0}};
  return all;
}

Result merged(Engine& engine, const std::vector<TestImage>& images, const StatsRequest& request) {
  const Layout& l = images.front().view.layout;
  Merger merger(l.type, l.channels, request);
  for (const TestImage& img : images) merger.add(engine.analyze(img.view, Merger::part_request(request)).channels);
  EXPECT_EQ(merger.images(), images.size());
  return merger.result();
}

void expect_float_close(const ChannelStats& got, const ChannelStats& want, const ImageView& all, uint32_t channel) {
  EXPECT_EQ(got.count, want.count);
  EXPECT_EQ(got.nan_count, want.nan_count);
  EXPECT_EQ(got.posinf_count, want.posinf_count);
  EXPECT_EQ(got.neginf_count, want.neginf_count);
  EXPECT_EQ(got.min, want.min);
  EXPECT_EQ(got.max, want.max);
  // 1e-12 of the sum of magnitudes, as the engines promise for one image.
  double sum_abs = 0;
  const Layout& l = all.layout;
  for (uint64_t i = channel; i < l.pixels() * l.channels; i += l.channels) {
    double v;
    if (l.type == SampleType::kFloat32) {
      float f;
      std::memcpy(&f, static_cast<const uint8_t*>(all.data) + i * 4, 4);
      v = f;
    } else {
      std::memcpy(&v, static_cast<const uint8_t*>(all.data) + i * 8, 8);
    }
    if (std::isfinite(v)) sum_abs += std::abs(v);
  }
  EXPECT_LE(std::abs(got.sum - want.sum), 1e-12 * sum_abs) << got.sum << " vs " << want.sum;
  if (want.count) EXPECT_LE(std::abs(got.mean - want.mean), 1e-12 * sum_abs / want.count);
  if (std::isfinite(want.stddev))
    EXPECT_LE(std::abs(got.stddev - want.stddev), 1e-10 * want.stddev + 1e-300);
  else
    EXPECT_EQ(got.stddev, want.stddev);
  EXPECT_EQ(got.histogram.counts, want.histogram.counts);
  EXPECT_EQ(got.histogram.underflow, want.histogram.underflow);
  EXPECT_EQ(got.histogram.overflow, want.histogram.overflow);
  EXPECT_EQ(got.has_shape, want.has_shape);
  if (got.has_shape && want.has_shape) {
    EXPECT_NEAR(got.skewness, want.skewness, 1e-8 * (1 + std::abs(want.skewness)));
    EXPECT_NEAR(got.kurtosis, want.kurtosis, 1e-8 * (3 + std::abs(want.kurtosis)));
  }
}

void expect_merge_equals_whole(Engine& parts, Engine& whole, const std::vector<TestImage>& images,
                               StatsRequest request) {
  const Result got = merged(parts, images, request);
  const TestImage all = concatenated(images);
  const SampleType t = all.view.layout.type;
  // What the merge leaves out, the whole is not asked for either.
  StatsRequest asked = request;
  asked.positions = asked.unique_colors = asked.luminance = false;
  if (is_float(t)) {
    asked.distribution = false;
    if (!asked.hist.explicit_range) asked.histogram = false;
  }
  const Result want = whole.analyze(all.view, asked);
  ASSERT_EQ(got.channels.size(), want.channels.size());
  for (size_t c = 0; c < want.channels.size(); ++c) {
    SCOPED_TRACE("channel " + std::to_string(c));
    if (is_float(t))
      expect_float_close(got.channels[c], want.channels[c], all.view, static_cast<uint32_t>(c));
    else
      expect_same_channel(got.channels[c], want.channels[c], t);
    EXPECT_FALSE(got.channels[c].has_merge_state);
  }
  EXPECT_EQ(got.has_summary, want.has_summary);
  if (!is_float(t) && got.has_summary) {
    SCOPED_TRACE("summary");
    expect_same_channel(got.summary, want.summary, t);
  }
}

StatsRequest merged_request(uint32_t bins, bool explicit_range, double lo, double hi) {
  StatsRequest r;
  r.distribution = r.shape = r.summary = true;
  r.percentiles = {0, 1, 5, 25, 50, 75, 95, 99, 100};
  r.hist.bins = bins;
  r.hist.explicit_range = explicit_range;
  r.hist.lo = lo;
  r.hist.hi = hi;
  return r;
}

TEST_P(MergeTest, ImagesMergedEqualTheirPixelsAtOnce) {
  std::mt19937_64 rng(2311);
  struct Shape { uint64_t w, h; };
  const Shape shapes[] = {{1, 1}, {13, 7}, {127, 3}, {1021, 5}, {3, 257}, {64, 64}};
  for (SampleType t : kAllTypes)
    for (uint32_t c = 1; c <= 4; ++c) {
      std::vector<TestImage> images;
      const int n = 1 + static_cast<int>(rng() % 6);
      for (int i = 0; i < n; ++i) {
        const Shape s = shapes[rng() % std::size(shapes)];
        // Random data with NaN and Inf for floats, padded rows and unaligned starts.
        images.push_back(random_image(rng, s.w, s.h, c, t, rng() % 2 ? 1 + rng() % 7 : 0, rng() % 2, 0.02));
      }
      images.push_back(constant_image(5, 3, c, t, is_float(t) ? -2.5 : type_lo(t) + 7));
      const double lo = is_float(t) ? -100 : static_cast<double>(type_lo(t)) + 3;
      for (const StatsRequest& r : {merged_request(256, false, 0, 0), merged_request(7, false, 0, 0),
                                    merged_request(100, true, lo, lo + 900)}) {
        SCOPED_TRACE(describe(images.front().view.layout) + ", " + std::to_string(images.size()) + " images, " +
                     std::to_string(r.hist.bins) + " bins" + (r.hist.explicit_range ? " over a range" : ""));
        expect_merge_equals_whole(*parts_, *whole_, images, r);
      }
    }
}

TEST_P(MergeTest, ExtremesAndOneImageAlone) {
  std::mt19937_64 rng(5);
  for (SampleType t : kAllTypes) {
    // Float extremes whose sum still fits a double; their squares do not.
    const double lo = is_float(t) ? (t == SampleType::kFloat32 ? -3e38 : -1e300) : static_cast<double>(type_lo(t));
    const double hi = is_float(t) ? (t == SampleType::kFloat32 ? 3e38 : 1e300)
                                  : static_cast<double>(type_lo(t)) + std::ldexp(1.0, type_bits(t)) - 1;
    std::vector<TestImage> images;
    images.push_back(image_of_values(rng, 31, 3, 2, t, {lo, hi}));
    images.push_back(constant_image(1, 1, 2, t, hi));
    SCOPED_TRACE(to_string(t));
    expect_merge_equals_whole(*parts_, *whole_, images, merged_request(256, false, 0, 0));
    expect_merge_equals_whole(*parts_, *whole_, {images.front()}, merged_request(256, false, 0, 0));
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, MergeTest, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

ChannelStats counts_part(std::vector<uint64_t> counts) {
  ChannelStats s;
  s.has_merge_state = true;
  for (uint64_t k : counts) s.count += k;
  s.value_counts = std::move(counts);
  return s;
}

TEST(Merger, RefusesWhatDoesNotFitAndKeepsNoTraceOfIt) {
  StatsRequest r = merged_request(256, false, 0, 0);
  Merger m(SampleType::kUint8, 1, r);
  std::vector<uint64_t> counts(256, 0);
  counts[9] = 4;
  m.add({counts_part(counts)});
  auto refused = [&](std::vector<ChannelStats> parts, const char* words) {
    try {
      m.add(parts);
      ADD_FAILURE() << "accepted: " << words;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused({counts_part(counts), counts_part(counts)}, "2 channels among images of 1");
  ChannelStats none = counts_part(counts);
  none.has_merge_state = false;
  refused({none}, "no merge state");
  refused({counts_part(std::vector<uint64_t>(65536, 1))}, "65536 value counts for uint8");
  ChannelStats lying = counts_part(counts);
  lying.count = 3;
  refused({lying}, "do not add up");
  std::vector<uint64_t> huge(256, 0);
  huge[1] = huge[2] = std::numeric_limits<uint64_t>::max() / 2 + 1;
  refused({counts_part(huge)}, "pass 2^64");
  const Result once = m.result();
  EXPECT_EQ(m.images(), 1u);
  EXPECT_EQ(once.channels[0].count, 4u);
  EXPECT_EQ(once.channels[0].sum_int, 36);
}

// Datasets pass what one image can hold: 2^41 samples and more, sums past
// 64 bits. The variance then takes another exact path.
TEST(Merger, CountsPast2To41AndSumsPast64Bits) {
  StatsRequest r = merged_request(256, false, 0, 0);
  Merger m(SampleType::kUint16, 1, r);
  std::vector<uint64_t> counts(65536, 0);
  const uint64_t a = uint64_t{3} << 48, b = (uint64_t{1} << 47) + 12345;
  counts[65535] = a;
  counts[2] = b;
  m.add({counts_part(counts)});
  counts[65535] = 0;
  counts[100] = 7;
  m.add({counts_part(counts)});
  const Result got = m.result();
  const ChannelStats& s = got.channels[0];
  const uint64_t n = a + 2 * b + 7;
  EXPECT_EQ(s.count, n);
  const __int128 sum = static_cast<__int128>(a) * 65535 + static_cast<__int128>(b) * 4 + 700;
  EXPECT_FALSE(s.has_sum_int);  // past 64 bits: the exact sum is in decimal
  std::string digits;
  for (__int128 v = sum; v; v /= 10) digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(v % 10)));
  EXPECT_EQ(m.exact_sum(0), digits);
  EXPECT_EQ(m.exact_summary_sum(), digits);
  // Variance from exact rational arithmetic: (n sumsq - sum^2) / n^2, each
  // part in long double from exact integers split to stay in range.
  const long double nd = static_cast<long double>(n);
  const long double mean = static_cast<long double>(sum) / nd;
  long double var = 0;
  for (auto [v, k] : {std::pair<long double, uint64_t>{65535, a}, {2, 2 * b}, {100, 7}})
    var += static_cast<long double>(k) * (v - mean) * (v - mean);
  var /= nd;
  EXPECT_NEAR(s.stddev, static_cast<double>(std::sqrt(var)), 1e-12 * static_cast<double>(std::sqrt(var)));
  EXPECT_EQ(s.mean, static_cast<double>(mean));
  EXPECT_EQ(s.median, 65535);  // a quarter of the samples are below 65535
  ASSERT_EQ(s.percentiles.size(), 9u);
  EXPECT_EQ(s.percentiles[2].second, 2);  // p5
  EXPECT_EQ(s.max, 65535);
}

TEST(Merger, FloatHistogramsNeedOneRangeForAll) {
  // Automatic float ranges are each image's own [min, max]: not merged.
  Merger automatic(SampleType::kFloat32, 1, merged_request(256, false, 0, 0));
  EXPECT_FALSE(automatic.request().histogram);
  EXPECT_FALSE(automatic.request().distribution);
  EXPECT_TRUE(automatic.request().shape);
  Merger ranged(SampleType::kFloat32, 1, merged_request(64, true, 0, 1));
  EXPECT_TRUE(ranged.request().histogram);
  EXPECT_TRUE(Merger::part_request(merged_request(64, true, 0, 1)).histogram);
  EXPECT_FALSE(Merger::part_request(merged_request(64, false, 0, 0)).histogram);
  EXPECT_TRUE(Merger::part_request(merged_request(64, false, 0, 0)).merge_state);
}

}  // namespace
}  // namespace imgstat::testing
