// Launch shapes for parts: which map kernel fits the map, whether every
// part's slots fit in shared memory, how a tile's rows are shared out.
#include <algorithm>

#include "cuda/tuning/launch.hpp"
#include "cuda/agent/parts.cuh"
#include "cuda/cuda_check.hpp"
#include "cuda/dispatch/dispatch.hpp"

namespace imgstat::cuda {
namespace {

constexpr int kPartBlocksPerSm = 8;
// A tile's share of pixels per block, at least.
constexpr uint64_t kTilePixelsPerBlock = 16384;

// Maps the four-pixel kernel reads: one packed sample a pixel, rows back to back.
inline bool map_fits_four(const MaskMap& m, uint32_t width) { return m.step == 1 && m.stride == width; }
template <class L>
bool map_fits_four(const TableMap<L>& m, uint32_t width) {
  return m.step == 1 && m.stride == uint64_t{width} * sizeof(L);
}
template <class L>
bool map_fits_four(const SearchMap<L>&, uint32_t) {
  return false;
}
inline Mask4 as_four(const MaskMap& m) { return Mask4{m.p}; }
template <class L>
Table4<L> as_four(const TableMap<L>& m) {
  return Table4<L>{reinterpret_cast<const L*>(m.p), m.table};
}
template <class L>
Mask4 as_four(const SearchMap<L>&) {  // never used: map_fits_four is false
  return Mask4{nullptr};
}

template <class T, class Map>
void map_kernel(const uint8_t* pixels, uint32_t width, uint32_t height, uint32_t channels, int32_t lo, const Map& map,
                uint32_t parts, PartAccum* acc, const PartSlots& s, bool moments, bool positions, const DeviceInfo& dev,
                cudaStream_t stream) {
  const size_t one = size_t{parts} * channels * s.stride * 4;
  if (one == 0 && s.stride) return;  // no parts: nothing to count
  const bool shared = s.stride && one <= kSharedSlotBytes;
  if constexpr (sizeof(T) == 1) {
  if (!moments && map_fits_four(map, width)) {  // four pixels at a time
    const uint32_t copies = shared ? static_cast<uint32_t>(std::min<size_t>(kPartThreads / 32, kSharedSlotBytes / one)) : 1;
    const SlotsOut out{s.slots, s.slot_of, s.stride, shared};
    const uint64_t groups = uint64_t{width} * height / 4;
    const unsigned grid = static_cast<unsigned>(
        std::clamp<uint64_t>((groups + kPartThreads - 1) / kPartThreads, 1, uint64_t(dev.sm_count) * kPartBlocksPerSm));
    const auto four = as_four(map);
    const uint64_t n = uint64_t{width} * height;
    const size_t smem = shared ? one * copies : 0;
    switch (channels) {
      case 1: part_values4_kernel<T, 1><<<grid, kPartThreads, smem, stream>>>(pixels, n, lo, four, out, parts, copies); break;
      case 2: part_values4_kernel<T, 2><<<grid, kPartThreads, smem, stream>>>(pixels, n, lo, four, out, parts, copies); break;
      case 3: part_values4_kernel<T, 3><<<grid, kPartThreads, smem, stream>>>(pixels, n, lo, four, out, parts, copies); break;
      default: part_values4_kernel<T, 4><<<grid, kPartThreads, smem, stream>>>(pixels, n, lo, four, out, parts, copies); break;
    }
    IMGSTAT_CUDA_LAUNCHED("part_values4_kernel");
    return;
  }
  }
  if (!moments) {  // the slots are every value: a lookup and an increment a sample
    const uint32_t copies = shared ? static_cast<uint32_t>(std::min<size_t>(kPartThreads / 32, kSharedSlotBytes / one)) : 1;
    const SlotsOut out{s.slots, s.slot_of, s.stride, shared};
    const unsigned grid = static_cast<unsigned>(std::clamp<uint64_t>(height, 1, uint64_t(dev.sm_count) * kPartBlocksPerSm));
    part_values_kernel<T, Map><<<grid, kPartThreads, shared ? one * copies : 0, stream>>>(pixels, width, height, channels,
                                                                                         lo, map, out, parts, copies);
    IMGSTAT_CUDA_LAUNCHED("part_values_kernel");
    return;
  }
  const SlotsOut out{s.slots, s.slot_of, s.stride, shared};
  const uint64_t segs = (uint64_t{width} + kPartSegment - 1) / kPartSegment * height;
  const uint64_t wanted = (segs + kPartThreads - 1) / kPartThreads;
  const unsigned grid = static_cast<unsigned>(std::clamp<uint64_t>(wanted, 1, uint64_t(dev.sm_count) * kPartBlocksPerSm));
  const size_t smem = shared ? one : 0;
  if (positions)
    part_map_kernel<T, Map, true><<<grid, kPartThreads, smem, stream>>>(pixels, width, height, channels, lo, map, acc, out, parts);
  else
    part_map_kernel<T, Map, false><<<grid, kPartThreads, smem, stream>>>(pixels, width, height, channels, lo, map, acc, out, parts);
  IMGSTAT_CUDA_LAUNCHED("part_map_kernel");
}

template <class T>
void map_of(const uint8_t* pixels, uint32_t width, uint32_t height, uint32_t channels, int32_t lo,
            const PartMapDevice& m, uint32_t parts, PartAccum* acc, const PartSlots& s, bool moments, bool positions,
            const DeviceInfo& dev, cudaStream_t stream) {
  switch (m.kind) {
    case PartMapKind::kMask:
      return map_kernel<T>(pixels, width, height, channels, lo, MaskMap{m.data, m.stride, m.step}, parts, acc, s, moments, positions, dev, stream);
    case PartMapKind::kTable8:
      return map_kernel<T>(pixels, width, height, channels, lo, TableMap<uint8_t>{m.data, m.stride, m.step, m.table},
                           parts, acc, s, moments, positions, dev, stream);
    case PartMapKind::kTable16:
      return map_kernel<T>(pixels, width, height, channels, lo, TableMap<uint16_t>{m.data, m.stride, m.step, m.table},
                           parts, acc, s, moments, positions, dev, stream);
    case PartMapKind::kSearchU32:
      return map_kernel<T>(pixels, width, height, channels, lo,
                           SearchMap<uint32_t>{m.data, m.stride, m.step, m.labels, m.count, m.ignore, m.ignored}, parts,
                           acc, s, moments, positions, dev, stream);
    case PartMapKind::kSearchI32:
      return map_kernel<T>(pixels, width, height, channels, lo,
                           SearchMap<int32_t>{m.data, m.stride, m.step, m.labels, m.count, m.ignore, m.ignored}, parts,
                           acc, s, moments, positions, dev, stream);
  }
}

}  // namespace

void launch_part_map(const uint8_t* pixels, uint32_t width, uint32_t height, uint32_t channels, SampleType type,
                     const PartMapDevice& map, uint32_t parts, PartAccum* acc, const PartSlots& slots, bool moments,
                     bool positions, const DeviceInfo& dev, cudaStream_t stream) {
  const int32_t lo = static_cast<int32_t>(type_lo(type));
  switch (type) {
    case SampleType::kUint8: return map_of<uint8_t>(pixels, width, height, channels, lo, map, parts, acc, slots, moments, positions, dev, stream);
    case SampleType::kInt8: return map_of<int8_t>(pixels, width, height, channels, lo, map, parts, acc, slots, moments, positions, dev, stream);
    case SampleType::kUint16: return map_of<uint16_t>(pixels, width, height, channels, lo, map, parts, acc, slots, moments, positions, dev, stream);
    case SampleType::kInt16: return map_of<int16_t>(pixels, width, height, channels, lo, map, parts, acc, slots, moments, positions, dev, stream);
    default: fail(ErrorCode::kUnimplemented, "parts of float images are computed on the CPU");
  }
}

void launch_part_tiles(const uint8_t* pixels, uint32_t width, uint32_t channels, SampleType type,
                       const uint32_t* x_edges, const uint32_t* y_edges, uint32_t columns, uint32_t rows,
                       uint64_t pixels_count, PartAccum* acc, const PartSlots& s, bool moments, bool positions,
                       const DeviceInfo& dev, cudaStream_t stream) {
  const size_t shared_bytes = size_t{channels} * s.stride * 4;
  const bool shared = s.stride && shared_bytes <= kSharedSlotBytes;
  const SlotsOut out{s.slots, s.slot_of, s.stride, shared};
  const uint64_t tiles = uint64_t{columns} * rows;
  // Enough blocks to fill the GPU, none with less than a share of pixels.
  const uint64_t per_tile = std::max<uint64_t>(1, pixels_count / tiles);
  const uint64_t splits = std::clamp<uint64_t>(
      std::min<uint64_t>((uint64_t(dev.sm_count) * kPartBlocksPerSm + tiles - 1) / tiles, per_tile / kTilePixelsPerBlock),
      1, 65535);
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(splits));
  const int32_t lo = static_cast<int32_t>(type_lo(type));
  const size_t smem = shared ? shared_bytes : 0;
  auto launch = [&](auto kernel) {
    kernel<<<grid, kPartThreads, smem, stream>>>(pixels, width, channels, lo, x_edges, y_edges, columns, acc, out);
  };
  switch (type) {
    case SampleType::kUint8:
      positions ? launch(part_tile_kernel<uint8_t, true, true>)
      : moments ? launch(part_tile_kernel<uint8_t, false, true>)
                : launch(part_tile_kernel<uint8_t, false, false>);
      break;
    case SampleType::kInt8:
      positions ? launch(part_tile_kernel<int8_t, true, true>)
      : moments ? launch(part_tile_kernel<int8_t, false, true>)
                : launch(part_tile_kernel<int8_t, false, false>);
      break;
    case SampleType::kUint16:
      positions ? launch(part_tile_kernel<uint16_t, true, true>)
      : moments ? launch(part_tile_kernel<uint16_t, false, true>)
                : launch(part_tile_kernel<uint16_t, false, false>);
      break;
    case SampleType::kInt16:
      positions ? launch(part_tile_kernel<int16_t, true, true>)
      : moments ? launch(part_tile_kernel<int16_t, false, true>)
                : launch(part_tile_kernel<int16_t, false, false>);
      break;
    default: fail(ErrorCode::kUnimplemented, "parts of float images are computed on the CPU");
  }
  IMGSTAT_CUDA_LAUNCHED("part_tile_kernel");
}

}  // namespace imgstat::cuda
