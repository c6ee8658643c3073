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
//
// A task waiting on other hardware (a JPEG on the GPU's decoder) holds a
// thread but no core: with `waiting_threads` more threads than `threads`,
// such a task steps aside (StepAside) and its place goes to the next task,
// so that the GPU's batches fill from more calls than there are cores. At
// most `threads` tasks run outside a StepAside at once; one coming back
// takes the next free place before any task not yet begun. A task's parallel
// loops then run on at most `threads` threads, and on fewer than 2 x
// `threads` with several tasks' loops at once (TBB's workers take the
// arena's threads - 1 shared slots while the queue's threads hold others).
// Without waiting threads, at most `threads`.
#pragma once

#include <pthread.h>
#include <tbb/task_arena.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "imgstat/trace.hpp"

namespace imgstat {

class WorkQueue {
 public:
  WorkQueue(unsigned threads, size_t max_waiting, unsigned waiting_threads = 0)
      : max_waiting_(max_waiting),
        free_places_(std::max(1u, threads)),
        // Every queue thread enters the arena, so it has a slot for each;
        // all but threads - 1 are kept for them, so that TBB's workers
        // (one a core) still join a task's parallel loops as they do in an
        // arena of `threads`, not one of every thread the queue has.
        arena_(static_cast<int>(std::max(1u, threads) + waiting_threads), waiting_threads + 1) {
    for (unsigned i = 0; i < std::max(1u, threads) + waiting_threads; ++i) threads_.emplace_back([this] { loop(); });
  }

  // While one lives, the task running on this thread gives its place to
  // another: for waits that use no core. Nothing outside a queue's task.
  class StepAside {
   public:
    StepAside() : queue_(t_running) {
      if (!queue_) return;
      std::lock_guard<std::mutex> lock(queue_->mu_);
      queue_->free_place();
    }
    ~StepAside() {
      if (!queue_) return;
      std::unique_lock<std::mutex> lock(queue_->mu_);
      ++queue_->returning_;
      queue_->place_.wait(lock, [this] { return queue_->free_places_ > 0; });
      --queue_->returning_;
      --queue_->free_places_;
    }
    StepAside(const StepAside&) = delete;
    StepAside& operator=(const StepAside&) = delete;

   private:
    WorkQueue* queue_;
  };

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
  // A task may begin only where no stepped-aside task waits to come back.
  bool can_begin() const { return !queue_.empty() && free_places_ > returning_; }

  // With mu_ held.
  void free_place() {
    ++free_places_;
    if (returning_ > 0)
      place_.notify_one();
    else if (can_begin())
      wake_.notify_one();
  }

  void loop() {
    pthread_setname_np(pthread_self(), "imgstat-work");  // per-thread CPU in /proc and profilers
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      wake_.wait(lock, [this] { return (stopping_ && queue_.empty()) || can_begin(); });
      if (queue_.empty()) return;  // stopping, nothing left
      std::function<void()> task = std::move(queue_.front());
      queue_.pop_front();
      --free_places_;
      if (stopping_ && queue_.empty()) wake_.notify_all();  // the others may go
      lock.unlock();
      t_running = this;
      arena_.execute([&] {
        TraceRange range("queue task");
        task();
      });
      t_running = nullptr;
      lock.lock();
      ++free_places_;  // this thread looks for the next task itself
      if (returning_ > 0) place_.notify_one();
      if (--pending_ == 0) idle_.notify_all();
    }
  }

  static inline thread_local WorkQueue* t_running = nullptr;  // the queue whose task this thread runs

  const size_t max_waiting_;
  mutable std::mutex mu_;
  std::condition_variable wake_, idle_;
  std::condition_variable place_;  // stepped-aside tasks waiting to come back
  std::deque<std::function<void()>> queue_;
  size_t pending_ = 0;
  unsigned free_places_;  // tasks that may still begin or come back
  unsigned returning_ = 0;
  bool stopping_ = false;
  tbb::task_arena arena_;
  std::vector<std::thread> threads_;  // last: they start once the rest is made
};

}  // namespace imgstat
