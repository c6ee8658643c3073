// The CUDA engine against the CPU engine, as OpenCV's CUDA tests check their
// kernels: integer results identical to the bit, float sums within 1e-12,
// histograms identical, on every sample type and channel count, odd and huge
// sizes, strides, unaligned and pinned sources, constant and extreme data,
// and streams cut anywhere. Skips where no GPU is usable.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cfloat>
#include <random>
#include <thread>

#include "common/hashes.hpp"
#include "cuda/dispatch/dispatch.hpp"
#include "imgstat/engine.hpp"
#include "test_images.hpp"

namespace imgstat::testing {
namespace {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    gpu_ = make_cuda_engine(EngineOptions{}, &why);
    if (!gpu_) GTEST_SKIP() << "no usable GPU: " << why;
    cpu_ = make_cpu_engine();
  }

  void expect_same(const ImageView& img, const StatsRequest& request = {}) {
    const Result g = gpu_->analyze(img, request), c = cpu_->analyze(img, request);
    EXPECT_EQ(g.engine, "cuda");
    expect_same_stats(g, c, img.layout.type);
  }

  std::unique_ptr<Engine> gpu_, cpu_;
};

// Every statistic a stream computes (the luminance is for whole images).
StatsRequest streamed_everything() {
  StatsRequest r = everything();
  r.luminance = false;
  return r;
}

const SampleType kAllTypes[] = {SampleType::kUint8,  SampleType::kUint16,  SampleType::kInt8,
                                SampleType::kInt16,  SampleType::kFloat32, SampleType::kFloat64};

TEST_F(GpuTest, RandomDataEveryTypeChannelsShapeStrideAlignment) {
  struct Shape { uint64_t w, h; };
  const Shape shapes[] = {{1, 1}, {17, 1}, {1, 17}, {31, 7}, {257, 129}, {4099, 33}, {1021, 1031}};
  std::mt19937_64 rng(101);
  for (SampleType t : kAllTypes)
    for (uint32_t c = 1; c <= 4; ++c)
      for (const Shape& s : shapes)
        for (int variant = 0; variant < 3; ++variant) {
          TestImage img = random_image(rng, s.w, s.h, c, t, variant == 1 ? 1 + rng() % 29 : 0, variant == 2 ? 3 : 0);
          SCOPED_TRACE(describe(img.view.layout) + " variant " + std::to_string(variant));
          expect_same(img.view);
        }
}

// Every kernel once on about a megabyte, for compute-sanitizer's memcheck
// and racecheck (slow tools: the other tests are too large for them).
TEST_F(GpuTest, EveryKernelOnce) {
  std::mt19937_64 rng(3);
  for (SampleType t : kAllTypes)
    for (uint32_t c = 1; c <= 4; ++c) {
      const uint64_t w = (1300 * 1024) / (c * sample_size(t) * 97) + 3;
      TestImage img = random_image(rng, w, 97, c, t, 0, 0, is_float(t) ? 0.01 : 0);
      SCOPED_TRACE(describe(img.view.layout));
      expect_same(img.view);
      StatsRequest r;
      r.hist.bins = 300;
      r.hist.explicit_range = true;
      r.hist.lo = 5;
      r.hist.hi = 150;
      expect_same(img.view, r);
      expect_same(img.view, everything());
    }
}

TEST_F(GpuTest, ImagesOfManyChunks) {
  // Larger than the 8 MiB staging slots several times over: every slot and
  // stream is used, and floats keep the whole image on the device.
  std::mt19937_64 rng(7);
  const struct { uint64_t w, h; uint32_t c; SampleType t; } cases[] = {
      {4096, 4096, 4, SampleType::kUint8}, {5000, 3001, 3, SampleType::kUint8},
      {3001, 3000, 3, SampleType::kUint16}, {4096, 2048, 1, SampleType::kInt16},
      {8192, 4096, 1, SampleType::kFloat32}, {2047, 2049, 2, SampleType::kFloat64}};
  for (const auto& k : cases) {
    TestImage img = random_image(rng, k.w, k.h, k.c, k.t, 0, 0, is_float(k.t) ? 0.001 : 0);
    SCOPED_TRACE(describe(img.view.layout));
    expect_same(img.view);
    StatsRequest explicit_range;
    explicit_range.hist.bins = 1000;
    explicit_range.hist.explicit_range = true;
    explicit_range.hist.lo = 10;
    explicit_range.hist.hi = 200;
    expect_same(img.view, explicit_range);
  }
}

TEST_F(GpuTest, ConstantAndExtremeData) {
  std::mt19937_64 rng(9);
  for (SampleType t : kAllTypes)
    for (double v : {0.0, 1.0, -7.0, 255.0, 65535.0, -32768.0, 0.25}) {
      if (!representable(t, v)) continue;
      TestImage img = constant_image(2048, 1537, 1 + static_cast<uint32_t>(rng() % 4), t, v);
      SCOPED_TRACE(describe(img.view.layout) + " value " + std::to_string(v));
      expect_same(img.view);
    }
  const std::vector<std::pair<SampleType, std::vector<double>>> extremes = {
      {SampleType::kUint8, {0, 255}},       {SampleType::kInt8, {-128, 127}},
      {SampleType::kUint16, {0, 65535}},    {SampleType::kInt16, {-32768, 32767}},
      {SampleType::kFloat32, {FLT_MAX, -FLT_MAX, FLT_TRUE_MIN, -0.0, 0.0}},
      {SampleType::kFloat64, {1e150, -1e150, DBL_TRUE_MIN, 0.0}}};
  for (const auto& [t, values] : extremes) {
    TestImage img = image_of_values(rng, 1999, 1001, 3, t, values);
    SCOPED_TRACE(describe(img.view.layout));
    expect_same(img.view);
  }
}

TEST_F(GpuTest, NanAndInfAndChannelsWithoutFiniteSamples) {
  std::mt19937_64 rng(11);
  for (SampleType t : {SampleType::kFloat32, SampleType::kFloat64})
    for (uint32_t c = 1; c <= 4; ++c) {
      TestImage img = random_image(rng, 1003, 997, c, t, 0, 0, 0.3);
      expect_same(img.view);
    }
  TestImage nan = constant_image(1000, 1000, 2, SampleType::kFloat32, std::numeric_limits<double>::quiet_NaN());
  expect_same(nan.view);
}

TEST_F(GpuTest, HistogramBinsAndRanges) {
  std::mt19937_64 rng(13);
  for (SampleType t : kAllTypes)
    for (uint32_t bins : {1u, 7u, 256u, 1000u, 4096u, 65536u})
      for (bool explicit_range : {false, true}) {
        TestImage img = random_image(rng, 1024, 777, 2, t, 0, 0, 0.01);
        StatsRequest r;
        r.hist.bins = bins;
        r.hist.explicit_range = explicit_range;
        r.hist.lo = -20.5;
        r.hist.hi = 180.25;
        SCOPED_TRACE(describe(img.view.layout) + " bins " + std::to_string(bins) + (explicit_range ? " explicit" : ""));
        expect_same(img.view, r);
      }
}

// Cut anywhere and paused anywhere (each pause ends a session: its counts
// come back and merge, a float stream's pixels stay on the device), every
// statistic is the CPU engine's on the whole image.
TEST_F(GpuTest, StreamsCutAndPausedAnywhere) {
  std::mt19937_64 rng(17);
  for (SampleType t : kAllTypes)
    for (uint32_t c : {1u, 3u, 4u})
      for (int pauses : {0, 1, 2}) {
        TestImage img = random_image(rng, 2000, 1500, c, t, rng() % 2 ? 7 : 0, 0, is_float(t) && pauses ? 0.001 : 0);
        const StatsRequest request = pauses == 2 ? streamed_everything() : StatsRequest{};
        auto g = gpu_->open_stream(img.view.layout, request);
        const auto* p = static_cast<const uint8_t*>(img.view.data);
        uint64_t left = img.view.layout.min_bytes();
        g->pause();  // nothing sent yet: nothing to give back
        while (left > 0) {
          const uint64_t n = std::min<uint64_t>(left, 1 + rng() % (3 << 20));
          g->feed(p, n);
          if (pauses && rng() % 2) g->pause();
          p += n;
          left -= n;
        }
        SCOPED_TRACE(describe(img.view.layout) + ", " + std::to_string(pauses) + " (pauses, all statistics)");
        const Result r = g->finish();
        EXPECT_EQ(r.engine, "cuda");
        expect_same_stats(r, cpu_->analyze(img.view, request), t);
      }
}

TEST_F(GpuTest, PinnedSourcesGoStraightToTheDevice) {
  std::mt19937_64 rng(19);
  for (SampleType t : {SampleType::kUint8, SampleType::kUint16, SampleType::kFloat32}) {
    TestImage img = random_image(rng, 6000, 3000, 3, t, 0, 0);
    const uint64_t bytes = img.view.layout.min_bytes();
    void* pinned = nullptr;
    ASSERT_EQ(cudaMallocHost(&pinned, bytes), cudaSuccess);
    std::memcpy(pinned, img.view.data, bytes);
    const ImageView view{pinned, img.view.layout};
    SCOPED_TRACE(describe(img.view.layout));
    expect_same(view);
    cudaFreeHost(pinned);
  }
}

// A large file read where it lies (analyze_read: FITS, NIfTI, raw regions)
// goes in lanes, one a core, each piece read and sent by whoever takes it,
// windows finished out of order: every statistic equals the CPU engine's
// reading the same bytes, with 2, 3 and every core's lanes, a reader that
// converts each value (big-endian, as a FITS file's) and cuts pieces
// anywhere, and an error part way ends the call and leaves the engine whole.
TEST_F(GpuTest, LargeReadsInLanesAsTheCpuEngine) {
  std::mt19937_64 rng(41);
  struct Case { uint64_t w, h; uint32_t c; SampleType t; };
  // Two windows with a short last one; three; five (slots reused) of 8-byte values.
  const Case cases[] = {{4099, 3001, 3, SampleType::kUint8}, {6007, 5003, 1, SampleType::kUint16},
                        {3001, 2003, 4, SampleType::kFloat32}, {4099, 4001, 1, SampleType::kFloat64},
                        {5003, 3001, 2, SampleType::kInt16}};
  StatsRequest range;
  range.hist.bins = 777;
  range.hist.explicit_range = true;
  range.hist.lo = 3;
  range.hist.hi = 190;
  StatsRequest all = everything();
  all.luminance = false;
  StatsRequest hsv;
  hsv.colour_space = ColourSpace::kHsv;
  std::vector<std::unique_ptr<Engine>> gpus;
  gpus.push_back(std::move(gpu_));
  for (uint32_t threads : {2u, 3u}) {
    EngineOptions o;
    o.kind = EngineKind::kCuda;
    o.cpu_threads = threads;
    gpus.push_back(make_engine(o));
  }
  for (const Case& k : cases) {
    TestImage img = random_image(rng, k.w, k.h, k.c, k.t, 0, 0, is_float(k.t) ? 0.01 : 0);
    const Layout& l = img.view.layout;
    const size_t size = sample_size(k.t);
    // The image as a big-endian file holds it; the reader turns it back.
    std::vector<uint8_t> stored(l.min_bytes());
    const auto* p = static_cast<const uint8_t*>(img.view.data);
    for (uint64_t i = 0; i < stored.size(); i += size) std::reverse_copy(p + i, p + i + size, stored.data() + i);
    std::atomic<uint64_t> reads{0};
    const ByteReader swapped = [&](uint64_t at, uint64_t n, uint8_t* out) {
      ASSERT_LE(at + n, stored.size());
      reads++;
      for (uint64_t i = at; i < at + n; ++i) {  // byte i of value i / size is byte size-1-i%size of its stored value
        const uint64_t v = i / size * size;
        out[i - at] = stored[v + size - 1 - (i - v)];
      }
    };
    for (const StatsRequest* request : {&all, &range, &hsv}) {
      if (request == &hsv && (k.c < 3 || k.t != SampleType::kUint8)) continue;
      SCOPED_TRACE(describe(l) + (request == &all ? " everything" : request == &range ? " range" : " HSV"));
      const Result want = cpu_->analyze(img.view, *request);
      for (auto& gpu : gpus) {
        SCOPED_TRACE(std::to_string(gpu->info().threads) + " threads");
        reads = 0;
        const Result got = gpu->analyze_read(l, *request, swapped);
        EXPECT_EQ(got.engine, "cuda");
        EXPECT_GT(reads.load(), 2u);
        expect_same_stats(got, want, k.t);
      }
    }
  }
  // A read that fails part way: its error, and the engines compute on.
  TestImage img = random_image(rng, 4099, 3001, 3, SampleType::kUint8, 0, 0);
  const auto* p = static_cast<const uint8_t*>(img.view.data);
  // Four at once: one has the engine's large pieces, the others cut their
  // workspaces' slots.
  {
    const Result want = cpu_->analyze(img.view, all);
    std::vector<Result> got(4);
    std::vector<std::thread> callers;
    for (size_t i = 0; i < got.size(); ++i)
      callers.emplace_back([&, i] {
        got[i] = gpus[0]->analyze_read(img.view.layout, all,
                                       [&](uint64_t at, uint64_t n, uint8_t* out) { std::memcpy(out, p + at, n); });
      });
    for (auto& t : callers) t.join();
    for (const Result& r : got) {
      EXPECT_EQ(r.engine, "cuda");
      expect_same_stats(r, want, SampleType::kUint8);
    }
  }
  for (auto& gpu : gpus) {
    std::atomic<uint64_t> read_bytes{0};
    EXPECT_THROW(gpu->analyze_read(img.view.layout, StatsRequest{},
                                   [&](uint64_t at, uint64_t n, uint8_t* out) {
                                     if (read_bytes.fetch_add(n) > (uint64_t{20} << 20))
                                       fail(ErrorCode::kDataLoss, "the file went away");
                                     std::memcpy(out, p + at, n);
                                   }),
                 Error);
    expect_same_stats(gpu->analyze_read(img.view.layout, StatsRequest{},
                                        [&](uint64_t at, uint64_t n, uint8_t* out) { std::memcpy(out, p + at, n); }),
                      cpu_->analyze(img.view, StatsRequest{}), SampleType::kUint8);
  }
}

// Every form of the 8-bit histogram kernel (1 and 2 histograms a warp, one
// block overwriting), called directly on device memory, against a plain count.
TEST_F(GpuTest, EveryHist8KernelCountsExactly) {
  cudaDeviceProp p;
  ASSERT_EQ(cudaGetDeviceProperties(&p, 0), cudaSuccess);
  const cuda::DeviceInfo dev{p.multiProcessorCount};
  std::mt19937_64 rng(31);
  uint8_t* d = nullptr;
  unsigned long long* counts = nullptr;
  const uint64_t max_bytes = uint64_t{300} << 20;
  ASSERT_EQ(cudaMalloc(&d, max_bytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&counts, 4 * 256 * sizeof(unsigned long long)), cudaSuccess);
  std::vector<uint8_t> host(max_bytes);
  for (auto& b : host) b = static_cast<uint8_t>(rng() % 7 == 0 ? 200 : rng());
  for (uint32_t c = 1; c <= 4; ++c)
    for (uint64_t pixels : {uint64_t{1}, uint64_t{15}, uint64_t{16}, uint64_t{1000003}, (uint64_t{280} << 20) / c + 5}) {
      std::vector<unsigned long long> want(4 * 256, 0);
      for (uint64_t i = 0; i < pixels * c; ++i) ++want[(i % c) * 256 + host[i]];
      ASSERT_EQ(cudaMemcpy(d, host.data(), pixels * c, cudaMemcpyHostToDevice), cudaSuccess);
      for (int k = 0; k < 3; ++k) {
        if (k == 2 && pixels * c > cuda::kOneBlockHist8Bytes) continue;
        ASSERT_EQ(cudaMemset(counts, 0xee, 4 * 256 * sizeof(unsigned long long)), cudaSuccess);
        if (k < 2) {  // these add to the counts: start from zero
          ASSERT_EQ(cudaMemset(counts, 0, 4 * 256 * sizeof(unsigned long long)), cudaSuccess);
          cuda::launch_hist8(d, pixels, c, counts, dev, nullptr, k + 1);
        } else {  // this one overwrites them: the poison must go
          cuda::launch_hist8_one_block(d, pixels, c, counts, nullptr);
        }
        std::vector<unsigned long long> got(c * 256);
        ASSERT_EQ(cudaMemcpy(got.data(), counts, got.size() * 8, cudaMemcpyDeviceToHost), cudaSuccess);
        EXPECT_EQ(got, std::vector<unsigned long long>(want.begin(), want.begin() + c * 256))
            << "kernel " << k << ", " << c << " channels, " << pixels << " pixels";
      }
    }
  cudaFree(d);
  cudaFree(counts);
}

TEST_F(GpuTest, ConcurrentCallsShareTheDevice) {
  std::mt19937_64 rng(23);
  std::vector<TestImage> images;
  for (int i = 0; i < 12; ++i)
    images.push_back(random_image(rng, 1500 + i, 1000, 1 + i % 4, kAllTypes[i % 6], 0, 0));
  std::vector<Result> want;
  for (auto& img : images) want.push_back(cpu_->analyze(img.view, StatsRequest{}));
  std::vector<std::thread> threads;
  std::vector<Result> got(images.size());
  for (size_t i = 0; i < images.size(); ++i)
    threads.emplace_back([&, i] { got[i] = gpu_->analyze(images[i].view, StatsRequest{}); });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < images.size(); ++i) expect_same_stats(got[i], want[i], images[i].view.layout.type);
}

// A stream holds a workspace only while it has bytes to compute: 64 streams
// paused part way hold no workspace and no device memory but their float
// pixels, whole images meanwhile go to the GPU, and each stream then
// finishes with the CPU engine's answer. Four streams computing hold the
// four workspaces: a fifth waits a bounded time, then goes to the CPU.
TEST_F(GpuTest, StreamsHoldAWorkspaceOnlyWhileTheyCompute) {
  EngineOptions o;
  o.kind = EngineKind::kCuda;
  std::string reason;
  o.on_fallback = [&](const std::string& why) { reason = why; };
  auto engine = make_engine(o);
  std::mt19937_64 rng(37);
  TestImage whole = random_image(rng, 640, 480, 3, SampleType::kUint8, 0, 0);
  // The workspace's first-use buffers exist before the baseline.
  (void)engine->analyze(whole.view, everything());
  const uint64_t held0 = engine->usage().device_bytes_held;

  struct Stalled {
    TestImage img;
    StatsRequest request;
    std::unique_ptr<StreamAnalysis> stream;
    uint64_t sent = 0;
  };
  std::vector<Stalled> stalled;
  uint64_t float_bytes = 0;
  for (int i = 0; i < 64; ++i) {
    const SampleType t = kAllTypes[i % 6];
    Stalled s{random_image(rng, 700 + i, 300, 1 + i % 4, t, 0, 0, is_float(t) ? 0.01 : 0),
              i % 2 ? streamed_everything() : StatsRequest{}, nullptr};
    s.stream = engine->open_stream(s.img.view.layout, s.request);
    s.sent = 1 + rng() % (s.img.view.layout.min_bytes() / 2);
    s.stream->feed(s.img.view.data, s.sent);
    s.stream->pause();
    const uint64_t pixel = s.img.view.layout.pixel_bytes();
    if (is_float(t)) float_bytes += s.sent / pixel * pixel;  // whole pixels; the rest waits on the host
    stalled.push_back(std::move(s));
  }
  const uint64_t held = engine->usage().device_bytes_held - held0;
  EXPECT_EQ(held, float_bytes) << "device bytes held by 64 paused streams, against their float pixels";
  for (int i = 0; i < 8; ++i) EXPECT_EQ(engine->analyze(whole.view, StatsRequest{}).engine, "cuda") << reason;
  EXPECT_EQ(reason, "");
  for (Stalled& s : stalled) {
    const auto* p = static_cast<const uint8_t*>(s.img.view.data) + s.sent;
    uint64_t left = s.img.view.layout.min_bytes() - s.sent;
    while (left > 0) {
      const uint64_t n = std::min<uint64_t>(left, 1 + rng() % (1 << 20));
      s.stream->feed(p, n);
      if (rng() % 2) s.stream->pause();
      p += n;
      left -= n;
    }
    const Result r = s.stream->finish();
    SCOPED_TRACE(describe(s.img.view.layout));
    EXPECT_EQ(r.engine, "cuda");
    expect_same_stats(r, cpu_->analyze(s.img.view, s.request), s.img.view.layout.type);
  }
  stalled.clear();
  EXPECT_EQ(engine->usage().device_bytes_held, held0) << "device memory kept after every stream finished";

  // Fed and not paused, a stream computes: four hold the four workspaces.
  TestImage img = random_image(rng, 300, 200, 3, SampleType::kUint8, 0, 0);
  std::vector<std::unique_ptr<StreamAnalysis>> busy;
  for (int i = 0; i < 4; ++i) {
    busy.push_back(engine->open_stream(img.view.layout, StatsRequest{}));
    busy.back()->feed(img.view.data, 100);
  }
  auto fifth = engine->open_stream(img.view.layout, StatsRequest{});
  EXPECT_EQ(reason, "") << "a stream that has sent nothing takes no workspace";
  fifth->feed(img.view.data, img.view.layout.min_bytes());
  EXPECT_NE(reason.find("busy"), std::string::npos) << reason;
  const Result r = fifth->finish();
  EXPECT_EQ(r.engine, "cpu");
  expect_same_stats(r, cpu_->analyze(img.view, StatsRequest{}), SampleType::kUint8);
  for (auto& s : busy) {
    s->feed(static_cast<const uint8_t*>(img.view.data) + 100, img.view.layout.min_bytes() - 100);
    const Result b = s->finish();
    EXPECT_EQ(b.engine, "cuda");
    expect_same_stats(b, cpu_->analyze(img.view, StatsRequest{}), SampleType::kUint8);
  }
}

// A server's engine makes every workspace at start, within its memory
// limit, and never more: streams fed and paused from many threads at once
// leave the GPU memory it holds as it was.
TEST_F(GpuTest, WorkspacesMadeAtStartAreAllItHolds) {
  EngineOptions o;
  o.kind = EngineKind::kCuda;
  o.cuda_workspaces_at_start = true;
  auto engine = make_engine(o);
  const uint64_t held0 = engine->usage().device_bytes_held;
  std::mt19937_64 rng(41);
  std::vector<TestImage> images;
  for (int i = 0; i < 16; ++i) images.push_back(random_image(rng, 1500 + i, 700, 1 + i % 4, SampleType::kUint8, 0, 0));
  std::vector<std::thread> threads;
  std::vector<Result> got(images.size());
  for (size_t i = 0; i < images.size(); ++i)
    threads.emplace_back([&, i] {
      auto s = engine->open_stream(images[i].view.layout, StatsRequest{});
      const auto* p = static_cast<const uint8_t*>(images[i].view.data);
      const uint64_t n = images[i].view.layout.min_bytes(), half = n / 2;
      s->feed(p, half);
      s->pause();
      s->feed(p + half, n - half);
      got[i] = s->finish();
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(engine->usage().device_bytes_held, held0);
  for (size_t i = 0; i < images.size(); ++i)
    expect_same_stats(got[i], cpu_->analyze(images[i].view, StatsRequest{}), SampleType::kUint8);
  // A limit with room for two workspaces (about 105 MiB each): two are made, and they serve.
  o.cuda_memory_limit = uint64_t{300} << 20;
  auto limited = make_engine(o);
  EXPECT_LE(limited->usage().device_bytes_held, o.cuda_memory_limit);
  EXPECT_GE(limited->usage().device_bytes_held, uint64_t{200} << 20);
  EXPECT_EQ(limited->analyze(images[0].view, StatsRequest{}).engine, "cuda");
}

// Distribution, shape, positions, colours, summary and luminance: the same
// numbers as the CPU engine's on every type, channel count and shape, on
// images of many chunks (positions across slots), and on device images.
TEST_F(GpuTest, EveryStatisticAgreesWithTheCpu) {
  struct Shape { uint64_t w, h; };
  const Shape shapes[] = {{1, 1}, {17, 1}, {31, 7}, {257, 129}, {1021, 1031}};
  std::mt19937_64 rng(303);
  for (SampleType t : kAllTypes)
    for (uint32_t c = 1; c <= 4; ++c)
      for (const Shape& s : shapes)
        for (int variant = 0; variant < 3; ++variant) {
          TestImage img = random_image(rng, s.w, s.h, c, t, variant == 1 ? 1 + rng() % 29 : 0, variant == 2 ? 3 : 0,
                                       is_float(t) && variant ? 0.05 : 0);
          SCOPED_TRACE(describe(img.view.layout) + " variant " + std::to_string(variant));
          expect_same(img.view, everything());
        }
  const struct { uint64_t w, h; uint32_t c; SampleType t; } large[] = {
      {5000, 3001, 3, SampleType::kUint8}, {4096, 2048, 4, SampleType::kUint8}, {3001, 3000, 3, SampleType::kUint16},
      {4096, 2048, 1, SampleType::kInt16}, {4096, 4096, 1, SampleType::kFloat32}, {2047, 2049, 3, SampleType::kFloat64}};
  for (const auto& k : large) {
    TestImage img = random_image(rng, k.w, k.h, k.c, k.t, 0, 0, is_float(k.t) ? 0.001 : 0);
    SCOPED_TRACE(describe(img.view.layout));
    expect_same(img.view, everything());
    // The first extremes late in the image: in a chunk other than the first.
    TestImage late = image_of_values(rng, k.w, k.h, k.c, k.t, {3, 4, 5});
    uint8_t* base = const_cast<uint8_t*>(static_cast<const uint8_t*>(late.view.data));
    const uint64_t at = late.view.layout.pixels() * 7 / 8;
    store(base + (at / k.w) * late.view.layout.stride() + (at % k.w) * late.view.layout.pixel_bytes(), k.t, 1);
    store(base + (at / k.w + 1) * late.view.layout.stride(), k.t, 9);
    const Result g = gpu_->analyze(late.view, everything());
    expect_same_stats(g, cpu_->analyze(late.view, everything()), k.t);
    EXPECT_EQ(g.channels[0].min_at, at);
    EXPECT_EQ(g.channels[0].max_at, (at / k.w + 1) * k.w);
  }
  for (uint32_t c : {1u, 3u, 4u}) {
    TestImage img = random_image(rng, 1920, 1080, c, SampleType::kUint8, 0, 0);
    const size_t bytes = img.view.layout.pixels() * c;
    void* device = nullptr;
    ASSERT_EQ(cudaMalloc(&device, bytes), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(device, img.view.data, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    const Result g = gpu_->analyze_device(DeviceImageView{device, img.view.layout}, everything());
    cudaFree(device);
    SCOPED_TRACE("device image, " + describe(img.view.layout));
    EXPECT_EQ(g.has_luminance, c >= 3);
    expect_same_stats(g, cpu_->analyze(img.view, everything()), SampleType::kUint8);
  }
}

// A JPEG decoded on the GPU keeps its pixels there: its quality measures
// and hashes are counted by the device (measures_on_device) and finished on
// the host by the CPU engine's code. Every field equal to the CPU engine's
// of the same pixels in host memory: random, smooth, constant (every pixel
// in one brightness bucket), the type's two ends, R = G = B, B and R
// swapped, prime and odd sizes, a last strip of one column (257 wide) and of
// one warp (288), one large image; the histograms taken from the statistics
// pass or counted by the quality pass (not asked for); sizes the device does
// not take (small, 32 wide, one row) through the host copy, the same answers;
// quality alone as well.
TEST_F(GpuTest, QualityAndHashesOfDeviceImagesAsTheCpuEngines) {
  std::mt19937_64 rng(653);
  struct Size { uint64_t w, h; bool on_device; };
  const Size sizes[] = {{65, 66, true},   {97, 61, true},  {500, 375, true}, {211, 1013, true}, {257, 70, true},
                        {288, 75, true},    {4001, 2999, true},
                        {40, 30, false},  {32, 100, false}, {300, 1, false}};
  StatsRequest req;
  req.quality = req.hashes = true;
  for (const Size& sz : sizes)
    for (uint32_t c : {1u, 3u})
      for (int kind = 0; kind < 6; ++kind) {
        if (sz.w * sz.h > 2000000 && kind > 1) continue;
        const uint64_t n = sz.w * sz.h * c;
        std::vector<double> vals(n);
        for (uint64_t i = 0; i < n; ++i) {
          const uint64_t px = i / c, x = px % sz.w, y = px / sz.w;
          switch (kind) {
            case 0: vals[i] = static_cast<double>(rng() % 256); break;
            case 1: vals[i] = static_cast<double>((x * 7 + y * 3 + (i % c) * 50 + rng() % 9) % 256); break;
            case 2: vals[i] = 201; break;
            case 3: vals[i] = (rng() % 2) * 255.0; break;
            case 4: vals[i] = i % c == 0 ? static_cast<double>(rng() % 256) : vals[i - i % c]; break;  // R = G = B
            default: vals[i] = static_cast<double>(40 + rng() % 3); break;  // a few colours: buckets of many pixels
          }
        }
        for (bool swapped : {false, true}) {
          if (swapped && c == 1) continue;
          SCOPED_TRACE(std::to_string(sz.w) + "x" + std::to_string(sz.h) + "x" + std::to_string(c) + " data " +
                       std::to_string(kind) + (swapped ? " BGR" : ""));
          StatsRequest r = req;
          if (swapped) r.rgb[0] = 2, r.rgb[2] = 0;
          r.histogram = kind % 2 == 0;
          const TestImage img = make_image(rng, sz.w, sz.h, c, SampleType::kUint8, 0, 0, [&](uint64_t i) { return vals[i]; });
          EXPECT_EQ(gpu_->measures_on_device(img.view.layout, r), sz.on_device);
          void* device = nullptr;
          ASSERT_EQ(cudaMalloc(&device, n), cudaSuccess);
          ASSERT_EQ(cudaMemcpy(device, img.view.data, n, cudaMemcpyHostToDevice), cudaSuccess);
          const Result g = gpu_->analyze_device(DeviceImageView{device, img.view.layout}, r);
          cudaFree(device);
          const Result want = cpu_->analyze(img.view, r);
          ASSERT_TRUE(g.has_quality && g.has_hashes);
          expect_same_quality(g.quality, want.quality);
          EXPECT_EQ(g.hashes.pixels, want.hashes.pixels);
          EXPECT_EQ(g.hashes.has_phash, want.hashes.has_phash);
          EXPECT_EQ(g.hashes.phash, want.hashes.phash);
          expect_same_stats(g, want, SampleType::kUint8);
          if (kind == 0) {  // quality alone: the device's memory laid out without the hash's pieces
            StatsRequest q = r;
            q.hashes = false;
            ASSERT_EQ(cudaMalloc(&device, n), cudaSuccess);
            ASSERT_EQ(cudaMemcpy(device, img.view.data, n, cudaMemcpyHostToDevice), cudaSuccess);
            const Result gq = gpu_->analyze_device(DeviceImageView{device, img.view.layout}, q);
            cudaFree(device);
            ASSERT_TRUE(gq.has_quality);
            EXPECT_FALSE(gq.has_hashes);
            expect_same_quality(gq.quality, want.quality);
          }
        }
      }
}

// The pixel hash on the device (common/xxh3_long.hpp's pieces) at every
// input length from the short ones the host hashes (up to 240 bytes with
// the header) past several of XXH3's 1,024-byte blocks, one and three
// channels, R and B swapped: the CPU engine's hash each time, and
// one sample changed changes it.
TEST_F(GpuTest, PixelHashOfDeviceImagesAtEveryLengthAsTheCpuEngines) {
  std::mt19937_64 rng(8128);
  StatsRequest req;
  req.hashes = true;
  int wrong = 0, checked = 0;
  for (uint32_t c : {1u, 3u})
    for (uint64_t w = 2; w * 2 * c <= 3 * 1024 + 200; ++w) {
      if (w == kPhashSide) continue;  // the host's
      const uint64_t h = 2, n = w * h * c;
      std::vector<uint8_t> px(n);
      for (uint8_t& b : px) b = static_cast<uint8_t>(rng());
      void* device = nullptr;
      ASSERT_EQ(cudaMalloc(&device, n), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(device, px.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
      const Layout l{w, h, c, SampleType::kUint8};
      for (bool swapped : {false, true}) {
        if (swapped && c == 1) continue;
        StatsRequest r = req;
        if (swapped) r.rgb[0] = 2, r.rgb[2] = 0;
        EXPECT_TRUE(gpu_->measures_on_device(l, r));
        const Result g = gpu_->analyze_device(DeviceImageView{device, l}, r);
        const Result want = cpu_->analyze(ImageView{px.data(), l}, r);
        if (g.hashes.pixels != want.hashes.pixels || g.hashes.phash != want.hashes.phash) {
          if (++wrong < 5) ADD_FAILURE() << w << "x" << h << "x" << c << (swapped ? " BGR" : "");
        }
        ++checked;
      }
      if (w % 97 == 0) {  // one sample changed
        const uint64_t at = rng() % n;
        px[at] ^= 1;
        ASSERT_EQ(cudaMemcpy(device, px.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
        const Result g = gpu_->analyze_device(DeviceImageView{device, l}, req);
        EXPECT_EQ(g.hashes.pixels, cpu_->analyze(ImageView{px.data(), l}, req).hashes.pixels);
        px[at] ^= 1;
        EXPECT_NE(g.hashes.pixels, cpu_->analyze(ImageView{px.data(), l}, req).hashes.pixels);
      }
      cudaFree(device);
    }
  EXPECT_EQ(wrong, 0) << "of " << checked;
}

TEST_F(GpuTest, OverTheMemoryLimitFallsBackToTheCpu) {
  EngineOptions o;
  o.kind = EngineKind::kCuda;
  // Room for the one workspace made at start (96 MiB of device slots), not
  // also for a 256 MiB float image.
  o.cuda_memory_limit = uint64_t{300} << 20;
  std::string reason;
  o.on_fallback = [&](const std::string& why) { reason = why; };
  auto engine = make_engine(o);
  std::mt19937_64 rng(29);
  TestImage img = random_image(rng, 8192, 8192, 1, SampleType::kFloat32, 0, 0);
  const Result r = engine->analyze(img.view, StatsRequest{});
  EXPECT_EQ(r.engine, "cpu");
  EXPECT_NE(reason.find("limit"), std::string::npos) << reason;
  expect_same_stats(r, cpu_->analyze(img.view, StatsRequest{}), SampleType::kFloat32);
  // Small images still go to the GPU.
  TestImage small = random_image(rng, 640, 480, 3, SampleType::kUint8, 0, 0);
  EXPECT_EQ(engine->analyze(small.view, StatsRequest{}).engine, "cuda");
}

// One GPU listed twice: two engines behind one placement, calls from many
// threads spread over both, each answer the CPU engine's; a slot taken out
// takes no more.
TEST(GpuPlacement, OneGpuListedTwiceSpreadsCallsAndAgreesWithTheCpu) {
  std::string why;
  if (!make_cuda_engine(EngineOptions{}, &why)) GTEST_SKIP() << "no usable GPU: " << why;
  EngineOptions o;
  o.kind = EngineKind::kCuda;
  o.cuda_devices = {0, 0};
  std::unique_ptr<Engine> twice = make_engine(o);
  const std::shared_ptr<Placement> placement = twice->placement();
  ASSERT_TRUE(placement);
  ASSERT_EQ(placement->size(), 2u);
  EXPECT_NE(twice->info().device_name.find("2 x "), std::string::npos) << twice->info().device_name;
  auto cpu = make_cpu_engine();
  std::atomic<int> wrong{0};
  auto run = [&](int threads, int each, uint64_t seed) {
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        std::mt19937_64 rng(seed + t);
        for (int i = 0; i < each; ++i) {
          const SampleType type = kAllTypes[rng() % std::size(kAllTypes)];
          TestImage img = random_image(rng, 1 + rng() % 700, 1 + rng() % 300, 1 + rng() % 4, type, 0, 0);
          StatsRequest r;
          r.distribution = r.shape = r.summary = r.merge_state = true;
          const Result g = twice->analyze(img.view, r);
          if (g.engine != "cuda" || g.device != 0) ++wrong;
          expect_same_stats(g, cpu->analyze(img.view, r), type);
          // A stream holds its slot from open to finish.
          auto s = twice->open_stream(img.view.layout, StatsRequest{});
          s->feed(img.view.data, img.view.layout.min_bytes());
          expect_same_stats(s->finish(), cpu->analyze(img.view, StatsRequest{}), type);
        }
      });
    for (auto& th : ts) th.join();
  };
  run(8, 12, 1000);
  EXPECT_EQ(wrong.load(), 0);
  std::vector<GpuStatus> s = placement->status();
  EXPECT_EQ(s[0].images + s[1].images, 8u * 12 * 2);
  EXPECT_GT(s[0].images, 20u);
  EXPECT_GT(s[1].images, 20u);
  EXPECT_EQ(s[0].in_flight + s[1].in_flight, 0u);
  placement->take_out(0, "taken out by the test");
  const uint64_t before = s[0].images;
  run(4, 4, 2000);
  s = placement->status();
  EXPECT_EQ(s[0].images, before);
  EXPECT_EQ(s[1].images + s[0].images, 8u * 12 * 2 + 4 * 4 * 2);
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace imgstat::testing
