// The largest single allocation asked of malloc while a watch lives, every
// library's included (OpenCV's, libtiff's, libpng's, the engines'), asked
// for even when it failed: a test asserts that what a request or a file
// declares is refused before it is allocated, not after the allocator said
// no (nor, on a host with more memory, after it said yes).
//
// Link alloc_watch.cpp into the test: it defines malloc and its family over
// glibc's own (__libc_malloc...). Under AddressSanitizer, which owns malloc,
// the sanitizer's hook sees allocations that succeeded.
#pragma once

#include <cstdint>

namespace imgstat::testing {

class AllocWatch {
 public:
  AllocWatch();
  ~AllocWatch();
  AllocWatch(const AllocWatch&) = delete;
  AllocWatch& operator=(const AllocWatch&) = delete;
  // Bytes of the largest single allocation since the watch began.
  uint64_t largest() const;
  // Whether allocations are seen at all in this build.
  static bool works();
};

}  // namespace imgstat::testing
