// Joint histograms: a pixel's flat bin (row-major, the first axis slowest)
// from its axes' samples, counted in shared memory when the bins fit a
// block, else straight into the 64-bit global counts; per part in global
// memory. The bins are the CPU engine's (JointPlan): the same tables and
// float64 range binners.
#pragma once

#include <cstdint>

#include "cuda/tuning/launch.hpp"
#include "cuda/agent/colour.cuh"
#include "imgstat/binning.hpp"
#include "imgstat/types.hpp"

namespace imgstat::cuda {

// 8-bit samples: per-axis contributions by raw byte, bin * stride, or a
// large negative number for values outside the axis (three stay negative).
struct JointTables8 {
  int32_t axis[3][256];
  uint32_t channel[3];
  uint32_t axes;
  uint32_t pixel_bytes;
  __device__ int32_t flat(const uint8_t* px) const {
    int32_t idx = axis[0][px[channel[0]]] + axis[1][px[channel[1]]];
    if (axes == 3) idx += axis[2][px[channel[2]]];
    return idx;
  }
};
constexpr int32_t kJointOutside8 = -(int32_t{1} << 29);

// Other samples: each axis' range binner in float64; NaN, infinities and
// values outside an axis make the pixel outside (-1).
struct JointRanges {
  RangeBinner binner[3];
  uint32_t channel[3];
  uint32_t stride[3];
  uint32_t axes;
  uint32_t pixel_bytes;
  SampleType type;
  __device__ double sample(const uint8_t* px, uint32_t c) const {
    switch (type) {
      case SampleType::kUint16: return reinterpret_cast<const uint16_t*>(px)[c];
      case SampleType::kInt16: return reinterpret_cast<const int16_t*>(px)[c];
      case SampleType::kFloat32: return reinterpret_cast<const float*>(px)[c];
      default: return reinterpret_cast<const double*>(px)[c];
    }
  }
  __device__ int32_t flat(const uint8_t* px) const {
    int32_t idx = 0;
#pragma unroll
    for (uint32_t a = 0; a < 3; ++a) {
      if (a == axes) break;
      const double d = sample(px, channel[a]);
      if (!(d >= binner[a].lo && d < binner[a].hi)) return -1;
      idx += static_cast<int32_t>(binner[a](d) * stride[a]);
    }
    return idx;
  }
};


template <bool kShared, class Bins>
__global__ void __launch_bounds__(kShared ? kJointThreads : kColourThreads)
    joint_pass(const uint8_t* __restrict__ in, uint64_t pixels, const Bins j, uint32_t bins,
               unsigned long long* __restrict__ counts, unsigned long long* __restrict__ outside) {
  extern __shared__ uint32_t local[];  // bins counters when kShared
  if constexpr (kShared) {
    for (uint32_t i = threadIdx.x; i < bins; i += blockDim.x) local[i] = 0;
    __syncthreads();
  }
  uint32_t out = 0;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pixels; i += stride) {
    const int32_t idx = j.flat(in + i * j.pixel_bytes);
    if (idx < 0)
      ++out;
    else if constexpr (kShared)
      atomicAdd(local + idx, 1u);
    else
      atomicAdd(counts + idx, 1ull);
  }
  // Pixels outside: a warp's total, one atomic per warp.
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) out += __shfl_down_sync(0xffffffffu, out, o);
  if ((threadIdx.x & 31) == 0 && out) atomicAdd(outside, static_cast<unsigned long long>(out));
  if constexpr (kShared) {
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < bins; i += blockDim.x)
      if (local[i]) atomicAdd(counts + i, static_cast<unsigned long long>(local[i]));
  }
}

// A tile's part: its column and row found among the tile edges.
struct TileMap {
  const uint32_t* xs;  // columns + 1 edges
  const uint32_t* ys;  // rows + 1 edges
  uint32_t columns;
  uint32_t rows;
  __device__ static uint32_t find(const uint32_t* edges, uint32_t n, uint32_t v) {
    uint32_t lo = 0, hi = n;  // the last edge <= v among edges[0..n)
    while (hi - lo > 1) {
      const uint32_t mid = (lo + hi) / 2;
      if (edges[mid] <= v)
        lo = mid;
      else
        hi = mid;
    }
    return lo;
  }
  __device__ uint32_t raw(uint32_t x, uint32_t y) const { return find(ys, rows, y) * columns + find(xs, columns, x); }
  __device__ uint32_t part(uint32_t raw) const { return raw; }
};

// Each part's joint histogram: counts[part * bins + bin] and outside[part],
// in global memory (parts times bins rarely fit a block).
template <class Map, class Bins>
__global__ void __launch_bounds__(kColourThreads)
    part_joint(const uint8_t* __restrict__ in, uint32_t width, uint64_t pixels, const Map map, const Bins j,
               uint32_t bins, unsigned long long* __restrict__ counts, unsigned long long* __restrict__ outside) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pixels; i += stride) {
    const uint32_t x = static_cast<uint32_t>(i % width), y = static_cast<uint32_t>(i / width);
    const uint32_t part = map.part(map.raw(x, y));
    if (part == 0xFFFFFFFFu) continue;
    const int32_t idx = j.flat(in + i * j.pixel_bytes);
    if (idx < 0)
      atomicAdd(outside + part, 1ull);
    else
      atomicAdd(counts + static_cast<uint64_t>(part) * bins + idx, 1ull);
  }
}

}  // namespace imgstat::cuda
