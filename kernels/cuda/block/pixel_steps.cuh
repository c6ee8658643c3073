// A thread's unit of work for multi-byte samples: the fewest whole pixels
// that fill whole 16-byte vectors, so that every sample's channel is a
// compile-time constant.
#pragma once

#include <cstdint>

namespace imgstat::cuda {

constexpr int gcd_int(int a, int b) { return b == 0 ? a : gcd_int(b, a % b); }

template <class T, int C>
struct PixelSteps {
  static constexpr int kPixelBytes = C * static_cast<int>(sizeof(T));
  static constexpr int kBytes = 16 / gcd_int(16, kPixelBytes) * kPixelBytes;
  static constexpr int kVecs = kBytes / 16;
  static constexpr int kSamples = kBytes / static_cast<int>(sizeof(T));
  static constexpr int kPixels = kSamples / C;
};

template <class T, int C>
union Step {
  uint4 v[PixelSteps<T, C>::kVecs];
  T s[PixelSteps<T, C>::kSamples];
};

template <class T, int C>
__device__ __forceinline__ Step<T, C> load_step(const uint4* __restrict__ data, uint64_t step) {
  Step<T, C> u;
#pragma unroll
  for (int j = 0; j < PixelSteps<T, C>::kVecs; ++j) u.v[j] = __ldg(data + step * PixelSteps<T, C>::kVecs + j);
  return u;
}

// Calls f(k) with k == c, k a compile-time index, so that per-channel
// register arrays stay in registers.
template <int C, class F>
__device__ __forceinline__ void with_channel(int c, F&& f) {
#pragma unroll
  for (int k = 0; k < C; ++k)
    if (k == c) f(k);
}

// A thread's share of a grid-stride pass: f(channel, sample) for every sample
// of its steps, U steps' loads in flight at once, then in block 0 the tail
// of samples past the last whole step.
template <class T, int C, int U, class F>
__device__ __forceinline__ void for_each_sample(const uint4* __restrict__ data, uint64_t steps,
                                                const T* __restrict__ tail, uint32_t tail_samples, F&& f) {
  using S = PixelSteps<T, C>;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  uint64_t step = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; step + (U - 1) * stride < steps; step += U * stride) {
    Step<T, C> u[U];
#pragma unroll
    for (int k = 0; k < U; ++k) u[k] = load_step<T, C>(data, step + k * stride);
#pragma unroll
    for (int k = 0; k < U; ++k)
#pragma unroll
      for (int j = 0; j < S::kSamples; ++j) f(j % C, u[k].s[j]);
  }
  for (; step < steps; step += stride) {
    const Step<T, C> u = load_step<T, C>(data, step);
#pragma unroll
    for (int j = 0; j < S::kSamples; ++j) f(j % C, u.s[j]);
  }
  if (blockIdx.x == 0)
    for (uint32_t i = threadIdx.x; i < tail_samples; i += blockDim.x)
      with_channel<C>(static_cast<int>(i % C), [&](int c) { f(c, tail[i]); });
}

}  // namespace imgstat::cuda
