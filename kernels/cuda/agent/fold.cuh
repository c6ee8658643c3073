// Per-block partial results merged into running totals: the merge every
// partial type defines (merge(a, b) in imgstat/float_moments.hpp), as a CUB
// reduction operator, and the one-block fold that adds `count` partials to
// running[channel] always in the same order (deterministic).
#pragma once

#include <cub/block/block_reduce.cuh>

#include <cstdint>

#include "imgstat/float_moments.hpp"

namespace imgstat::cuda {

struct MergeOp {
  template <class T>
  __device__ T operator()(const T& a, const T& b) const {
    T r = a;
    merge(r, b);
    return r;
  }
};

template <class T, int C, int kThreads>
__global__ void __launch_bounds__(kThreads)
    fold_partials(const T* __restrict__ partials, uint32_t count, T* __restrict__ running) {
  using Reduce = cub::BlockReduce<T, kThreads>;
  __shared__ typename Reduce::TempStorage temp;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    T m;
    for (uint32_t i = threadIdx.x; i < count; i += blockDim.x) merge(m, partials[i * C + c]);
    const T r = Reduce(temp).Reduce(m, MergeOp());
    __syncthreads();
    if (threadIdx.x == 0) merge(running[c], r);
  }
}

}  // namespace imgstat::cuda
