// The threads that decode and compute, off gRPC's callback threads (which
// must not block). Plain threads, not TBB workers: each runs its tasks in
// one TBB arena of `threads` (the decoders' parallel loops run there) and
// joins the CPU engine's arena of as many as an outside thread, so one large
// request still gets every thread and concurrent requests add their own.
// What a server holds per thread (a decoder's buffers and handles, malloc's
// arenas, an engine's counters) then grows with --threads, never with the
// host's cores.
//
// The line is bounded: submit() refuses work beyond max_waiting, so a flood
// of calls is answered RESOURCE_EXHAUSTED instead of queueing without end.
#pragma once

#include <tbb/task_arena.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace imgstat {

class WorkQueue {
 public:
  WorkQueue(unsigned threads, size_t max_waiting)
      : max_waiting_(max_waiting), arena_(static_cast<int>(std::max(1u, threads))) {
    for (unsigned i = 0; i < std::max(1u, threads); ++i) threads_.emplace_back([this] { loop(); });
  }

  ~WorkQueue() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // False, and the task dropped, when max_waiting tasks already wait.
  bool submit(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.size() >= max_waiting_) return false;
      queue_.push_back(std::move(task));
      ++pending_;
    }
    wake_.notify_one();
    return true;
  }

  size_t waiting() const {
    std::lock_guard<std::mutex> lock(mu_);
    return queue_.size();
  }

  // Blocks until every submitted task has run.
  void drain() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [this] { return pending_ == 0; });
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      std::function<void()> task = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      arena_.execute([&] { task(); });
      lock.lock();
      if (--pending_ == 0) idle_.notify_all();
    }
  }

  const size_t max_waiting_;
  mutable std::mutex mu_;
  std::condition_variable wake_, idle_;
  std::deque<std::function<void()>> queue_;
  size_t pending_ = 0;
  bool stopping_ = false;
  tbb::task_arena arena_;
  std::vector<std::thread> threads_;  // last: they start once the rest is made
};

}  // namespace imgstat
