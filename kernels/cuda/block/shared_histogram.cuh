// Histogram counters for passes with any number of bins: one copy per warp
// when they fit (fewer collisions between warps), one per block otherwise, or
// straight to global memory for the largest bin counts. Flushed once per block.
#pragma once

#include <cub/block/block_reduce.cuh>

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

// Adds each channel's per-thread counts of samples below and above an
// explicit range to the block's totals, one atomic each. Every thread of the
// block (of kThreads) must call this.
template <int C, int kThreads>
__device__ void flush_out_of_range(const uint32_t (&under)[C], const uint32_t (&over)[C],
                                   unsigned long long* underflow, unsigned long long* overflow) {
  using Count = cub::BlockReduce<unsigned int, kThreads>;
  __shared__ typename Count::TempStorage temp;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const unsigned int u = Count(temp).Sum(under[c]);
    __syncthreads();
    const unsigned int o = Count(temp).Sum(over[c]);
    __syncthreads();
    if (threadIdx.x == 0) {
      if (u) atomicAdd(underflow + c, static_cast<unsigned long long>(u));
      if (o) atomicAdd(overflow + c, static_cast<unsigned long long>(o));
    }
  }
}

}  // namespace imgstat::cuda
