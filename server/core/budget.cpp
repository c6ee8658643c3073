#include "core/budget.hpp"

#include <algorithm>

namespace imgstat {
namespace {

std::string mib(uint64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; }

}  // namespace

MemoryBudget::Lease& MemoryBudget::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    release();
    budget_ = o.budget_;
    bytes_ = o.bytes_;
    o.budget_ = nullptr;
  }
  return *this;
}

void MemoryBudget::Lease::release() {
  if (budget_) budget_->give_back(bytes_);
  budget_ = nullptr;
}

MemoryBudget::Lease MemoryBudget::acquire(uint64_t bytes, const std::string& what, const CallContext& call,
                                          std::chrono::steady_clock::time_point until) {
  if (bytes > capacity_)
    fail(ErrorCode::kResourceExhausted, what + " needs " + mib(bytes) + " to decode, more than the decode memory "
                                        "limit of " + mib(capacity_) + " (--max-decode-memory)");
  std::unique_lock<std::mutex> lock(mu_);
  if (line_.empty() && used_ + bytes <= capacity_) {
    used_ += bytes;
    return Lease(this, bytes);
  }
  if (line_.size() >= max_waiting_)
    fail(ErrorCode::kResourceExhausted, std::to_string(line_.size()) + " decodes already wait for decode memory (" +
                                            mib(used_) + " of " + mib(capacity_) + " in use): try again later");
  const uint64_t ticket = next_ticket_++;
  line_.push_back(ticket);
  const auto leave = [&] {
    line_.erase(std::find(line_.begin(), line_.end(), ticket));
    changed_.notify_all();  // the next in line may fit now
  };
  // Polled: cancellation has no way to wake this wait.
  constexpr auto kPoll = std::chrono::milliseconds(50);
  while (!(line_.front() == ticket && used_ + bytes <= capacity_)) {
    const auto now = std::chrono::steady_clock::now();
    if (call.is_cancelled()) {
      leave();
      fail(ErrorCode::kCancelled, "cancelled by the client while waiting for decode memory");
    }
    if (now >= until) {
      leave();
      if (call.has_deadline() && until >= call.deadline)
        fail(ErrorCode::kDeadlineExceeded, "deadline exceeded while waiting for decode memory");
      fail(ErrorCode::kResourceExhausted, what + " waited too long for " + mib(bytes) + " of decode memory (" +
                                              mib(used_) + " of " + mib(capacity_) + " in use)");
    }
    changed_.wait_for(lock, std::min<std::chrono::steady_clock::duration>(kPoll, until - now));
  }
  line_.pop_front();
  used_ += bytes;
  changed_.notify_all();
  return Lease(this, bytes);
}

bool MemoryBudget::try_grow(Lease& lease, uint64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (used_ + bytes > capacity_) return false;
    used_ += bytes;
  }
  if (!lease.budget_) {
    lease.budget_ = this;
    lease.bytes_ = 0;
  }
  lease.bytes_ += bytes;
  return true;
}

MemoryBudget::Lease MemoryBudget::take_now(uint64_t bytes, const std::string& what) {
  if (bytes > capacity_)
    fail(ErrorCode::kResourceExhausted, what + " needs " + mib(bytes) + ", more than the decode memory limit of " +
                                            mib(capacity_) + " (--max-decode-memory)");
  Lease lease;
  if (!try_grow(lease, bytes))
    fail(ErrorCode::kResourceExhausted, what + " needs " + mib(bytes) + ": " + mib(in_use()) + " of the " + mib(capacity_) +
                                            " of decode memory (--max-decode-memory) are in use; try again later");
  return lease;
}

void MemoryBudget::give_back(uint64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    used_ -= bytes;
  }
  changed_.notify_all();
}

uint64_t MemoryBudget::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

size_t MemoryBudget::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return line_.size();
}

}  // namespace imgstat
