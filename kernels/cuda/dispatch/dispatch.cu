// Launch shapes and template instantiation for every pass: the only place
// that knows grid sizes, shared-memory budgets and which kernel fits which
// input.
#include <algorithm>
#include <mutex>

#include "cuda/tuning/launch.hpp"
#include "cuda/agent/extras.cuh"
#include "cuda/agent/float_passes.cuh"
#include "cuda/agent/hist8.cuh"
#include "cuda/agent/int16.cuh"
#include "cuda/cuda_check.hpp"
#include "cuda/dispatch/dispatch.hpp"

namespace imgstat::cuda {
namespace {


template <class T>
T* as(const uint8_t* p) {
  return reinterpret_cast<T*>(const_cast<uint8_t*>(p));
}

// Kernels that want more than 48 KiB of dynamic shared memory must say so
// once per kernel.
template <class Kernel>
void allow_shared(Kernel kernel, size_t bytes) {
  if (bytes > (48 << 10)) IMGSTAT_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

struct HistogramSite {
  HistPlace place;
  size_t shared_bytes;
};

HistogramSite place_histogram(uint32_t bins, uint32_t channels, bool wanted) {
  const size_t one = static_cast<size_t>(bins) * channels * 4;
  if (!wanted) return {HistPlace::kBlock, 0};
  if (one * (kPassThreads / 32) <= kWarpCopiesBytes) return {HistPlace::kWarp, one * (kPassThreads / 32)};
  if (one <= kBlockCopyBytes) return {HistPlace::kBlock, one};
  return {HistPlace::kGlobal, 0};
}

// One wave of as many blocks as the SMs hold at once (persistent
// grid-stride blocks), fewer for small inputs.
template <class Kernel>
int blocks_per_sm(Kernel kernel, size_t shared) {
  int per_sm = 0;
  IMGSTAT_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kPassThreads, shared));
  return std::clamp(per_sm, 1, kBlocksPerSm);
}

unsigned pass_grid(int per_sm, uint64_t steps, const DeviceInfo& dev) {
  const uint64_t wanted = (steps + kPassThreads - 1) / kPassThreads;
  return static_cast<unsigned>(std::clamp<uint64_t>(wanted, 1, static_cast<uint64_t>(dev.sm_count) * per_sm));
}

__global__ void reset_results(unsigned long long* counts, uint64_t count_n, unsigned long long* under,
                              unsigned long long* over, uint32_t channels, IntAccum* ints, FloatMoments* running,
                              uint32_t running_n) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const uint64_t i0 = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (uint64_t i = i0; i < count_n; i += stride) counts[i] = 0;
  if (i0 < channels) {
    if (under) under[i0] = 0;
    if (over) over[i0] = 0;
    if (ints) ints[i0] = IntAccum{0xffffffffu, 0, 0, 0, 0};
  }
  for (uint64_t i = i0; i < running_n; i += stride) running[i] = FloatMoments{};
}

template <int C, int kCopies>
void hist8_c(const uint8_t* data, uint64_t pixels, unsigned long long* counts, const DeviceInfo& dev,
             cudaStream_t stream, bool one_block) {
  constexpr uint64_t kStepBytes = Hist8Step<C>::kBytes;
  const uint64_t bytes = pixels * C, steps = bytes / kStepBytes;
  constexpr size_t shared = hist8_shared_bytes<C, kCopies>();
  static const int per_sm = [] {
    allow_shared(hist8_warp<C, kCopies>, shared);
    int n = 0;
    IMGSTAT_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, hist8_warp<C, kCopies>, kHist8Threads, shared));
    return std::max(n, 1);
  }();
  const unsigned grid = one_block ? 1u
                                  : static_cast<unsigned>(std::clamp<uint64_t>(
                                        (steps + kHist8Threads - 1) / kHist8Threads, 1, uint64_t(dev.sm_count) * per_sm));
  hist8_warp<C, kCopies><<<grid, kHist8Threads, shared, stream>>>(reinterpret_cast<const uint4*>(data), steps,
                                                            data + steps * kStepBytes,
                                                            static_cast<uint32_t>(bytes - steps * kStepBytes), counts,
                                                            one_block, typename RawBytes<C>::Params{});
  IMGSTAT_CUDA_LAUNCHED("hist8_warp");
}


template <int C, bool kSigned, bool kDefault>
void int16_launch(const uint8_t* data, uint64_t pixels, IntAccum* accum, const HistogramOut& h, const DeviceInfo& dev,
                  cudaStream_t stream) {
  using S = PixelSteps<uint16_t, C>;
  const HistogramSite p = kDefault ? HistogramSite{HistPlace::kWarp, size_t{kPassThreads / 32} * C * 256 * 4}
                               : place_histogram(h.bins, C, h.counts != nullptr);
  const int per_sm = blocks_per_sm(int16_pass<C, kSigned, kDefault>, p.shared_bytes);
  const uint64_t threads = uint64_t(dev.sm_count) * per_sm * kPassThreads;
  // Below the bound even for the remainder pieces: whole steps, and the
  // block-0 tail handled by few threads.
  const uint64_t launch_pixels = std::max<uint64_t>(S::kPixels, threads * (kInt16ThreadSamples / 2) / C / S::kPixels * S::kPixels);
  for (uint64_t done = 0; done < pixels;) {
    const uint64_t n = std::min(launch_pixels, pixels - done);
    const uint8_t* at = data + done * C * 2;
    const uint64_t steps = n / S::kPixels;
    const uint32_t tail = static_cast<uint32_t>((n % S::kPixels) * C);
    const unsigned grid = pass_grid(per_sm, steps, dev);
    int16_pass<C, kSigned, kDefault><<<grid, kPassThreads, p.shared_bytes, stream>>>(
        reinterpret_cast<const uint4*>(at), steps, as<uint16_t>(at) + steps * S::kSamples, tail, accum, h, p.place);
    IMGSTAT_CUDA_LAUNCHED("int16_pass");
    done += n;
  }
}

template <int C>
void int16_c(const uint8_t* data, uint64_t pixels, bool is_signed, IntAccum* accum, const HistogramOut& h,
             const DeviceInfo& dev, cudaStream_t stream) {
  const bool default_histogram = h.counts && h.bins == 256 && !h.explicit_range;
  if (is_signed)
    default_histogram ? int16_launch<C, true, true>(data, pixels, accum, h, dev, stream)
                      : int16_launch<C, true, false>(data, pixels, accum, h, dev, stream);
  else
    default_histogram ? int16_launch<C, false, true>(data, pixels, accum, h, dev, stream)
                      : int16_launch<C, false, false>(data, pixels, accum, h, dev, stream);
}

template <class T, int C>
void float_moments_c(const uint8_t* data, uint64_t pixels, FloatMoments* partials, FloatMoments* running,
                     const DeviceInfo& dev, cudaStream_t stream) {
  using S = PixelSteps<T, C>;
  const uint64_t steps = pixels / S::kPixels;
  const uint32_t tail = static_cast<uint32_t>((pixels % S::kPixels) * C);
  static const int per_sm = blocks_per_sm(float_moments_pass<T, C>, 0);
  const unsigned grid = pass_grid(per_sm, steps, dev);
  float_moments_pass<T, C><<<grid, kPassThreads, 0, stream>>>(reinterpret_cast<const uint4*>(data), steps,
                                                              as<T>(data) + steps * S::kSamples, tail, partials);
  IMGSTAT_CUDA_LAUNCHED("float_moments_pass");
  fold_partials<FloatMoments, C, kPassThreads><<<1, kPassThreads, 0, stream>>>(partials, grid, running);
  IMGSTAT_CUDA_LAUNCHED("fold_partials");
}

template <class T, int C>
void float_bins_c(const uint8_t* data, uint64_t pixels, const HistogramOut& h, const FloatMoments* running,
                  uint32_t running_sets, const DeviceInfo& dev, cudaStream_t stream) {
  using S = PixelSteps<T, C>;
  const uint64_t steps = pixels / S::kPixels;
  const uint32_t tail = static_cast<uint32_t>((pixels % S::kPixels) * C);
  const HistogramSite p = place_histogram(h.bins, C, true);
  const unsigned grid = pass_grid(blocks_per_sm(float_bins_pass<T, C>, p.shared_bytes), steps, dev);
  float_bins_pass<T, C><<<grid, kPassThreads, p.shared_bytes, stream>>>(
      reinterpret_cast<const uint4*>(data), steps, as<T>(data) + steps * S::kSamples, tail, h, running, running_sets,
      p.place);
  IMGSTAT_CUDA_LAUNCHED("float_bins_pass");
}

template <template <int> class F, class... Args>
void by_channels(uint32_t channels, Args&&... args) {
  switch (channels) {
    case 1: return F<1>::run(args...);
    case 2: return F<2>::run(args...);
    case 3: return F<3>::run(args...);
    case 4: return F<4>::run(args...);
  }
  fail(ErrorCode::kInvalidArgument, "channels must be 1 to 4");
}

template <int C>
struct Hist8 {
  static void run(const uint8_t* data, uint64_t pixels, unsigned long long* counts, const DeviceInfo& dev,
                  cudaStream_t stream, int copies, bool one_block) {
    if (copies == 1)
      hist8_c<C, 1>(data, pixels, counts, dev, stream, one_block);
    else
      hist8_c<C, 2>(data, pixels, counts, dev, stream, one_block);
  }
};
template <int C>
struct Int16 {
  template <class... A>
  static void run(A&&... a) { int16_c<C>(a...); }
};
template <int C>
struct FloatMomentsF32 {
  template <class... A>
  static void run(A&&... a) { float_moments_c<float, C>(a...); }
};
template <int C>
struct FloatMomentsF64 {
  template <class... A>
  static void run(A&&... a) { float_moments_c<double, C>(a...); }
};
template <int C>
struct FloatBinsF32 {
  template <class... A>
  static void run(A&&... a) { float_bins_c<float, C>(a...); }
};
template <int C>
struct FloatBinsF64 {
  template <class... A>
  static void run(A&&... a) { float_bins_c<double, C>(a...); }
};

// The extras' grid: one wave, fewer for small inputs.
unsigned extras_grid(uint64_t pixels, const DeviceInfo& dev) {
  return static_cast<unsigned>(
      std::clamp<uint64_t>((pixels + kPassThreads - 1) / kPassThreads, 1, uint64_t(dev.sm_count) * kBlocksPerSm));
}

template <class T, int C>
void extremes_c(const uint8_t* data, uint64_t pixels, uint64_t first, Extremes* partials, Extremes* running,
                const DeviceInfo& dev, cudaStream_t stream) {
  const unsigned grid = extras_grid(pixels, dev);
  extremes_pass<T, C><<<grid, kPassThreads, 0, stream>>>(as<T>(data), pixels, first, partials);
  IMGSTAT_CUDA_LAUNCHED("extremes_pass");
  fold_partials<Extremes, C, kPassThreads><<<1, kPassThreads, 0, stream>>>(partials, grid, running);
  IMGSTAT_CUDA_LAUNCHED("fold_partials");
}

// Calls f with a value of the C++ type of samples of type t.
template <class F>
void with_sample_type(SampleType t, F&& f) {
  switch (t) {
    case SampleType::kUint8: return f(uint8_t{});
    case SampleType::kInt8: return f(int8_t{});
    case SampleType::kUint16: return f(uint16_t{});
    case SampleType::kInt16: return f(int16_t{});
    case SampleType::kFloat32: return f(float{});
    case SampleType::kFloat64: return f(double{});
  }
}

template <int C>
struct ExtremesOf {
  static void run(SampleType type, const uint8_t* data, uint64_t pixels, uint64_t first, Extremes* partials,
                  Extremes* running, const DeviceInfo& dev, cudaStream_t stream) {
    with_sample_type(type, [&](auto sample) {
      extremes_c<decltype(sample), C>(data, pixels, first, partials, running, dev, stream);
    });
  }
};

template <int C>
struct ColorsOf {
  static void run(const uint8_t* data, uint64_t pixels, unsigned long long* bits, const DeviceInfo& dev,
                  cudaStream_t stream) {
    colors_pass<C><<<extras_grid(pixels, dev), kPassThreads, 0, stream>>>(data, pixels, bits);
    IMGSTAT_CUDA_LAUNCHED("colors_pass");
  }
};

template <class T, int C>
void luminance_c(const uint8_t* data, uint64_t pixels, int64_t lo, uint3 rgb, void* out, const DeviceInfo& dev,
                 cudaStream_t stream) {
  luminance_pass<T, C><<<extras_grid(pixels, dev), kPassThreads, 0, stream>>>(as<T>(data), pixels, lo, rgb, out);
  IMGSTAT_CUDA_LAUNCHED("luminance_pass");
}

template <int C>
struct LuminanceOf {
  static void run(SampleType type, const uint8_t* data, uint64_t pixels, uint3 rgb, void* out, const DeviceInfo& dev,
                  cudaStream_t stream) {
    if constexpr (C >= 3) {
      const int64_t lo = type_lo(type);
      return with_sample_type(type, [&](auto sample) {
        luminance_c<decltype(sample), C>(data, pixels, lo, rgb, out, dev, stream);
      });
    }
    fail(ErrorCode::kInvalidArgument, "luminance needs 3 or 4 channels");
  }
};

}  // namespace

void launch_extremes(const uint8_t* data, uint64_t pixels, uint64_t first, uint32_t channels, SampleType type,
                     Extremes* partials, Extremes* running, const DeviceInfo& dev, cudaStream_t stream) {
  if (pixels == 0) return;
  by_channels<ExtremesOf>(channels, type, data, pixels, first, partials, running, dev, stream);
}

void launch_colors(const uint8_t* data, uint64_t pixels, uint32_t channels, unsigned long long* bits,
                   const DeviceInfo& dev, cudaStream_t stream) {
  if (pixels == 0) return;
  by_channels<ColorsOf>(channels, data, pixels, bits, dev, stream);
}

void launch_luminance(const uint8_t* data, uint64_t pixels, uint32_t channels, SampleType type, const uint32_t* rgb,
                      void* out, const DeviceInfo& dev, cudaStream_t stream) {
  if (pixels == 0) return;
  by_channels<LuminanceOf>(channels, type, data, pixels, make_uint3(rgb[0], rgb[1], rgb[2]), out, dev, stream);
}

void launch_reset(const HistogramOut& h, uint32_t channels, IntAccum* ints, FloatMoments* running,
                  uint32_t running_count, cudaStream_t stream) {
  reset_results<<<32, 256, 0, stream>>>(h.counts, static_cast<uint64_t>(h.bins) * channels, h.underflow, h.overflow,
                                        channels, ints, running, running_count);
  IMGSTAT_CUDA_LAUNCHED("reset_results");
}

void launch_hist8(const uint8_t* data, uint64_t pixels, uint32_t channels, unsigned long long* counts,
                  const DeviceInfo& dev, cudaStream_t stream, int copies) {
  if (pixels == 0) return;
  by_channels<Hist8>(channels, data, pixels, counts, dev, stream, copies, false);
}

void launch_hist8_one_block(const uint8_t* data, uint64_t pixels, uint32_t channels, unsigned long long* counts,
                            cudaStream_t stream) {
  by_channels<Hist8>(channels, data, pixels, counts, DeviceInfo{1}, stream, kHist8Copies, true);
}

void launch_int16(const uint8_t* data, uint64_t pixels, uint32_t channels, bool is_signed, IntAccum* accum,
                  const HistogramOut& h, const DeviceInfo& dev, cudaStream_t stream) {
  if (pixels == 0) return;
  by_channels<Int16>(channels, data, pixels, is_signed, accum, h, dev, stream);
}

size_t float_partials_needed(uint32_t channels, const DeviceInfo& dev) {
  return static_cast<size_t>(dev.sm_count) * kBlocksPerSm * channels;
}

void launch_float_moments(const uint8_t* data, uint64_t pixels, uint32_t channels, SampleType type,
                          FloatMoments* partials, FloatMoments* running, const DeviceInfo& dev,
                          cudaStream_t stream) {
  if (pixels == 0) return;
  if (type == SampleType::kFloat32)
    by_channels<FloatMomentsF32>(channels, data, pixels, partials, running, dev, stream);
  else
    by_channels<FloatMomentsF64>(channels, data, pixels, partials, running, dev, stream);
}

void launch_float_bins(const uint8_t* data, uint64_t pixels, uint32_t channels, SampleType type,
                       const HistogramOut& h, const FloatMoments* running, uint32_t running_sets,
                       const DeviceInfo& dev, cudaStream_t stream) {
  if (pixels == 0) return;
  if (type == SampleType::kFloat32)
    by_channels<FloatBinsF32>(channels, data, pixels, h, running, running_sets, dev, stream);
  else
    by_channels<FloatBinsF64>(channels, data, pixels, h, running, running_sets, dev, stream);
}

}  // namespace imgstat::cuda
