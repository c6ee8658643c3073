// Colour conversion and joint histograms of 8-bit pixels, per chunk.
//
// convert8: whole pixels of C channels (R, G, B at rgb[], alpha at 3) into
// the space's channels (alpha appended), written packed for the passes
// that follow; the same integer and float steps as the CPU engine
// (common/colour.hpp), so every byte is equal.
//
// joint8: a flat bin per pixel from per-axis tables (bin * stride, or
// negative for outside), counted in shared memory when the bins fit, else
// straight into the 64-bit global counts.
#pragma once

#include <cstdint>

#include "common/colour.hpp"
#include "cuda/block/colour_tables.cuh"

namespace imgstat::cuda {

constexpr int kColourThreads = 256;

template <ColourSpace S, int C>
__global__ void __launch_bounds__(kColourThreads)
    convert8(const uint8_t* __restrict__ in, uint64_t pixels, uint32_t r, uint32_t g, uint32_t b,
             const ColourTables* __restrict__ tables, uint8_t* __restrict__ out) {
  __shared__ ColourTables t;
  load_colour_tables(&t, tables);
  constexpr int kOut = S == ColourSpace::kGray ? 1 : 3;
  constexpr int kStep = kOut + (C == 4 ? 1 : 0);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  // Selects rather than an indexed array, so the pixel stays in registers.
  auto pick = [](const uint8_t* px, uint32_t c) { return c == 0 ? px[0] : c == 1 ? px[1] : px[2]; };
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pixels; i += stride) {
    uint8_t px[C];
#pragma unroll
    for (int c = 0; c < C; ++c) px[c] = in[i * C + c];
    uint8_t o[kStep];
    convert_rgb8<S>(pick(px, r), pick(px, g), pick(px, b), t, o);
    if constexpr (C == 4) o[kOut] = px[3];
#pragma unroll
    for (int c = 0; c < kStep; ++c) out[i * kStep + c] = o[c];
  }
}

// The value counts of the converted channels without writing them: the
// 8-bit pass's 16-byte loads (16 pixels a step for C = 3, 4 for C = 4), each
// pixel converted in registers and counted in its warp's histograms, the
// tables in shared memory beside them. counts[channel * 256 + value].
// kOrder: 0 for R, G, B stored in that order, 1 for B, G, R, 2 for any
// other (each read through selects).
template <ColourSpace S, int C, int kOrder>
__global__ void __launch_bounds__(kColourThreads)
    hist8_colour(const uint4* __restrict__ data, uint64_t steps, const uint8_t* __restrict__ tail, uint32_t tail_pixels,
                 uint32_t r, uint32_t g, uint32_t b, const ColourTables* __restrict__ tables,
                 unsigned long long* __restrict__ counts) {
  constexpr int kOut = S == ColourSpace::kGray ? 1 : 3;
  constexpr int kMeasured = kOut + (C == 4 ? 1 : 0);
  // A histogram per two warps: with the tables, few enough shared bytes
  // for a full SM of blocks.
  constexpr int kVecs = C == 3 ? 3 : 1, kPixels = 16 * kVecs / C, kCopies = kColourThreads / 64;
  __shared__ ColourTables t;
  __shared__ uint32_t hist[kCopies][kMeasured * 256];
  for (int i = threadIdx.x; i < kCopies * kMeasured * 256; i += blockDim.x) (&hist[0][0])[i] = 0;
  load_colour_tables(&t, tables);
  uint32_t* h = hist[threadIdx.x / 64];
  auto pick = [](const uint8_t* px, uint32_t c) { return c == 0 ? px[0] : c == 1 ? px[1] : px[2]; };
  auto count = [&](const uint8_t* px) {
    uint8_t o[kMeasured];
    if constexpr (kOrder == 0)
      convert_rgb8<S>(px[0], px[1], px[2], t, o);
    else if constexpr (kOrder == 1)
      convert_rgb8<S>(px[2], px[1], px[0], t, o);
    else
      convert_rgb8<S>(pick(px, r), pick(px, g), pick(px, b), t, o);
    if constexpr (C == 4) o[kOut] = px[3];
#pragma unroll
    for (int c = 0; c < kMeasured; ++c) atomicAdd(h + c * 256 + o[c], 1u);
  };
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  union Step {
    uint4 v[kVecs];
    uint8_t bytes[16 * kVecs];
  };
  uint64_t step = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // Two steps' loads in flight before either is converted.
  for (; step + stride < steps; step += 2 * stride) {
    Step u[2];
#pragma unroll
    for (int k = 0; k < 2; ++k)
#pragma unroll
      for (int j = 0; j < kVecs; ++j) u[k].v[j] = __ldg(data + (step + k * stride) * kVecs + j);
#pragma unroll
    for (int k = 0; k < 2; ++k)
#pragma unroll
      for (int p = 0; p < kPixels; ++p) count(u[k].bytes + p * C);
  }
  for (; step < steps; step += stride) {
    Step u;
#pragma unroll
    for (int j = 0; j < kVecs; ++j) u.v[j] = __ldg(data + step * kVecs + j);
#pragma unroll
    for (int p = 0; p < kPixels; ++p) count(u.bytes + p * C);
  }
  if (blockIdx.x == 0)
    for (uint32_t i = threadIdx.x; i < tail_pixels; i += blockDim.x) {
      uint8_t px[C];
#pragma unroll
      for (int c = 0; c < C; ++c) px[c] = tail[i * C + c];
      count(px);
    }
  __syncthreads();
  for (int i = threadIdx.x; i < kMeasured * 256; i += blockDim.x) {
    unsigned long long sum = 0;
#pragma unroll
    for (int w = 0; w < kCopies; ++w) sum += hist[w][i];
    if (sum) atomicAdd(counts + i, sum);
  }
}

// Per-axis contributions to the flat bin, by raw byte: bin * stride, or a
// large negative number for values outside the axis (three stay negative).
struct JointTables8 {
  int32_t axis[3][256];
  uint32_t channel[3];
  uint32_t axes;
};
constexpr int32_t kJointOutside8 = -(int32_t{1} << 29);

// Shared counters of up to 200 KiB leave one block an SM: a block of
// kJointThreads keeps enough loads in flight.
constexpr int kJointThreads = 1024;

template <int C, bool kShared>
__global__ void __launch_bounds__(kShared ? kJointThreads : kColourThreads)
    joint8(const uint8_t* __restrict__ in, uint64_t pixels, const JointTables8 j, uint32_t bins,
           unsigned long long* __restrict__ counts, unsigned long long* __restrict__ outside) {
  extern __shared__ uint32_t local[];  // bins counters when kShared
  if constexpr (kShared) {
    for (uint32_t i = threadIdx.x; i < bins; i += blockDim.x) local[i] = 0;
    __syncthreads();
  }
  uint32_t out = 0;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pixels; i += stride) {
    const uint8_t* px = in + i * C;
    int32_t idx = j.axis[0][px[j.channel[0]]] + j.axis[1][px[j.channel[1]]];
    if (j.axes == 3) idx += j.axis[2][px[j.channel[2]]];
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

// Each part's joint histogram of 8-bit pixels: counts[part * bins + bin]
// and outside[part], in global memory (parts times bins rarely fit a block).
template <int C, class Map>
__global__ void __launch_bounds__(kColourThreads)
    part_joint8(const uint8_t* __restrict__ in, uint32_t width, uint64_t pixels, const Map map, const JointTables8 j,
                uint32_t bins, unsigned long long* __restrict__ counts, unsigned long long* __restrict__ outside) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pixels; i += stride) {
    const uint32_t x = static_cast<uint32_t>(i % width), y = static_cast<uint32_t>(i / width);
    const uint32_t part = map.part(map.raw(x, y));
    if (part == 0xFFFFFFFFu) continue;
    const uint8_t* px = in + i * C;
    int32_t idx = j.axis[0][px[j.channel[0]]] + j.axis[1][px[j.channel[1]]];
    if (j.axes == 3) idx += j.axis[2][px[j.channel[2]]];
    if (idx < 0)
      atomicAdd(outside + part, 1ull);
    else
      atomicAdd(counts + static_cast<uint64_t>(part) * bins + idx, 1ull);
  }
}

}  // namespace imgstat::cuda
