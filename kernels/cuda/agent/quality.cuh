// The quality measures' and the perceptual hash's work on a device image
// of 8-bit pixels with one or three channels, in common/quality.hpp's
// words (QualityCounts): the pass that sums the grey image, its Laplacian
// and the colour differences and counts the histograms and brightness
// buckets; the colours of the wanted buckets' pixels; PIL's horizontal
// resampling pass for the thumbnails. Integer arithmetic throughout: the
// host's finishing code then gives the CPU engine's bits.
#pragma once

#include <cub/block/block_scan.cuh>
#include <cub/warp/warp_reduce.cuh>

#include <cstdint>

#include "common/pil_resample.hpp"
#include "common/quality.hpp"
#include "cuda/block/quality_counts.hpp"
#include "cuda/tuning/launch.hpp"

namespace imgstat::cuda {

template <int C>
__device__ __forceinline__ int grey_at(const uint8_t* __restrict__ px, uint32_t w, uint32_t x, uint32_t y, uint3 rgb) {
  const uint8_t* q = px + (static_cast<uint64_t>(y) * w + x) * C;
  if constexpr (C == 1) {
    return q[0];
  } else {
    return static_cast<int>(quality_grey(q[rgb.x], q[rgb.y], q[rgb.z]));
  }
}

// Borders as OpenCV's BORDER_REFLECT_101 (a side of one pixel: itself).
template <int C>
__global__ void __launch_bounds__(kPassThreads)
    quality_counts(const uint8_t* __restrict__ px, uint32_t w, uint32_t h, uint3 rgb, unsigned long long* out) {
  __shared__ unsigned int hist[C * 256];
  for (uint32_t i = threadIdx.x; i < C * 256; i += blockDim.x) hist[i] = 0;
  __syncthreads();
  long long s[kQualitySums] = {};
  unsigned long long unequal = 0;
  const uint64_t n = static_cast<uint64_t>(w) * h;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint32_t y = static_cast<uint32_t>(i / w), x = static_cast<uint32_t>(i - static_cast<uint64_t>(y) * w);
    const long long v = grey_at<C>(px, w, x, y, rgb);
    const long long left = x > 0 ? grey_at<C>(px, w, x - 1, y, rgb) : w > 1 ? grey_at<C>(px, w, 1, y, rgb) : v;
    const long long right = x + 1 < w ? grey_at<C>(px, w, x + 1, y, rgb) : w > 1 ? grey_at<C>(px, w, w - 2, y, rgb) : v;
    const long long up = y > 0 ? grey_at<C>(px, w, x, y - 1, rgb) : h > 1 ? grey_at<C>(px, w, x, 1, rgb) : v;
    const long long down = y + 1 < h ? grey_at<C>(px, w, x, y + 1, rgb) : h > 1 ? grey_at<C>(px, w, x, h - 2, rgb) : v;
    const long long lap = left + right + up + down - 4 * v;
    s[0] += v, s[1] += v * v, s[2] += lap, s[3] += lap * lap;
    const uint8_t* p = px + i * C;
#pragma unroll
    for (int c = 0; c < C; ++c) atomicAdd(&hist[c * 256 + p[c]], 1u);
    if constexpr (C == 3) {
      const uint32_t r = p[rgb.x], g = p[rgb.y], b = p[rgb.z];
      const long long d = static_cast<long long>(r) - g, e = static_cast<long long>(r) + g - 2 * static_cast<long long>(b);
      s[4] += d, s[5] += d * d, s[6] += e, s[7] += e * e;
      unequal += (d != 0) | (e != 0);
      atomicAdd(&out[kQualityBucketsAt + (brightness_key(r, g, b) >> kBrightnessShift)], 1ull);
    }
  }
  using WarpSum = cub::WarpReduce<long long>;
  __shared__ typename WarpSum::TempStorage temp[kPassThreads / 32];
  const int warp = threadIdx.x / 32;
#pragma unroll
  for (uint32_t k = 0; k < kQualitySums; ++k) {
    const long long t = WarpSum(temp[warp]).Sum(s[k]);
    if (threadIdx.x % 32 == 0 && t != 0) atomicAdd(&out[k], static_cast<unsigned long long>(t));
    __syncwarp();
  }
  const long long u = WarpSum(temp[warp]).Sum(static_cast<long long>(unequal));
  if (threadIdx.x % 32 == 0 && u != 0) atomicAdd(&out[kQualityUnequalAt], static_cast<unsigned long long>(u));
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < C * 256; i += blockDim.x)
    if (hist[i]) atomicAdd(&out[kQualityHistAt + i], static_cast<unsigned long long>(hist[i]));
}

// One block: the buckets holding the ranks (as brightness_wanted() finds
// them from the running counts), ascending and distinct, and their pixels.
constexpr int kWantedThreads = 1024;
constexpr int kWantedItems = (kBrightnessBuckets + kWantedThreads - 1) / kWantedThreads;
__global__ void __launch_bounds__(kWantedThreads)
    find_wanted(const unsigned long long* __restrict__ buckets, BrightnessRanks ranks, WantedBuckets* wanted) {
  using Scan = cub::BlockScan<unsigned long long, kWantedThreads>;
  __shared__ typename Scan::TempStorage temp;
  __shared__ uint32_t of_rank[kBrightnessRanks];
  __shared__ unsigned long long first_of_rank[kBrightnessRanks];
  unsigned long long mine[kWantedItems], total = 0;
  const uint32_t first = threadIdx.x * kWantedItems;
#pragma unroll
  for (int j = 0; j < kWantedItems; ++j) {
    mine[j] = first + j < kBrightnessBuckets ? buckets[first + j] : 0;
    total += mine[j];
  }
  unsigned long long start = 0;
  Scan(temp).ExclusiveSum(total, start);
#pragma unroll
  for (int j = 0; j < kWantedItems; ++j) {
    for (int i = 0; i < kBrightnessRanks; ++i)
      if (start <= ranks.rank[i] && ranks.rank[i] < start + mine[j]) of_rank[i] = first + j, first_of_rank[i] = start;
    start += mine[j];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    WantedBuckets w{};
    for (int i = 0; i < kBrightnessRanks; ++i) {  // ranks ascend: so do their buckets
      if (w.count && w.bucket[w.count - 1] == of_rank[i]) continue;
      w.bucket[w.count] = of_rank[i];
      w.first[w.count] = first_of_rank[i];
      w.pixels[w.count] = buckets[of_rank[i]];
      ++w.count;
    }
    *wanted = w;
  }
}

// The colours (r | g << 8 | b << 16) of the pixels in the wanted buckets,
// in any order, into out (room for every pixel).
__global__ void __launch_bounds__(kPassThreads)
    wanted_colours(const uint8_t* __restrict__ px, uint64_t n, uint3 rgb, const WantedBuckets* __restrict__ given,
                   uint32_t* __restrict__ out, unsigned int* next) {
  __shared__ WantedBuckets wanted;
  if (threadIdx.x == 0) wanted = *given;
  __syncthreads();
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint8_t* p = px + i * 3;
    const uint32_t r = p[rgb.x], g = p[rgb.y], b = p[rgb.z];
    const uint32_t k = brightness_key(r, g, b) >> kBrightnessShift;
    bool hit = false;
    for (uint32_t j = 0; j < wanted.count; ++j) hit |= wanted.bucket[j] == k;
    if (!hit) continue;
    out[atomicAdd(next, 1u)] = r | g << 8 | b << 16;
  }
}

// PIL's horizontal pass (Resample.c, 8 bits) over input rows first_row ..
// first_row + rows into rows x xsize pixels of B bands: B = 3 the R, G, B
// channels, B = 1 the one channel or (C = 3) PIL's L of the pixel.
template <int C, int B>
__global__ void __launch_bounds__(kPassThreads)
    pil_horizontal(const uint8_t* __restrict__ px, uint32_t w, uint3 rgb, int first_row, int rows, int xsize,
                   const int* __restrict__ bounds, const int32_t* __restrict__ k, int ksize, uint8_t* __restrict__ out) {
  const uint64_t total = static_cast<uint64_t>(rows) * xsize;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int yy = static_cast<int>(i / xsize), xx = static_cast<int>(i % xsize);
    const int xmin = bounds[2 * xx], xmax = bounds[2 * xx + 1];
    const int32_t* kk = k + static_cast<size_t>(xx) * ksize;
    const uint8_t* q = px + (static_cast<uint64_t>(first_row + yy) * w + xmin) * C;
    int32_t ss[B];
#pragma unroll
    for (int b = 0; b < B; ++b) ss[b] = 1 << (kPilPrecisionBits - 1);
    for (int x = 0; x < xmax; ++x, q += C) {
      if constexpr (B == 3) {
        ss[0] += q[rgb.x] * kk[x], ss[1] += q[rgb.y] * kk[x], ss[2] += q[rgb.z] * kk[x];
      } else if constexpr (C == 3) {
        ss[0] += pil_l(q[rgb.x], q[rgb.y], q[rgb.z]) * kk[x];
      } else {
        ss[0] += q[0] * kk[x];
      }
    }
#pragma unroll
    for (int b = 0; b < B; ++b) {
      const int32_t v = ss[b] >> kPilPrecisionBits;
      out[i * B + b] = static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
    }
  }
}

// PIL's vertical pass over the horizontal pass's rows (the plan's rows from
// first_row on) into ysize x xsize pixels of B bands.
template <int B>
__global__ void __launch_bounds__(kPassThreads)
    pil_vertical(const uint8_t* __restrict__ rows, int first_row, int xsize, int ysize, const int* __restrict__ bounds,
                 const int32_t* __restrict__ k, int ksize, uint8_t* __restrict__ out) {
  const uint64_t total = static_cast<uint64_t>(ysize) * xsize * B;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int b = static_cast<int>(i % B), xx = static_cast<int>((i / B) % xsize), yy = static_cast<int>(i / B / xsize);
    const int ymin = bounds[2 * yy] - first_row, ymax = bounds[2 * yy + 1];
    const int32_t* kk = k + static_cast<size_t>(yy) * ksize;
    int32_t ss = 1 << (kPilPrecisionBits - 1);
    for (int y = 0; y < ymax; ++y) ss += rows[(static_cast<uint64_t>(y + ymin) * xsize + xx) * B + b] * kk[y];
    const int32_t v = ss >> kPilPrecisionBits;
    out[i] = static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
  }
}

}  // namespace imgstat::cuda
