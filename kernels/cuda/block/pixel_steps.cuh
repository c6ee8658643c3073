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

// Calls f(sample, channel) for a runtime channel with a compile-time index, so
// per-channel register arrays stay in registers.
template <int C, class F>
__device__ __forceinline__ void with_channel(int c, F&& f) {
#pragma unroll
  for (int k = 0; k < C; ++k)
    if (k == c) f(k);
}

}  // namespace imgstat::cuda
