// The imgstat::Error code a call throws, or 0 when it throws none.
#pragma once

#include <functional>

#include "imgstat/error.hpp"

namespace imgstat::testing {

inline ErrorCode code_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.code();
  }
  return static_cast<ErrorCode>(0);
}

}  // namespace imgstat::testing
