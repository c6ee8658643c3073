// The request core on its own: the decoded-memory budget, the bounded work
// queue, checked layout arithmetic, limits and the log's escaping.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "core/budget.hpp"
#include "core/limits.hpp"
#include "core/text.hpp"
#include "core/validate.hpp"
#include "core/work_queue.hpp"
#include "error_code.hpp"
#include "imgstat/engine.hpp"

namespace imgstat {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using testing::code_of;

TEST(MemoryBudget, GrantsWhatFitsAndRefusesWhatNeverCan) {
  MemoryBudget budget(1000, 4);
  CallContext call;
  auto a = budget.acquire(600, "a", call, Clock::now() + 1s);
  EXPECT_EQ(budget.in_use(), 600u);
  auto b = budget.acquire(400, "b", call, Clock::now() + 1s);
  EXPECT_EQ(budget.in_use(), 1000u);
  b.release();
  EXPECT_EQ(budget.in_use(), 600u);
  try {
    budget.acquire(1001, "this 100x100 PNG", call, Clock::now() + 1s);
    FAIL() << "granted more than the capacity";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("--max-decode-memory"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("this 100x100 PNG"), std::string::npos) << e.what();
  }
}

TEST(MemoryBudget, WaitsInOrderUntilThereIsRoom) {
  MemoryBudget budget(1000, 4);
  CallContext call;
  auto held = std::make_unique<MemoryBudget::Lease>(budget.acquire(900, "held", call, Clock::now() + 1s));
  std::vector<int> order;
  std::mutex mu;
  auto wait_for = [&](int id, uint64_t bytes) {
    auto lease = budget.acquire(bytes, "w", call, Clock::now() + 5s);
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(id);
  };
  std::thread first(wait_for, 1, 800);
  std::this_thread::sleep_for(50ms);
  std::thread second(wait_for, 2, 50);  // would fit now, but must wait behind the first
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(budget.waiting(), 2u);
  EXPECT_TRUE(order.empty());
  held.reset();
  first.join();
  second.join();
  EXPECT_EQ(order.size(), 2u);  // both granted once the first fitted
  EXPECT_EQ(budget.in_use(), 0u);
}

TEST(MemoryBudget, LineTimeoutDeadlineAndCancellation) {
  MemoryBudget budget(100, 1);
  CallContext call;
  auto held = budget.acquire(100, "held", call, Clock::now() + 1s);
  EXPECT_EQ(code_of([&] { budget.acquire(10, "late", call, Clock::now() + 30ms); }), ErrorCode::kResourceExhausted);
  CallContext with_deadline;
  with_deadline.deadline = Clock::now() + 30ms;
  EXPECT_EQ(code_of([&] { budget.acquire(10, "d", with_deadline, with_deadline.deadline); }),
            ErrorCode::kDeadlineExceeded);
  std::atomic<bool> cancelled{false};
  CallContext cancellable;
  cancellable.cancelled = [&] { return cancelled.load(); };
  auto waiter = std::async(std::launch::async, [&] {
    return code_of([&] { budget.acquire(10, "c", cancellable, Clock::now() + 10s); });
  });
  std::this_thread::sleep_for(50ms);
  // The line holds one: a second waiter is refused at once.
  EXPECT_EQ(code_of([&] { budget.acquire(10, "full", call, Clock::now() + 10s); }), ErrorCode::kResourceExhausted);
  cancelled = true;
  EXPECT_EQ(waiter.get(), ErrorCode::kCancelled);
  EXPECT_EQ(budget.waiting(), 0u);
  EXPECT_EQ(budget.in_use(), 100u);
}

TEST(MemoryBudget, LeasesGrowWithoutWaitingUntilFull) {
  MemoryBudget budget(100, 4);
  MemoryBudget::Lease lease;
  EXPECT_TRUE(budget.try_grow(lease, 60));
  EXPECT_TRUE(budget.try_grow(lease, 30));
  EXPECT_EQ(lease.bytes(), 90u);
  EXPECT_FALSE(budget.try_grow(lease, 20));
  EXPECT_EQ(budget.in_use(), 90u);
  lease.release();
  EXPECT_EQ(budget.in_use(), 0u);
}

TEST(WorkQueue, RefusesBeyondItsLineAndRunsEverythingItTook) {
  WorkQueue queue(1, 3);
  std::promise<void> gate;
  std::shared_future<void> open = gate.get_future().share();
  std::atomic<int> ran{0};
  ASSERT_TRUE(queue.submit([&] { open.wait(); ++ran; }));
  std::this_thread::sleep_for(20ms);  // the one thread is now busy
  int taken = 0;
  for (int i = 0; i < 10; ++i) taken += queue.submit([&] { ++ran; });
  EXPECT_EQ(taken, 3);
  gate.set_value();
  queue.drain();
  EXPECT_EQ(ran.load(), 4);
}

TEST(ByteExtent, OverflowIsDetectedEverywhere) {
  uint64_t row, least, full;
  Layout l{4096, 2, 1, SampleType::kUint8, ~uint64_t{0} - 2047};
  EXPECT_FALSE(byte_extent(l, &row, &least, &full));  // stride + row wraps
  l = Layout{1, 2, 1, SampleType::kUint8, (uint64_t{1} << 63) + 1};
  EXPECT_FALSE(byte_extent(l, &row, &least, &full));  // stride * 2 wraps
  l = Layout{UINT32_MAX, UINT32_MAX, 4, SampleType::kFloat64, 0};
  EXPECT_FALSE(byte_extent(l, &row, &least, &full));
  l = Layout{7, 3, 3, SampleType::kUint16, 50};
  ASSERT_TRUE(byte_extent(l, &row, &least, &full));
  EXPECT_EQ(row, 42u);
  EXPECT_EQ(least, 142u);
  EXPECT_EQ(full, 150u);
  // The engines' own check refuses what the front door refuses.
  EXPECT_EQ(code_of([] { validate(Layout{1, 2, 1, SampleType::kUint8, (uint64_t{1} << 63) + 1}, StatsRequest{}); }),
            ErrorCode::kInvalidArgument);
}

TEST(Validate, RawLayoutsAreCheckedBeforeAnyUse) {
  v1::RawLayout raw;
  raw.set_width(1);
  raw.set_height(2);
  raw.set_channels(1);
  raw.set_sample_type(v1::SAMPLE_TYPE_UINT8);
  raw.set_row_stride((uint64_t{1} << 63) + 1);
  try {
    raw_layout_of(raw);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("raw.row_stride"), std::string::npos) << e.what();
  }
  raw.set_row_stride(0);
  const Layout l = raw_layout_of(raw);
  EXPECT_NO_THROW(check_raw_size(l, 2));
  EXPECT_EQ(code_of([&] { check_raw_size(l, 3); }), ErrorCode::kInvalidArgument);
}

TEST(Validate, HistogramRanges) {
  v1::Options o;
  o.mutable_range()->set_lo(-1e308);
  o.mutable_range()->set_hi(1e308);
  EXPECT_EQ(code_of([&] { stats_request_of(o); }), ErrorCode::kInvalidArgument);  // hi - lo overflows
  o.mutable_range()->set_lo(0);
  o.mutable_range()->set_hi(1e-320);
  o.set_bins(65536);
  EXPECT_EQ(code_of([&] { stats_request_of(o); }), ErrorCode::kInvalidArgument);
}

TEST(Printable, EscapesControlBytesAndCuts) {
  EXPECT_EQ(printable("a\nb\x1b[0m\"\\", 100), "a\\nb\\x1b[0m\\\"\\\\");
  EXPECT_EQ(printable("\xc3\xa9", 100), "\\xc3\\xa9");
  EXPECT_EQ(printable(std::string(300, 'x'), 10), std::string(10, 'x') + "...(300 bytes)");
}

TEST(Limits, MachineDefaultsAreFilledIn) {
  const Limits l = resolve(Limits{}, 4);
  EXPECT_GT(l.max_decode_memory, uint64_t{64} << 20);
  EXPECT_EQ(l.max_concurrent, 256u);
  Limits set;
  set.max_decode_memory = 12345;
  set.max_concurrent = 7;
  EXPECT_EQ(resolve(set, 4).max_decode_memory, 12345u);
  EXPECT_EQ(resolve(set, 4).max_concurrent, 7u);
}

}  // namespace
}  // namespace imgstat
