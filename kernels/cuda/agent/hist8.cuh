// 8-bit histograms. hist8_lanes: per-lane counters (block/lane_counters.cuh)
// fed by channel-selecting groups of lanes (block/channel_select.cuh), one
// block per SM, a grid-stride loop over 16-pixel blocks with several 16-byte
// loads in flight per lane. hist8_small: shared atomics, for inputs too small
// to pay for clearing and summing per-lane counters.
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

template <int C>
__global__ void hist8_small(const uint8_t* __restrict__ data, uint64_t bytes, unsigned long long* __restrict__ counts) {
  __shared__ uint32_t h[C * 256];
  for (int i = threadIdx.x; i < C * 256; i += blockDim.x) h[i] = 0;
  __syncthreads();
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < bytes;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x)
    atomicAdd(h + (i % C) * 256 + data[i], 1u);
  __syncthreads();
  for (int i = threadIdx.x; i < C * 256; i += blockDim.x)
    if (h[i]) atomicAdd(counts + i, static_cast<unsigned long long>(h[i]));
}

}  // namespace imgstat::cuda
