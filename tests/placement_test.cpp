// Several GPUs in one server (--cuda-devices): each call on the least loaded
// slot, a slot whose engine faults taken out and its work redone on another
// or on the CPU, nothing lost, every answer the CPU engine's own. The slots
// here are CPU engines behind a wrapper that can stall or fail like a GPU,
// so the placement runs everywhere; the GPU suite (gpu_test) runs it on a
// real GPU listed twice.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include "common/fallback_engine.hpp"
#include "decode/jpeg/gpu.hpp"
#include "imgstat/engine.hpp"
#include "imgstat/placement.hpp"
#include "test_images.hpp"

namespace imgstat::testing {
namespace {

// A stand-in for one GPU's engine: the CPU engine's answers, device images
// read as host memory, and faults on request.
class StandIn final : public Engine {
 public:
  enum class Fault { kNone, kLost, kBusy, kBadInput };
  EngineInfo info() const override {
    EngineInfo i = cpu_->info();
    i.kind = "cuda";
    i.device_name = "stand-in";
    return i;
  }
  bool usable() const override { return !lost_; }
  Result analyze(const ImageView& image, const StatsRequest& request) override {
    ++calls;
    enter();
    Result r = cpu_->analyze(image, request);
    r.engine = "cuda";
    return r;
  }
  Result analyze_device(const DeviceImageView& image, const StatsRequest& request) override {
    ++device_calls;
    last_device = image.device;
    return analyze(ImageView{image.data, image.layout}, request);
  }
  bool takes_device_images() const override { return !lost_; }
  std::unique_ptr<StreamAnalysis> open_stream(const Layout& layout, const StatsRequest& request) override {
    ++calls;
    enter();
    return std::make_unique<Stream>(*this, cpu_->open_stream(layout, request));
  }
  // Calls stop until release().
  void hold() {
    std::lock_guard<std::mutex> lock(mu_);
    holding_ = true;
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      holding_ = false;
    }
    changed_.notify_all();
  }
  bool held() {
    std::lock_guard<std::mutex> lock(mu_);
    return inside_ > 0;
  }
  // Its feeds fail as the engine's calls do, once a fault is set.
  class Stream final : public StreamAnalysis {
   public:
    Stream(StandIn& owner, std::unique_ptr<StreamAnalysis> inner) : owner_(owner), inner_(std::move(inner)) {}
    void feed(const void* data, size_t bytes) override {
      owner_.strike();
      inner_->feed(data, bytes);
    }
    Result finish() override {
      owner_.strike();
      Result r = inner_->finish();
      r.engine = "cuda";
      return r;
    }

   private:
    StandIn& owner_;
    std::unique_ptr<StreamAnalysis> inner_;
  };
  std::atomic<Fault> fault{Fault::kNone};
  std::atomic<int> calls{0}, device_calls{0};
  std::atomic<int> last_device{-2};

 private:
  void enter() {
    strike();
    std::unique_lock<std::mutex> lock(mu_);
    ++inside_;
    changed_.wait(lock, [this] { return !holding_; });
    --inside_;
  }
  void strike() {
    switch (fault.load()) {
      case Fault::kLost:
        lost_ = true;
        fail(ErrorCode::kUnavailable, "CUDA error cudaErrorIllegalAddress (injected)");
      case Fault::kBusy:
        fail(ErrorCode::kResourceExhausted, "all 4 GPU workspaces are busy (injected)");
      case Fault::kBadInput:
        fail(ErrorCode::kInvalidArgument, "bad input (injected)");
      case Fault::kNone:
        break;
    }
  }
  std::unique_ptr<Engine> cpu_ = make_cpu_engine(2);
  std::atomic<bool> lost_{false};
  std::mutex mu_;
  std::condition_variable changed_;
  bool holding_ = false;
  int inside_ = 0;
};

struct Pool {
  std::vector<StandIn*> slots;
  std::shared_ptr<Placement> placement;
  std::unique_ptr<Engine> engine;  // the placed engine under a FallbackEngine to the CPU
  std::vector<std::string> told;
  explicit Pool(std::vector<int> devices) {
    std::vector<std::unique_ptr<Engine>> engines;
    std::vector<GpuStatus> status;
    for (int d : devices) {
      auto e = std::make_unique<StandIn>();
      slots.push_back(e.get());
      engines.push_back(std::move(e));
      status.push_back(GpuStatus{d, "stand-in", 1, "9.0"});
    }
    placement = std::make_shared<Placement>(status, [this](const std::string& w) { told.push_back(w); });
    engine = std::make_unique<FallbackEngine>(make_placed_engine(std::move(engines), placement), make_cpu_engine(2),
                                              [this](const std::string& w) { told.push_back(w); });
  }
};

StatsRequest everything_mergeable() {
  StatsRequest r;
  r.distribution = r.shape = r.summary = true;
  r.percentiles = {1, 50, 99};
  return r;
}

TEST(Placement, EqualLoadsAlternateAndAnswersAreTheCpuEngines) {
  Pool pool({0, 1});
  auto cpu = make_cpu_engine();
  std::mt19937_64 rng(3);
  for (int i = 0; i < 8; ++i) {
    TestImage img = random_image(rng, 61, 7, 3, i % 2 ? SampleType::kUint16 : SampleType::kUint8, 3, 1);
    const Result got = pool.engine->analyze(img.view, everything_mergeable());
    EXPECT_EQ(got.engine, "cuda");
    EXPECT_TRUE(got.device == 0 || got.device == 1);
    expect_same_stats(got, cpu->analyze(img.view, everything_mergeable()), img.view.layout.type);
  }
  const std::vector<GpuStatus> s = pool.placement->status();
  EXPECT_EQ(s[0].images + s[1].images, 8u);
  EXPECT_EQ(s[0].images, 4u);  // one after the other, loads equal: in turn
  EXPECT_EQ(s[0].in_flight + s[1].in_flight, 0u);
}

TEST(Placement, TheLeastLoadedSlotTakesTheNextCall) {
  Pool pool({0, 1});
  std::mt19937_64 rng(4);
  TestImage img = random_image(rng, 32, 32, 1, SampleType::kUint8, 0, 0);
  pool.slots[0]->hold();
  pool.slots[1]->hold();
  // Two calls stall, one on each slot.
  auto a = std::async(std::launch::async, [&] { return pool.engine->analyze(img.view, StatsRequest{}); });
  auto b = std::async(std::launch::async, [&] { return pool.engine->analyze(img.view, StatsRequest{}); });
  for (int i = 0; i < 1000 && !(pool.slots[0]->held() && pool.slots[1]->held()); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_TRUE(pool.slots[0]->held() && pool.slots[1]->held()) << "each stalled call on a slot of its own";
  for (const GpuStatus& s : pool.placement->status()) EXPECT_EQ(s.in_flight, 1u);
  // Slot 1's call ends; slot 0's still runs: every next call goes to slot 1.
  pool.slots[1]->release();
  for (int i = 0; i < 1000 && pool.placement->status()[1].in_flight > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(pool.engine->analyze(img.view, StatsRequest{}).device, 1);
  pool.slots[0]->release();
  const Result ra = a.get(), rb = b.get();
  EXPECT_NE(ra.device, rb.device);
}

// A stream waiting for its client computes nothing: its GPU's load is as
// if it were not there, so the next call may go there; it comes back to the
// same GPU when it computes again, and its answer is the whole image's.
TEST(Placement, AStreamWaitingForItsClientPutsNoLoadOnItsGpu) {
  Pool pool({0, 1});
  std::mt19937_64 rng(6);
  TestImage img = random_image(rng, 300, 200, 3, SampleType::kUint16, 0, 0);
  const auto* p = static_cast<const uint8_t*>(img.view.data);
  const uint64_t n = img.view.layout.min_bytes();
  auto s = pool.engine->open_stream(img.view.layout, StatsRequest{});
  s->feed(p, n / 3);
  const auto load = [&] {
    uint32_t sum = 0;
    for (const GpuStatus& g : pool.placement->status()) sum += g.in_flight;
    return sum;
  };
  EXPECT_EQ(load(), 1u) << "a stream computing holds its GPU's share";
  s->pause();
  EXPECT_EQ(load(), 0u) << "a stream waiting for its client holds none";
  s->feed(p + n / 3, n / 3);
  EXPECT_EQ(load(), 1u);
  s->pause();
  s->pause();  // twice in a row: still none
  EXPECT_EQ(load(), 0u);
  s->feed(p + 2 * (n / 3), n - 2 * (n / 3));
  const Result r = s->finish();
  EXPECT_EQ(load(), 0u);
  EXPECT_EQ(r.engine, "cuda");
  const std::vector<GpuStatus> status = pool.placement->status();
  EXPECT_EQ(status[0].images + status[1].images, 1u);
  EXPECT_EQ(r.device, status[0].images ? 0 : 1);
  expect_same_stats(r, make_cpu_engine()->analyze(img.view, StatsRequest{}), SampleType::kUint16);
}

TEST(Placement, AFaultingGpuIsTakenOutAndItsWorkRedoneOnAnother) {
  Pool pool({0, 1});
  auto cpu = make_cpu_engine();
  std::mt19937_64 rng(5);
  pool.slots[1]->fault = StandIn::Fault::kLost;
  for (int i = 0; i < 6; ++i) {
    TestImage img = random_image(rng, 17, 5, 2, SampleType::kInt16, 0, 0);
    const Result got = pool.engine->analyze(img.view, everything_mergeable());
    EXPECT_EQ(got.engine, "cuda");
    EXPECT_EQ(got.device, 0);  // never an answer from the lost one
    expect_same_stats(got, cpu->analyze(img.view, everything_mergeable()), img.view.layout.type);
  }
  const std::vector<GpuStatus> s = pool.placement->status();
  EXPECT_TRUE(s[0].in_service);
  EXPECT_FALSE(s[1].in_service);
  EXPECT_NE(s[1].out_of_service_reason.find("cudaErrorIllegalAddress"), std::string::npos);
  EXPECT_EQ(pool.slots[1]->calls, 1);  // tried once, then left alone
  ASSERT_EQ(pool.told.size(), 1u);
  EXPECT_NE(pool.told[0].find("GPU 1 (slot 1) taken out of service"), std::string::npos) << pool.told[0];
  EXPECT_TRUE(pool.engine->usable());
}

TEST(Placement, WhenEveryGpuIsLostTheCpuTakesEveryImage) {
  Pool pool({0, 1});
  auto cpu = make_cpu_engine();
  std::mt19937_64 rng(6);
  for (StandIn* s : pool.slots) s->fault = StandIn::Fault::kLost;
  for (int i = 0; i < 3; ++i) {
    TestImage img = random_image(rng, 23, 3, 1, SampleType::kFloat32, 0, 0, 0.05);
    const Result got = pool.engine->analyze(img.view, StatsRequest{});
    EXPECT_EQ(got.engine, "cpu");
    EXPECT_EQ(got.device, -1);
    expect_same_stats(got, cpu->analyze(img.view, StatsRequest{}), img.view.layout.type);
  }
  EXPECT_EQ(pool.engine->info().kind, "cpu");
  const std::vector<GpuStatus> s = pool.placement->status();
  EXPECT_FALSE(s[0].in_service);
  EXPECT_FALSE(s[1].in_service);
}

TEST(Placement, BusyGpusPassTheCallOnAndStayInService) {
  Pool pool({0, 1});
  pool.slots[0]->fault = StandIn::Fault::kBusy;
  std::mt19937_64 rng(7);
  TestImage img = random_image(rng, 9, 9, 1, SampleType::kUint8, 0, 0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(pool.engine->analyze(img.view, StatsRequest{}).device, 1);
  pool.slots[1]->fault = StandIn::Fault::kBusy;
  EXPECT_EQ(pool.engine->analyze(img.view, StatsRequest{}).engine, "cpu");  // both busy: the CPU
  for (const GpuStatus& s : pool.placement->status()) EXPECT_TRUE(s.in_service);
}

TEST(Placement, BadInputIsNotTriedElsewhere) {
  Pool pool({0, 1});
  for (StandIn* s : pool.slots) s->fault = StandIn::Fault::kBadInput;
  std::mt19937_64 rng(8);
  TestImage img = random_image(rng, 9, 9, 1, SampleType::kUint8, 0, 0);
  try {
    pool.engine->analyze(img.view, StatsRequest{});
    ADD_FAILURE() << "bad input answered";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
  EXPECT_EQ(pool.slots[0]->calls + pool.slots[1]->calls, 1);
  for (const GpuStatus& s : pool.placement->status()) EXPECT_TRUE(s.in_service);
}

TEST(Placement, AStreamOnAGpuLostPartWayEndsOnTheCpuWhole) {
  Pool pool({0, 1});
  auto cpu = make_cpu_engine();
  std::mt19937_64 rng(9);
  TestImage img = random_image(rng, 1000, 50, 3, SampleType::kUint8, 0, 0);
  auto stream = pool.engine->open_stream(img.view.layout, everything_mergeable());
  const auto* p = static_cast<const uint8_t*>(img.view.data);
  const uint64_t n = img.view.layout.min_bytes();
  for (uint64_t off = 0; off < n; off += 4096) {
    if (off == 40960)  // the stream's GPU is lost part way
      for (StandIn* s : pool.slots)
        if (s->calls > 0) s->fault = StandIn::Fault::kLost;
    stream->feed(p + off, std::min<uint64_t>(4096, n - off));
  }
  const Result got = stream->finish();
  EXPECT_EQ(got.engine, "cpu");
  expect_same_stats(got, cpu->analyze(img.view, everything_mergeable()), SampleType::kUint8);
  const std::vector<GpuStatus> s = pool.placement->status();
  EXPECT_EQ(s[0].in_service + s[1].in_service, 1) << "the stream's GPU is out, the other never had a call";
  // A stream holds its share from open to its end (here, the fault).
  for (const GpuStatus& g : s) EXPECT_EQ(g.in_flight, 0u);
  // A whole stream on the GPU left in service gives its share back at finish.
  auto next = pool.engine->open_stream(img.view.layout, StatsRequest{});
  next->feed(img.view.data, n);
  EXPECT_EQ(next->finish().engine, "cuda");
  for (const GpuStatus& g : pool.placement->status()) EXPECT_EQ(g.in_flight, 0u);
}

TEST(Placement, DeviceImagesAreComputedOnTheirOwnGpu) {
  Pool pool({0, 1, 1});  // GPU 1 listed twice: two slots read its memory
  std::mt19937_64 rng(10);
  TestImage img = random_image(rng, 40, 4, 3, SampleType::kUint8, 0, 0);
  for (int i = 0; i < 6; ++i) {
    const Result r = pool.engine->analyze_device(DeviceImageView{img.view.data, img.view.layout, 1}, StatsRequest{});
    EXPECT_EQ(r.device, 1);
  }
  EXPECT_EQ(pool.slots[0]->device_calls, 0);
  EXPECT_GT(pool.slots[1]->device_calls, 0);
  EXPECT_GT(pool.slots[2]->device_calls, 0);
  // Unnamed (-1): the first GPU in service, where regions of GPU memory open.
  EXPECT_EQ(pool.engine->analyze_device(DeviceImageView{img.view.data, img.view.layout}, StatsRequest{}).device, 0);
}

// A decoder that stands in for one GPU's nvJPEG: host pixels, and whether
// its batch ever saw the JPEG announced.
class StandInDecoder final : public GpuJpegDecoder {
 public:
  std::unique_ptr<Ticket> announce() override {
    ++announced;
    return std::make_unique<Ticket>();
  }
  GpuDecodedImage decode(Ticket&, const uint8_t* data, size_t size) override {
    ++decoded;
    GpuDecodedImage out;
    out.decoder = "stand-in";
    out.view.data = data;
    out.view.layout = Layout{size, 1, 1, SampleType::kUint8, 0};
    return out;
  }
  std::string description() const override { return "stand-in"; }
  std::atomic<int> announced{0}, decoded{0};
};

TEST(Placement, JpegsAreDecodedOnTheSlotAnnouncedAndNameItsGpu) {
  std::vector<GpuStatus> status{{0, "a", 1, "9.0"}, {3, "b", 1, "9.0"}};
  auto placement = std::make_shared<Placement>(status);
  std::vector<std::unique_ptr<GpuJpegDecoder>> decoders;
  std::vector<StandInDecoder*> raw;
  for (int i = 0; i < 2; ++i) {
    auto d = std::make_unique<StandInDecoder>();
    raw.push_back(d.get());
    decoders.push_back(std::move(d));
  }
  auto placed = make_placed_gpu_jpeg_decoder(std::move(decoders), placement);
  const uint8_t bytes[5] = {1, 2, 3, 4, 5};
  // Two announced at once: one on each GPU, each decoded where announced.
  auto t1 = placed->announce();
  auto t2 = placed->announce();
  EXPECT_EQ(raw[0]->announced, 1);
  EXPECT_EQ(raw[1]->announced, 1);
  const std::vector<GpuStatus> busy = placement->status();
  EXPECT_EQ(busy[0].in_flight + busy[1].in_flight, 2u);
  const GpuDecodedImage a = placed->decode(*t1, bytes, 5), b = placed->decode(*t2, bytes, 5);
  EXPECT_NE(a.view.device, b.view.device);
  EXPECT_TRUE((a.view.device == 0 || a.view.device == 3) && (b.view.device == 0 || b.view.device == 3));
  t1.reset();
  t2.reset();
  for (const GpuStatus& s : placement->status()) EXPECT_EQ(s.in_flight, 0u);
  // A GPU out of service gets no more JPEGs; none in service: UNAVAILABLE.
  placement->take_out(1, "injected");
  for (int i = 0; i < 3; ++i) {
    auto t = placed->announce();
    EXPECT_EQ(placed->decode(*t, bytes, 5).view.device, 0);
  }
  placement->take_out(0, "injected");
  auto t = placed->announce();
  try {
    placed->decode(*t, bytes, 5);
    ADD_FAILURE() << "decoded with no GPU in service";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnavailable);
  }
}

}  // namespace
}  // namespace imgstat::testing
