// The quality measures' and the perceptual hash's work on a device image
// of 8-bit pixels with one or three channels, in common/quality.hpp's
// words (QualityCounts): the pass that sums the grey image, its Laplacian
// and the colour differences and counts the histograms and brightness
// buckets; the colours of the wanted buckets' pixels; PIL's horizontal
// resampling pass for the thumbnails. Integer arithmetic throughout: the
// host's finishing code then gives the CPU engine's bits.
#pragma once

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

// The colours (r | g << 8 | b << 16) of the pixels in the wanted buckets,
// in any order; the host sized `out` from the buckets' counts.
__global__ void __launch_bounds__(kPassThreads)
    wanted_colours(const uint8_t* __restrict__ px, uint64_t n, uint3 rgb, WantedBuckets wanted,
                   uint32_t* __restrict__ out, unsigned int* next, uint32_t capacity) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint8_t* p = px + i * 3;
    const uint32_t r = p[rgb.x], g = p[rgb.y], b = p[rgb.z];
    const uint32_t k = brightness_key(r, g, b) >> kBrightnessShift;
    bool hit = false;
    for (uint32_t j = 0; j < wanted.count; ++j) hit |= wanted.bucket[j] == k;
    if (!hit) continue;
    const unsigned int at = atomicAdd(next, 1u);
    if (at < capacity) out[at] = r | g << 8 | b << 16;
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

}  // namespace imgstat::cuda
