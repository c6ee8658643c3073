#include "core/arriving.hpp"

#include <chrono>
#include <thread>

namespace imgstat {

void ArrivingDecodes::start(std::function<void(bool)> fn, std::function<bool()> give_up) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++running_;
  }
  std::thread([this, fn = std::move(fn), give_up = std::move(give_up)]() mutable {
    bool slot = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Polled: an upload's end has no way to wake this wait.
      while (!(slot = decoding_ < slots_) && !give_up()) changed_.wait_for(lock, std::chrono::milliseconds(20));
      if (slot) ++decoding_;
    }
    give_up = nullptr;  // what it holds (the upload's file) goes with fn's answer, not after it
    arena_.execute([&] { fn(slot); });
    fn = nullptr;  // what it holds goes before the analyzer may
    std::lock_guard<std::mutex> lock(mu_);
    if (slot) --decoding_;
    --running_;
    changed_.notify_all();
  }).detach();
}

}  // namespace imgstat
