// Every engine against the reference implementation of the conventions.
// Runs on the CPU engine everywhere and on the CUDA engine where a GPU is.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <atomic>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "imgstat/engine.hpp"
#include "test_images.hpp"

namespace imgstat::testing {
namespace {

class EngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    engine_ = make_test_engine(GetParam());
    if (!engine_) GTEST_SKIP() << "no " << GetParam() << " engine here: " << why_not_;
  }
  std::unique_ptr<Engine> make_test_engine(const std::string& kind) {
    if (kind == "cpu") return make_cpu_engine();
    return make_cuda_engine(EngineOptions{}, &why_not_);
  }
  std::unique_ptr<Engine> engine_;
  std::string why_not_;
};

const SampleType kAllTypes[] = {SampleType::kUint8,  SampleType::kUint16,  SampleType::kInt8,
                                SampleType::kInt16,  SampleType::kFloat32, SampleType::kFloat64};

TEST_P(EngineTest, RandomDataEveryTypeChannelsAndShape) {
  struct Shape { uint64_t w, h; };
  const Shape shapes[] = {{1, 1}, {2, 1}, {1, 7}, {13, 7}, {127, 3}, {1021, 5}, {4099, 2}, {3, 257}};
  std::mt19937_64 rng(42);
  for (SampleType t : kAllTypes)
    for (uint32_t c = 1; c <= 4; ++c)
      for (const Shape& s : shapes)
        for (int variant = 0; variant < 3; ++variant) {
          // 0: packed, aligned; 1: padded rows (odd stride); 2: packed, unaligned start.
          const uint64_t pad = variant == 1 ? 1 + rng() % 13 : 0;
          const size_t offset = variant == 2 ? 1 : 0;
          TestImage img = random_image(rng, s.w, s.h, c, t, pad, offset);
          SCOPED_TRACE(describe(img.view.layout) + " variant " + std::to_string(variant));
          expect_matches_reference(*engine_, img.view);
        }
}

TEST_P(EngineTest, ConstantImages) {
  std::mt19937_64 rng(7);
  for (SampleType t : kAllTypes)
    for (double value : {0.0, 1.0, -3.0, 200.0, 255.0, 65535.0, -32768.0, 1.5}) {
      if (!representable(t, value)) continue;
      TestImage img = constant_image(333, 17, 3, t, value);
      SCOPED_TRACE(describe(img.view.layout) + " value " + std::to_string(value));
      const auto stats = engine_->analyze(img.view, StatsRequest{}).channels;
      for (const ChannelStats& s : stats) {
        EXPECT_EQ(s.count, 333u * 17u);
        EXPECT_EQ(s.min, value);
        EXPECT_EQ(s.max, value);
        EXPECT_EQ(s.mean, value);
        EXPECT_EQ(s.stddev, 0.0);
      }
      expect_matches_reference(*engine_, img.view);
    }
}

TEST_P(EngineTest, ExtremeValues) {
  std::mt19937_64 rng(11);
  const std::vector<std::pair<SampleType, std::vector<double>>> cases = {
      {SampleType::kUint8, {0, 255}},
      {SampleType::kInt8, {-128, 127}},
      {SampleType::kUint16, {0, 65535}},
      {SampleType::kInt16, {-32768, 32767}},
      {SampleType::kFloat32, {FLT_MAX, -FLT_MAX, FLT_MIN, -FLT_TRUE_MIN, FLT_TRUE_MIN, 0.0, -0.0}},
      {SampleType::kFloat64, {1e300, -1e300, DBL_MIN, DBL_TRUE_MIN, -DBL_TRUE_MIN, 0.0}},
  };
  for (const auto& [t, values] : cases) {
    TestImage img = image_of_values(rng, 257, 9, 2, t, values);
    SCOPED_TRACE(describe(img.view.layout));
    expect_matches_reference(*engine_, img.view);
  }
}

TEST_P(EngineTest, NanAndInfAreCountedAndExcluded) {
  std::mt19937_64 rng(3);
  for (SampleType t : {SampleType::kFloat32, SampleType::kFloat64})
    for (uint32_t c = 1; c <= 4; ++c) {
      TestImage img = random_image(rng, 211, 13, c, t, 0, 0, /*nonfinite_fraction=*/0.2);
      SCOPED_TRACE(describe(img.view.layout));
      const auto stats = engine_->analyze(img.view, StatsRequest{}).channels;
      uint64_t nonfinite = 0;
      for (const ChannelStats& s : stats) nonfinite += s.nan_count + s.posinf_count + s.neginf_count;
      EXPECT_GT(nonfinite, 0u);
      expect_matches_reference(*engine_, img.view);
    }
}

TEST_P(EngineTest, ChannelWithoutFiniteSamples) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  TestImage img = constant_image(31, 5, 1, SampleType::kFloat32, nan);
  const auto stats = engine_->analyze(img.view, StatsRequest{}).channels;
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].count, 0u);
  EXPECT_EQ(stats[0].nan_count, 31u * 5u);
  uint64_t total = 0;
  for (uint64_t n : stats[0].histogram.counts) total += n;
  EXPECT_EQ(total, 0u);
}

TEST_P(EngineTest, HistogramBinsAndRanges) {
  std::mt19937_64 rng(5);
  for (SampleType t : kAllTypes)
    for (uint32_t bins : {1u, 3u, 100u, 255u, 256u, 1000u, 65536u}) {
      TestImage img = random_image(rng, 509, 7, 2, t, 0, 0);
      SCOPED_TRACE(describe(img.view.layout) + " bins " + std::to_string(bins));
      expect_matches_reference(*engine_, img.view, bins);
      // An explicit range inside the data, so both underflow and overflow occur.
      const auto ref = reference_stats(img.view);
      const double lo = ref[0].min + (ref[0].max - ref[0].min) * 0.25;
      const double hi = ref[0].min + (ref[0].max - ref[0].min) * 0.75;
      if (lo < hi) expect_matches_reference(*engine_, img.view, bins, true, lo, hi);
    }
}

TEST_P(EngineTest, OnlyTheRequestedStatistics) {
  std::mt19937_64 rng(9);
  TestImage img = random_image(rng, 100, 10, 3, SampleType::kUint8, 0, 0);
  StatsRequest request;
  request.min_max = request.sum = request.stddev = false;
  const auto stats = engine_->analyze(img.view, request).channels;
  const auto ref = reference_stats(img.view);
  for (size_t c = 0; c < stats.size(); ++c) {
    EXPECT_EQ(stats[c].count, 1000u);
    EXPECT_EQ(stats[c].histogram.counts, ref[c].hist);
    EXPECT_FALSE(stats[c].has_sum_int);
  }
}

TEST_P(EngineTest, StreamedInChunksEqualsWholeImage) {
  std::mt19937_64 rng(13);
  for (SampleType t : kAllTypes)
    for (uint32_t c : {1u, 3u, 4u}) {
      const uint64_t pad = rng() % 2 ? 5 : 0;
      TestImage img = random_image(rng, 301, 17, c, t, pad, 0);
      SCOPED_TRACE(describe(img.view.layout));
      for (size_t max_chunk : {size_t{1}, size_t{7}, size_t{4096}, size_t{1} << 20}) {
        auto stream = engine_->open_stream(img.view.layout, StatsRequest{});
        const auto* p = static_cast<const uint8_t*>(img.view.data);
        size_t left = img.view.layout.min_bytes();
        while (left > 0) {
          const size_t n = std::min<size_t>(left, 1 + rng() % max_chunk);
          stream->feed(p, n);
          p += n;
          left -= n;
        }
        expect_matches_reference(stream->finish().channels, img.view);
      }
    }
}

TEST_P(EngineTest, DistributionShapePositionsColorsAndLuminance) {
  struct Shape { uint64_t w, h; };
  const Shape shapes[] = {{1, 1}, {2, 1}, {13, 7}, {127, 3}, {1021, 5}, {3, 257}};
  std::mt19937_64 rng(4242);
  for (SampleType t : kAllTypes)
    for (uint32_t c = 1; c <= 4; ++c)
      for (const Shape& s : shapes)
        for (int variant = 0; variant < 2; ++variant) {
          TestImage img = variant == 0 ? random_image(rng, s.w, s.h, c, t, 0, 0)
                                       : random_image(rng, s.w, s.h, c, t, 1 + rng() % 13, 1, is_float(t) ? 0.1 : 0);
          SCOPED_TRACE(describe(img.view.layout) + " variant " + std::to_string(variant));
          expect_described(engine_->analyze(img.view, everything()), img.view);
        }
}

// Few distinct values, so that ties decide mode, median and the first
// positions; and constant images, whose shape is undefined.
TEST_P(EngineTest, TiesAndConstantImages) {
  std::mt19937_64 rng(77);
  for (SampleType t : kAllTypes) {
    for (uint32_t c : {1u, 3u, 4u}) {
      TestImage img = image_of_values(rng, 97, 31, c, t, {1, 2, 2, 3, 100});
      SCOPED_TRACE(describe(img.view.layout));
      expect_described(engine_->analyze(img.view, everything()), img.view);
      TestImage flat = constant_image(61, 7, c, t, 3);
      const Result r = engine_->analyze(flat.view, everything());
      expect_described(r, flat.view);
      for (const ChannelStats& s : r.channels) {
        EXPECT_FALSE(s.has_shape);
        EXPECT_EQ(s.median, 3);
        EXPECT_EQ(s.entropy, 0);
        EXPECT_EQ(s.min_at, 0u);
        EXPECT_EQ(s.max_at, 0u);
      }
    }
  }
}

// Float fine bins are found two ways on the CPU engine: a few samples
// (up to kListedFineSamples, 16384, in kernels/cpu/float_passes.hpp) each
// binned and sorted, more counted into all 65536 bins. Every sample twice
// has the same median, percentiles (the sample of rank ceil(2pn/100) is the
// one of rank ceil(pn/100)), mode, entropy and bin error, so 12,000 samples
// against the same 24,000 times take both ways and must agree to the bit;
// on the GPU both are counted. Ties, NaN, infinities and -0 included.
TEST_P(EngineTest, FloatDistributionTheSameForFewSamplesAsForMany) {
  std::mt19937_64 rng(5);
  for (SampleType t : {SampleType::kFloat32, SampleType::kFloat64})
    for (uint32_t c : {1u, 3u}) {
      for (int values = 0; values < 2; ++values) {
        const uint64_t n = 12000;
        const std::vector<double> few = {-2, -0.0, 0, 0.5, 0.5, 7, 1e6};
        std::uniform_real_distribution<double> unit(-1, 1);
        TestImage once = make_image(rng, n, 1, c, t, 0, 0, [&](uint64_t i) {
          if (i == 17) return double{NAN};  // non-finite samples are left out of the bins
          if (i == c * 300 + 1) return double{INFINITY};
          if (i == c * 901) return -double{INFINITY};
          return values ? few[rng() % few.size()] : unit(rng) * 1e3;
        });
        const uint64_t bytes = once.view.layout.min_bytes();
        const auto* p = static_cast<const uint8_t*>(once.view.data);
        std::vector<uint8_t> twice(2 * bytes);
        std::memcpy(twice.data(), p, bytes);
        std::memcpy(twice.data() + bytes, p, bytes);
        const ImageView doubled{twice.data(), Layout{2 * n, 1, c, t, 0}};
        SCOPED_TRACE(describe(once.view.layout) + (values ? " few values" : " random"));
        const StatsRequest request = everything();
        const Result a = engine_->analyze(once.view, request), b = engine_->analyze(doubled, request);
        expect_described(a, once.view);
        for (uint32_t ch = 0; ch < c; ++ch) {
          const ChannelStats &x = a.channels[ch], &y = b.channels[ch];
          EXPECT_EQ(2 * x.count, y.count);
          ASSERT_TRUE(x.has_distribution && y.has_distribution);
          EXPECT_EQ(x.median, y.median);
          EXPECT_EQ(x.percentiles, y.percentiles);
          EXPECT_EQ(x.mode, y.mode);
          EXPECT_EQ(x.entropy, y.entropy);
          EXPECT_EQ(x.bin_error, y.bin_error);
        }
      }
    }
}

TEST_P(EngineTest, StreamsFindTheSamePositionsAndColors) {
  std::mt19937_64 rng(31);
  for (SampleType t : kAllTypes)
    for (uint32_t c : {1u, 3u, 4u}) {
      TestImage img = random_image(rng, 211, 19, c, t, rng() % 2 ? 5 : 0, 0);
      SCOPED_TRACE(describe(img.view.layout));
      StatsRequest request = everything();
      request.luminance = false;  // whole images only
      auto stream = engine_->open_stream(img.view.layout, request);
      const auto* p = static_cast<const uint8_t*>(img.view.data);
      size_t left = img.view.layout.min_bytes();
      while (left > 0) {
        const size_t n = std::min<size_t>(left, 1 + rng() % 3000);
        stream->feed(p, n);
        p += n;
        left -= n;
      }
      Result streamed = stream->finish();
      const Result whole = engine_->analyze(img.view, request);
      ASSERT_EQ(streamed.channels.size(), whole.channels.size());
      for (size_t i = 0; i < whole.channels.size(); ++i) {
        EXPECT_EQ(streamed.channels[i].min_at, whole.channels[i].min_at);
        EXPECT_EQ(streamed.channels[i].max_at, whole.channels[i].max_at);
        EXPECT_EQ(streamed.channels[i].median, whole.channels[i].median);
        EXPECT_EQ(streamed.channels[i].mode, whole.channels[i].mode);
      }
      EXPECT_EQ(streamed.unique_colors, whole.unique_colors);
      EXPECT_EQ(streamed.summary.count, whole.summary.count);
    }
}

TEST_P(EngineTest, PercentilesOutsideZeroToHundredAreRefused) {
  uint8_t data[16] = {};
  StatsRequest request = everything();
  for (double p : {-1.0, 100.5, std::nan("")}) {
    request.percentiles = {p};
    try {
      engine_->analyze(ImageView{data, Layout{4, 4, 1, SampleType::kUint8, 0}}, request);
      ADD_FAILURE() << "accepted percentile " << p;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    }
  }
}

TEST_P(EngineTest, StreamThatEndsEarlyIsAnError) {
  std::mt19937_64 rng(17);
  TestImage img = random_image(rng, 64, 64, 1, SampleType::kUint16, 0, 0);
  auto stream = engine_->open_stream(img.view.layout, StatsRequest{});
  stream->feed(img.view.data, img.view.layout.min_bytes() - 1);
  try {
    stream->finish();
    FAIL() << "finish() accepted a short stream";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

TEST_P(EngineTest, RejectsBadLayoutsWithInvalidArgument) {
  uint8_t data[64] = {};
  StatsRequest request;
  const Layout bad[] = {
      {4, 4, 0, SampleType::kUint8, 0},   // no channels
      {4, 4, 5, SampleType::kUint8, 0},   // five channels
      {0, 4, 1, SampleType::kUint8, 0},   // empty
      {4, 4, 2, SampleType::kUint8, 7},   // stride below a row
  };
  for (const Layout& l : bad) {
    try {
      engine_->analyze(ImageView{data, l}, request);
      ADD_FAILURE() << "accepted " << describe(l);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    }
  }
  request.hist.bins = 0;
  EXPECT_THROW(engine_->analyze(ImageView{data, Layout{4, 4, 1, SampleType::kUint8, 0}}, request), Error);
  request.hist.bins = 65537;
  EXPECT_THROW(engine_->analyze(ImageView{data, Layout{4, 4, 1, SampleType::kUint8, 0}}, request), Error);
}

TEST_P(EngineTest, CountsBeyond32Bits) {
  // 2^32 + 2^20 + 13 bytes of i % 251: every counter passes 2^24, the total
  // passes 2^32, and the counts are known in closed form.
  const uint64_t n = (uint64_t{1} << 32) + (uint64_t{1} << 20) + 13;
  void* mem = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  madvise(mem, n, MADV_HUGEPAGE);  // 4 GiB in 4 KiB pages faults for seconds
  auto* data = static_cast<uint8_t*>(mem);
  for (uint64_t i = 0, v = 0; i < n; ++i, v = v == 250 ? 0 : v + 1) data[i] = static_cast<uint8_t>(v);
  StatsRequest request;
  const auto stats = engine_->analyze(ImageView{data, Layout{n, 1, 1, SampleType::kUint8, 0}}, request).channels;
  munmap(mem, n);
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].count, n);
  uint64_t total = 0;
  __int128 sum = 0;
  for (uint32_t v = 0; v < 256; ++v) {
    const uint64_t want = v < 251 ? (n - v + 250) / 251 : 0;
    EXPECT_EQ(stats[0].histogram.counts[v], want) << "value " << v;
    total += stats[0].histogram.counts[v];
    sum += static_cast<__int128>(want) * v;
  }
  EXPECT_EQ(total, n);
  EXPECT_EQ(stats[0].sum_int, static_cast<int64_t>(sum));
  EXPECT_EQ(stats[0].max, 250);
}

// astropy.stats.sigma_clipped_stats and mad_std, written out over the
// samples as numpy computes them: the reference for ChannelStats::robust.
struct RobustReference {
  double mean = 0, median = 0, stddev = 0, mad = 0;
  uint64_t count = 0, low = 0, high = 0;
  uint32_t iterations = 0;
};
double np_median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
double np_mean(const std::vector<double>& v) {
  long double s = 0;
  for (double x : v) s += x;
  return static_cast<double>(s / v.size());
}
double np_std(const std::vector<double>& v) {
  const long double m = np_mean(v);
  long double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return static_cast<double>(std::sqrt(s / v.size()));
}
double np_mad(const std::vector<double>& v) {
  const double m = np_median(v);
  std::vector<double> d;
  for (double x : v) d.push_back(std::fabs(x - m));
  return np_median(d);
}
RobustReference sigma_clipped(const std::vector<double>& data, const SigmaClipSpec& c) {
  RobustReference r;
  r.mad = np_mad(data);
  std::vector<double> kept = data;
  double lo = 0, hi = 0;
  while (c.maxiters < 0 || r.iterations < static_cast<uint32_t>(c.maxiters)) {
    ++r.iterations;
    const double centre = c.centre_mean ? np_mean(kept) : np_median(kept);
    const double spread = c.spread_mad_std ? np_mad(kept) * kMadStdScale : np_std(kept);
    lo = centre - spread * c.sigma_lower;
    hi = centre + spread * c.sigma_upper;
    std::vector<double> next;
    for (double x : kept)
      if (x >= lo && x <= hi) next.push_back(x);
    const bool changed = next.size() != kept.size();
    kept = std::move(next);
    if (!changed || kept.empty()) break;
  }
  r.count = kept.size();
  if (kept.empty()) return r;
  const double kmin = *std::min_element(kept.begin(), kept.end()), kmax = *std::max_element(kept.begin(), kept.end());
  for (double x : data) r.low += x < kmin, r.high += x > kmax;
  r.mean = np_mean(kept);
  r.median = np_median(kept);
  r.stddev = np_std(kept);
  return r;
}

void expect_robust(const ChannelStats& got, const RobustReference& want) {
  ASSERT_TRUE(got.has_robust);
  const ChannelStats::Robust& q = got.robust;
  EXPECT_EQ(q.count, want.count);
  EXPECT_EQ(q.iterations, want.iterations);
  EXPECT_EQ(q.mad, want.mad);
  EXPECT_EQ(q.mad_std, want.mad * kMadStdScale);
  if (want.count == 0) {
    EXPECT_TRUE(std::isnan(q.mean) && std::isnan(q.median) && std::isnan(q.stddev));
    return;
  }
  EXPECT_EQ(q.clipped_low, want.low);
  EXPECT_EQ(q.clipped_high, want.high);
  EXPECT_EQ(q.median, want.median);
  EXPECT_NEAR(q.mean, want.mean, 1e-12 * std::max(1.0, std::fabs(want.mean)));
  EXPECT_NEAR(q.stddev, want.stddev, 1e-12 * std::max(1.0, want.stddev));
}

// Sigma-clipped statistics of every integer type, odd sizes, strides and
// unaligned starts, outliers at the type's extremes, constant data and one
// pixel, under astropy's defaults and other clippings: as astropy computes
// them over the samples; per tile as over the tile's samples; floats refused.
TEST_P(EngineTest, RobustStatisticsAsAstropysSigmaClippedStats) {
  std::mt19937_64 rng(53);
  std::vector<SigmaClipSpec> clips(4);
  clips[1].sigma_lower = clips[1].sigma_upper = 2;
  clips[1].maxiters = -1;
  clips[2].sigma_lower = 1.5;
  clips[2].sigma_upper = 4;
  clips[2].centre_mean = true;
  clips[3].spread_mad_std = true;
  clips[3].maxiters = 10;
  struct Size { uint64_t w, h; uint64_t pad; size_t offset; };
  const Size sizes[] = {{1, 1, 0, 0}, {211, 13, 0, 0}, {67, 31, 5, 3}};
  for (SampleType t : {SampleType::kUint8, SampleType::kInt8, SampleType::kUint16, SampleType::kInt16}) {
    const double tlo = type_lo(t), thi = type_lo(t) + std::ldexp(1.0, static_cast<int>(type_bits(t))) - 1;
    for (const Size& sz : sizes)
      for (uint32_t c : {1u, 3u})
        for (int kind = 0; kind < 3; ++kind) {  // spread with outliers, constant, two values at the extremes
          std::normal_distribution<double> normal((tlo + thi) / 2, (thi - tlo) / 40);
          std::vector<double> vals(sz.w * sz.h * c);
          for (double& v : vals) {
            const uint64_t u = rng() % 100;
            v = kind == 1 ? tlo + 7 : kind == 2 ? (u < 50 ? tlo : thi)
                : u < 3 ? thi : u < 5 ? tlo : std::clamp(std::round(normal(rng)), tlo, thi);
          }
          TestImage img = make_image(rng, sz.w, sz.h, c, t, sz.pad, sz.offset, [&](uint64_t i) { return vals[i]; });
          for (const SigmaClipSpec& clip : clips) {
            SCOPED_TRACE(std::string(to_string(t)) + " " + std::to_string(sz.w) + "x" + std::to_string(sz.h) + "x" +
                         std::to_string(c) + " data " + std::to_string(kind) + " centre_mean " +
                         std::to_string(clip.centre_mean) + " maxiters " + std::to_string(clip.maxiters));
            StatsRequest req;
            req.robust = true;
            req.sigma_clip = clip;
            const Result r = engine_->analyze(img.view, req);
            for (uint32_t ch = 0; ch < c; ++ch) {
              std::vector<double> samples;
              for (size_t i = ch; i < vals.size(); i += c) samples.push_back(vals[i]);
              expect_robust(r.channels[ch], sigma_clipped(samples, clip));
            }
            if (sz.w < 60 || clip.maxiters != 5) continue;
            Parts tiles;
            tiles.kind = PartsKind::kTiles;
            tiles.columns = 3;
            tiles.rows = 2;
            const Result parts = engine_->analyze_parts(img.view, tiles, req);
            ASSERT_EQ(parts.parts.size(), 6u);
            for (const PartStats& p : parts.parts)
              for (uint32_t ch = 0; ch < c; ++ch) {
                std::vector<double> samples;
                for (uint64_t y = p.roi.y; y < p.roi.y + p.roi.height; ++y)
                  for (uint64_t x = p.roi.x; x < p.roi.x + p.roi.width; ++x) samples.push_back(vals[(y * sz.w + x) * c + ch]);
                expect_robust(p.channels[ch], sigma_clipped(samples, clip));
              }
          }
        }
  }
  // Float samples: NaN and infinities left out, outliers, ties, constant
  // data, one pixel; as the reference over the finite samples. (The CUDA
  // engine hands them to the CPU's: this engine alone may refuse them.)
  for (SampleType t : {SampleType::kFloat32, SampleType::kFloat64})
    for (const Size& sz : sizes)
      for (int kind = 0; kind < 3; ++kind) {
        std::normal_distribution<double> normal(1000.5, 30);
        std::vector<double> vals(sz.w * sz.h);
        for (double& v : vals) {
          const uint64_t u = rng() % 100;
          v = kind == 1 ? 7.25
              : kind == 2 ? std::round(normal(rng) / 10) * 10  // ties
              : u < 2 ? std::numeric_limits<double>::quiet_NaN()
              : u < 3 ? std::numeric_limits<double>::infinity()
              : u < 6 ? 1e6 : u < 8 ? -1e5 : normal(rng);
          if (t == SampleType::kFloat32) v = static_cast<float>(v);
        }
        TestImage img = make_image(rng, sz.w, sz.h, 1, t, sz.pad, sz.offset, [&](uint64_t i) { return vals[i]; });
        std::vector<double> finite;
        for (double v : vals)
          if (std::isfinite(v)) finite.push_back(v);
        for (const SigmaClipSpec& clip : clips) {
          SCOPED_TRACE(std::string(to_string(t)) + " " + std::to_string(sz.w) + "x" + std::to_string(sz.h) + " data " +
                       std::to_string(kind) + " maxiters " + std::to_string(clip.maxiters));
          StatsRequest req;
          req.robust = true;
          req.sigma_clip = clip;
          Result r;
          try {
            r = engine_->analyze(img.view, req);
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::kUnimplemented) << e.what();
            EXPECT_EQ(GetParam(), "cuda") << e.what();
            continue;
          }
          if (finite.empty()) {
            EXPECT_FALSE(r.channels[0].has_robust && r.channels[0].robust.count > 0);
            continue;
          }
          expect_robust(r.channels[0], sigma_clipped(finite, clip));
        }
      }
}

// Quality measures of 8- and 16-bit images of 1 to 4 channels, odd sizes,
// padded rows and unaligned starts, random, constant and two-valued: the
// Laplacian variance, contrast, colourfulness and exposure equal to those
// computed here in long double from the pixels (OpenCV's grey, its
// Laplacian with reflected borders), the same bits whatever the layout, and
// every field the CPU engine's on this engine. Floats refused.
TEST_P(EngineTest, QualityMeasuresAsComputedFromThePixels) {
  std::mt19937_64 rng(531);
  const auto cpu = make_cpu_engine();
  struct Size { uint64_t w, h; uint64_t pad; size_t offset; };
  const Size sizes[] = {{1, 1, 0, 0}, {2, 5, 0, 0}, {3, 3, 7, 1}, {97, 61, 0, 0}, {211, 13, 5, 3}, {500, 7, 0, 1}};
  for (SampleType t : {SampleType::kUint8, SampleType::kUint16})
    for (const Size& sz : sizes)
      for (uint32_t c = 1; c <= 4; ++c)
        for (int kind = 0; kind < 3; ++kind) {  // random, constant, the type's two ends
          const double top = t == SampleType::kUint8 ? 255 : 65535;
          std::vector<double> vals(sz.w * sz.h * c);
          for (double& v : vals)
            v = kind == 0 ? static_cast<double>(rng() % (static_cast<uint64_t>(top) + 1)) : kind == 1 ? 77 : (rng() % 2) * top;
          SCOPED_TRACE(std::string(to_string(t)) + " " + std::to_string(sz.w) + "x" + std::to_string(sz.h) + "x" +
                       std::to_string(c) + " data " + std::to_string(kind));
          const TestImage img = make_image(rng, sz.w, sz.h, c, t, sz.pad, sz.offset, [&](uint64_t i) { return vals[i]; });
          const TestImage packed = make_image(rng, sz.w, sz.h, c, t, 0, 0, [&](uint64_t i) { return vals[i]; });
          StatsRequest req;
          req.quality = true;
          req.rgb[0] = 2, req.rgb[1] = 1, req.rgb[2] = 0;  // stored B, G, R as OpenCV stores them
          const Result r = engine_->analyze(img.view, req);
          ASSERT_TRUE(r.has_quality);
          const QualityStats& q = r.quality;
          // The grey image, its Laplacian and the sums, here.
          const uint64_t w = sz.w, h = sz.h, n = w * h;
          auto at = [&](uint64_t x, uint64_t y, uint32_t ch) { return vals[(y * w + x) * c + ch]; };
          std::vector<long double> grey(n);
          for (uint64_t y = 0; y < h; ++y)
            for (uint64_t x = 0; x < w; ++x)
              grey[y * w + x] = c >= 3 ? std::floor((9798 * at(x, y, 2) + 19235 * at(x, y, 1) + 3735 * at(x, y, 0) + 16384) / 32768)
                                       : at(x, y, 0);
          auto g = [&](int64_t x, int64_t y) {
            auto reflect = [](int64_t i, int64_t len) { return len == 1 ? 0 : i < 0 ? 1 : i >= len ? len - 2 : i; };
            return grey[reflect(y, static_cast<int64_t>(h)) * w + reflect(x, static_cast<int64_t>(w))];
          };
          long double ls = 0, lsq = 0, gs = 0, gsq = 0;
          for (int64_t y = 0; y < static_cast<int64_t>(h); ++y)
            for (int64_t x = 0; x < static_cast<int64_t>(w); ++x) {
              const long double lap = g(x - 1, y) + g(x + 1, y) + g(x, y - 1) + g(x, y + 1) - 4 * g(x, y);
              ls += lap, lsq += lap * lap, gs += g(x, y), gsq += g(x, y) * g(x, y);
            }
          const long double nn = static_cast<long double>(n);
          EXPECT_NEAR(q.laplacian_variance, static_cast<double>(lsq / nn - (ls / nn) * (ls / nn)),
                      1e-9 * (1 + q.laplacian_variance));
          EXPECT_NEAR(q.rms_contrast, static_cast<double>(std::sqrt(std::max(0.0L, gsq / nn - (gs / nn) * (gs / nn))) / top),
                      1e-9);
          if (kind == 1) EXPECT_EQ(q.laplacian_variance, 0.0);
          ASSERT_EQ(q.share_at_min.size(), c);
          for (uint32_t ch = 0; ch < c; ++ch) {
            uint64_t lo = 0, hi = 0;
            for (uint64_t i = ch; i < vals.size(); i += c) lo += vals[i] == 0, hi += vals[i] == top;
            EXPECT_EQ(q.share_at_min[ch], static_cast<double>(lo) / static_cast<double>(n));
            EXPECT_EQ(q.share_at_max[ch], static_cast<double>(hi) / static_cast<double>(n));
          }
          EXPECT_EQ(q.has_colourfulness, c >= 3);
          EXPECT_EQ(q.has_cleanvision, t == SampleType::kUint8);
          if (t == SampleType::kUint8) EXPECT_EQ(q.cleanvision.is_grayscale_issue, c < 3 || kind == 1);
          // The same bits packed and aligned, and from the CPU engine.
          StatsRequest with_histograms = req;  // 8-bit: the engine's histograms reused
          with_histograms.histogram = true;
          for (const Result& other : {engine_->analyze(packed.view, req), cpu->analyze(img.view, req),
                                      engine_->analyze(img.view, with_histograms)}) {
            expect_same_quality(other.quality, q);
          }
        }
  TestImage floats = random_image(rng, 17, 5, 3, SampleType::kFloat32, 0, 0);
  StatsRequest req;
  req.quality = true;
  try {
    engine_->analyze(floats.view, req);
    ADD_FAILURE() << "float samples' quality answered";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    EXPECT_NE(std::string(e.what()).find("float32"), std::string::npos) << e.what();
  }
}

// Many callers at once on one engine, as a server's requests or a pass's
// lanes are: more threads than the engine's arena has places, so that a
// thread waiting in one image's parallel loop runs another caller's whole
// analysis (arena.execute enqueues it). Each image's quality measures are
// the ones it gets alone (the buffers a thread kept between images were
// once shared by such nested calls: one image's grey plane overwrote
// another's, or was freed under it).
// Background meshes (photutils' Background2D, checked against photutils
// itself in tests/background/check.py): on this engine every field is the
// CPU engine's, whatever the layout (row padding, an unaligned start); one
// box over the whole image, clipping nothing (sigma 1e6), no filter and the
// mean estimator give the mean and population stddev of the finite samples,
// computed here; a constant image gives its constant and RMS 0 everywhere.
TEST_P(EngineTest, BackgroundMeshesAsTheCpuEnginesAndFromTheSamples) {
  std::mt19937_64 rng(2026);
  const auto cpu = make_cpu_engine();
  struct Size { uint64_t w, h; uint64_t pad; size_t offset; uint64_t box_w, box_h; };
  const Size sizes[] = {{1, 1, 0, 0, 1, 1}, {17, 5, 3, 1, 4, 2}, {97, 61, 0, 0, 10, 13}, {131, 67, 8, 3, 32, 16}};
  const SampleType types[] = {SampleType::kUint8, SampleType::kInt8, SampleType::kUint16, SampleType::kInt16,
                              SampleType::kFloat32, SampleType::kFloat64};
  for (SampleType t : types)
    for (const Size& sz : sizes)
      for (uint32_t c : {1u, 3u}) {
        SCOPED_TRACE(std::string(to_string(t)) + " " + std::to_string(sz.w) + "x" + std::to_string(sz.h) + "x" + std::to_string(c));
        std::vector<double> vals(sz.w * sz.h * c);
        std::normal_distribution<double> sky(is_float(t) ? 1000.0 : sample_size(t) == 1 ? 60.0 : 3000.0, 7.0);
        for (double& v : vals) {
          v = std::round(sky(rng));
          if (is_float(t)) v += sky(rng) / 1000;
          if (rng() % 50 == 0) v += is_float(t) ? 5000 : 60;  // sources: clipped
          if (is_float(t) && rng() % 40 == 0) v = rng() % 2 ? NAN : INFINITY;
          if (t == SampleType::kInt8) v -= 100;
          if (t == SampleType::kFloat32) v = static_cast<float>(v);  // as stored
        }
        const TestImage img = make_image(rng, sz.w, sz.h, c, t, sz.pad, sz.offset, [&](uint64_t i) { return vals[i]; });
        const TestImage packed = make_image(rng, sz.w, sz.h, c, t, 0, 0, [&](uint64_t i) { return vals[i]; });
        StatsRequest req;
        req.min_max = req.sum = req.stddev = req.histogram = false;
        req.background.enabled = true;
        req.background.box_columns = sz.box_w;
        req.background.box_rows = sz.box_h;
        const Result r = engine_->analyze(img.view, req), want = cpu->analyze(packed.view, req);
        ASSERT_EQ(r.background.size(), c);
        ASSERT_EQ(want.background.size(), c);
        for (uint32_t ch = 0; ch < c; ++ch) {
          const BackgroundMesh &g = r.background[ch], &w = want.background[ch];
          EXPECT_EQ(g.rows, (sz.h + sz.box_h - 1) / sz.box_h);
          EXPECT_EQ(g.columns, (sz.w + sz.box_w - 1) / sz.box_w);
          EXPECT_EQ(g.excluded, w.excluded);
          EXPECT_EQ(g.boxes_excluded, w.boxes_excluded);
          EXPECT_EQ(g.background, w.background);  // bit for bit
          EXPECT_EQ(g.rms, w.rms);
          EXPECT_EQ(g.background_median, w.background_median);
          EXPECT_EQ(g.rms_median, w.rms_median);
        }
        // One box, nothing clipped, the mean: the finite samples' mean and stddev.
        req.background.box_columns = sz.w;
        req.background.box_rows = sz.h;
        req.background.filter_rows = req.background.filter_columns = 1;
        req.background.sigma_clip.sigma_lower = req.background.sigma_clip.sigma_upper = 1e6;
        req.background.estimator = BackgroundEstimator::kMean;
        req.background.exclude_percentile = 100;
        const Result one = engine_->analyze(img.view, req);
        for (uint32_t ch = 0; ch < c; ++ch) {
          long double sum = 0, m2 = 0;
          uint64_t n = 0;
          for (uint64_t i = ch; i < vals.size(); i += c)
            if (std::isfinite(vals[i])) sum += vals[i], ++n;
          if (n == 0) continue;
          const long double mean = sum / n;
          for (uint64_t i = ch; i < vals.size(); i += c)
            if (std::isfinite(vals[i])) m2 += (vals[i] - mean) * (vals[i] - mean);
          ASSERT_EQ(one.background[ch].background.size(), 1u);
          EXPECT_NEAR(one.background[ch].background[0], static_cast<double>(mean), 1e-12 * std::fabs(static_cast<double>(mean)));
          EXPECT_NEAR(one.background[ch].rms[0], std::sqrt(static_cast<double>(m2 / n)), 1e-10);
        }
      }
  // Constant: the constant, RMS 0, in every box (those past the image's
  // edge left out and filled from their neighbours: a weighted mean of the
  // constant, within its rounding).
  const TestImage flat = make_image(rng, 45, 31, 1, SampleType::kUint16, 0, 0, [](uint64_t) { return 4321.0; });
  StatsRequest req;
  req.background.enabled = true;
  req.background.box_columns = 8, req.background.box_rows = 8;
  const Result r = engine_->analyze(flat.view, req);
  ASSERT_EQ(r.background.size(), 1u);
  ASSERT_EQ(r.background[0].background.size(), 6u * 4u);
  EXPECT_EQ(r.background[0].boxes_excluded, 4u + 6u - 1u);  // the last column and row: over 10% padding
  for (size_t i = 0; i < 24; ++i) {
    EXPECT_NEAR(r.background[0].background[i], 4321.0, 1e-12 * 4321) << i;
    EXPECT_EQ(r.background[0].rms[i], 0.0) << i;
  }
  // Boxes past the image or of 0 pixels, an even filter: refused by name.
  for (auto bad : {std::pair<uint64_t, uint32_t>{46, 3}, {0, 3}, {8, 2}}) {
    req.background.box_columns = bad.first;
    req.background.filter_rows = bad.second;
    try {
      engine_->analyze(flat.view, req);
      ADD_FAILURE() << "box " << bad.first << " filter " << bad.second << " was not refused";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("background"), std::string::npos) << e.what();
    }
  }
}

// Hashes (common/hashes.hpp; the phash against imagehash's in
// tests/duplicates/check.py): this engine's are the CPU engine's; the
// pixel hash does not depend on the layout (row padding, an unaligned
// start) nor on the stored channel order (B, G, R with rgb saying so is the
// same image as R, G, B), and changes with one sample, the size or the
// type; 8-bit images alone have a phash.
TEST_P(EngineTest, HashesOfThePixelsWhateverTheLayout) {
  std::mt19937_64 rng(15);
  const auto cpu = make_cpu_engine();
  for (SampleType t : {SampleType::kUint8, SampleType::kUint16, SampleType::kFloat32})
    for (uint32_t c : {1u, 3u, 4u}) {
      const uint64_t w = 37, h = 23;
      std::vector<double> vals(w * h * c);
      for (double& v : vals) v = static_cast<double>(rng() % 250);
      SCOPED_TRACE(std::string(to_string(t)) + " x" + std::to_string(c));
      const TestImage padded = make_image(rng, w, h, c, t, 6, 1, [&](uint64_t i) { return vals[i]; });
      const TestImage packed = make_image(rng, w, h, c, t, 0, 0, [&](uint64_t i) { return vals[i]; });
      StatsRequest req;
      req.hashes = true;
      const Result a = engine_->analyze(padded.view, req), b = cpu->analyze(packed.view, req);
      ASSERT_TRUE(a.has_hashes);
      EXPECT_EQ(a.hashes.pixels, b.hashes.pixels);
      {  // the hash docs/conventions.md states: XXH3-128 (xxhash's one-shot call) of the size, channels, type, samples
        std::vector<uint8_t> bytes(20);
        const uint32_t channels = c;
        std::memcpy(bytes.data(), &w, 8), std::memcpy(bytes.data() + 8, &h, 8), std::memcpy(bytes.data() + 16, &channels, 4);
        const std::string type = to_string(t);
        bytes.insert(bytes.end(), type.c_str(), type.c_str() + type.size() + 1);
        const auto* samples = static_cast<const uint8_t*>(packed.view.data);
        bytes.insert(bytes.end(), samples, samples + packed.view.layout.row_bytes() * h);
        XXH128_canonical_t want;
        XXH128_canonicalFromHash(&want, XXH3_128bits(bytes.data(), bytes.size()));
        EXPECT_EQ(std::memcmp(want.digest, b.hashes.pixels.data(), 16), 0);
      }
      EXPECT_EQ(a.hashes.has_phash, t == SampleType::kUint8);
      EXPECT_EQ(a.hashes.phash, b.hashes.phash);
      if (c >= 3) {  // the same image stored B, G, R(, A)
        const TestImage bgr = make_image(rng, w, h, c, t, 0, 0, [&](uint64_t i) {
          const uint64_t ch = i % c;
          return ch < 3 ? vals[i - ch + (2 - ch)] : vals[i];
        });
        StatsRequest swapped = req;
        swapped.rgb[0] = 2, swapped.rgb[1] = 1, swapped.rgb[2] = 0;
        const Result s = engine_->analyze(bgr.view, swapped);
        EXPECT_EQ(s.hashes.pixels, b.hashes.pixels);
        EXPECT_EQ(s.hashes.phash, b.hashes.phash);
      }
      std::vector<double> changed = vals;
      changed[vals.size() / 2] += 1;
      const TestImage one = make_image(rng, w, h, c, t, 0, 0, [&](uint64_t i) { return changed[i]; });
      EXPECT_NE(cpu->analyze(one.view, req).hashes.pixels, b.hashes.pixels);
      const TestImage narrower = make_image(rng, w - 1, h, c, t, 0, 0, [&](uint64_t i) { return vals[i]; });
      EXPECT_NE(cpu->analyze(narrower.view, req).hashes.pixels, b.hashes.pixels);
    }
}

TEST_P(EngineTest, QualityOfManyCallersAtOnceEachAsAlone) {
  std::mt19937_64 rng(77);
  std::vector<TestImage> images;
  std::vector<Result> alone;
  StatsRequest req;
  req.quality = true;
  for (int i = 0; i < 24; ++i) {
    images.push_back(random_image(rng, 40 + rng() % 400, 100 + rng() % 500, 3, SampleType::kUint8, 0, 0));
    alone.push_back(engine_->analyze(images.back().view, req));
  }
  std::vector<std::thread> callers;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 8; ++t)
    callers.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round)
        for (size_t i = t % 3; i < images.size(); i += 2) {
          const Result r = engine_->analyze(images[i].view, req);
          wrong += r.quality.laplacian_variance != alone[i].quality.laplacian_variance ||
                   r.quality.cleanvision.blurriness != alone[i].quality.cleanvision.blurriness ||
                   r.quality.cleanvision.brightness_percentiles != alone[i].quality.cleanvision.brightness_percentiles;
        }
    });
  for (std::thread& c : callers) c.join();
  EXPECT_EQ(wrong.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineTest, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

// kAuto on a machine without a GPU is the CPU engine and a calm note that
// says what is missing; with a GPU, the CUDA engine and no note.
// Float moments are rounded sums: the CPU engine adds them in an order fixed
// by the pixels' index alone, so every path to the same image gives the same
// bits: any thread count, a stream fed in chunks of any size, a read image,
// a colour space; one run as the next.
void expect_identical(const Result& a, const Result& b) {
  auto channel = [](const ChannelStats& x, const ChannelStats& y) {
    expect_same_channel(x, y, SampleType::kUint8);  // everything exact...
    EXPECT_EQ(x.sum, y.sum);                        // ...the float sums too
  };
  ASSERT_EQ(a.channels.size(), b.channels.size());
  for (size_t i = 0; i < a.channels.size(); ++i) {
    SCOPED_TRACE("channel " + std::to_string(i));
    channel(a.channels[i], b.channels[i]);
  }
  ASSERT_EQ(a.has_summary, b.has_summary);
  if (a.has_summary) {
    SCOPED_TRACE("summary");
    channel(a.summary, b.summary);
  }
}

TEST(CpuEngine, FloatsGiveTheSameBitsOnEveryPath) {
  std::mt19937_64 rng(47);
  std::vector<std::unique_ptr<Engine>> engines;
  for (uint32_t threads : {1u, 2u, 5u, 16u}) engines.push_back(make_cpu_engine(threads));
  StatsRequest explicit_range;
  explicit_range.histogram = true;
  explicit_range.hist.explicit_range = true;
  explicit_range.hist.lo = -3;
  explicit_range.hist.hi = 7;
  StatsRequest hsv = everything();
  hsv.luminance = false;
  hsv.colour_space = ColourSpace::kHsv;
  StatsRequest all = everything();
  all.luminance = false;
  for (SampleType t : {SampleType::kFloat32, SampleType::kFloat64})
    for (uint32_t c : {1u, 3u, 4u})
      // Several groups of 65536 pixels, with padded rows; one pixel; one row.
      for (auto [w, h, pad] : {std::tuple<uint64_t, uint64_t, uint64_t>{701, 311, 9}, {1, 1, 0}, {200003, 1, 0}}) {
        TestImage img = random_image(rng, w, h, c, t, pad, 0, 0.01);
        for (const StatsRequest* request : {&all, &explicit_range, &hsv}) {
          if (request == &hsv && (c < 3 || t == SampleType::kFloat64)) continue;
          SCOPED_TRACE(describe(img.view.layout) + (request == &hsv ? " HSV" : request == &all ? " everything" : " range"));
          const Result want = engines[0]->analyze(img.view, *request);
          for (auto& e : engines) {
            SCOPED_TRACE(std::to_string(e->info().threads) + " threads");
            expect_identical(e->analyze(img.view, *request), want);
            const auto* p = static_cast<const uint8_t*>(img.view.data);
            expect_identical(e->analyze_read(img.view.layout, *request,
                                             [&](uint64_t at, uint64_t n, uint8_t* out) { std::memcpy(out, p + at, n); }),
                             want);
            for (size_t max_chunk : {size_t{13}, size_t{100000}, size_t{3} << 20}) {
              auto stream = e->open_stream(img.view.layout, *request);
              size_t left = img.view.layout.min_bytes(), at = 0;
              while (left > 0) {
                const size_t n = std::min<size_t>(left, 1 + rng() % max_chunk);
                stream->feed(p + at, n);
                at += n;
                left -= n;
              }
              expect_identical(stream->finish(), want);
            }
          }
        }
      }
}

TEST(EngineChoice, AutoSaysPlainlyWhenThereIsNoGpu) {
  std::string note = "unset";
  bool absent = false;
  EngineOptions o;
  o.kind = EngineKind::kAuto;
  const auto engine = make_engine(o, &note, &absent);
  std::string why;
  if (make_cuda_engine(EngineOptions{}, &why)) {
    EXPECT_EQ(engine->info().kind, "cuda");
    EXPECT_EQ(note, "unset");
    return;
  }
  EXPECT_EQ(engine->info().kind, "cpu");
  if (absent) {
    EXPECT_EQ(note.rfind("no GPU here (", 0), 0u) << note;
    EXPECT_EQ(note.find(".cpp"), std::string::npos) << "no source paths in what users read: " << note;
  } else {
    EXPECT_EQ(note.rfind("no usable CUDA device (", 0), 0u) << note;  // a GPU that failed: a warning
  }
}

}  // namespace
}  // namespace imgstat::testing
