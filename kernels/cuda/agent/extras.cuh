// The statistics that need a sample's place or its whole pixel: where each
// channel's min and max first occur, and the set of colours of 8-bit pixels.
// Neither is on the fused passes' path; both run only when asked for.
#pragma once

#include <cub/block/block_reduce.cuh>

#include <cstdint>

#include "imgstat/float_moments.hpp"
#include "common/partial.hpp"
#include "common/luminance.hpp"
#include "cuda/agent/fold.cuh"
#include "cuda/agent/int16.cuh"

namespace imgstat::cuda {

// Each thread walks its pixels in increasing order and replaces only on a
// strictly smaller (larger) sample, so it keeps its first extreme; merges
// break ties by index. Samples are read one by one: this pass is opt-in and
// its loads hit the chunk the main pass just read.
template <class T, int C>
__global__ void __launch_bounds__(kPassThreads)
    extremes_pass(const T* __restrict__ data, uint64_t pixels, uint64_t first, Extremes* __restrict__ partials) {
  Extremes t[C];
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pixels; i += stride) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const double v = static_cast<double>(data[i * C + c]);
      if (!isfinite(v)) continue;
      if (!t[c].any) {
        t[c] = Extremes{true, v, v, first + i, first + i};
      } else if (v < t[c].min) {
        t[c].min = v;
        t[c].min_at = first + i;
      } else if (v > t[c].max) {
        t[c].max = v;
        t[c].max_at = first + i;
      }
    }
  }
  using Reduce = cub::BlockReduce<Extremes, kPassThreads>;
  __shared__ typename Reduce::TempStorage temp;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const Extremes r = Reduce(temp).Reduce(t[c], MergeOp());
    __syncthreads();
    if (threadIdx.x == 0) partials[blockIdx.x * C + c] = r;
  }
}

// One bit per colour (color_key). A plain read first skips the atomic for
// colours already seen, which in most images is nearly all of them; a stale
// read costs only a redundant atomic.
template <int C>
__global__ void __launch_bounds__(kPassThreads)
    colors_pass(const uint8_t* __restrict__ data, uint64_t pixels, unsigned long long* __restrict__ bits) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pixels; i += stride) {
    const uint32_t key = color_key(data + i * C, C);
    const unsigned long long mask = 1ull << (key & 63);
    unsigned long long* word = bits + (key >> 6);
    if (!(*word & mask)) atomicOr(word, mask);
  }
}

// The luminance plane (luminance.hpp's arithmetic) of packed pixels.
template <class T, int C>
__global__ void __launch_bounds__(kPassThreads)
    luminance_pass(const T* __restrict__ data, uint64_t pixels, int64_t lo, uint3 rgb, void* __restrict__ out) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pixels; i += stride) {
    const T r = data[i * C + rgb.x], g = data[i * C + rgb.y], b = data[i * C + rgb.z];
    if constexpr (sizeof(T) >= 4) {
      static_cast<double*>(out)[i] = luma_float(r, g, b);
    } else {
      const uint32_t y = luma_offset(static_cast<uint32_t>(r - lo), static_cast<uint32_t>(g - lo),
                                     static_cast<uint32_t>(b - lo));
      static_cast<T*>(out)[i] = static_cast<T>(static_cast<int64_t>(y) + lo);
    }
  }
}

}  // namespace imgstat::cuda
