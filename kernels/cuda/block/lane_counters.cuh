// Per-lane histogram counters in shared memory, laid out [bin][lane] so that
// a lane's counters all sit in its own bank (or its own half of a shared
// word): no two lanes ever conflict, whatever the data. Three ways to count,
// measured against each other by imgstat-bench:
//  - kAtomic32: 32-bit counters, one shared atomic per byte (32 KiB a warp);
//  - kPlain16: 16-bit counters updated by plain loads and stores, two bytes
//    at a time with their equality folded in (16 KiB a warp, twice the warps;
//    a lane's counters are its own, so no atomic is needed);
//  - kAtomic16: 16-bit counters packed in words, one shared atomic per byte.
// 16-bit counters hold 65535: a launch gives each lane far fewer bytes.
#pragma once

#include <cstdint>

namespace imgstat::cuda {

enum class LaneCounting : int { kAtomic32, kPlain16, kAtomic16 };

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
struct LaneCounters<LaneCounting::kPlain16> {
  static constexpr int kBytesPerWarp = 256 * 32 * 2;
  uint16_t* mine;
  __device__ LaneCounters(void* warp_base, int lane) : mine(static_cast<uint16_t*>(warp_base) + lane) {}
  __device__ void clear() {
#pragma unroll 16
    for (int b = 0; b < 256; ++b) mine[32 * b] = 0;
  }
  __device__ void add(uint32_t bin) { mine[32 * bin] += 1; }
  // Both loads before both stores, so the two updates overlap; when the two
  // bins are one, the second store carries both counts.
  __device__ void add_pair(uint32_t b0, uint32_t b1) {
    const uint32_t x0 = mine[32 * b0], x1 = mine[32 * b1];
    mine[32 * b0] = static_cast<uint16_t>(x0 + 1);
    mine[32 * b1] = static_cast<uint16_t>(x1 + 1 + (b0 == b1));
  }
  __device__ void add_word(uint32_t w) {
    add_pair(__byte_perm(w, 0, 0x4440), __byte_perm(w, 0, 0x4441));
    add_pair(__byte_perm(w, 0, 0x4442), __byte_perm(w, 0, 0x4443));
  }
  __device__ static uint32_t read(const void* warp_base, int bin, int lane) {
    return static_cast<const uint16_t*>(warp_base)[32 * bin + lane];
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
