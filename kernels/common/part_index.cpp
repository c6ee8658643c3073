// Which part each pixel is in: the map read a row at a time, its distinct
// labels found once.
#include "common/parts.hpp"

#include <tbb/enumerable_thread_specific.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <string>

#include "imgstat/binning.hpp"

namespace imgstat {

namespace {

// The map's samples of row y from pixel x0 on (sample i * channels is pixel x0 + i's).
template <class T>
Samples<T> map_row(const PartMapView& m, uint64_t y, uint64_t x0 = 0) {
  return Samples<T>{static_cast<const uint8_t*>(m.data) + y * m.stride() + (x0 * m.channels + m.channel) * sizeof(T)};
}

template <class T>
void mask_row(const PartMapView& m, uint64_t y, uint64_t x0, uint64_t n, uint32_t* out) {
  const Samples<T> p = map_row<T>(m, y, x0);
  for (uint64_t i = 0; i < n; ++i) {
    const T v = p[i * m.channels];
    // NaN != 0: a NaN in a float mask selects its pixel.
    out[i] = v != T(0) ? 0 : kNoPart;
  }
}

template <class T>
void table_row(const PartMapView& m, const std::vector<uint32_t>& table, uint64_t y, uint64_t x0, uint64_t n,
               uint32_t* out) {
  const Samples<T> p = map_row<T>(m, y, x0);
  for (uint64_t i = 0; i < n; ++i) out[i] = table[p[i * m.channels]];
}

template <class T>
void search_row(const PartMapView& m, const std::vector<int64_t>& labels, bool ignore, int64_t ignored, uint64_t y,
                uint64_t x0, uint64_t n, uint32_t* out) {
  const Samples<T> p = map_row<T>(m, y, x0);
  int64_t last = 0;
  uint32_t last_part = kNoPart;
  bool have_last = false;
  for (uint64_t i = 0; i < n; ++i) {
    const int64_t v = static_cast<int64_t>(p[i * m.channels]);
    if (!have_last || v != last) {
      have_last = true;
      last = v;
      if (ignore && v == ignored) {
        last_part = kNoPart;
      } else {
        const auto it = std::lower_bound(labels.begin(), labels.end(), v);
        last_part = (it != labels.end() && *it == v) ? static_cast<uint32_t>(it - labels.begin()) : kNoPart;
      }
    }
    out[i] = last_part;
  }
}

constexpr uint64_t kRowsPerBlock = 16;

template <class T>
std::vector<int64_t> distinct_small(const PartMapView& m, uint64_t height, uint64_t width) {
  const size_t values = size_t{1} << (sizeof(T) * 8);
  tbb::enumerable_thread_specific<std::vector<uint8_t>> seen([values] { return std::vector<uint8_t>(values, 0); });
  tbb::parallel_for(uint64_t{0}, (height + kRowsPerBlock - 1) / kRowsPerBlock, [&](uint64_t b) {
    std::vector<uint8_t>& s = seen.local();
    for (uint64_t y = b * kRowsPerBlock; y < std::min(height, (b + 1) * kRowsPerBlock); ++y) {
      const Samples<T> p = map_row<T>(m, y);
      if (m.channels == 1) {  // a run at a time
        for (uint64_t x = 0; x < width; x = run_end<T>(p.base, x, width)) s[p[x]] = 1;
        continue;
      }
      for (uint64_t x = 0; x < width; ++x) s[p[x * m.channels]] = 1;
    }
  });
  std::vector<uint8_t> all(values, 0);
  for (const std::vector<uint8_t>& s : seen)
    for (size_t i = 0; i < values; ++i) all[i] |= s[i];
  std::vector<int64_t> out;
  for (size_t i = 0; i < values; ++i)
    if (all[i]) out.push_back(static_cast<int64_t>(i));
  return out;
}

// Distinct 32-bit labels, each thread's kept sorted and checked against
// `limit` after every block: memory stays within the limit plus a block.
template <class T>
std::vector<int64_t> distinct_wide(const PartMapView& m, uint64_t height, uint64_t width, uint64_t limit,
                                   bool ignore, int64_t ignored) {
  tbb::enumerable_thread_specific<std::vector<int64_t>> found;
  auto over = [&](uint64_t n) {
    fail_limit("the label image has more than " + std::to_string(limit) +
                                            " distinct labels (at least " + std::to_string(n) +
                                            "), more than the limit of --max-parts");
  };
  tbb::parallel_for(uint64_t{0}, (height + kRowsPerBlock - 1) / kRowsPerBlock, [&](uint64_t b) {
    std::vector<int64_t>& f = found.local();
    const size_t before = f.size();
    for (uint64_t y = b * kRowsPerBlock; y < std::min(height, (b + 1) * kRowsPerBlock); ++y) {
      const Samples<T> p = map_row<T>(m, y);
      int64_t last = 0;
      bool have = false;
      for (uint64_t x = 0; x < width; ++x) {
        const int64_t v = static_cast<int64_t>(p[x * m.channels]);
        if (have && v == last) continue;
        have = true;
        last = v;
        if (!(ignore && v == ignored)) f.push_back(v);
      }
    }
    if (f.size() == before) return;
    std::sort(f.begin(), f.end());
    f.erase(std::unique(f.begin(), f.end()), f.end());
    if (f.size() > limit) over(f.size());
  });
  std::vector<int64_t> all;
  for (std::vector<int64_t>& f : found) {
    all.insert(all.end(), f.begin(), f.end());
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    if (all.size() > limit) over(all.size());
  }
  return all;
}

}  // namespace

PartIndex::PartIndex(const Layout& layout, const Parts& parts) : parts_(parts), layout_(layout) {
  validate(layout, parts);
  switch (parts.kind) {
    case PartsKind::kMask: count_ = 1; break;
    case PartsKind::kTiles: {
      count_ = static_cast<uint32_t>(parts.tile_count());
      column_of_.resize(layout.width);
      row_of_.resize(layout.height);
      for (uint32_t c = 0; c < parts.columns; ++c)
        for (uint64_t x = tile_edge(c, layout.width, parts.columns); x < tile_edge(c + 1, layout.width, parts.columns); ++x)
          column_of_[x] = c;
      // A volume's rows: each plane's cut into tile rows, the planes into
      // slabs; row_of_ is then the slab's and the row's tile row.
      const uint64_t height = parts.slabs ? parts.plane_height : layout.height;
      const uint64_t planes = layout.height / height;
      const uint32_t slabs = parts.slabs ? parts.slabs : 1;
      for (uint32_t s = 0; s < slabs; ++s)
        for (uint64_t z = tile_edge(s, planes, slabs); z < tile_edge(s + 1, planes, slabs); ++z)
          for (uint32_t r = 0; r < parts.rows; ++r)
            for (uint64_t y = tile_edge(r, height, parts.rows); y < tile_edge(r + 1, height, parts.rows); ++y)
              row_of_[z * height + y] = s * parts.rows + r;
      break;
    }
    case PartsKind::kLabels: {
      const PartMapView& m = parts.map;
      switch (m.type) {
        case MapType::kUint8: labels_ = distinct_small<uint8_t>(m, layout.height, layout.width); break;
        case MapType::kUint16: labels_ = distinct_small<uint16_t>(m, layout.height, layout.width); break;
        case MapType::kUint32:
          labels_ = distinct_wide<uint32_t>(m, layout.height, layout.width, parts.max_parts, parts.ignore_label,
                                            parts.ignored_label);
          break;
        case MapType::kInt32:
          labels_ = distinct_wide<int32_t>(m, layout.height, layout.width, parts.max_parts, parts.ignore_label,
                                           parts.ignored_label);
          break;
        default: fail(ErrorCode::kInvalidArgument, "labels are uint8, uint16, uint32 or int32 samples");
      }
      if (parts.ignore_label)
        labels_.erase(std::remove(labels_.begin(), labels_.end(), parts.ignored_label), labels_.end());
      if (labels_.size() > parts.max_parts)
        fail_limit("the label image has " + std::to_string(labels_.size()) +
                                                " distinct labels, more than the limit of " +
                                                std::to_string(parts.max_parts) + " (--max-parts)");
      count_ = static_cast<uint32_t>(labels_.size());
      if (m.type == MapType::kUint8 || m.type == MapType::kUint16) {
        table_.assign(size_t{1} << (map_sample_size(m.type) * 8), kNoPart);
        for (uint32_t i = 0; i < count_; ++i) table_[static_cast<size_t>(labels_[i])] = i;
      }
      break;
    }
    default: fail(ErrorCode::kInternal, "no part index for rectangles or a whole image");
  }
}

bool PartIndex::serves(const Layout& layout, const Parts& parts) const {
  const PartMapView &a = parts_.map, &b = parts.map;
  return parts_.kind == PartsKind::kLabels && parts.kind == PartsKind::kLabels && a.data == b.data &&
         a.width == b.width && a.height == b.height && a.channels == b.channels && a.channel == b.channel &&
         a.type == b.type && a.stride() == b.stride() && parts_.ignore_label == parts.ignore_label &&
         (!parts.ignore_label || parts_.ignored_label == parts.ignored_label) && parts_.max_parts == parts.max_parts &&
         layout_.width == layout.width && layout_.height == layout.height;
}

std::shared_ptr<const PartIndex> find_labels(const Layout& layout, const Parts& parts) {
  if (parts.kind != PartsKind::kLabels) fail(ErrorCode::kInternal, "find_labels: parts are not labels");
  Parts own = parts;
  own.index.reset();
  return std::make_shared<const PartIndex>(layout, own);
}

const PartIndex& index_of(const Layout& layout, const Parts& parts, std::optional<PartIndex>& built) {
  if (parts.index && parts.index->serves(layout, parts)) return *parts.index;
  return built.emplace(layout, parts);
}

void PartIndex::row(uint64_t y, uint64_t x0, uint64_t n, uint32_t* out) const {
  const PartMapView& m = parts_.map;
  switch (parts_.kind) {
    case PartsKind::kTiles: {
      const uint32_t base = row_of_[y] * parts_.columns;
      for (uint64_t i = 0; i < n; ++i) out[i] = base + column_of_[x0 + i];
      return;
    }
    case PartsKind::kMask:
      switch (m.type) {
        case MapType::kUint8: return mask_row<uint8_t>(m, y, x0, n, out);
        case MapType::kInt8: return mask_row<int8_t>(m, y, x0, n, out);
        case MapType::kUint16: return mask_row<uint16_t>(m, y, x0, n, out);
        case MapType::kInt16: return mask_row<int16_t>(m, y, x0, n, out);
        case MapType::kUint32: return mask_row<uint32_t>(m, y, x0, n, out);
        case MapType::kInt32: return mask_row<int32_t>(m, y, x0, n, out);
        case MapType::kFloat32: return mask_row<float>(m, y, x0, n, out);
        case MapType::kFloat64: return mask_row<double>(m, y, x0, n, out);
      }
      return;
    case PartsKind::kLabels:
      switch (m.type) {
        case MapType::kUint8: return table_row<uint8_t>(m, table_, y, x0, n, out);
        case MapType::kUint16: return table_row<uint16_t>(m, table_, y, x0, n, out);
        case MapType::kUint32:
          return search_row<uint32_t>(m, labels_, parts_.ignore_label, parts_.ignored_label, y, x0, n, out);
        case MapType::kInt32:
          return search_row<int32_t>(m, labels_, parts_.ignore_label, parts_.ignored_label, y, x0, n, out);
        default: return;
      }
    default: return;
  }
}


}  // namespace imgstat
