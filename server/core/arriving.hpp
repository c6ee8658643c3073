// Uploads decoded while they arrive (a PNG read from the spool as its
// chunks come), each on a thread of its own, at most as many decoding at
// once as the engine has threads.
#pragma once

#include <tbb/task_arena.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>

namespace imgstat {

// At most `slots` decode at once, as many as the engine has threads (decoding
// is the CPU's work, as the work queue's is): the rest of the uploads wait
// in the spool, costing no memory, until one ends. fn(true) runs in a slot;
// fn(false) when its upload ended while it waited (give_up()).
class ArrivingDecodes {
 public:
  // In an arena of `slots` threads, as the work queue's (work_queue.hpp).
  explicit ArrivingDecodes(uint32_t slots) : slots_(std::max(1u, slots)), arena_(static_cast<int>(slots_)) {}
  ~ArrivingDecodes() {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return running_ == 0; });
  }
  void start(std::function<void(bool)> fn, std::function<bool()> give_up);

 private:
  const uint32_t slots_;
  tbb::task_arena arena_;
  std::mutex mu_;
  std::condition_variable changed_;
  uint32_t running_ = 0, decoding_ = 0;
};

}  // namespace imgstat
