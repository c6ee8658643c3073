#include "cuda/parts.hpp"

#include <optional>

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "common/parts.hpp"
#include "cuda/cuda_check.hpp"
#include "imgstat/trace.hpp"

namespace imgstat::cuda {
namespace {

using HeldBuffers = std::vector<std::unique_ptr<DeviceBuffer>>;

// A host vector copied into a device buffer of the call.
template <class V>
std::unique_ptr<DeviceBuffer> upload(DeviceBudget& budget, const std::vector<V>& v, const char* what,
                                     cudaStream_t stream) {
  auto b = std::make_unique<DeviceBuffer>(budget, std::max<uint64_t>(1, v.size() * sizeof(V)), what);
  if (!v.empty())
    IMGSTAT_CUDA(cudaMemcpyAsync(b->data(), v.data(), v.size() * sizeof(V), cudaMemcpyHostToDevice, stream));
  return b;
}

// What the counts keep per part and channel: every value, or the bins; each
// with two more slots (under- and overflow).
uint32_t kept_slots(const PartCounts& counts) { return counts.values ? counts.values : counts.bins; }

// Each part's histogram slots, zeroed, and the slot of every sample value.
PartSlots make_slots(DeviceBudget& budget, const PartCounts& counts, const Layout& l, const StatsRequest& request,
                     uint64_t accums, HeldBuffers& held, cudaStream_t stream) {
  const uint32_t kept = kept_slots(counts);
  const uint32_t stride = kept + 2;
  held.push_back(std::make_unique<DeviceBuffer>(budget, accums * stride * 4, "the parts' histograms"));
  auto* slots = static_cast<unsigned int*>(held.back()->data());
  IMGSTAT_CUDA(cudaMemsetAsync(slots, 0, accums * stride * 4, stream));
  std::vector<int32_t> table(size_t{1} << type_bits(l.type));
  if (counts.values) {
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  } else {
    table = bin_table(l.type, request.hist);
    for (int32_t& s : table)
      s = s == kUnderflowBin ? static_cast<int32_t>(kept) : s == kOverflowBin ? static_cast<int32_t>(kept + 1) : s;
  }
  held.push_back(upload(budget, table, "the slot of each value", stream));
  return PartSlots{slots, static_cast<const int32_t*>(held.back()->data()), stride};
}

// The mask or label image on the device, with the table or labels its kind
// reads.
PartMapDevice stage_map(const GpuContext& gpu, const Parts& parts, const PartIndex& index, const Layout& l,
                        HeldBuffers& held, cudaStream_t stream) {
  DeviceBudget& budget = *gpu.budget;
  const PartMapView& m = parts.map;
  PartMapDevice map;
  const uint64_t sample = map_sample_size(m.type);
  const bool as_stored = parts.kind == PartsKind::kLabels || m.type == MapType::kUint8;
  if (as_stored) {  // the map's rows as they are; the kernel reads its channel
    const uint64_t map_row = m.width * m.channels * sample;
    held.push_back(std::make_unique<DeviceBuffer>(budget, map_row * m.height, "the mask or label image"));
    stage_to_device(gpu, static_cast<const uint8_t*>(m.data), m.height, map_row, m.stride(),
                    static_cast<uint8_t*>(held.back()->data()));
    map.data = static_cast<const uint8_t*>(held.back()->data()) + m.channel * sample;
    map.stride = map_row;
    map.step = m.channels;
  } else {  // a mask of another type: its verdicts, a byte a pixel
    std::vector<uint8_t> plane(l.pixels());
    std::vector<uint32_t> row(l.width);
    for (uint64_t y = 0; y < l.height; ++y) {
      index.row(y, 0, l.width, row.data());
      for (uint64_t x = 0; x < l.width; ++x) plane[y * l.width + x] = row[x] != kNoPart;
    }
    held.push_back(upload(budget, plane, "the mask", stream));
    IMGSTAT_CUDA(cudaStreamSynchronize(stream));  // plane goes out of scope
    map.data = static_cast<const uint8_t*>(held.back()->data());
    map.stride = l.width;
    map.step = 1;
  }
  if (parts.kind == PartsKind::kMask) {
    map.kind = PartMapKind::kMask;
  } else if (m.type == MapType::kUint8 || m.type == MapType::kUint16) {
    map.kind = m.type == MapType::kUint8 ? PartMapKind::kTable8 : PartMapKind::kTable16;
    held.push_back(upload(budget, index.table(), "the part of each label", stream));
    map.table = static_cast<const uint32_t*>(held.back()->data());
  } else {
    map.kind = m.type == MapType::kUint32 ? PartMapKind::kSearchU32 : PartMapKind::kSearchI32;
    std::vector<long long> labels(index.labels().begin(), index.labels().end());
    held.push_back(upload(budget, labels, "the labels", stream));
    map.labels = static_cast<const long long*>(held.back()->data());
    map.count = index.count();
    map.ignore = parts.ignore_label;
    map.ignored = parts.ignored_label;
  }
  return map;
}

// Where the kernels count: the moments, the slots, the joint histograms
// (each part's, then every part's pixels outside them).
struct PartOutputs {
  PartAccum* acc;
  PartSlots slots;
  bool moments;
  unsigned long long* joint_counts;
  unsigned long long* joint_outside;
};

void launch_parts(const GpuContext& gpu, const uint8_t* px, const Layout& l, const Parts& parts, const PartIndex& index,
                  const StatsRequest& request, const PartCounts& counts, const PartOutputs& out, HeldBuffers& held,
                  cudaStream_t stream) {
  const DeviceInfo& dev = gpu.info;
  const auto width = static_cast<uint32_t>(l.width), height = static_cast<uint32_t>(l.height);
  if (parts.kind == PartsKind::kTiles) {
    std::vector<uint32_t> xs, ys;
    for (uint32_t c = 0; c <= parts.columns; ++c) xs.push_back(static_cast<uint32_t>(tile_edge(c, l.width, parts.columns)));
    for (uint32_t r = 0; r <= parts.rows; ++r) ys.push_back(static_cast<uint32_t>(tile_edge(r, l.height, parts.rows)));
    held.push_back(upload(*gpu.budget, xs, "tile edges", stream));
    const auto* x_edges = static_cast<const uint32_t*>(held.back()->data());
    held.push_back(upload(*gpu.budget, ys, "tile edges", stream));
    const auto* y_edges = static_cast<const uint32_t*>(held.back()->data());
    launch_part_tiles(px, width, l.channels, l.type, x_edges, y_edges, parts.columns, parts.rows, l.pixels(), out.acc,
                      out.slots, out.moments, counts.positions, dev, stream);
    if (out.joint_counts)
      launch_part_joint(px, width, height, l.channels, l.type, request.joint, nullptr, x_edges, y_edges, parts.columns,
                        parts.rows, out.joint_counts, out.joint_outside, dev, stream);
    return;
  }
  const PartMapDevice map = stage_map(gpu, parts, index, l, held, stream);
  launch_part_map(px, width, height, l.channels, l.type, map, index.count(), out.acc, out.slots, out.moments,
                  counts.positions, dev, stream);
  if (out.joint_counts)
    launch_part_joint(px, width, height, l.channels, l.type, request.joint, &map, nullptr, nullptr, 0, 0,
                      out.joint_counts, out.joint_outside, dev, stream);
}

// The device's accumulators and slots, read back, into the counts.
void take_counts(const std::vector<PartAccum>& acc, const std::vector<unsigned int>& slots, bool moments,
                 SampleType type, PartCounts& counts) {
  const int64_t lo = type_lo(type);
  const uint32_t kept = kept_slots(counts);
  const uint32_t stride = slots.empty() ? 0 : kept + 2;
  constexpr uint64_t kIndexMask = (uint64_t{1} << kPartKeyShift) - 1;
  for (uint64_t i = 0; i < acc.size(); ++i) {
    const PartAccum& a = acc[i];
    if (moments && a.n) {
      IntMoments& m = counts.moments[i];
      m.n = a.n;
      m.sum = static_cast<int64_t>(a.sum);
      m.sumsq = a.sumsq;
      m.min = lo + static_cast<int64_t>(~a.min_inverse);
      m.max = lo + static_cast<int64_t>(a.max);
      if (counts.positions) {
        const uint64_t min_key = ~a.min_key;
        counts.min_at[i] = min_key & kIndexMask;
        counts.max_at[i] = kIndexMask - (a.max_key & kIndexMask);
      }
    }
    if (!stride) continue;
    const unsigned int* s = &slots[i * stride];
    if (counts.values) {
      for (uint32_t k = 0; k < kept; ++k) counts.value_counts[i * kept + k] = s[k];
    } else {
      for (uint32_t k = 0; k < kept; ++k) counts.binned[i * kept + k] = s[k];
      counts.underflow[i] = s[kept];
      counts.overflow[i] = s[kept + 1];
    }
  }
}

// The joint histograms read back, in part order: the mask's is the image's.
void attach_joint(const std::vector<uint64_t>& host_joint, uint32_t count, const Parts& parts, const JointSpec& spec,
                  Result& r) {
  const uint64_t bins = spec.total_bins();
  auto joint_of = [&](uint32_t p) {
    JointHistogram j;
    j.spec = spec;
    j.counts.assign(host_joint.begin() + uint64_t{p} * bins, host_joint.begin() + uint64_t{p + 1} * bins);
    j.outside = host_joint[uint64_t{count} * bins + p];
    return j;
  };
  if (parts.kind == PartsKind::kMask) {
    r.has_joint = true;
    r.joint = joint_of(0);
    return;
  }
  for (uint32_t p = 0; p < r.parts.size(); ++p) {
    r.parts[p].has_joint = true;
    r.parts[p].joint = joint_of(p);
  }
}

}  // namespace

bool part_kernels_take(const Layout& layout, const Parts& parts) {
  // A volume's tiles are no grid of rows and columns: the CPU's.
  return !is_float(layout.type) && layout.pixels() < (uint64_t{1} << 32) &&
         (parts.kind == PartsKind::kMask || parts.kind == PartsKind::kLabels ||
          (parts.kind == PartsKind::kTiles && !parts.slabs));
}

namespace {

// The parts of pixels on the host (host) or already on this device
// (device, packed rows 16-byte aligned): the host's go up first.
Result parts_on_gpu(const GpuContext& gpu, const void* host, const uint8_t* device, const Layout& source,
                    const Parts& parts, const StatsRequest& asked) {
  DeviceBudget& budget = *gpu.budget;
  // A colour space: the image goes up as it is and is converted on the
  // device; the parts are then of the converted image (measured_layout()).
  const Layout l = measured_layout(source, asked);
  const StatsRequest request = measured_request(asked, source);
  std::optional<PartIndex> built;
  const PartIndex& index = index_of(l, parts, built);
  const uint32_t count = index.count();
  if (parts.kind != PartsKind::kMask) check_answer_bytes(count, l, parts, request);
  check_part_count_bytes(count, l.channels, l.type, request);
  PartCounts counts = PartCounts::shaped(count, l.channels, l.type, request);
  if (count == 0) return result_of_parts(counts, index, parts, l, request, "cuda");  // every label ignored
  const cudaStream_t stream = cudaStreamPerThread;
  TraceRange range("gpu parts");

  std::optional<DeviceBuffer> staged;
  if (!device) {
    staged.emplace(budget, source.pixels() * source.pixel_bytes(), "the image's pixels for its parts");
    stage_to_device(gpu, static_cast<const uint8_t*>(host), source.height, source.row_bytes(), source.stride(),
                    static_cast<uint8_t*>(staged->data()));
    device = static_cast<const uint8_t*>(staged->data());
  }
  std::optional<DeviceBuffer> converted;
  if (asked.colour_space != ColourSpace::kNone) {
    converted.emplace(budget, l.pixels() * l.pixel_bytes(), "the image's pixels in a colour space");
    launch_convert(device, source.pixels(), source.channels, source.type, asked.colour_space, asked.rgb,
                   static_cast<uint8_t*>(converted->data()), gpu.info, stream);
  }
  const uint8_t* pixels = converted ? static_cast<const uint8_t*>(converted->data()) : device;

  const uint64_t accums = uint64_t{count} * l.channels;
  const DeviceBuffer acc(budget, std::max<uint64_t>(1, accums * sizeof(PartAccum)), "the parts' moments");
  IMGSTAT_CUDA(cudaMemsetAsync(acc.data(), 0, accums * sizeof(PartAccum), stream));
  HeldBuffers held;  // slots, the map and its tables, until the kernels are done
  // Value counts hold the moments (partial_of_part takes them from there):
  // the kernels count moments only for positions or binned histograms.
  PartOutputs out{static_cast<PartAccum*>(acc.data()), PartSlots{}, counts.positions || !counts.values, nullptr,
                  nullptr};
  const bool slotted = kept_slots(counts) != 0;
  if (slotted) out.slots = make_slots(budget, counts, l, request, accums, held, stream);
  const uint64_t joint_bins = request.joint.total_bins();
  std::optional<DeviceBuffer> joint;
  if (joint_bins) {
    const uint64_t n = uint64_t{count} * (joint_bins + 1);
    joint.emplace(budget, n * 8, "the parts' joint histograms");
    IMGSTAT_CUDA(cudaMemsetAsync(joint->data(), 0, n * 8, stream));
    out.joint_counts = static_cast<unsigned long long*>(joint->data());
    out.joint_outside = out.joint_counts + uint64_t{count} * joint_bins;
  }
  launch_parts(gpu, pixels, l, parts, index, request, counts, out, held, stream);

  std::vector<uint64_t> host_joint(joint ? uint64_t{count} * (joint_bins + 1) : 0);
  if (joint)
    IMGSTAT_CUDA(cudaMemcpyAsync(host_joint.data(), joint->data(), host_joint.size() * 8, cudaMemcpyDeviceToHost, stream));
  std::vector<PartAccum> host_acc(accums);
  std::vector<unsigned int> host_slots(slotted ? accums * out.slots.stride : 0);
  IMGSTAT_CUDA(cudaMemcpyAsync(host_acc.data(), acc.data(), accums * sizeof(PartAccum), cudaMemcpyDeviceToHost, stream));
  if (slotted)
    IMGSTAT_CUDA(cudaMemcpyAsync(host_slots.data(), out.slots.slots, host_slots.size() * 4, cudaMemcpyDeviceToHost,
                                 stream));
  IMGSTAT_CUDA(cudaStreamSynchronize(stream));

  take_counts(host_acc, host_slots, out.moments, l.type, counts);
  Result r = result_of_parts(counts, index, parts, l, request, "cuda");
  if (joint) attach_joint(host_joint, count, parts, request.joint, r);
  return r;
}

}  // namespace

Result analyze_parts_on_gpu(const GpuContext& gpu, const ImageView& image, const Parts& parts,
                            const StatsRequest& request) {
  return parts_on_gpu(gpu, image.data, nullptr, image.layout, parts, request);
}

Result analyze_device_parts_on_gpu(const GpuContext& gpu, const DeviceImageView& image, const Parts& parts,
                                   const StatsRequest& request) {
  // Padded rows, or a start the kernels' loads cannot take: packed first,
  // device to device.
  std::optional<DeviceBuffer> packed;
  Layout layout = image.layout;
  const uint8_t* pixels = static_cast<const uint8_t*>(image.data);
  if ((layout.row_stride != 0 && layout.row_stride != layout.row_bytes()) || reinterpret_cast<uintptr_t>(pixels) % 16) {
    layout.row_stride = 0;
    packed.emplace(*gpu.budget, layout.pixels() * layout.pixel_bytes(), "a packed copy of a device image");
    IMGSTAT_CUDA(cudaMemcpy2DAsync(packed->data(), layout.row_bytes(), pixels, image.layout.stride(), layout.row_bytes(),
                                   layout.height, cudaMemcpyDeviceToDevice, cudaStreamPerThread));
    pixels = static_cast<const uint8_t*>(packed->data());
  }
  layout.row_stride = 0;
  return parts_on_gpu(gpu, nullptr, pixels, layout, parts, request);
}

}  // namespace imgstat::cuda
