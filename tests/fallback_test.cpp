// A GPU that fails part way through a stream: the CPU engine carries on from
// the last checkpoint and the caller gets the whole image's answer, the same
// as the CPU engine's own. The fault is injected around a real engine: the
// CPU engine everywhere, the CUDA engine (its checkpoints read back from the
// device) where a GPU is.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <tuple>

#include "common/fallback_engine.hpp"
#include "common/partial.hpp"
#include "imgstat/engine.hpp"
#include "test_images.hpp"

namespace imgstat::testing {
namespace {

// Where the injected fault strikes.
struct Fault {
  enum Where { kNever, kFeed, kCheckpoint, kFinish, kPause } where = kNever;
  uint64_t after_bytes = 0;  // kFeed: once this many bytes were fed
  int after_checkpoints = 0; // kCheckpoint, kPause: on this checkpoint or pause (0 = the first)
  bool device_lost = false;  // the engine is unusable afterwards
};

class FaultyStream final : public CheckpointStream {
 public:
  FaultyStream(std::unique_ptr<StreamAnalysis> inner, Fault fault, std::atomic<bool>& lost, int& checkpoints)
      : inner_(std::move(inner)), fault_(fault), lost_(lost), checkpoints_(checkpoints) {}
  void feed(const void* data, size_t bytes) override {
    fed_ += bytes;
    if (fault_.where == Fault::kFeed && fed_ >= fault_.after_bytes) strike();
    inner_->feed(data, bytes);
  }
  void pause() override {
    if (fault_.where == Fault::kPause && pauses_++ == fault_.after_checkpoints) strike();
    inner_->pause();
  }
  Result finish() override {
    if (fault_.where == Fault::kFinish) strike();
    return inner_->finish();
  }
  std::optional<Partial> partial() override {
    if (fault_.where == Fault::kCheckpoint && checkpoints_ == fault_.after_checkpoints) strike();
    ++checkpoints_;
    auto* cp = dynamic_cast<CheckpointStream*>(inner_.get());
    return cp ? cp->partial() : std::nullopt;
  }

 private:
  [[noreturn]] void strike() {
    if (fault_.device_lost) lost_ = true;
    fail(ErrorCode::kInternal, "injected fault: an illegal memory access was encountered");
  }
  std::unique_ptr<StreamAnalysis> inner_;
  Fault fault_;
  uint64_t fed_ = 0;
  int pauses_ = 0;
  std::atomic<bool>& lost_;
  int& checkpoints_;
};

class FaultyEngine final : public Engine {
 public:
  FaultyEngine(std::shared_ptr<Engine> inner, Fault fault, int& checkpoints)
      : inner_(std::move(inner)), fault_(fault), checkpoints_(checkpoints) {}
  EngineInfo info() const override { return inner_->info(); }
  bool usable() const override { return !lost_; }
  Result analyze(const ImageView& image, const StatsRequest& request) override { return inner_->analyze(image, request); }
  std::unique_ptr<StreamAnalysis> open_stream(const Layout& layout, const StatsRequest& request) override {
    return std::make_unique<FaultyStream>(inner_->open_stream(layout, request), fault_, lost_, checkpoints_);
  }
  // kFeed strikes once after_bytes were read: the engine's own fault in the
  // middle of its reads (the source is fine).
  Result analyze_read(const Layout& layout, const StatsRequest& request, const ByteReader& read) override {
    std::atomic<uint64_t> got{0};
    return inner_->analyze_read(layout, request, [&](uint64_t at, uint64_t n, uint8_t* out) {
      read(at, n, out);
      if (fault_.where == Fault::kFeed && (got += n) >= fault_.after_bytes) {
        if (fault_.device_lost) lost_ = true;
        fail(ErrorCode::kInternal, "injected fault: an illegal memory access was encountered");
      }
    });
  }

 private:
  std::shared_ptr<Engine> inner_;
  Fault fault_;
  std::atomic<bool> lost_{false};
  int& checkpoints_;
};

// Forwards to an engine owned elsewhere, so one CUDA engine serves every case.
class Borrowed final : public Engine {
 public:
  explicit Borrowed(Engine& e) : e_(e) {}
  EngineInfo info() const override { return e_.info(); }
  bool usable() const override { return e_.usable(); }
  Result analyze(const ImageView& i, const StatsRequest& r) override { return e_.analyze(i, r); }
  std::unique_ptr<StreamAnalysis> open_stream(const Layout& l, const StatsRequest& r) override {
    return e_.open_stream(l, r);
  }
  Result analyze_read(const Layout& l, const StatsRequest& r, const ByteReader& read) override {
    return e_.analyze_read(l, r, read);
  }

 private:
  Engine& e_;
};

const SampleType kAllTypes[] = {SampleType::kUint8,  SampleType::kUint16,  SampleType::kInt8,
                                SampleType::kInt16,  SampleType::kFloat32, SampleType::kFloat64};

class FallbackStreamTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    cpu_ = make_cpu_engine();
    if (GetParam() == "cpu") {
      primary_ = make_cpu_engine();
    } else {
      std::string why;
      primary_ = make_cuda_engine(EngineOptions{}, &why);
      if (!primary_) GTEST_SKIP() << "no CUDA engine here: " << why;
    }
  }

  struct Run {
    Result result;
    std::vector<std::string> told;
    int checkpoints = 0;
  };

  // Streams img in chunks of `chunk` bytes through a FallbackEngine whose
  // primary fails as `fault` says, pausing after every `pause_every` chunks
  // (a client slower than the engine).
  Run stream(const TestImage& img, const StatsRequest& request, Fault fault, size_t chunk,
             FallbackTuning tuning, int pause_every = 0) {
    Run run;
    FallbackEngine engine(std::make_unique<FaultyEngine>(std::make_shared<Borrowed>(*primary_), fault, run.checkpoints),
                          make_cpu_engine(), [&](const std::string& why) { run.told.push_back(why); }, tuning);
    auto s = engine.open_stream(img.view.layout, request);
    const auto* p = static_cast<const uint8_t*>(img.view.data);
    const uint64_t n = img.view.layout.min_bytes();
    int chunks = 0;
    for (uint64_t off = 0; off < n; off += chunk) {
      s->feed(p + off, std::min<uint64_t>(chunk, n - off));
      if (pause_every && ++chunks % pause_every == 0) s->pause();
    }
    run.result = s->finish();
    return run;
  }

  std::unique_ptr<Engine> primary_, cpu_;
};

TEST_P(FallbackStreamTest, AFaultAnywhereGivesTheWholeImagesAnswer) {
  std::mt19937_64 rng(2026);
  for (SampleType t : kAllTypes)
    for (uint32_t c : {1u, 3u, 4u}) {
      // Odd width, padded rows, and chunks that split pixels and rows.
      TestImage img = random_image(rng, 1021, 67, c, t, 5, 1, is_float(t) ? 0.01 : 0);
      // The primary sees packed pixels, row padding dropped.
      const uint64_t bytes = img.view.layout.pixels() * img.view.layout.pixel_bytes();
      const size_t chunk = 7919;
      FallbackTuning tuning;
      tuning.checkpoint_bytes = bytes / 7;  // several checkpoints per image
      for (int h = 0; h < 4; ++h) {
        StatsRequest request;
        if (h == 3) {  // positions and colours found after a checkpoint count from the image's start
          request = everything();
          request.luminance = false;
        }
        if (h == 1) request.hist.bins = 100;
        if (h == 2) {
          request.hist.bins = 37;
          request.hist.explicit_range = true;
          request.hist.lo = is_float(t) ? -100 : type_lo(t) / 2;
          request.hist.hi = is_float(t) ? 700 : 100;
        }
        const Result want = cpu_->analyze(img.view, request);
        const Fault faults[] = {
            {Fault::kNever},
            {Fault::kFeed, bytes / 20},               // before the first checkpoint
            {Fault::kFeed, bytes * 3 / 5, 0, true},   // after a few, and the device is lost
            {Fault::kFeed, bytes - 1},                // on the last chunk
            {Fault::kCheckpoint, 0, 2},               // reading a checkpoint back
            {Fault::kFinish},
            {Fault::kPause, 0, 1},                    // giving back what a waiting stream holds
        };
        for (const Fault& f : faults)
        for (int pause_every : {0, 3}) {
          if (f.where == Fault::kPause && !pause_every) continue;
          SCOPED_TRACE(describe(img.view.layout) + " histogram " + std::to_string(h) + " fault " +
                       std::to_string(f.where) + " at " + std::to_string(f.after_bytes) + ", pausing every " +
                       std::to_string(pause_every));
          const Run run = stream(img, request, f, chunk, tuning, pause_every);
          expect_same_stats(run.result, want, t);
          const bool auto_floats = is_float(t) && !request.hist.explicit_range;
          if (f.where == Fault::kNever) {
            EXPECT_EQ(run.result.engine, primary_->info().kind);
            EXPECT_TRUE(run.told.empty());
            // Integer and explicit-range streams checkpoint; floats over their own range cannot.
            if (!auto_floats) EXPECT_GE(run.checkpoints, 5);
          } else if (!(f.where == Fault::kCheckpoint && auto_floats)) {
            EXPECT_EQ(run.result.engine, "cpu");
            ASSERT_EQ(run.told.size(), 1u);
            EXPECT_NE(run.told[0].find("injected fault"), std::string::npos) << run.told[0];
            if (f.device_lost) EXPECT_NE(run.told[0].find("no longer usable"), std::string::npos) << run.told[0];
          }
        }
      }
    }
}

TEST_P(FallbackStreamTest, OnePixelAndOneRowImages) {
  std::mt19937_64 rng(5);
  for (SampleType t : kAllTypes) {
    for (auto [w, h] : {std::pair<uint64_t, uint64_t>{1, 1}, {1, 9}, {11, 1}}) {
      TestImage img = random_image(rng, w, h, 2, t, 3, 0);
      SCOPED_TRACE(describe(img.view.layout));
      FallbackTuning tuning;
      tuning.checkpoint_bytes = 1;
      for (Fault f : {Fault{Fault::kFeed, 1}, Fault{Fault::kFinish}, Fault{Fault::kCheckpoint, 0, 0}}) {
        const Run run = stream(img, StatsRequest{}, f, 3, tuning);
        expect_same_stats(run.result, cpu_->analyze(img.view, StatsRequest{}), t);
      }
    }
  }
}

TEST_P(FallbackStreamTest, WhatIsKeptStaysWithinTheLimit) {
  // Floats over their own range keep every pixel; past the engine's limit
  // they stop, and a fault then fails the call and says why.
  std::mt19937_64 rng(8);
  TestImage img = random_image(rng, 512, 64, 1, SampleType::kFloat32, 0, 0);
  FallbackTuning tuning;
  tuning.checkpoint_bytes = 4096;
  tuning.retain_limit = img.view.layout.min_bytes() / 2;
  try {
    stream(img, StatsRequest{}, Fault{Fault::kFinish}, 1000, tuning);
    FAIL() << "a fault past the limit should fail the call";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
    EXPECT_NE(std::string(e.what()).find("too many to keep"), std::string::npos) << e.what();
  }
  // Within the limit the same fault is recovered, and an explicit range
  // (which checkpoints) needs no such room.
  tuning.retain_limit = img.view.layout.min_bytes();
  EXPECT_EQ(stream(img, StatsRequest{}, Fault{Fault::kFinish}, 1000, tuning).result.engine, "cpu");
  StatsRequest ranged;
  ranged.hist.explicit_range = true;
  ranged.hist.lo = 0;
  ranged.hist.hi = 1000;
  tuning.retain_limit = 0;
  const Run run = stream(img, ranged, Fault{Fault::kFinish}, 1000, tuning);
  expect_same_stats(run.result, cpu_->analyze(img.view, ranged), SampleType::kFloat32);
}

TEST_P(FallbackStreamTest, BadInputIsNotRetried) {
  std::mt19937_64 rng(9);
  TestImage img = random_image(rng, 64, 8, 3, SampleType::kUint8, 0, 0);
  Run run;
  FallbackEngine engine(std::make_unique<Borrowed>(*primary_), make_cpu_engine(),
                        [&](const std::string& why) { run.told.push_back(why); });
  auto s = engine.open_stream(img.view.layout, StatsRequest{});
  s->feed(img.view.data, 100);
  try {
    s->finish();
    FAIL() << "a short stream must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("stream ended after 100 bytes"), std::string::npos) << e.what();
  }
  auto t = engine.open_stream(img.view.layout, StatsRequest{});
  std::vector<uint8_t> more(img.view.layout.min_bytes() + 1);
  EXPECT_THROW(t->feed(more.data(), more.size()), Error);
  EXPECT_TRUE(run.told.empty());
}

// An image read from a source that can be read again (a file region).
// Records every range read: each byte must be read exactly once per attempt.
struct Source {
  explicit Source(const TestImage& img) : img(img) {}
  void operator()(uint64_t at, uint64_t n, uint8_t* out) {
    const uint64_t size = img.view.layout.min_bytes();
    if (at > size || n > size - at) fail(ErrorCode::kInternal, "read past the image");
    if (fail_at != UINT64_MAX && at + n > fail_at)
      fail(ErrorCode::kFailedPrecondition, "the region's file was cut short");
    std::memcpy(out, static_cast<const uint8_t*>(img.view.data) + at, n);
    std::lock_guard<std::mutex> lock(mu);
    ranges.emplace_back(at, n);
  }
  // How many times each byte was read, if every byte was read equally often; 0 otherwise.
  int times_each_byte_read() {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<int> times(img.view.layout.min_bytes(), 0);
    for (auto [at, n] : ranges)
      for (uint64_t i = at; i < at + n; ++i) ++times[i];
    for (int t : times)
      if (t != times.front()) return 0;
    return times.empty() ? 0 : times.front();
  }
  const TestImage& img;
  uint64_t fail_at = UINT64_MAX;
  std::mutex mu;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
};

// Each byte is read once, or twice where the CPU engine's floats need a
// second pass over their own range: read again rather than kept.
TEST_P(FallbackStreamTest, ReadImagesGiveTheWholeImagesAnswerEachByteReadOnceOrTwice) {
  std::mt19937_64 rng(31);
  for (SampleType t : kAllTypes)
    for (uint32_t c : {1u, 3u, 4u}) {
      // One pixel; a prime width; padded rows; and one over several 8 MiB
      // staging slots, its last slot part full.
      const uint64_t big_w = (uint64_t{21} << 20) / (c * sample_size(t)) / 64 + 13;
      for (auto [w, h, pad] : {std::tuple<uint64_t, uint64_t, uint64_t>{1, 1, 0}, {1021, 67, 0}, {509, 31, 7},
                               {big_w, 64, 0}}) {
        TestImage img = random_image(rng, w, h, c, t, pad, 0, is_float(t) ? 0.01 : 0);
        for (int k = 0; k < 2; ++k) {
          StatsRequest request;
          if (k == 1) {
            request = everything();
            request.luminance = false;
          }
          SCOPED_TRACE(describe(img.view.layout) + " request " + std::to_string(k));
          Source source(img);
          std::vector<std::string> told;
          int checkpoints = 0;
          FallbackEngine engine(
              std::make_unique<FaultyEngine>(std::make_shared<Borrowed>(*primary_), Fault{}, checkpoints),
              make_cpu_engine(), [&](const std::string& why) { told.push_back(why); });
          const Result got = engine.analyze_read(img.view.layout, request, std::ref(source));
          expect_same_stats(got, cpu_->analyze(img.view, request), t);
          EXPECT_EQ(got.engine, primary_->info().kind);
          EXPECT_TRUE(told.empty());
          const bool again = primary_->info().kind == "cpu" && cpu_->stream_bytes(img.view.layout, request) > 0;
          EXPECT_EQ(source.times_each_byte_read(), again ? 2 : 1);
        }
      }
    }
}

TEST_P(FallbackStreamTest, AFaultWhileReadingStartsOverOnTheCpuFromTheFirstByte) {
  std::mt19937_64 rng(32);
  for (SampleType t : {SampleType::kUint8, SampleType::kUint16, SampleType::kFloat32}) {
    TestImage img = random_image(rng, (uint64_t{19} << 20) / (3 * sample_size(t)) / 32 + 5, 32, 3, t, 0, 0);
    const uint64_t bytes = img.view.layout.min_bytes();
    for (uint64_t after : {uint64_t{1}, bytes / 2, bytes})
      for (bool lost : {false, true}) {
        SCOPED_TRACE(describe(img.view.layout) + " fault after " + std::to_string(after) + (lost ? ", device lost" : ""));
        Source source(img);
        std::vector<std::string> told;
        int checkpoints = 0;
        FallbackEngine engine(std::make_unique<FaultyEngine>(std::make_shared<Borrowed>(*primary_),
                                                             Fault{Fault::kFeed, after, 0, lost}, checkpoints),
                              make_cpu_engine(), [&](const std::string& why) { told.push_back(why); });
        const Result got = engine.analyze_read(img.view.layout, StatsRequest{}, std::ref(source));
        expect_same_stats(got, cpu_->analyze(img.view, StatsRequest{}), t);
        EXPECT_EQ(got.engine, "cpu");
        ASSERT_EQ(told.size(), 1u);
        EXPECT_NE(told[0].find("injected fault"), std::string::npos) << told[0];
        if (lost) EXPECT_NE(told[0].find("no longer usable"), std::string::npos) << told[0];
        EXPECT_EQ(engine.usage().cpu_fallbacks, 1u);
        // The CPU read every byte itself: what the primary had read (at
        // least `after` bytes) was kept nowhere.
        std::lock_guard<std::mutex> lock(source.mu);
        uint64_t read = 0;
        for (auto [at, n] : source.ranges) read += n;
        EXPECT_GE(read, bytes + after);
      }
  }
}

TEST_P(FallbackStreamTest, ASourceThatFailsIsNotRetried) {
  std::mt19937_64 rng(33);
  TestImage img = random_image(rng, 4099, 1031, 3, SampleType::kUint8, 0, 0);  // over a slot
  for (uint64_t cut : {uint64_t{0}, img.view.layout.min_bytes() / 3, img.view.layout.min_bytes() - 1}) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    Source source(img);
    source.fail_at = cut;
    std::vector<std::string> told;
    FallbackEngine engine(std::make_unique<Borrowed>(*primary_), make_cpu_engine(),
                          [&](const std::string& why) { told.push_back(why); });
    try {
      engine.analyze_read(img.view.layout, StatsRequest{}, std::ref(source));
      FAIL() << "a source cut short must fail the call";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
      EXPECT_NE(std::string(e.what()).find("cut short"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(told.empty());
    EXPECT_EQ(engine.usage().cpu_fallbacks, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, FallbackStreamTest, ::testing::Values("cpu", "cuda"));

}  // namespace
}  // namespace imgstat::testing
