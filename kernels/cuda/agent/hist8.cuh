// 8-bit histograms: one shared histogram per warp (or per half-warp), fed by
// 16-byte loads. Equal bytes of a warp hit one address and the hardware
// merges their atomics, so constant and smooth data run at the memory
// roofline; on noise, bank conflicts bind it. Measured on an H200 against
// per-lane private counters (32 KiB a warp, conflict-free, one shared atomic
// per byte: 2.47 TB/s on noise but 2.47 on constant data too, and 1.1 to
// 1.6 TB/s for 3 and 4 channels), the per-warp histograms win everywhere but
// single-channel noise, by 4% there: they are the only kernel kept.
//
// The same pass takes a pixel step (block/colour_step.cuh): a colour space
// converted in registers as its pixels are counted, nothing written but
// the counts.
#pragma once

#include <cstdint>

#include "cuda/tuning/launch.hpp"
#include "cuda/block/colour_step.cuh"

namespace imgstat::cuda {


template <int M, int kCopies>
constexpr size_t hist8_shared_bytes() {
  return static_cast<size_t>(kHist8Threads / 32 * kCopies) * M * 256 * 4;
}

// kCopies histograms per warp, one per group of 32 / kCopies lanes: fewer
// lanes share one, so noise collides less in the banks. The step's
// histograms (Step::kChannels of them) at counts[channel * 256 + value].
template <int C, int kCopies, class Step = RawBytes<C>>
__global__ void __launch_bounds__(kHist8Threads)
    hist8_warp(const uint4* __restrict__ data, uint64_t steps, const uint8_t* __restrict__ tail, uint32_t tail_bytes,
               unsigned long long* __restrict__ counts, bool overwrite, const typename Step::Params params) {
  constexpr int V = Hist8Step<C>::kVecs, M = Step::kChannels, kHists = kHist8Threads / 32 * kCopies;
  extern __shared__ uint32_t shared[];  // kHists * M * 256
  __shared__ typename Step::Shared step_shared;
  for (int i = threadIdx.x; i < kHists * M * 256; i += blockDim.x) shared[i] = 0;
  const Step step(params, step_shared);
  __syncthreads();
  uint32_t* h = shared + (threadIdx.x / (32 / kCopies)) * M * 256;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  uint64_t step_at = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  constexpr int U = V == 1 ? 4 : 2;  // 16-byte loads in flight per thread: 4 to 6
  for (; step_at + (U - 1) * stride < steps; step_at += U * stride) {
    uint4 v[U][V];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int t = 0; t < V; ++t) v[u][t] = __ldg(data + (step_at + u * stride) * V + t);
#pragma unroll
    for (int u = 0; u < U; ++u) step.count(h, v[u]);
  }
  for (; step_at < steps; step_at += stride) {
    uint4 v[V];
#pragma unroll
    for (int t = 0; t < V; ++t) v[t] = __ldg(data + step_at * V + t);
    step.count(h, v);
  }
  if (blockIdx.x == 0) step.count_tail(h, tail, tail_bytes);
  __syncthreads();
  for (int i = threadIdx.x; i < M * 256; i += blockDim.x) {
    unsigned long long sum = 0;
    for (int k = 0; k < kHists; ++k) sum += shared[k * M * 256 + i];
    if (overwrite)  // a one-block launch: the final counts, no zeroing needed
      counts[i] = sum;
    else if (sum)
      atomicAdd(counts + i, sum);
  }
}

}  // namespace imgstat::cuda
