// 256 counters per lane in shared memory, laid out [bin][lane] so that a
// lane's counters all sit in its own bank: every lane updates a counter in
// every cycle and no two lanes ever conflict, whatever the data. The price is
// 32 KiB per warp, so few warps per SM; 16-byte loads several deep keep
// memory busy instead.
#pragma once

#include <cstdint>

namespace imgstat::cuda {

constexpr int kLaneCounterBytesPerWarp = 256 * 32 * 4;

template <bool kAtomic>
struct LaneCounters {
  uint32_t* mine;  // this lane's bin 0; bin b at mine[32 * b]

  __device__ LaneCounters(uint32_t* warp_base, int lane) : mine(warp_base + lane) {}

  __device__ void clear() {
#pragma unroll 16
    for (int b = 0; b < 256; ++b) mine[32 * b] = 0;
  }

  __device__ void add(uint32_t bin) {
    if constexpr (kAtomic)
      atomicAdd(mine + 32 * bin, 1u);  // result unused: a reduction, no wait on the value
    else
      mine[32 * bin] += 1;
  }

  // Four bytes of a word.
  __device__ void add_bytes(uint32_t w) {
    add(__byte_perm(w, 0, 0x4440));
    add(__byte_perm(w, 0, 0x4441));
    add(__byte_perm(w, 0, 0x4442));
    add(__byte_perm(w, 0, 0x4443));
  }
};

}  // namespace imgstat::cuda
