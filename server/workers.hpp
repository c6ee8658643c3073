// The threads that decode and compute, off gRPC's callback threads (which
// must not block). A TBB arena, so that the CPU engine's parallel loops and
// these tasks share one set of cores.
#pragma once

#include <tbb/task_arena.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>

namespace imgstat {

class Workers {
 public:
  explicit Workers(unsigned threads) : arena_(static_cast<int>(threads), 0) {}

  void submit(std::function<void()> task) {
    pending_.fetch_add(1);
    arena_.enqueue([this, task = std::move(task)] {
      task();
      if (pending_.fetch_sub(1) == 1) {
        std::lock_guard<std::mutex> lock(mu_);
        idle_.notify_all();
      }
    });
  }

  // Blocks until every submitted task has run.
  void drain() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [this] { return pending_.load() == 0; });
  }

 private:
  tbb::task_arena arena_;
  std::atomic<int> pending_{0};
  std::mutex mu_;
  std::condition_variable idle_;
};

}  // namespace imgstat
