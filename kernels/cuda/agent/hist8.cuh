// 8-bit histograms, three kernels for three kinds of input:
//  - hist8_lanes: per-lane counters (block/lane_counters.cuh) fed by
//    channel-selecting groups of lanes (block/channel_select.cuh), one block
//    per SM, several 16-byte loads in flight per lane: fastest on noisy data,
//    where every byte of a warp lands in a different bin;
//  - hist8_warp: one shared histogram per warp, 16-byte loads: equal bytes of
//    a warp hit one address and the hardware merges their atomics, so smooth
//    data (photos, flat areas) runs faster than with per-lane counters;
//  - hist8_one_block: small images, one block that writes the final counts,
//    so nothing needs zeroing first.
#pragma once

#include <cstdint>

#include "cuda/block/channel_select.cuh"
#include "cuda/block/lane_counters.cuh"

namespace imgstat::cuda {

// Warps per block: as many as the SM's shared memory holds counters for.
template <LaneCounting K>
struct Hist8Warps {
  static constexpr int value = K == LaneCounting::kAtomic32 ? 6 : 12;
};

constexpr int kHist8WarpThreads = 256;

template <int C>
struct Hist8Shape {
  static constexpr int kGroups = 32 / C;                       // groups of C lanes per warp
  static constexpr int kUnroll = C == 1 ? 8 : C == 2 ? 4 : 2;  // 16-pixel blocks in flight per lane
};

template <int C, LaneCounting K>
__global__ void __launch_bounds__(Hist8Warps<K>::value * 32, 1)
    hist8_lanes(const uint4* __restrict__ data, uint64_t blocks16, const uint8_t* __restrict__ tail,
                uint32_t tail_pixels, unsigned long long* __restrict__ counts) {
  extern __shared__ uint4 shared_raw[];
  auto* shared = reinterpret_cast<uint8_t*>(shared_raw);
  using Counters = LaneCounters<K>;
  constexpr int W = Hist8Warps<K>::value;
  constexpr int G = Hist8Shape<C>::kGroups, U = Hist8Shape<C>::kUnroll;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = min(lane / C, G - 1);  // lanes past G * C shadow the last group, uncounted
  const bool counting = lane < G * C;
  Counters counters(shared + warp * Counters::kBytesPerWarp, lane);
  counters.clear();
  const ChannelSelect<C> select(lane % C);

  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * W * G;
  uint64_t q = (static_cast<uint64_t>(blockIdx.x) * W + warp) * G + group;
  for (; q + (U - 1) * stride < blocks16; q += U * stride) {
    uint4 v[U][C];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int j = 0; j < C; ++j) v[u][j] = __ldg(data + (q + u * stride) * C + j);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      uint32_t w[4];
      select(v[u], w);
      if (counting)
#pragma unroll
        for (int k = 0; k < 4; ++k) counters.add_word(w[k]);
    }
  }
  for (; q < blocks16; q += stride) {
    uint4 v[C];
#pragma unroll
    for (int j = 0; j < C; ++j) v[j] = __ldg(data + q * C + j);
    uint32_t w[4];
    select(v, w);
    if (counting)
#pragma unroll
      for (int k = 0; k < 4; ++k) counters.add_word(w[k]);
  }
  if (blockIdx.x == 0 && warp == 0 && lane < C)  // lane c is channel c
    for (uint32_t p = 0; p < tail_pixels; ++p) counters.add(tail[p * C + lane]);
  __syncthreads();

  // Sum the lanes of each channel over all warps, one atomic per bin and block.
  for (int i = threadIdx.x; i < C * 256; i += blockDim.x) {
    const int c = i / 256, b = i % 256;
    unsigned long long sum = 0;
    for (int w = 0; w < W; ++w)
      for (int g = 0; g < G; ++g) sum += Counters::read(shared + w * Counters::kBytesPerWarp, b, g * C + c);
    if (sum) atomicAdd(counts + i, sum);
  }
}

// A step: 16 pixels' worth of whole 16-byte vectors for C = 3, one vector
// otherwise, so every byte's channel is known at compile time.
template <int C>
struct Hist8Step {
  static constexpr int kVecs = C == 3 ? 3 : 1;
};

template <int C>
__device__ __forceinline__ void count_vectors(uint32_t* h, const uint4* v) {
  constexpr int V = Hist8Step<C>::kVecs;
#pragma unroll
  for (int t = 0; t < V; ++t) {
    const uint32_t w[4] = {v[t].x, v[t].y, v[t].z, v[t].w};
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int c = (16 * t + j) % C;
      atomicAdd(h + c * 256 + __byte_perm(w[j / 4], 0, 0x4440 | (j % 4)), 1u);
    }
  }
}

template <int C>
__global__ void __launch_bounds__(kHist8WarpThreads)
    hist8_warp(const uint4* __restrict__ data, uint64_t steps, const uint8_t* __restrict__ tail, uint32_t tail_bytes,
               unsigned long long* __restrict__ counts) {
  constexpr int V = Hist8Step<C>::kVecs, kWarps = kHist8WarpThreads / 32;
  __shared__ uint32_t shared[kWarps * C * 256];
  for (int i = threadIdx.x; i < kWarps * C * 256; i += blockDim.x) shared[i] = 0;
  __syncthreads();
  uint32_t* h = shared + (threadIdx.x >> 5) * C * 256;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  uint64_t step = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  constexpr int U = V == 1 ? 4 : 2;
  for (; step + (U - 1) * stride < steps; step += U * stride) {
    uint4 v[U][V];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int t = 0; t < V; ++t) v[u][t] = __ldg(data + (step + u * stride) * V + t);
#pragma unroll
    for (int u = 0; u < U; ++u) count_vectors<C>(h, v[u]);
  }
  for (; step < steps; step += stride) {
    uint4 v[V];
#pragma unroll
    for (int t = 0; t < V; ++t) v[t] = __ldg(data + step * V + t);
    count_vectors<C>(h, v);
  }
  if (blockIdx.x == 0)
    for (uint32_t i = threadIdx.x; i < tail_bytes; i += blockDim.x) atomicAdd(h + (i % C) * 256 + tail[i], 1u);
  __syncthreads();
  for (int i = threadIdx.x; i < C * 256; i += blockDim.x) {
    unsigned long long sum = 0;
    for (int w = 0; w < kWarps; ++w) sum += shared[w * C * 256 + i];
    if (sum) atomicAdd(counts + i, sum);
  }
}

template <int C>
__global__ void __launch_bounds__(256) hist8_one_block(const uint8_t* __restrict__ data, uint64_t bytes,
                                                      unsigned long long* __restrict__ counts) {
  __shared__ uint32_t h[C * 256];
  for (int i = threadIdx.x; i < C * 256; i += blockDim.x) h[i] = 0;
  __syncthreads();
  for (uint64_t i = threadIdx.x; i < bytes; i += blockDim.x) atomicAdd(h + (i % C) * 256 + data[i], 1u);
  __syncthreads();
  for (int i = threadIdx.x; i < C * 256; i += blockDim.x) counts[i] = h[i];
}

}  // namespace imgstat::cuda
