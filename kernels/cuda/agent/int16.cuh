// 16-bit samples in one fused pass: exact moments in registers (offsets from
// the type's lowest value, so signed data needs no special arithmetic) and the
// histogram in shared memory.
#pragma once

#include <cub/block/block_reduce.cuh>

#include <cstdint>

#include "cuda/tuning/launch.hpp"
#include "cuda/block/pixel_steps.cuh"
#include "cuda/block/shared_histogram.cuh"
#include "cuda/block/types.hpp"
#include "imgstat/binning.hpp"

namespace imgstat::cuda {


struct IntPartial {
  uint32_t min;
  uint32_t max;
  unsigned long long sum;
  unsigned long long sumsq;  // a block's share stays far below 2^64
};

// A thread's running moments: its sum fits 32 bits as long as it sees fewer
// than 65537 samples, which the dispatch guarantees per launch.
struct IntThread {
  uint32_t min = 0xffffffffu;
  uint32_t max = 0;
  uint32_t sum = 0;
  unsigned long long sumsq = 0;
};

struct IntPartialMerge {
  __device__ IntPartial operator()(const IntPartial& a, const IntPartial& b) const {
    return {min(a.min, b.min), max(a.max, b.max), a.sum + b.sum, a.sumsq + b.sumsq};
  }
};

__device__ __forceinline__ void add128(unsigned long long* lo, unsigned long long* hi, unsigned long long v) {
  const unsigned long long old = atomicAdd(lo, v);
  if (old + v < old) atomicAdd(hi, 1ull);
}

// kDefault: the default histogram (256 bins over the type's range, so the
// bin is the high byte) with one copy per warp; else whatever h asks.
template <int C, bool kSigned, bool kDefault>
__global__ void __launch_bounds__(kPassThreads)
    int16_pass(const uint4* __restrict__ data, uint64_t steps, const uint16_t* __restrict__ tail,
               uint32_t tail_samples, IntAccum* __restrict__ accum, HistogramOut h, HistPlace place) {
  extern __shared__ uint32_t shared[];
  const bool histogram = kDefault || h.counts != nullptr;
  SharedHistogram hist(shared, h.counts, histogram ? h.bins : 0, C, kDefault ? HistPlace::kWarp : place);
  RangeBinner binner[C];
#pragma unroll
  for (int c = 0; c < C; ++c) binner[c] = RangeBinner::make(h.lo[c], h.hi[c], h.bins);
  constexpr int64_t kLo = kSigned ? -32768 : 0;
  IntThread t[C];
  uint32_t under[C], over[C];
#pragma unroll
  for (int c = 0; c < C; ++c) under[c] = over[c] = 0;
  auto add = [&](int c, uint16_t raw) {
    const uint32_t u = raw ^ (kSigned ? 0x8000u : 0u);
    t[c].min = min(t[c].min, u);
    t[c].max = max(t[c].max, u);
    t[c].sum += u;
    t[c].sumsq += static_cast<unsigned long long>(u) * u;
    if constexpr (kDefault) {
      atomicAdd(hist.base + c * 256 + (u >> 8), 1u);
      return;
    }
    if (!histogram) return;
    if (!h.explicit_range) {
      hist.add(c, type_range_bin(u, h.bins, 16));
    } else {
      const double v = static_cast<double>(static_cast<int64_t>(u) + kLo);
      if (v < h.lo[c])
        ++under[c];
      else if (v >= h.hi[c])
        ++over[c];
      else
        hist.add(c, binner[c](v));
    }
  };

  for_each_sample<uint16_t, C, 2>(data, steps, tail, tail_samples, add);
  hist.flush(shared);

  using Reduce = cub::BlockReduce<IntPartial, kPassThreads>;
  __shared__ typename Reduce::TempStorage temp;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const IntPartial r =
        Reduce(temp).Reduce(IntPartial{t[c].min, t[c].max, t[c].sum, t[c].sumsq}, IntPartialMerge());
    __syncthreads();
    if (threadIdx.x == 0 && r.min <= r.max) {
      atomicMin(&accum[c].min, r.min);
      atomicMax(&accum[c].max, r.max);
      atomicAdd(&accum[c].sum, r.sum);
      add128(&accum[c].sumsq_lo, &accum[c].sumsq_hi, r.sumsq);
    }
  }
  if (!kDefault && histogram && h.explicit_range)
    flush_out_of_range<C, kPassThreads>(under, over, h.underflow, h.overflow);
}

}  // namespace imgstat::cuda
