// Per-lane histogram counters in shared memory, laid out [bin][lane] so that
// a lane's counters all sit in its own bank: no two lanes ever conflict,
// whatever the data. Two ways to count, measured against each other by
// imgstat-bench:
//  - kAtomic32: 32-bit counters, one shared atomic per byte (32 KiB a warp);
//  - kAtomic16: 16-bit counters packed in words, one shared atomic per byte
//    (16 KiB a warp, so twice the warps); a counter holds 65535, and a launch
//    gives each lane far fewer bytes.
// Plain loads and stores instead of atomics (the counters are the lane's
// own), two bytes at a time with their equality folded in, measured slower
// on an H200: 1.39 against 2.06 TB/s, so they are gone.
#pragma once

#include <cstdint>

namespace imgstat::cuda {

enum class LaneCounting : int { kAtomic32, kAtomic16 };

template <LaneCounting K>
struct LaneCounters;

template <>
struct LaneCounters<LaneCounting::kAtomic32> {
  static constexpr int kBytesPerWarp = 256 * 32 * 4;
  uint32_t* mine;
  __device__ LaneCounters(void* warp_base, int lane) : mine(static_cast<uint32_t*>(warp_base) + lane) {}
  __device__ void clear() {
#pragma unroll 16
    for (int b = 0; b < 256; ++b) mine[32 * b] = 0;
  }
  __device__ void add(uint32_t bin) { atomicAdd(mine + 32 * bin, 1u); }
  __device__ void add_word(uint32_t w) {
    add(__byte_perm(w, 0, 0x4440));
    add(__byte_perm(w, 0, 0x4441));
    add(__byte_perm(w, 0, 0x4442));
    add(__byte_perm(w, 0, 0x4443));
  }
  // Lane l's count of bin b, from the warp's base.
  __device__ static uint32_t read(const void* warp_base, int bin, int lane) {
    return static_cast<const uint32_t*>(warp_base)[32 * bin + lane];
  }
};

template <>
struct LaneCounters<LaneCounting::kAtomic16> {
  static constexpr int kBytesPerWarp = 256 * 32 * 2;
  uint32_t* mine;  // bins 2k and 2k+1 share word k: low and high half
  __device__ LaneCounters(void* warp_base, int lane) : mine(static_cast<uint32_t*>(warp_base) + lane) {}
  __device__ void clear() {
#pragma unroll 16
    for (int k = 0; k < 128; ++k) mine[32 * k] = 0;
  }
  __device__ void add(uint32_t bin) { atomicAdd(mine + 32 * (bin >> 1), 1u << ((bin & 1) << 4)); }
  __device__ void add_word(uint32_t w) {
    add(__byte_perm(w, 0, 0x4440));
    add(__byte_perm(w, 0, 0x4441));
    add(__byte_perm(w, 0, 0x4442));
    add(__byte_perm(w, 0, 0x4443));
  }
  __device__ static uint32_t read(const void* warp_base, int bin, int lane) {
    return (static_cast<const uint32_t*>(warp_base)[32 * (bin >> 1) + lane] >> ((bin & 1) << 4)) & 0xffffu;
  }
};

}  // namespace imgstat::cuda
