// Launch shapes for colour conversion and joint histograms: persistent
// grid-stride blocks, the joint histogram's counters in shared memory up
// to kJointSharedBytes.
#include <algorithm>
#include <mutex>

#include "cuda/tuning/launch.hpp"
#include "common/colour.hpp"
#include "cuda/agent/colour.cuh"
#include "cuda/agent/hist8.cuh"
#include "cuda/agent/joint.cuh"
#include "cuda/agent/parts.cuh"
#include "cuda/cuda_check.hpp"
#include "cuda/dispatch/dispatch.hpp"
#include "imgstat/binning.hpp"

namespace imgstat::cuda {
namespace {

constexpr int kMaxDevices = 64;

// `bytes` of host data copied once per device into device memory that
// lives with the process; `slot` tells the tables apart.
const void* per_device(int slot, const void* host, size_t bytes) {
  static std::mutex mu;
  static void* copies[2][kMaxDevices] = {};
  int device = 0;
  IMGSTAT_CUDA(cudaGetDevice(&device));
  if (device < 0 || device >= kMaxDevices) fail(ErrorCode::kInternal, "CUDA device ordinal past the colour tables'");
  std::lock_guard<std::mutex> lock(mu);
  void*& p = copies[slot][device];
  if (!p) {
    void* d = nullptr;
    IMGSTAT_CUDA(cudaMalloc(&d, bytes));
    IMGSTAT_CUDA(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    p = d;
  }
  return p;
}

// The tables of the uint8 conversions, and float Lab's 33^3 table.
const ColourTables* device_tables() {
  return static_cast<const ColourTables*>(per_device(0, &colour_tables(), sizeof(ColourTables)));
}
const int16_t* device_lab_table() {
  return static_cast<const int16_t*>(
      per_device(1, lab_f_table(), sizeof(int16_t) * kLabGrid * kLabGrid * kLabGrid * 3));
}

unsigned grid_for(uint64_t pixels, const DeviceInfo& dev) {
  const uint64_t wanted = (pixels + kColourThreads - 1) / kColourThreads;
  return static_cast<unsigned>(std::clamp<uint64_t>(wanted, 1, static_cast<uint64_t>(dev.sm_count) * kColourBlocksPerSm));
}

template <int C>
void convert_f_c(ColourSpace space, const float* data, uint64_t pixels, const uint32_t* rgb, const int16_t* lab,
                 float* out, unsigned grid, cudaStream_t stream) {
  with_colour_space(space, [&](auto s) {
    convert_f<decltype(s)::value, C><<<grid, kColourThreads, 0, stream>>>(data, pixels, rgb[0], rgb[1], rgb[2], lab, out);
  });
}

template <int C>
void convert_c(ColourSpace space, const uint8_t* data, uint64_t pixels, const uint32_t* rgb, const ColourTables* t,
               uint8_t* out, unsigned grid, cudaStream_t stream) {
  with_colour_space(space, [&](auto s) {
    convert8<decltype(s)::value, C><<<grid, kColourThreads, 0, stream>>>(data, pixels, rgb[0], rgb[1], rgb[2], t, out);
  });
}

template <class Bins>
void joint_launch(const uint8_t* data, uint64_t pixels, const Bins& j, uint32_t bins, unsigned long long* counts,
                  unsigned long long* outside, const DeviceInfo& dev, cudaStream_t stream) {
  const size_t shared = static_cast<size_t>(bins) * 4;
  if (shared <= kJointSharedBytes) {
    static std::once_flag allowed;
    std::call_once(allowed, [] {
      IMGSTAT_CUDA(cudaFuncSetAttribute(joint_pass<true, Bins>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(kJointSharedBytes)));
    });
    // Fewer, fuller blocks when the counters are large: each block clears
    // and flushes all of them.
    const unsigned per_sm = static_cast<unsigned>(std::clamp<size_t>((228 << 10) / (shared + 1024), 1, 2));
    const uint64_t wanted = (pixels + kJointThreads - 1) / kJointThreads;
    const unsigned grid = static_cast<unsigned>(std::clamp<uint64_t>(wanted, 1, static_cast<uint64_t>(dev.sm_count) * per_sm));
    joint_pass<true, Bins><<<grid, kJointThreads, shared, stream>>>(data, pixels, j, bins, counts, outside);
  } else {
    joint_pass<false, Bins><<<grid_for(pixels, dev), kColourThreads, 0, stream>>>(data, pixels, j, bins, counts, outside);
  }
}

// The 8-bit pass with the conversion as its pixel step: one histogram per
// warp, as many blocks as fit.
template <ColourSpace S, int C, int kOrder>
void hist8_colour_launch(const uint8_t* data, uint64_t pixels, const typename ColourStep<S, C, kOrder>::Params& p,
                         unsigned long long* counts, const DeviceInfo& dev, cudaStream_t stream) {
  using Step = ColourStep<S, C, kOrder>;
  constexpr uint64_t kStepBytes = Hist8Step<C>::kBytes;
  constexpr size_t shared = hist8_shared_bytes<Step::kChannels, 1>();
  const uint64_t bytes = pixels * C, steps = bytes / kStepBytes;
  static const int per_sm = [] {
    int n = 0;
    IMGSTAT_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, hist8_warp<C, 1, Step>, kHist8Threads, shared));
    return std::max(n, 1);
  }();
  const unsigned grid = static_cast<unsigned>(
      std::clamp<uint64_t>((steps + kHist8Threads - 1) / kHist8Threads, 1, static_cast<uint64_t>(dev.sm_count) * per_sm));
  hist8_warp<C, 1, Step><<<grid, kHist8Threads, shared, stream>>>(reinterpret_cast<const uint4*>(data), steps,
                                                                  data + steps * kStepBytes,
                                                                  static_cast<uint32_t>(bytes - steps * kStepBytes),
                                                                  counts, false, p);
}

template <int C>
void hist8_colour_c(ColourSpace space, const uint8_t* data, uint64_t pixels, const uint32_t* rgb,
                    const ColourTables* t, unsigned long long* counts, const DeviceInfo& dev, cudaStream_t stream) {
  const int order = rgb[0] == 0 && rgb[1] == 1 && rgb[2] == 2 ? 0 : rgb[0] == 2 && rgb[1] == 1 && rgb[2] == 0 ? 1 : 2;
  with_colour_space(space, [&](auto s) {
    constexpr ColourSpace S = decltype(s)::value;
    if (order == 0)
      hist8_colour_launch<S, C, 0>(data, pixels, {t, rgb[0], rgb[1], rgb[2]}, counts, dev, stream);
    else if (order == 1)
      hist8_colour_launch<S, C, 1>(data, pixels, {t, rgb[0], rgb[1], rgb[2]}, counts, dev, stream);
    else
      hist8_colour_launch<S, C, 2>(data, pixels, {t, rgb[0], rgb[1], rgb[2]}, counts, dev, stream);
  });
}

}  // namespace

void launch_hist8_colour(const uint8_t* data, uint64_t pixels, uint32_t channels, ColourSpace space,
                         const uint32_t* rgb, unsigned long long* counts, const DeviceInfo& dev, cudaStream_t stream) {
  if (pixels == 0) return;
  const ColourTables* t = device_tables();
  if (channels == 4)
    hist8_colour_c<4>(space, data, pixels, rgb, t, counts, dev, stream);
  else
    hist8_colour_c<3>(space, data, pixels, rgb, t, counts, dev, stream);
  IMGSTAT_CUDA(cudaGetLastError());
}

void launch_convert(const uint8_t* data, uint64_t pixels, uint32_t channels, SampleType type, ColourSpace space,
                    const uint32_t* rgb, uint8_t* out, const DeviceInfo& dev, cudaStream_t stream) {
  if (pixels == 0) return;
  const unsigned grid = grid_for(pixels, dev);
  if (type == SampleType::kFloat32) {
    const int16_t* lab = space == ColourSpace::kLab ? device_lab_table() : nullptr;
    const auto* in = reinterpret_cast<const float*>(data);
    auto* to = reinterpret_cast<float*>(out);
    if (channels == 4)
      convert_f_c<4>(space, in, pixels, rgb, lab, to, grid, stream);
    else
      convert_f_c<3>(space, in, pixels, rgb, lab, to, grid, stream);
  } else {
    const ColourTables* t = device_tables();
    if (channels == 4)
      convert_c<4>(space, data, pixels, rgb, t, out, grid, stream);
    else
      convert_c<3>(space, data, pixels, rgb, t, out, grid, stream);
  }
  IMGSTAT_CUDA(cudaGetLastError());
}

namespace {

JointTables8 joint_tables8(const JointSpec& spec, SampleType type, uint32_t channels) {
  JointTables8 j{};
  j.axes = spec.axes;
  j.pixel_bytes = channels;
  uint64_t stride = 1;
  for (uint32_t a = spec.axes; a-- > 0;) {
    j.channel[a] = spec.channels[a];
    const RangeBinner binner = RangeBinner::make(spec.lo[a], spec.hi[a], spec.bins[a]);
    for (int raw = 0; raw < 256; ++raw) {
      const double v = type == SampleType::kInt8 ? static_cast<double>(static_cast<int8_t>(raw)) : raw;
      j.axis[a][raw] = v < spec.lo[a] || v >= spec.hi[a] ? kJointOutside8 : static_cast<int32_t>(binner(v) * stride);
    }
    stride *= spec.bins[a];
  }
  if (spec.axes == 2) j.channel[2] = 0;
  return j;
}

JointRanges joint_ranges(const JointSpec& spec, SampleType type, uint32_t channels) {
  JointRanges j{};
  j.axes = spec.axes;
  j.type = type;
  j.pixel_bytes = channels * static_cast<uint32_t>(sample_size(type));
  uint64_t stride = 1;
  for (uint32_t a = spec.axes; a-- > 0;) {
    j.channel[a] = spec.channels[a];
    j.binner[a] = RangeBinner::make(spec.lo[a], spec.hi[a], spec.bins[a]);
    j.stride[a] = static_cast<uint32_t>(stride);
    stride *= spec.bins[a];
  }
  return j;
}

// Calls f(bins) with the joint binning of the sample type: tables for
// bytes, range binners for the rest.
template <class F>
void with_joint_bins(const JointSpec& spec, SampleType type, uint32_t channels, F&& f) {
  if (sample_size(type) == 1)
    f(joint_tables8(spec, type, channels));
  else
    f(joint_ranges(spec, type, channels));
}

}  // namespace

void launch_part_joint(const uint8_t* pixels, uint32_t width, uint32_t height, uint32_t channels, SampleType type,
                       const JointSpec& spec, const PartMapDevice* m, const uint32_t* x_edges,
                       const uint32_t* y_edges, uint32_t columns, uint32_t rows, unsigned long long* counts,
                       unsigned long long* outside, const DeviceInfo& dev, cudaStream_t stream) {
  const uint64_t n = uint64_t{width} * height;
  if (n == 0) return;
  const uint32_t bins = static_cast<uint32_t>(spec.total_bins());
  with_joint_bins(spec, type, channels, [&](const auto& j) {
    auto go = [&](const auto& map) {
      part_joint<<<grid_for(n, dev), kColourThreads, 0, stream>>>(pixels, width, n, map, j, bins, counts, outside);
    };
    if (!m) {
      go(TileMap{x_edges, y_edges, columns, rows});
      return;
    }
    switch (m->kind) {
      case PartMapKind::kMask: go(MaskMap{m->data, m->stride, m->step}); break;
      case PartMapKind::kTable8: go(TableMap<uint8_t>{m->data, m->stride, m->step, m->table}); break;
      case PartMapKind::kTable16: go(TableMap<uint16_t>{m->data, m->stride, m->step, m->table}); break;
      case PartMapKind::kSearchU32:
        go(SearchMap<uint32_t>{m->data, m->stride, m->step, m->labels, m->count, m->ignore, m->ignored});
        break;
      case PartMapKind::kSearchI32:
        go(SearchMap<int32_t>{m->data, m->stride, m->step, m->labels, m->count, m->ignore, m->ignored});
        break;
    }
  });
  IMGSTAT_CUDA(cudaGetLastError());
}

void launch_joint(const uint8_t* data, uint64_t pixels, uint32_t channels, SampleType type, const JointSpec& spec,
                  unsigned long long* counts, unsigned long long* outside, const DeviceInfo& dev, cudaStream_t stream) {
  if (pixels == 0) return;
  const uint32_t bins = static_cast<uint32_t>(spec.total_bins());
  with_joint_bins(spec, type, channels,
                  [&](const auto& j) { joint_launch(data, pixels, j, bins, counts, outside, dev, stream); });
  IMGSTAT_CUDA(cudaGetLastError());
}

}  // namespace imgstat::cuda
