// What the core knows of the call it works for: when the caller stops
// waiting, and whether it already has. The transport fills it in.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "imgstat/error.hpp"

namespace imgstat {

struct CallContext {
  using Clock = std::chrono::steady_clock;
  Clock::time_point deadline = Clock::time_point::max();  // the caller's own
  std::function<bool()> cancelled;
  // Who calls: the token's or the client certificate's name, "" when none
  // (regions belong to it).
  std::string caller;
  // The call came over loopback or a Unix socket: regions may be named.
  bool same_host = false;

  bool is_cancelled() const { return cancelled && cancelled(); }
  bool has_deadline() const { return deadline != Clock::time_point::max(); }

  // Throws kCancelled or kDeadlineExceeded, saying at which stage.
  void check(const char* stage) const {
    if (is_cancelled()) fail(ErrorCode::kCancelled, std::string("cancelled by the client ") + stage);
    if (Clock::now() >= deadline) fail(ErrorCode::kDeadlineExceeded, std::string("deadline exceeded ") + stage);
  }
};

}  // namespace imgstat
