// Colour spaces and joint histograms on the CUDA engine against the CPU
// engine: every converted byte of all 2^24 colours equal, and every
// statistic and joint count equal, from host memory, GPU memory and streams
// cut anywhere. Skips where no GPU is usable.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>

#include "common/colour.hpp"
#include "cuda/dispatch/dispatch.hpp"
#include "imgstat/engine.hpp"
#include "test_images.hpp"

namespace imgstat::testing {
namespace {

const ColourSpace kSpaces[] = {ColourSpace::kHsv, ColourSpace::kHsvFull, ColourSpace::kHls,
                               ColourSpace::kLab, ColourSpace::kYCrCb,   ColourSpace::kGray};

class ColourGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    gpu_ = make_cuda_engine(EngineOptions{}, &why);
    if (!gpu_) GTEST_SKIP() << "no usable GPU: " << why;
    cpu_ = make_cpu_engine();
  }

  void expect_same(const Result& g, const Result& c, SampleType t) {
    expect_same_stats(g, c, t);
    ASSERT_EQ(g.has_joint, c.has_joint);
    EXPECT_EQ(g.joint.counts, c.joint.counts);
    EXPECT_EQ(g.joint.outside, c.joint.outside);
  }

  std::unique_ptr<Engine> gpu_, cpu_;
};

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

// A joint histogram case: channels and bins per axis, explicit ranges or
// each channel's own.
struct JointCase {
  const TestImage* img;
  ColourSpace space;
  uint32_t axes, c0, c1, c2, b0, b1, b2;
  bool ranged;
};

// Its request; explicit ranges [lo + a lo_step, hi + a hi_step) on axis a.
StatsRequest joint_request(const JointCase& k, double lo, double lo_step, double hi, double hi_step) {
  StatsRequest r;
  r.colour_space = k.space;
  r.joint.axes = k.axes;
  const uint32_t ch[3] = {k.c0, k.c1, k.c2}, bins[3] = {k.b0, k.b1, k.b2};
  for (uint32_t a = 0; a < k.axes; ++a) {
    r.joint.channels[a] = ch[a];
    r.joint.bins[a] = bins[a];
    if (k.ranged) {
      r.joint.lo[a] = lo + lo_step * a;
      r.joint.hi[a] = hi + hi_step * a;
    }
  }
  r.joint.explicit_range = k.ranged;
  return r;
}

TEST_F(ColourGpuTest, EveryColourConvertsToTheCpuEnginesBytes) {
  const uint64_t n = uint64_t{1} << 24;
  std::vector<uint8_t> rgba(n * 4);
  for (uint64_t i = 0; i < n; ++i) {
    rgba[i * 4] = static_cast<uint8_t>(i);
    rgba[i * 4 + 1] = static_cast<uint8_t>(i >> 8);
    rgba[i * 4 + 2] = static_cast<uint8_t>(i >> 16);
    rgba[i * 4 + 3] = static_cast<uint8_t>(i * 7);
  }
  uint8_t *in = nullptr, *out = nullptr;
  CUDA_OK(cudaMalloc(&in, n * 4));
  CUDA_OK(cudaMalloc(&out, n * 4));
  CUDA_OK(cudaMemcpy(in, rgba.data(), n * 4, cudaMemcpyHostToDevice));
  int device = 0;
  CUDA_OK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, device));
  const cuda::DeviceInfo dev{prop.multiProcessorCount};
  const uint32_t bgr[3] = {2, 1, 0};  // B, G, R stored: R is channel 2
  for (ColourSpace s : kSpaces) {
    const uint32_t out_channels = colour_channels(s) + 1;
    std::vector<uint8_t> want(n * out_channels), got(n * out_channels);
    convert_pixels(s, SampleType::kUint8, rgba.data(), n, 4, bgr, want.data());
    cuda::launch_convert(in, n, 4, SampleType::kUint8, s, bgr, out, dev, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(got.data(), out, got.size(), cudaMemcpyDeviceToHost));
    uint64_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i];
    EXPECT_EQ(differ, 0u) << to_string(s);
  }
  cudaFree(in);
  cudaFree(out);
}

TEST_F(ColourGpuTest, StatisticsInEverySpaceEqualTheCpuEngines) {
  struct Shape { uint64_t w, h; };
  const Shape shapes[] = {{1, 1}, {17, 3}, {257, 129}, {4099, 33}, {1021, 1031}};
  std::mt19937_64 rng(41);
  // Everything: converted into slots, then every pass; value counts alone
  // (the default statistics, the distribution): converted as counted.
  StatsRequest all = everything(), counts;
  all.luminance = false;
  counts.distribution = true;
  for (const StatsRequest* base : {&all, &counts})
    for (ColourSpace s : kSpaces)
      for (uint32_t c = 3; c <= 4; ++c)
        for (const Shape& shape : shapes) {
          TestImage img = random_image(rng, shape.w, shape.h, c, SampleType::kUint8, shape.w % 2 ? 5 : 0, shape.h % 2 ? 3 : 0);
          StatsRequest request = *base;
          request.colour_space = s;
          if ((shape.w + c) % 2) {  // B, G, R stored, as OpenCV decodes; else R, G, B
            request.rgb[0] = 2;
            request.rgb[2] = 0;
          }
          SCOPED_TRACE(std::string(to_string(s)) + " " + describe(img.view.layout) + (base == &all ? " all" : " counts"));
          const Result g = gpu_->analyze(img.view, request), cp = cpu_->analyze(img.view, request);
          EXPECT_EQ(g.engine, "cuda");
          expect_same(g, cp, SampleType::kUint8);
        }
}

TEST_F(ColourGpuTest, JointHistogramsEqualTheCpuEngines) {
  std::mt19937_64 rng(43);
  TestImage rgb = random_image(rng, 1921, 1079, 3, SampleType::kUint8, 7, 1);
  TestImage gray_alpha = random_image(rng, 333, 211, 2, SampleType::kInt8, 0, 0);
  const JointCase cases[] = {
      {&rgb, ColourSpace::kNone, 3, 0, 1, 2, 32, 32, 32, false},          // 128 KiB of shared counters
      {&rgb, ColourSpace::kNone, 3, 2, 0, 1, 256, 256, 256, false},       // 2^24 bins: global
      {&rgb, ColourSpace::kNone, 2, 1, 2, 0, 7, 13, 0, true},             // odd bins, values outside
      {&rgb, ColourSpace::kHsv, 2, 0, 1, 0, 30, 32, 0, false},            // hue and saturation
      {&rgb, ColourSpace::kLab, 3, 0, 1, 2, 16, 16, 16, false},
      {&gray_alpha, ColourSpace::kNone, 2, 0, 1, 0, 64, 64, 0, true},     // int8, negative ranges
  };
  for (const JointCase& k : cases) {
    const StatsRequest r = joint_request(k, -40.5, 10, 100, 30);
    SCOPED_TRACE(std::to_string(r.joint.total_bins()) + " bins, " + to_string(k.space));
    const Result g = gpu_->analyze(k.img->view, r), c = cpu_->analyze(k.img->view, r);
    EXPECT_EQ(g.engine, "cuda");
    expect_same(g, c, k.img->view.layout.type);
  }
}

TEST_F(ColourGpuTest, StreamsAndGpuMemoryGiveTheSameAnswers) {
  std::mt19937_64 rng(47);
  TestImage img = random_image(rng, 3001, 2003, 4, SampleType::kUint8, 0, 0);
  StatsRequest r = everything();
  r.luminance = false;
  r.colour_space = ColourSpace::kHls;
  r.joint.axes = 2;
  r.joint.channels[0] = 0;
  r.joint.channels[1] = 2;
  r.joint.bins[0] = 45;
  r.joint.bins[1] = 64;
  const Result want = cpu_->analyze(img.view, r);
  // Cut anywhere: odd chunk sizes, pixels split across feeds.
  auto stream = gpu_->open_stream(img.view.layout, r);
  const auto* p = static_cast<const uint8_t*>(img.view.data);
  const uint64_t total = img.view.layout.min_bytes();
  for (uint64_t at = 0, k = 0; at < total; ++k) {
    const uint64_t n = std::min<uint64_t>(total - at, 1 + (k * 7919 + 13) % (5 << 20));
    stream->feed(p + at, n);
    at += n;
  }
  expect_same(stream->finish(), want, SampleType::kUint8);
  // Pixels already in GPU memory (as a GPU JPEG decoder leaves them).
  const uint64_t bytes = img.view.layout.pixels() * 4;
  uint8_t* device = nullptr;
  CUDA_OK(cudaMalloc(&device, bytes));
  CUDA_OK(cudaMemcpy(device, img.view.data, bytes, cudaMemcpyHostToDevice));
  Layout packed = img.view.layout;
  packed.row_stride = 0;
  expect_same(gpu_->analyze_device(DeviceImageView{device, packed}, r), want, SampleType::kUint8);
  cudaFree(device);
}

// Masks, labels, tiles and rectangles of an image in a colour space: the
// part kernels on the converted pixels, each part's answer the CPU's.
TEST_F(ColourGpuTest, PartsInAColourSpaceEqualTheCpuEngines) {
  std::mt19937_64 rng(59);
  TestImage img = random_image(rng, 613, 401, 4, SampleType::kUint8, 9, 0);
  const Layout& l = img.view.layout;
  std::vector<uint16_t> labels(l.pixels());
  std::vector<uint8_t> mask(l.pixels());
  for (uint64_t i = 0; i < l.pixels(); ++i) {
    labels[i] = static_cast<uint16_t>((i % l.width) / 50 + 13 * ((i / l.width) / 40));
    mask[i] = rng() % 3 == 0 ? 255 : 0;
  }
  Parts by_label, by_mask, by_tile, by_rect;
  by_label.kind = PartsKind::kLabels;
  by_label.map = PartMapView{labels.data(), l.width, l.height, 1, 0, MapType::kUint16, 0};
  by_mask.kind = PartsKind::kMask;
  by_mask.map = PartMapView{mask.data(), l.width, l.height, 1, 0, MapType::kUint8, 0};
  by_tile.kind = PartsKind::kTiles;
  by_tile.columns = 7;
  by_tile.rows = 5;
  by_rect.kind = PartsKind::kRects;
  by_rect.rects = {Rect{3, 5, 17, 300}, Rect{100, 1, 500, 7}};
  StatsRequest r;
  r.distribution = r.positions = true;
  r.rgb[0] = 2;
  r.rgb[2] = 0;
  for (ColourSpace s : {ColourSpace::kNone, ColourSpace::kHsv, ColourSpace::kLab, ColourSpace::kGray})
    for (const Parts* p : {&by_label, &by_mask, &by_tile, &by_rect}) {
      r.colour_space = s;
      // Each part's joint histogram of its first and last channel.
      r.joint.axes = 2;
      r.joint.channels[0] = 0;
      r.joint.channels[1] = s == ColourSpace::kGray ? 1 : 2;
      r.joint.bins[0] = 9;
      r.joint.bins[1] = 14;
      SCOPED_TRACE(std::string(to_string(s)) + " parts kind " + std::to_string(static_cast<int>(p->kind)));
      const Result g = gpu_->analyze_parts(img.view, *p, r), c = cpu_->analyze_parts(img.view, *p, r);
      EXPECT_EQ(g.engine, "cuda");
      expect_same(g, c, SampleType::kUint8);
      ASSERT_EQ(g.parts.size(), c.parts.size());
      for (size_t k = 0; k < g.parts.size(); ++k) {
        SCOPED_TRACE("part " + std::to_string(k));
        Result gp, cp;
        gp.channels = g.parts[k].channels;
        cp.channels = c.parts[k].channels;
        expect_same_stats(gp, cp, SampleType::kUint8);
        ASSERT_TRUE(g.parts[k].has_joint);
        EXPECT_EQ(g.parts[k].joint.counts, c.parts[k].joint.counts);
        EXPECT_EQ(g.parts[k].joint.outside, c.parts[k].joint.outside);
      }
    }
}

// Float32 pixels: mostly in [0, 1], some outside, a few not finite, and
// the corners of the cube.
TestImage float_colours(std::mt19937_64& rng, uint64_t w, uint64_t h, uint32_t c, uint64_t pad, size_t offset) {
  std::uniform_real_distribution<double> unit(0, 1);
  uint64_t k = 0;
  return make_image(rng, w, h, c, SampleType::kFloat32, pad, offset, [&](uint64_t) -> double {
    if (k++ < 8 * c) return ((k - 1) / c >> ((k - 1) % c)) & 1;  // black, white, the primaries...
    const double u = unit(rng);
    if (u < 0.002) return std::numeric_limits<double>::quiet_NaN();
    if (u < 0.003) return std::numeric_limits<double>::infinity();
    if (u < 0.02) return unit(rng) * 3 - 1;
    if (u < 0.1) return std::floor(unit(rng) * 8) / 8;  // equal channels: gray, hue 0
    return unit(rng);
  });
}

TEST_F(ColourGpuTest, FloatColoursConvertToTheCpuEnginesBits) {
  std::mt19937_64 rng(61);
  const uint64_t n = 1 << 20;
  TestImage img = float_colours(rng, n, 1, 4, 0, 0);
  const auto* host = static_cast<const uint8_t*>(img.view.data);
  uint8_t *in = nullptr, *out = nullptr;
  CUDA_OK(cudaMalloc(&in, n * 16));
  CUDA_OK(cudaMalloc(&out, n * 16));
  CUDA_OK(cudaMemcpy(in, host, n * 16, cudaMemcpyHostToDevice));
  int device = 0;
  CUDA_OK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, device));
  const cuda::DeviceInfo dev{prop.multiProcessorCount};
  const uint32_t order[3] = {1, 2, 0};
  for (ColourSpace s : kSpaces) {
    const uint64_t samples = n * (colour_channels(s) + 1);
    std::vector<float> want(samples), got(samples);
    convert_pixels(s, SampleType::kFloat32, host, n, 4, order, reinterpret_cast<uint8_t*>(want.data()));
    cuda::launch_convert(in, n, 4, SampleType::kFloat32, s, order, out, dev, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(got.data(), out, samples * 4, cudaMemcpyDeviceToHost));
    uint64_t differ = 0, first = samples;
    for (uint64_t i = 0; i < samples; ++i) {
      uint32_t a, b;
      std::memcpy(&a, &got[i], 4);
      std::memcpy(&b, &want[i], 4);
      if (a != b && !(std::isnan(got[i]) && std::isnan(want[i]))) {
        ++differ;
        first = std::min(first, i);
      }
    }
    EXPECT_EQ(differ, 0u) << to_string(s) << ", first at sample " << first << ": " << got[first] << " vs "
                          << want[first];
  }
  cudaFree(in);
  cudaFree(out);
}

TEST_F(ColourGpuTest, FloatColourStatisticsEqualTheCpuEngines) {
  std::mt19937_64 rng(67);
  struct Shape { uint64_t w, h; };
  const Shape shapes[] = {{1, 1}, {13, 7}, {1031, 517}};
  StatsRequest all = everything();
  all.unique_colors = false;
  StatsRequest plain, ranged;
  ranged.hist.explicit_range = true;  // one range for every channel, the caller's
  ranged.hist.lo = -0.25;
  ranged.hist.hi = 0.75;
  ranged.hist.bins = 100;
  for (const StatsRequest* base : {&all, &plain, &ranged})
    for (ColourSpace s : kSpaces)
      for (uint32_t c = 3; c <= 4; ++c)
        for (const Shape& shape : shapes) {
          TestImage img = float_colours(rng, shape.w, shape.h, c, shape.w % 2 ? 3 : 0, shape.h % 2 ? 4 : 0);
          StatsRequest r = *base;
          r.colour_space = s;
          SCOPED_TRACE(std::string(to_string(s)) + " " + describe(img.view.layout));
          const Result want = cpu_->analyze(img.view, r), g = gpu_->analyze(img.view, r);
          EXPECT_EQ(g.engine, "cuda");
          expect_same(g, want, SampleType::kFloat32);
          if (shape.w < 1000) continue;
          // A stream in odd pieces (its pixels kept converted across
          // sessions; a stream has no luminance), and pixels already in GPU
          // memory.
          StatsRequest rs = r;
          rs.luminance = false;
          auto stream = gpu_->open_stream(img.view.layout, rs);
          const auto* p = static_cast<const uint8_t*>(img.view.data);
          const uint64_t total = img.view.layout.min_bytes();
          for (uint64_t at = 0, k = 0; at < total; ++k) {
            const uint64_t n = std::min<uint64_t>(total - at, 1 + (k * 7919 + 13) % (1 << 20));
            stream->feed(p + at, n);
            if (k % 3 == 1) stream->pause();
            at += n;
          }
          expect_same(stream->finish(), cpu_->analyze(img.view, rs), SampleType::kFloat32);
          Layout packed = img.view.layout;
          packed.row_stride = 0;
          std::vector<uint8_t> rows(packed.pixels() * packed.pixel_bytes());
          for (uint64_t y = 0; y < packed.height; ++y)
            std::memcpy(rows.data() + y * packed.row_bytes(), p + y * img.view.layout.stride(), packed.row_bytes());
          uint8_t* device = nullptr;
          CUDA_OK(cudaMalloc(&device, rows.size()));
          CUDA_OK(cudaMemcpy(device, rows.data(), rows.size(), cudaMemcpyHostToDevice));
          expect_same(gpu_->analyze_device(DeviceImageView{device, packed}, r), want, SampleType::kFloat32);
          cudaFree(device);
        }
}

// Joint histograms of 16-bit and float samples: range binners in float64
// on both engines, NaN and infinities outside.
TEST_F(ColourGpuTest, JointHistogramsOfWiderSamplesEqualTheCpuEngines) {
  std::mt19937_64 rng(71);
  TestImage u16 = random_image(rng, 1283, 509, 3, SampleType::kUint16, 5, 2);
  TestImage i16 = random_image(rng, 331, 97, 2, SampleType::kInt16, 0, 0);
  TestImage f32 = random_image(rng, 997, 211, 4, SampleType::kFloat32, 3, 0, 0.01);
  TestImage f64 = random_image(rng, 211, 101, 3, SampleType::kFloat64, 0, 0, 0.01);
  TestImage rgb = float_colours(rng, 777, 333, 3, 0, 0);
  const JointCase cases[] = {
      {&u16, ColourSpace::kNone, 3, 0, 1, 2, 32, 32, 32, false},     // the type's range, shared counters
      {&u16, ColourSpace::kNone, 2, 2, 0, 0, 4096, 4096, 0, false},  // 2^24 bins: global
      {&i16, ColourSpace::kNone, 2, 1, 0, 0, 17, 19, 0, true},       // negative ranges, values outside
      {&f32, ColourSpace::kNone, 3, 3, 1, 0, 10, 11, 12, true},
      {&f64, ColourSpace::kNone, 2, 0, 2, 0, 100, 3, 0, true},
      {&rgb, ColourSpace::kHsv, 2, 0, 1, 0, 30, 32, 0, false},       // float hue and saturation
      {&rgb, ColourSpace::kLab, 3, 0, 1, 2, 16, 16, 16, false},
  };
  for (const JointCase& k : cases) {
    const StatsRequest r = joint_request(k, -240.5, 100, 700, 30);
    SCOPED_TRACE(std::to_string(r.joint.total_bins()) + " bins, " + describe(k.img->view.layout) + " " +
                 to_string(k.space));
    const Result g = gpu_->analyze(k.img->view, r), c = cpu_->analyze(k.img->view, r);
    EXPECT_EQ(g.engine, "cuda");
    expect_same(g, c, measured_layout(k.img->view.layout, r).type);
    EXPECT_GT(std::accumulate(c.joint.counts.begin(), c.joint.counts.end(), uint64_t{0}), 0u);
  }
  // Each part's joint histogram of a 16-bit image.
  std::vector<uint8_t> labels(u16.view.layout.pixels());
  for (uint64_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<uint8_t>((i % 1283) / 200 + 7 * (i / 1283 / 100));
  Parts by_label;
  by_label.kind = PartsKind::kLabels;
  by_label.map = PartMapView{labels.data(), 1283, 509, 1, 0, MapType::kUint8, 0};
  StatsRequest r;
  r.joint.axes = 2;
  r.joint.channels[0] = 1;
  r.joint.channels[1] = 2;
  r.joint.bins[0] = 12;
  r.joint.bins[1] = 5;
  const Result g = gpu_->analyze_parts(u16.view, by_label, r), c = cpu_->analyze_parts(u16.view, by_label, r);
  EXPECT_EQ(g.engine, "cuda");
  ASSERT_EQ(g.parts.size(), c.parts.size());
  for (size_t k = 0; k < g.parts.size(); ++k) {
    ASSERT_TRUE(g.parts[k].has_joint);
    EXPECT_EQ(g.parts[k].joint.counts, c.parts[k].joint.counts) << "part " << k;
    EXPECT_EQ(g.parts[k].joint.outside, c.parts[k].joint.outside) << "part " << k;
  }
}

TEST_F(ColourGpuTest, WhatTheGpuDoesNotComputeIsSaidSo) {
  std::mt19937_64 rng(53);
  TestImage f = random_image(rng, 64, 64, 3, SampleType::kFloat32, 0, 0);
  std::vector<uint8_t> mask(64 * 64);
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = rng() % 2;
  Parts by_mask;
  by_mask.kind = PartsKind::kMask;
  by_mask.map = PartMapView{mask.data(), 64, 64, 1, 0, MapType::kUint8, 0};
  StatsRequest r;
  r.colour_space = ColourSpace::kHsv;
  try {
    gpu_->analyze_parts(f.view, by_mask, r);
    ADD_FAILURE() << "parts of a float image accepted by the CUDA engine";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
  }
  // An engine with a fallback gives the CPU's answer.
  EngineOptions options;
  options.kind = EngineKind::kCuda;
  auto engine = make_engine(options);
  const Result got = engine->analyze_parts(f.view, by_mask, r);
  EXPECT_EQ(got.engine, "cpu");
  expect_same(got, cpu_->analyze_parts(f.view, by_mask, r), SampleType::kFloat32);
}

}  // namespace
}  // namespace imgstat::testing
