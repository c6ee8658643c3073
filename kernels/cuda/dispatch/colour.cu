// Launch shapes for colour conversion and joint histograms: persistent
// grid-stride blocks, the joint histogram's counters in shared memory up
// to kJointSharedBytes.
#include <algorithm>
#include <mutex>

#include "common/colour.hpp"
#include "cuda/agent/colour.cuh"
#include "cuda/agent/parts.cuh"
#include "cuda/cuda_check.hpp"
#include "cuda/dispatch/dispatch.hpp"
#include "imgstat/binning.hpp"

namespace imgstat::cuda {
namespace {

constexpr int kColourBlocksPerSm = 8;
// 32^3 bins of 32-bit counters are 128 KiB: within an H100 or H200 block.
constexpr size_t kJointSharedBytes = 200 << 10;
constexpr int kMaxDevices = 64;

// The tables, once per device, in device memory that lives with the process.
const ColourTables* device_tables() {
  static std::mutex mu;
  static ColourTables* tables[kMaxDevices] = {};
  int device = 0;
  IMGSTAT_CUDA(cudaGetDevice(&device));
  if (device < 0 || device >= kMaxDevices) fail(ErrorCode::kInternal, "CUDA device ordinal past the colour tables'");
  std::lock_guard<std::mutex> lock(mu);
  if (!tables[device]) {
    ColourTables* p = nullptr;
    IMGSTAT_CUDA(cudaMalloc(&p, sizeof(ColourTables)));
    IMGSTAT_CUDA(cudaMemcpy(p, &colour_tables(), sizeof(ColourTables), cudaMemcpyHostToDevice));
    tables[device] = p;
  }
  return tables[device];
}

unsigned grid_for(uint64_t pixels, const DeviceInfo& dev) {
  const uint64_t wanted = (pixels + kColourThreads - 1) / kColourThreads;
  return static_cast<unsigned>(std::clamp<uint64_t>(wanted, 1, static_cast<uint64_t>(dev.sm_count) * kColourBlocksPerSm));
}

template <int C>
void convert_c(ColourSpace space, const uint8_t* data, uint64_t pixels, const uint32_t* rgb, const ColourTables* t,
               uint8_t* out, unsigned grid, cudaStream_t stream) {
  with_colour_space(space, [&](auto s) {
    convert8<decltype(s)::value, C><<<grid, kColourThreads, 0, stream>>>(data, pixels, rgb[0], rgb[1], rgb[2], t, out);
  });
}

template <int C>
void joint_c(const uint8_t* data, uint64_t pixels, const JointTables8& j, uint32_t bins, unsigned long long* counts,
             unsigned long long* outside, const DeviceInfo& dev, cudaStream_t stream) {
  const size_t shared = static_cast<size_t>(bins) * 4;
  if (shared <= kJointSharedBytes) {
    static std::once_flag allowed;
    std::call_once(allowed, [] {
      IMGSTAT_CUDA(cudaFuncSetAttribute(joint8<C, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(kJointSharedBytes)));
    });
    // Fewer, fuller blocks when the counters are large: each block clears
    // and flushes all of them.
    const unsigned per_sm = static_cast<unsigned>(std::clamp<size_t>((228 << 10) / (shared + 1024), 1, 2));
    const uint64_t wanted = (pixels + kJointThreads - 1) / kJointThreads;
    const unsigned grid = static_cast<unsigned>(std::clamp<uint64_t>(wanted, 1, static_cast<uint64_t>(dev.sm_count) * per_sm));
    joint8<C, true><<<grid, kJointThreads, shared, stream>>>(data, pixels, j, bins, counts, outside);
  } else {
    joint8<C, false><<<grid_for(pixels, dev), kColourThreads, 0, stream>>>(data, pixels, j, bins, counts, outside);
  }
}

template <int C>
void hist8_colour_c(ColourSpace space, const uint8_t* data, uint64_t pixels, const uint32_t* rgb,
                    const ColourTables* t, unsigned long long* counts, const DeviceInfo& dev, cudaStream_t stream) {
  constexpr uint64_t kStepPixels = C == 3 ? 16 : 4;
  const uint64_t steps = pixels / kStepPixels;
  const uint32_t tail = static_cast<uint32_t>(pixels - steps * kStepPixels);
  const unsigned grid = static_cast<unsigned>(
      std::clamp<uint64_t>((steps + kColourThreads - 1) / kColourThreads, 1, static_cast<uint64_t>(dev.sm_count) * kColourBlocksPerSm));
  const int order = rgb[0] == 0 && rgb[1] == 1 && rgb[2] == 2 ? 0 : rgb[0] == 2 && rgb[1] == 1 && rgb[2] == 0 ? 1 : 2;
  with_colour_space(space, [&](auto s) {
    constexpr ColourSpace S = decltype(s)::value;
    const uint4* vectors = reinterpret_cast<const uint4*>(data);
    const uint8_t* rest = data + steps * kStepPixels * C;
    if (order == 0)
      hist8_colour<S, C, 0><<<grid, kColourThreads, 0, stream>>>(vectors, steps, rest, tail, rgb[0], rgb[1], rgb[2], t, counts);
    else if (order == 1)
      hist8_colour<S, C, 1><<<grid, kColourThreads, 0, stream>>>(vectors, steps, rest, tail, rgb[0], rgb[1], rgb[2], t, counts);
    else
      hist8_colour<S, C, 2><<<grid, kColourThreads, 0, stream>>>(vectors, steps, rest, tail, rgb[0], rgb[1], rgb[2], t, counts);
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

void launch_convert8(const uint8_t* data, uint64_t pixels, uint32_t channels, ColourSpace space, const uint32_t* rgb,
                     uint8_t* out, const DeviceInfo& dev, cudaStream_t stream) {
  if (pixels == 0) return;
  const ColourTables* t = device_tables();
  const unsigned grid = grid_for(pixels, dev);
  if (channels == 4)
    convert_c<4>(space, data, pixels, rgb, t, out, grid, stream);
  else
    convert_c<3>(space, data, pixels, rgb, t, out, grid, stream);
  IMGSTAT_CUDA(cudaGetLastError());
}

namespace {

JointTables8 joint_tables(const JointSpec& spec, SampleType type) {
  JointTables8 j{};
  j.axes = spec.axes;
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

template <int C, class Map>
void part_joint_c(const uint8_t* pixels, uint32_t width, uint64_t n, const Map& map, const JointTables8& j,
                  uint32_t bins, unsigned long long* counts, unsigned long long* outside, const DeviceInfo& dev,
                  cudaStream_t stream) {
  part_joint8<C, Map><<<grid_for(n, dev), kColourThreads, 0, stream>>>(pixels, width, n, map, j, bins, counts, outside);
}

template <class Map>
void part_joint_map(const uint8_t* pixels, uint32_t width, uint64_t n, uint32_t channels, const Map& map,
                    const JointTables8& j, uint32_t bins, unsigned long long* counts, unsigned long long* outside,
                    const DeviceInfo& dev, cudaStream_t stream) {
  switch (channels) {
    case 1: return part_joint_c<1>(pixels, width, n, map, j, bins, counts, outside, dev, stream);
    case 2: return part_joint_c<2>(pixels, width, n, map, j, bins, counts, outside, dev, stream);
    case 3: return part_joint_c<3>(pixels, width, n, map, j, bins, counts, outside, dev, stream);
    default: return part_joint_c<4>(pixels, width, n, map, j, bins, counts, outside, dev, stream);
  }
}

}  // namespace

void launch_part_joint8(const uint8_t* pixels, uint32_t width, uint32_t height, uint32_t channels, SampleType type,
                        const JointSpec& spec, const PartMapDevice* m, const uint32_t* x_edges,
                        const uint32_t* y_edges, uint32_t columns, uint32_t rows, unsigned long long* counts,
                        unsigned long long* outside, const DeviceInfo& dev, cudaStream_t stream) {
  const uint64_t n = uint64_t{width} * height;
  if (n == 0) return;
  const JointTables8 j = joint_tables(spec, type);
  const uint32_t bins = static_cast<uint32_t>(spec.total_bins());
  auto go = [&](const auto& map) { part_joint_map(pixels, width, n, channels, map, j, bins, counts, outside, dev, stream); };
  if (!m) {
    go(TileMap{x_edges, y_edges, columns, rows});
  } else {
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
  }
  IMGSTAT_CUDA(cudaGetLastError());
}

void launch_joint8(const uint8_t* data, uint64_t pixels, uint32_t channels, SampleType type, const JointSpec& spec,
                   unsigned long long* counts, unsigned long long* outside, const DeviceInfo& dev, cudaStream_t stream) {
  if (pixels == 0) return;
  const JointTables8 j = joint_tables(spec, type);
  const uint32_t bins = static_cast<uint32_t>(spec.total_bins());
  switch (channels) {
    case 1: joint_c<1>(data, pixels, j, bins, counts, outside, dev, stream); break;
    case 2: joint_c<2>(data, pixels, j, bins, counts, outside, dev, stream); break;
    case 3: joint_c<3>(data, pixels, j, bins, counts, outside, dev, stream); break;
    default: joint_c<4>(data, pixels, j, bins, counts, outside, dev, stream); break;
  }
  IMGSTAT_CUDA(cudaGetLastError());
}

}  // namespace imgstat::cuda
