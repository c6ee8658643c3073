// The request core on its own: the decoded-memory budget, the bounded work
// queue, checked layout arithmetic, limits and the log's escaping.
#include <gtest/gtest.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>
#include <future>
#include <thread>

#include "core/budget.hpp"
#include "core/limits.hpp"
#include "core/regions.hpp"
#include "core/text.hpp"
#include "core/validate.hpp"
#include "core/work_queue.hpp"
#include "error_code.hpp"
#include "imgstat/engine.hpp"
#include "region_memfd.hpp"

namespace imgstat {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using testing::code_of;
using testing::memfd_with;
using testing::random_bytes;

v1::RegisterRegionRequest registration(const std::string& ticket, uint64_t offset = 0, uint64_t size = 0) {
  v1::RegisterRegionRequest r;
  r.set_ticket(ticket);
  r.set_offset(offset);
  r.set_size(size);
  r.set_name("test");
  return r;
}

v1::RegionRef ref(const std::string& id, uint64_t offset, uint64_t length) {
  v1::RegionRef r;
  r.set_region_id(id);
  r.set_offset(offset);
  r.set_length(length);
  return r;
}

TEST(RegionTable, SealedMemfdsAreMappedAndOtherFilesReadAsTheyAreThen) {
  RegionTable table(Limits{});
  const uint64_t s = table.open_session();
  const std::vector<uint8_t> bytes = random_bytes(50000, 1);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  close(pipe_fds[1]);
  EXPECT_EQ(code_of([&] { table.deposit(s, pipe_fds[0]); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { table.deposit(s, memfd_with({}, F_SEAL_SHRINK)); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(table.pending_tickets(), 0u);
  // Sealed against shrinking: mapped, read in place.
  const v1::Region mapped = table.register_region(registration(table.deposit(s, memfd_with(bytes, F_SEAL_SHRINK))), "");
  EXPECT_TRUE(mapped.mapped());
  EXPECT_NE(table.resolve(ref(mapped.region_id(), 0, 0), "").data, nullptr);
  // Unsealed (or sealed against growing and writing only): never mapped, read at each use.
  for (int seals : {0, F_SEAL_GROW | F_SEAL_WRITE}) {
    const int mine = memfd_with(bytes, seals);
    const v1::Region read = table.register_region(registration(table.deposit(s, dup(mine)), 1000, 20000), "");
    EXPECT_FALSE(read.mapped());
    const RegionBytes b = table.resolve(ref(read.region_id(), 5, 100), "");
    EXPECT_EQ(b.data, nullptr);
    std::vector<uint8_t> got(100);
    read_region(b, 0, 100, got.data());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), bytes.begin() + 1005));
    if (!(seals & F_SEAL_WRITE)) {
      // Cut short by its owner mid-use: an error, not a SIGBUS.
      ASSERT_EQ(ftruncate(mine, 1050), 0);
      EXPECT_EQ(code_of([&] { read_region(b, 0, 100, got.data()); }), ErrorCode::kFailedPrecondition);
    }
    close(mine);
  }
}

TEST(RegionTable, ReferencesAreCheckedAgainstTheRegionAndReadItsBytes) {
  RegionTable table(Limits{});
  const uint64_t s = table.open_session();
  const std::vector<uint8_t> bytes = random_bytes(50000, 2);
  const int mine = memfd_with(bytes, F_SEAL_SHRINK);
  // A part of the file, at an offset that is not a page's.
  const v1::Region region = table.register_region(registration(table.deposit(s, dup(mine)), 5003, 30011), "");
  EXPECT_EQ(region.size(), 30011u);
  EXPECT_EQ(region.name(), "test");
  RegionBytes b = table.resolve(ref(region.region_id(), 17, 1000), "");
  ASSERT_EQ(b.size, 1000u);
  EXPECT_TRUE(std::equal(b.data, b.data + b.size, bytes.begin() + 5003 + 17));
  b = table.resolve(ref(region.region_id(), 11, 0), "");  // to the end
  EXPECT_EQ(b.size, 30000u);
  EXPECT_EQ(b.data[b.size - 1], bytes[5003 + 30010]);
  for (const auto& bad : std::vector<std::pair<uint64_t, uint64_t>>{
           {30012, 0}, {30011, 1}, {1, 30011}, {1, UINT64_MAX}, {UINT64_MAX, 2}, {uint64_t{1} << 63, uint64_t{1} << 63}})
    EXPECT_EQ(code_of([&] { table.resolve(ref(region.region_id(), bad.first, bad.second), ""); }),
              ErrorCode::kInvalidArgument)
        << bad.first << " + " << bad.second;
  EXPECT_EQ(code_of([&] { table.resolve(ref("r-nonesuch", 0, 1), ""); }), ErrorCode::kNotFound);
  // Registration's own bounds, each ticket good once.
  EXPECT_EQ(code_of([&] { table.register_region(registration(table.deposit(s, dup(mine)), 50000), ""); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { table.register_region(registration(table.deposit(s, dup(mine)), 49999, 2), ""); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { table.register_region(registration(table.deposit(s, dup(mine)), 1, UINT64_MAX), ""); }),
            ErrorCode::kInvalidArgument);
  const std::string once = table.deposit(s, dup(mine));
  table.register_region(registration(once), "");
  EXPECT_EQ(code_of([&] { table.register_region(registration(once), ""); }), ErrorCode::kNotFound);
  EXPECT_EQ(code_of([&] { table.register_region(registration("t-guessed"), ""); }), ErrorCode::kNotFound);
  // The seal holds: the caller cannot cut the file short under the mapping.
  EXPECT_NE(ftruncate(mine, 100), 0);
  EXPECT_EQ(errno, EPERM);
  close(mine);  // the caller's descriptor gone: the region stays readable
  b = table.resolve(ref(region.region_id(), 0, 0), "");
  EXPECT_TRUE(std::equal(b.data, b.data + b.size, bytes.begin() + 5003));
}

TEST(RegionTable, ARegionIsItsOwnersAlone) {
  RegionTable table(Limits{});
  const uint64_t s = table.open_session();
  const v1::Region a = table.register_region(registration(table.deposit(s, memfd_with(random_bytes(100, 3), F_SEAL_SHRINK))), "alice");
  EXPECT_EQ(code_of([&] { table.resolve(ref(a.region_id(), 0, 0), "bob"); }), ErrorCode::kNotFound);
  EXPECT_EQ(code_of([&] { table.resolve(ref(a.region_id(), 0, 0), ""); }), ErrorCode::kNotFound);
  EXPECT_TRUE(table.list("bob").empty());
  EXPECT_EQ(code_of([&] { table.unregister(a.region_id(), "bob"); }), ErrorCode::kNotFound);
  ASSERT_EQ(table.list("alice").size(), 1u);
  EXPECT_EQ(table.list("alice")[0].region_id(), a.region_id());
  table.unregister(a.region_id(), "alice");
  EXPECT_TRUE(table.list("alice").empty());
}

TEST(RegionTable, LimitsPerCallerAndPerConnection) {
  Limits limits;
  limits.max_regions = 2;
  limits.max_region_bytes = 10000;
  limits.max_region_tickets = 3;
  limits.max_region_connections = 2;
  RegionTable table(limits);
  const uint64_t s = table.open_session();
  table.open_session();
  EXPECT_EQ(code_of([&] { table.open_session(); }), ErrorCode::kResourceExhausted);
  const std::vector<uint8_t> bytes = random_bytes(6000, 4);
  auto ticket = [&] { return table.deposit(s, memfd_with(bytes, F_SEAL_SHRINK)); };
  const std::string t1 = ticket(), t2 = ticket(), t3 = ticket();
  EXPECT_EQ(code_of([&] { ticket(); }), ErrorCode::kResourceExhausted);  // three waiting already
  const v1::Region a = table.register_region(registration(t1), "alice");
  // 6000 + 6000 bytes is over 10000: refused before mapping.
  EXPECT_EQ(code_of([&] { table.register_region(registration(t2), "alice"); }), ErrorCode::kResourceExhausted);
  table.register_region(registration(t3, 0, 4000), "alice");
  EXPECT_EQ(code_of([&] { table.register_region(registration(ticket(), 0, 1), "alice"); }),
            ErrorCode::kResourceExhausted);  // two regions held
  table.register_region(registration(ticket()), "bob");  // limits are per caller
  table.unregister(a.region_id(), "alice");
  table.register_region(registration(ticket(), 0, 5000), "alice");  // room again
}

TEST(RegionTable, ACallHoldsItsRegionPastUnregisterAndTheConnectionsEnd) {
  RegionTable table(Limits{});
  const uint64_t s = table.open_session();
  const std::vector<uint8_t> bytes = random_bytes(1 << 20, 5);
  const v1::Region a = table.register_region(registration(table.deposit(s, memfd_with(bytes, F_SEAL_SHRINK))), "");
  const v1::Region b = table.register_region(registration(table.deposit(s, memfd_with(bytes, F_SEAL_SHRINK))), "");
  const std::string pending = table.deposit(s, memfd_with(bytes, F_SEAL_SHRINK));
  RegionBytes in_use = table.resolve(ref(a.region_id(), 0, 0), "");
  table.unregister(a.region_id(), "");
  EXPECT_EQ(code_of([&] { table.resolve(ref(a.region_id(), 0, 0), ""); }), ErrorCode::kNotFound);
  EXPECT_TRUE(std::equal(in_use.data, in_use.data + in_use.size, bytes.begin()));  // still mapped
  RegionBytes other = table.resolve(ref(b.region_id(), 0, 0), "");
  table.close_session(s);  // the caller's socket closed: its regions and tickets go
  EXPECT_EQ(table.regions(), 0u);
  EXPECT_EQ(table.pending_tickets(), 0u);
  EXPECT_EQ(code_of([&] { table.register_region(registration(pending), ""); }), ErrorCode::kNotFound);
  EXPECT_EQ(code_of([&] { table.resolve(ref(b.region_id(), 0, 0), ""); }), ErrorCode::kNotFound);
  EXPECT_TRUE(std::equal(other.data, other.data + other.size, bytes.begin()));
  EXPECT_EQ(code_of([&] { table.deposit(s, memfd_with(bytes, F_SEAL_SHRINK)); }), ErrorCode::kFailedPrecondition);
}

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

// Calls waiting on the GPU's JPEG decoder step aside: more of them wait at
// once than there are places, which still bound the tasks using a core.
TEST(WorkQueue, TasksSteppingAsideLetOthersInAndAtMostThePlacesRunOutside) {
  constexpr unsigned kPlaces = 2, kWaiting = 6, kTasks = kPlaces + kWaiting;
  WorkQueue queue(kPlaces, 100, kWaiting);
  std::mutex mu;
  std::condition_variable changed;
  unsigned aside = 0, together = 0, outside = 0, most_outside = 0, done = 0;
  auto outside_for = [&](std::chrono::milliseconds d) {
    {
      std::lock_guard<std::mutex> lock(mu);
      most_outside = std::max(most_outside, ++outside);
    }
    std::this_thread::sleep_for(d);
    std::lock_guard<std::mutex> lock(mu);
    --outside;
  };
  for (unsigned i = 0; i < kTasks; ++i)
    ASSERT_TRUE(queue.submit([&] {
      outside_for(3ms);
      {
        WorkQueue::StepAside step;
        std::unique_lock<std::mutex> lock(mu);
        ++aside;
        changed.notify_all();
        // Every task gets here only if those waiting gave their places up.
        together += changed.wait_for(lock, 5s, [&] { return aside == kTasks; });
      }
      outside_for(3ms);
      std::lock_guard<std::mutex> lock(mu);
      ++done;
    }));
  queue.drain();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(together, kTasks);  // each saw every task aside at once
  EXPECT_EQ(done, kTasks);
  EXPECT_GE(most_outside, 1u);
  EXPECT_LE(most_outside, kPlaces);
}

// --threads bounds the threads a call's decode spreads over (and with them
// what each holds: a band's buffers, a decoder's state), whatever the host's
// cores and the waiting threads: on a 16-core GPU host a server of
// --threads 2 and 128 waiting threads once ran one call's loops on all 16.
TEST(WorkQueue, ParallelLoopsKeepToThePlacesWithWaitingThreads) {
  tbb::global_control cores(tbb::global_control::max_allowed_parallelism, 16);  // as on a 16-core host
  for (const unsigned waiting : {0u, 14u, 128u}) {
    WorkQueue queue(2, 100, waiting);
    auto widest = [&](unsigned tasks) {
      std::atomic<int> now{0}, most{0};
      for (unsigned t = 0; t < tasks; ++t)
        EXPECT_TRUE(queue.submit([&] {
          tbb::parallel_for(0, 48, [&](int) {
            const int n = ++now;
            int m = most.load();
            while (n > m && !most.compare_exchange_weak(m, n)) {
            }
            std::this_thread::sleep_for(5ms);
            --now;
          });
        }));
      queue.drain();
      return most.load();
    };
    EXPECT_EQ(widest(1), 2) << waiting << " waiting threads";
    EXPECT_LE(widest(2), waiting ? 3 : 2) << waiting << " waiting threads";
  }
}

TEST(WorkQueue, ATaskComingBackGoesBeforeTasksNotYetBegun) {
  WorkQueue queue(1, 100, 1);
  std::promise<void> a_may_return, b_may_end;
  std::shared_future<void> a_gate = a_may_return.get_future().share(), b_gate = b_may_end.get_future().share();
  std::promise<void> a_aside, b_began;
  std::mutex mu;
  std::vector<std::string> order;
  auto note = [&](const char* what) {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(what);
  };
  ASSERT_TRUE(queue.submit([&] {
    {
      WorkQueue::StepAside step;
      a_aside.set_value();
      a_gate.wait_for(5s);
    }
    note("a back");
  }));
  ASSERT_EQ(a_aside.get_future().wait_for(5s), std::future_status::ready);
  ASSERT_TRUE(queue.submit([&] {  // takes the place a gave up
    note("b began");
    b_began.set_value();
    b_gate.wait_for(5s);
  }));
  // Bounded waits: a queue that kept a's place would fail here, not hang.
  EXPECT_EQ(b_began.get_future().wait_for(5s), std::future_status::ready);
  ASSERT_TRUE(queue.submit([&] { note("c began"); }));
  a_may_return.set_value();
  std::this_thread::sleep_for(30ms);  // a now waits for the place b holds
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(order, (std::vector<std::string>{"b began"}));  // one place: a and c wait
  }
  b_may_end.set_value();
  queue.drain();
  EXPECT_EQ(order, (std::vector<std::string>{"b began", "a back", "c began"}));
  WorkQueue::StepAside outside_any_queue;  // does nothing on a thread of none
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
