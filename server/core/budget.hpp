// The decoded-memory budget: every decode takes the bytes its header says it
// may hold before the decoder allocates, and gives them back when the pixels
// are analyzed. A decode that does not fit waits, first come first served, in
// a bounded line; one that could never fit is refused at once. The server
// then runs out of neither memory nor patience, whatever callers send.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

#include "core/call_context.hpp"

namespace imgstat {

class MemoryBudget {
 public:
  MemoryBudget(uint64_t capacity, size_t max_waiting) : capacity_(capacity), max_waiting_(max_waiting) {}

  class Lease {
   public:
    Lease() = default;
    Lease(MemoryBudget* budget, uint64_t bytes) : budget_(budget), bytes_(bytes) {}
    Lease(Lease&& o) noexcept : budget_(o.budget_), bytes_(o.bytes_) { o.budget_ = nullptr; }
    Lease& operator=(Lease&& o) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { release(); }
    void release();
    uint64_t bytes() const { return budget_ ? bytes_ : 0; }

   private:
    friend class MemoryBudget;
    MemoryBudget* budget_ = nullptr;
    uint64_t bytes_ = 0;
  };

  // Waits until `bytes` fit, at most until `until` (RESOURCE_EXHAUSTED then,
  // or DEADLINE_EXCEEDED when `until` is the call's deadline), while the call
  // is not cancelled. `what` names the work in messages.
  Lease acquire(uint64_t bytes, const std::string& what, const CallContext& call,
                std::chrono::steady_clock::time_point until);

  // Adds bytes to a lease (empty or of this budget) without waiting: false
  // when they do not fit now. For memory that grows as a client sends it.
  bool try_grow(Lease& lease, uint64_t bytes);

  // `bytes` now or never, for a call that already holds memory (it must not
  // wait behind calls that may be waiting for what it holds): throws
  // RESOURCE_EXHAUSTED naming --max-decode-memory when they are more than
  // the capacity, or more than is free now. `what` names the work.
  Lease take_now(uint64_t bytes, const std::string& what);

  uint64_t capacity() const { return capacity_; }
  uint64_t in_use() const;
  size_t waiting() const;

 private:
  void give_back(uint64_t bytes);

  const uint64_t capacity_;
  const size_t max_waiting_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  uint64_t used_ = 0;
  uint64_t next_ticket_ = 0;
  std::deque<uint64_t> line_;  // tickets of the waiting decodes, in arrival order
};

}  // namespace imgstat
