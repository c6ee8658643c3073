// Histogram counters for passes with any number of bins: one copy per warp
// when they fit (fewer collisions between warps), one per block otherwise, or
// straight to global memory for the largest bin counts. Flushed once per block.
#pragma once

#include <cstdint>

namespace imgstat::cuda {

enum class HistPlace : int { kWarp, kBlock, kGlobal };

struct SharedHistogram {
  uint32_t* base;
  unsigned long long* global;
  uint32_t bins;
  uint32_t channels;
  HistPlace place;
  int copies;

  __device__ SharedHistogram(uint32_t* shared, unsigned long long* out, uint32_t bins_, uint32_t channels_,
                             HistPlace place_)
      : global(out), bins(bins_), channels(channels_), place(place_) {
    const int warp = threadIdx.x >> 5;
    copies = place == HistPlace::kWarp ? static_cast<int>(blockDim.x >> 5) : 1;
    base = shared + (place == HistPlace::kWarp ? warp * bins * channels : 0);
    if (place != HistPlace::kGlobal)
      for (uint32_t i = threadIdx.x; i < static_cast<uint32_t>(copies) * bins * channels; i += blockDim.x) shared[i] = 0;
    __syncthreads();
  }

  __device__ void add(uint32_t c, uint32_t bin) {
    if (place == HistPlace::kGlobal)
      atomicAdd(global + c * bins + bin, 1ull);
    else
      atomicAdd(base + c * bins + bin, 1u);
  }

  // Every thread of the block must call this.
  __device__ void flush(uint32_t* shared) {
    __syncthreads();
    if (place == HistPlace::kGlobal) return;
    const uint32_t n = bins * channels;
    for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
      unsigned long long sum = 0;
      for (int k = 0; k < copies; ++k) sum += shared[k * n + i];
      if (sum) atomicAdd(global + i, sum);
    }
  }
};

}  // namespace imgstat::cuda
