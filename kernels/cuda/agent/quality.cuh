// The quality measures' and the perceptual hash's work on a device image
// of 8-bit pixels with one or three channels, in common/quality.hpp's
// words (QualityCounts): the pass that sums the grey image, its Laplacian
// and the colour differences and counts the histograms and brightness
// buckets (strips of columns down bands of rows); the buckets holding the
// brightness ranks; the colours of their pixels; PIL's resampling passes
// of both thumbnails; the pixel hash's pieces. Three launches, by what each
// needs of another: the counting pass, the thumbnails' horizontal passes
// and the hash's pieces read only the image; the ranks' buckets need the
// counts, the vertical passes the horizontal ones' rows; the colours need
// the buckets. Integer arithmetic throughout: the host's finishing code
// then gives the CPU engine's bits.
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

// OpenCV's borderInterpolate for BORDER_REFLECT_101 one step outside 0 .. n-1
// (a side of one pixel: itself).
__device__ __forceinline__ uint32_t reflect101(long long i, uint32_t n) {
  if (n == 1) return 0;
  if (i < 0) return 1;
  if (i >= n) return n - 2;
  return static_cast<uint32_t>(i);
}

// A block: the strip of columns `strip` down bands of band_rows rows (band
// `band` of `bands`, grid-stride). Each thread holds its column's grey values of
// the rows above, at and below the row (computed once each as the band
// moves down); the row's are shared for the left and right neighbours, the
// strip's edges reflected as OpenCV's BORDER_REFLECT_101. A thread's sums
// of a band fit 32 bits (band_rows <= kQualityMaxBandRows). kHist: the
// channels' histograms too (else the statistics pass's are used).
template <int C, bool kHist>
__device__ __forceinline__ void quality_strip(const uint8_t* __restrict__ px, uint32_t w, uint32_t h, uint3 rgb,
                                              const QualityCountsPass& pass, uint32_t strip, uint32_t band) {
  static_assert(kQualityStripWidth == kPassThreads, "the counting pass shares its launch");
  unsigned long long* out = pass.out;
  unsigned long long* buckets = pass.buckets;
  const uint32_t band_rows = pass.band_rows;
  __shared__ unsigned int hist[kHist ? C * 256 : 1];
  __shared__ int row[kQualityStripWidth + 2];
  if constexpr (kHist) {
    for (uint32_t i = threadIdx.x; i < C * 256; i += blockDim.x) hist[i] = 0;
  }
  const uint32_t x0 = strip * kQualityStripWidth, x = x0 + threadIdx.x;
  const bool inside = x < w;
  const uint32_t last = min(w - x0, static_cast<uint32_t>(kQualityStripWidth)) - 1;  // the strip's last column
  const uint32_t xs = inside ? x : w - 1;  // columns past the image read one and add nothing
  long long s[kQualitySums] = {};
  unsigned long long unequal = 0;
  for (uint32_t y0 = band * band_rows; y0 < h; y0 += pass.bands * band_rows) {
    const uint32_t y1 = min(h, y0 + band_rows);
    int up = grey_at<C>(px, w, xs, reflect101(static_cast<long long>(y0) - 1, h), rgb);
    int mid = grey_at<C>(px, w, xs, y0, rgb);
    int gs = 0, ls = 0, rg = 0, yb = 0;
    uint32_t gsq = 0, lsq = 0, rgq = 0, ybq = 0, uneq = 0;
    for (uint32_t y = y0; y < y1; ++y) {
      const int down = grey_at<C>(px, w, xs, reflect101(static_cast<long long>(y) + 1, h), rgb);
      __syncthreads();  // the last row's neighbours are read
      if (inside) row[threadIdx.x + 1] = mid;  // not past the last column: its neighbour's place
      if (threadIdx.x == 0) row[0] = grey_at<C>(px, w, reflect101(static_cast<long long>(x0) - 1, w), y, rgb);
      if (threadIdx.x == last) row[last + 2] = grey_at<C>(px, w, reflect101(static_cast<long long>(x) + 1, w), y, rgb);
      __syncthreads();
      if (inside) {
        const int lap = row[threadIdx.x] + row[threadIdx.x + 2] + up + down - 4 * mid;
        gs += mid, gsq += static_cast<uint32_t>(mid * mid), ls += lap, lsq += static_cast<uint32_t>(lap * lap);
        const uint8_t* p = px + (static_cast<uint64_t>(y) * w + x) * C;
        if constexpr (kHist) {
#pragma unroll
          for (int c = 0; c < C; ++c) atomicAdd(&hist[c * 256 + p[c]], 1u);
        }
        if constexpr (C == 3) {
          const int r = p[rgb.x], g = p[rgb.y], b = p[rgb.z];
          const int d = r - g, e = r + g - 2 * b;
          rg += d, rgq += static_cast<uint32_t>(d * d), yb += e, ybq += static_cast<uint32_t>(e * e);
          uneq += (d != 0) | (e != 0);
          atomicAdd(&buckets[brightness_key(r, g, b) >> kBrightnessShift], 1ull);
        }
      }
      up = mid, mid = down;
    }
    s[0] += gs, s[1] += gsq, s[2] += ls, s[3] += lsq, s[4] += rg, s[5] += rgq, s[6] += yb, s[7] += ybq;
    unequal += uneq;
  }
  using WarpSum = cub::WarpReduce<long long>;
  __shared__ typename WarpSum::TempStorage temp[kQualityStripWidth / 32];
  const int warp = threadIdx.x / 32;
#pragma unroll
  for (uint32_t k = 0; k < kQualitySums; ++k) {
    const long long t = WarpSum(temp[warp]).Sum(s[k]);
    if (threadIdx.x % 32 == 0 && t != 0) atomicAdd(&out[k], static_cast<unsigned long long>(t));
    __syncwarp();
  }
  const long long u = WarpSum(temp[warp]).Sum(static_cast<long long>(unequal));
  if (threadIdx.x % 32 == 0 && u != 0) atomicAdd(&out[kQualityUnequalAt], static_cast<unsigned long long>(u));
  if constexpr (kHist) {
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < C * 256; i += blockDim.x)
      if (hist[i]) atomicAdd(&out[kQualityHistAt + i], static_cast<unsigned long long>(hist[i]));
  }
}

// One block: the buckets holding the ranks (as brightness_wanted() finds
// them from the running counts), ascending and distinct, and their pixels;
// the buckets left zeroed for the next image.
constexpr int kWantedThreads = 1024;
constexpr int kWantedItems = (kBrightnessBuckets + kWantedThreads - 1) / kWantedThreads;
__device__ __forceinline__ void find_wanted(unsigned long long* __restrict__ buckets, const BrightnessRanks& ranks,
                                            WantedBuckets* wanted) {
  using Scan = cub::BlockScan<unsigned long long, kWantedThreads>;
  __shared__ typename Scan::TempStorage temp;
  __shared__ uint32_t of_rank[kBrightnessRanks];
  __shared__ unsigned long long first_of_rank[kBrightnessRanks], pixels_of_rank[kBrightnessRanks];
  unsigned long long mine[kWantedItems], total = 0;
  const uint32_t first = threadIdx.x * kWantedItems;
#pragma unroll
  for (int j = 0; j < kWantedItems; ++j) {
    mine[j] = first + j < kBrightnessBuckets ? buckets[first + j] : 0;
    if (mine[j]) buckets[first + j] = 0;
    total += mine[j];
  }
  unsigned long long start = 0;
  Scan(temp).ExclusiveSum(total, start);
  // Only the few threads whose buckets hold a rank look at them one by one.
  bool holds = false;
  for (int i = 0; i < kBrightnessRanks; ++i) holds |= start <= ranks.rank[i] && ranks.rank[i] < start + total;
  if (holds) {
#pragma unroll
    for (int j = 0; j < kWantedItems; ++j) {
      for (int i = 0; i < kBrightnessRanks; ++i)
        if (start <= ranks.rank[i] && ranks.rank[i] < start + mine[j])
          of_rank[i] = first + j, first_of_rank[i] = start, pixels_of_rank[i] = mine[j];
      start += mine[j];
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    WantedBuckets w{};
    for (int i = 0; i < kBrightnessRanks; ++i) {  // ranks ascend: so do their buckets
      if (w.count && w.bucket[w.count - 1] == of_rank[i]) continue;
      w.bucket[w.count] = of_rank[i];
      w.first[w.count] = first_of_rank[i];
      w.pixels[w.count] = pixels_of_rank[i];
      ++w.count;
    }
    *wanted = w;
  }
}

// The colours (r | g << 8 | b << 16) of the pixels in the wanted buckets,
// in any order, into out (room for every pixel): block `block` of `blocks`.
__device__ __forceinline__ void wanted_colours(const uint8_t* __restrict__ px, uint64_t n, uint3 rgb,
                                               const WantedBuckets* __restrict__ given, uint32_t* __restrict__ out,
                                               unsigned int* next, uint32_t block, uint32_t blocks) {
  __shared__ WantedBuckets wanted;
  if (threadIdx.x == 0) wanted = *given;
  __syncthreads();
  const uint64_t stride = static_cast<uint64_t>(blocks) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(block) * blockDim.x + threadIdx.x; i < n; i += stride) {
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
// channels, B = 1 the one channel or (C = 3) PIL's L of the pixel. Block
// `block` of `blocks`.
template <int C, int B>
__device__ __forceinline__ void pil_horizontal(const uint8_t* __restrict__ px, uint32_t w, uint3 rgb,
                                               const ThumbnailPass& t, uint32_t block, uint32_t blocks) {
  const uint64_t total = static_cast<uint64_t>(t.rows) * t.xsize;
  const uint64_t stride = static_cast<uint64_t>(blocks) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(block) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int yy = static_cast<int>(i / t.xsize), xx = static_cast<int>(i % t.xsize);
    const int xmin = t.h_bounds[2 * xx], xmax = t.h_bounds[2 * xx + 1];
    const int32_t* kk = t.h_k + static_cast<size_t>(xx) * t.h_ksize;
    const uint8_t* q = px + (static_cast<uint64_t>(t.first_row + yy) * w + xmin) * C;
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
      t.rows_out[i * B + b] = static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
    }
  }
}

// PIL's vertical pass over the horizontal pass's rows (the plan's rows from
// first_row on) into ysize x xsize pixels of B bands. Block `block` of `blocks`.
template <int B>
__device__ __forceinline__ void pil_vertical(const ThumbnailPass& t, uint32_t block, uint32_t blocks) {
  const uint64_t total = static_cast<uint64_t>(t.ysize) * t.xsize * B;
  const uint64_t stride = static_cast<uint64_t>(blocks) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(block) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int b = static_cast<int>(i % B), xx = static_cast<int>((i / B) % t.xsize), yy = static_cast<int>(i / B / t.xsize);
    const int ymin = t.v_bounds[2 * yy] - t.first_row, ymax = t.v_bounds[2 * yy + 1];
    const int32_t* kk = t.v_k + static_cast<size_t>(yy) * t.v_ksize;
    int32_t ss = 1 << (kPilPrecisionBits - 1);
    for (int y = 0; y < ymax; ++y) ss += t.rows_out[(static_cast<uint64_t>(y + ymin) * t.xsize + xx) * B + b] * kk[y];
    const int32_t v = ss >> kPilPrecisionBits;
    t.out[i] = static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
  }
}

// Eight bytes of the pixel hash's input: where they are samples stored in
// the reported order (one channel, or R, G, B as stored) at an 8-byte
// aligned start, by two aligned loads; else byte by byte.
struct PixelHashWords {
  PixelHashInput in;
  bool words;
  __device__ __forceinline__ uint64_t operator()(uint64_t at) const {
    if (words && at >= in.header_bytes) {
      const uint64_t t = at - in.header_bytes, a = t & ~uint64_t{7};
      if (a + 16 <= in.sample_bytes) {
        const auto* p = reinterpret_cast<const unsigned long long*>(in.px + a);
        const unsigned long long lo = __ldg(p), hi = __ldg(p + 1);
        const unsigned shift = static_cast<unsigned>(t & 7) * 8;
        return shift ? (lo >> shift) | (hi << (64 - shift)) : lo;
      }
    }
    return in(at);
  }
};

// The pixel hash's additions (PixelHashPass): one item a piece and lane,
// grid-stride over block `block` of `blocks`, the secret read from shared
// memory.
__device__ __forceinline__ void pixel_hash_adds(const PixelHashPass& p, uint32_t block, uint32_t blocks) {
  __shared__ uint8_t secret[kXxh3SecretSize];
  for (uint32_t i = threadIdx.x; i < kXxh3SecretSize; i += blockDim.x) secret[i] = p.secret[i];
  __syncthreads();
  const PixelHashWords read{p.input, (p.input.channels == 1 || (p.input.order0 == 0 && p.input.order1 == 1 &&
                                                                 p.input.order2 == 2)) &&
                                         reinterpret_cast<uintptr_t>(p.input.px) % 8 == 0};
  const uint64_t items = xxh3_pieces(p.len) * kXxh3Lanes;
  const uint64_t stride = static_cast<uint64_t>(blocks) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(block) * blockDim.x + threadIdx.x; i < items; i += stride)
    p.adds[i] = xxh3_piece_add(read, p.len, secret, i / kXxh3Lanes, static_cast<int>(i % kXxh3Lanes));
}

// The first launch: what reads only the image, its blocks split in this
// order between the counting pass, the blurriness thumbnail's horizontal
// pass (B = C bands), the perceptual one's (PIL's L) and the pixel hash's
// additions.
template <int C, bool kHist>
__global__ void __launch_bounds__(kPassThreads)
    measures_first(const uint8_t* __restrict__ px, uint32_t w, uint32_t h, uint3 rgb, QualityCountsPass counts,
                   ThumbnailPass blur, ThumbnailPass phash, PixelHashPass hash) {
  uint32_t b = blockIdx.x;
  if (b < counts.blocks) {
    quality_strip<C, kHist>(px, w, h, rgb, counts, b % counts.strips, b / counts.strips);
    return;
  }
  b -= counts.blocks;
  if (b < blur.blocks) {
    pil_horizontal<C, C>(px, w, rgb, blur, b, blur.blocks);
    return;
  }
  b -= blur.blocks;
  if (b < phash.blocks) {
    pil_horizontal<C, 1>(px, w, rgb, phash, b, phash.blocks);
    return;
  }
  pixel_hash_adds(hash, b - phash.blocks, hash.blocks);
}

// The second: the buckets holding the brightness ranks (block 0 where
// wanted_blocks is 1) and both thumbnails' vertical passes (blur:
// BlurBands).
template <int BlurBands>
__global__ void __launch_bounds__(kWantedThreads)
    measures_second(unsigned long long* buckets, BrightnessRanks ranks, WantedBuckets* wanted, uint32_t wanted_blocks,
                    ThumbnailPass blur, ThumbnailPass phash) {
  uint32_t b = blockIdx.x;
  if (b < wanted_blocks) {
    find_wanted(buckets, ranks, wanted);
    return;
  }
  b -= wanted_blocks;
  if (b < blur.blocks) {
    pil_vertical<BlurBands>(blur, b, blur.blocks);
    return;
  }
  pil_vertical<1>(phash, b - blur.blocks, phash.blocks);
}

// The third, colour images' quality: the wanted buckets' colours.
__global__ void __launch_bounds__(kPassThreads)
    measures_colours(const uint8_t* __restrict__ px, uint64_t n, uint3 rgb, const WantedBuckets* __restrict__ wanted,
                     uint32_t* __restrict__ colours, unsigned int* next) {
  wanted_colours(px, n, rgb, wanted, colours, next, blockIdx.x, gridDim.x);
}

}  // namespace imgstat::cuda
