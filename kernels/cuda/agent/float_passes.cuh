// Float samples. Pass 1: each thread keeps count, NaN/Inf counts, min, max and
// sums of (v - shift) and its square in float64 (shift being its first finite
// sample), blocks reduce those by Chan's merge into one partial each, and a
// one-block fold adds the partials to running moments in a fixed order.
// Pass 2: the histogram over [min, max], read from the running moments on the
// device, or over an explicit range.
#pragma once

#include <cub/block/block_reduce.cuh>

#include <cmath>
#include <cstdint>

#include "imgstat/float_moments.hpp"
#include "cuda/agent/fold.cuh"
#include "cuda/agent/int16.cuh"
#include "cuda/block/pixel_steps.cuh"
#include "cuda/block/shared_histogram.cuh"
#include "cuda/block/types.hpp"
#include "imgstat/binning.hpp"

namespace imgstat::cuda {

template <class T>
struct FloatThread {
  uint32_t n = 0, nan = 0, posinf = 0, neginf = 0;
  double shift = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0;
  T min = INFINITY, max = -INFINITY;

  __device__ void add(T v) {
    if (isfinite(v)) {
      const double x = v;
      if (n == 0) shift = x;
      const double d = x - shift;
      const double d2 = d * d;
      s1 += d;
      s2 += d2;
      s3 = fma(d2, d, s3);
      s4 = fma(d2, d2, s4);
      ++n;
      min = v < min ? v : min;
      max = v > max ? v : max;
    } else if (isnan(v)) {
      ++nan;
    } else if (v > 0) {
      ++posinf;
    } else {
      ++neginf;
    }
  }

  __device__ FloatMoments moments() const {
    FloatMoments m = moments_from_shifted(n, shift, s1, s2, s3, s4, min, max, n * shift + s1);
    m.nan = nan;
    m.posinf = posinf;
    m.neginf = neginf;
    return m;
  }
};

template <class T, int C>
__global__ void __launch_bounds__(kPassThreads, 4)
    float_moments_pass(const uint4* __restrict__ data, uint64_t steps, const T* __restrict__ tail,
                       uint32_t tail_samples, FloatMoments* __restrict__ partials) {
  FloatThread<T> t[C];
  // 16-byte loads in flight per thread: 4 to 8.
  for_each_sample<T, C, PixelSteps<T, C>::kVecs >= 3 ? 2 : 4>(data, steps, tail, tail_samples,
                                                            [&](int c, T v) { t[c].add(v); });

  using Reduce = cub::BlockReduce<FloatMoments, kPassThreads>;
  __shared__ typename Reduce::TempStorage temp;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const FloatMoments r = Reduce(temp).Reduce(t[c].moments(), MergeOp());
    __syncthreads();
    if (threadIdx.x == 0) partials[blockIdx.x * C + c] = r;
  }
}

// Bins of float32 samples in float32 arithmetic where that provably gives
// the float64 rule's bin: the float32 bin coordinate is within bins * 2.4e-7
// of the float64 one (a few roundings of 2^-24), so away from a bin edge by
// more than bins * 1e-6 both floor alike; nearer, or when lo and hi are not
// floats, the float64 rule decides. The result is always RangeBinner's.
struct Float32Binner {
  RangeBinner exact;
  float lo, scale, window;
  bool usable;

  __device__ static Float32Binner make(const RangeBinner& b) {
    Float32Binner f;
    f.exact = b;
    f.lo = static_cast<float>(b.lo);
    const float hi = static_cast<float>(b.hi);
    f.usable = static_cast<double>(f.lo) == b.lo && static_cast<double>(hi) == b.hi && b.width > 0;
    f.scale = static_cast<float>(b.bins) / (hi - f.lo);
    f.window = static_cast<float>(b.bins) * 1e-6f;
    return f;
  }

  __device__ uint32_t operator()(float v) const {
    if (usable) {
      const float t = (v - lo) * scale;
      const float fl = floorf(t);
      const float frac = t - fl;
      if (frac >= window && frac <= 1.0f - window) return exact.clamp(fl);  // NaN and Inf fail both tests
    }
    return exact(static_cast<double>(v));
  }
};

template <class T, int C>
__global__ void __launch_bounds__(kPassThreads)
    float_bins_pass(const uint4* __restrict__ data, uint64_t steps, const T* __restrict__ tail, uint32_t tail_samples,
                    HistogramOut h, const FloatMoments* __restrict__ running, uint32_t running_sets, HistPlace place) {
  extern __shared__ uint32_t shared[];
  SharedHistogram hist(shared, h.counts, h.bins, C, place);
  RangeBinner binner[C];
  uint32_t under[C], over[C];
#pragma unroll
  for (int c = 0; c < C; ++c) {
    under[c] = over[c] = 0;
    double lo = h.lo[c], hi = h.hi[c];
    if (!h.explicit_range) {
      lo = INFINITY;
      hi = -INFINITY;
      for (uint32_t k = 0; k < running_sets; ++k) {
        const FloatMoments& m = running[k * kRunningStride + c];
        if (m.n) {
          lo = m.min < lo ? m.min : lo;
          hi = m.max > hi ? m.max : hi;
        }
      }
    }
    binner[c] = RangeBinner::make(lo, hi, h.bins);
  }
  Float32Binner fast[C];
  if constexpr (sizeof(T) == 4)
#pragma unroll
    for (int c = 0; c < C; ++c) fast[c] = Float32Binner::make(binner[c]);
  auto add = [&](int c, T v) {
    if (!isfinite(v)) return;
    const double x = v;
    if (h.explicit_range) {
      if (x < h.lo[c]) {
        ++under[c];
        return;
      }
      if (x >= h.hi[c]) {
        ++over[c];
        return;
      }
    }
    if constexpr (sizeof(T) == 4)
      hist.add(c, fast[c](v));
    else
      hist.add(c, binner[c](x));
  };
  bool wide = false;
  if constexpr (sizeof(T) == 8)
#pragma unroll
    for (int c = 0; c < C; ++c) wide = wide || binner[c].wide();
  if (wide) {  // float64 data spanning more than a double: rare, and kept out of the common loop
    auto add_wide = [&](int c, T v) {
      if (!isfinite(v)) return;
      hist.add(c, binner[c].wide() ? binner[c].exact_wide(v) : binner[c](v));
    };
    for_each_sample<T, C, 2>(data, steps, tail, tail_samples, add_wide);
  } else {
    for_each_sample<T, C, 2>(data, steps, tail, tail_samples, add);
  }
  hist.flush(shared);
  if (h.explicit_range) flush_out_of_range<C, kPassThreads>(under, over, h.underflow, h.overflow);
}

}  // namespace imgstat::cuda
