// Each label's bounding box over a label image or volume: the map read a
// row at a time through the part index (the same labels the engines
// answer), a box per thread, merged.
#include <tbb/blocked_range.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>

#include <algorithm>

#include "common/parts.hpp"

namespace imgstat {

std::vector<LabelBox> label_boxes(const Layout& layout, const Parts& parts, uint64_t plane_height) {
  if (parts.kind != PartsKind::kLabels) return {};
  if (plane_height == 0 || layout.height % plane_height != 0)
    fail(ErrorCode::kInternal, "label boxes: planes of " + std::to_string(plane_height) + " rows do not divide " +
                                   std::to_string(layout.height));
  std::optional<PartIndex> built;
  const PartIndex& index = index_of(layout, parts, built);
  const uint32_t n = index.count();
  LabelBox empty;
  empty.x = empty.y = empty.z = UINT64_MAX;
  tbb::enumerable_thread_specific<std::vector<LabelBox>> local([&] { return std::vector<LabelBox>(n, empty); });
  // Boxes hold min x, y, z and, until the end, max x, y, z in width,
  // height, depth. A run of one label's pixels widens its box once.
  auto widen = [](LabelBox& b, uint64_t x, uint64_t end, uint64_t y, uint64_t z) {
    b.x = std::min(b.x, x);
    b.width = std::max(b.width, end - 1);
    if (b.y > y) b.y = y;
    if (b.height < y) b.height = y;
    if (b.z > z) b.z = z;
    if (b.depth < z) b.depth = z;
  };
  const PartMapView& m = parts.map;
  // 8- and 16-bit one-channel maps: the runs found in the map's own
  // samples, each looked up once.
  const bool runs_of_map = !index.table().empty() && m.channels == 1 &&
                           (m.type == MapType::kUint8 || m.type == MapType::kUint16);
  tbb::parallel_for(tbb::blocked_range<uint64_t>(0, layout.height, 16), [&](const tbb::blocked_range<uint64_t>& rows) {
    std::vector<LabelBox>& boxes = local.local();
    std::vector<uint32_t> part(runs_of_map ? 0 : layout.width);
    const std::vector<uint32_t>& table = index.table();
    for (uint64_t row = rows.begin(); row != rows.end(); ++row) {
      const uint64_t z = row / plane_height, y = row % plane_height;
      if (runs_of_map) {
        const uint8_t* samples = static_cast<const uint8_t*>(m.data) + row * m.stride();
        const bool wide = m.type == MapType::kUint16;
        for (uint64_t x = 0; x < layout.width;) {
          const uint64_t end = wide ? run_end<uint16_t>(samples, x, layout.width) : run_end<uint8_t>(samples, x, layout.width);
          const uint32_t p = table[wide ? Samples<uint16_t>{samples}[x] : samples[x]];
          if (p != kNoPart) widen(boxes[p], x, end, y, z);
          x = end;
        }
        continue;
      }
      index.row(row, 0, layout.width, part.data());
      for (uint64_t x = 0; x < layout.width;) {
        const uint32_t p = part[x];
        uint64_t end = x + 1;
        while (end < layout.width && part[end] == p) ++end;
        if (p != kNoPart) widen(boxes[p], x, end, y, z);
        x = end;
      }
    }
  });
  std::vector<LabelBox> out(n, empty);
  for (const std::vector<LabelBox>& boxes : local)
    for (uint32_t p = 0; p < n; ++p) {
      LabelBox& o = out[p];
      const LabelBox& b = boxes[p];
      if (b.x == UINT64_MAX) continue;
      o.x = std::min(o.x, b.x), o.y = std::min(o.y, b.y), o.z = std::min(o.z, b.z);
      o.width = std::max(o.width, b.width), o.height = std::max(o.height, b.height), o.depth = std::max(o.depth, b.depth);
    }
  for (uint32_t p = 0; p < n; ++p) {
    LabelBox& o = out[p];
    o.label = index.labels()[p];
    o.width = o.width - o.x + 1, o.height = o.height - o.y + 1, o.depth = o.depth - o.z + 1;
  }
  return out;
}

}  // namespace imgstat
