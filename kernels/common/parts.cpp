#include "common/parts.hpp"

#include <tbb/enumerable_thread_specific.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "imgstat/binning.hpp"

namespace imgstat {

size_t map_sample_size(MapType t) {
  switch (t) {
    case MapType::kUint8:
    case MapType::kInt8: return 1;
    case MapType::kUint16:
    case MapType::kInt16: return 2;
    case MapType::kFloat32:
    case MapType::kUint32:
    case MapType::kInt32: return 4;
    case MapType::kFloat64: return 8;
  }
  return 0;
}

const char* to_string(MapType t) {
  switch (t) {
    case MapType::kUint8: return "uint8";
    case MapType::kUint16: return "uint16";
    case MapType::kInt8: return "int8";
    case MapType::kInt16: return "int16";
    case MapType::kFloat32: return "float32";
    case MapType::kFloat64: return "float64";
    case MapType::kUint32: return "uint32";
    case MapType::kInt32: return "int32";
  }
  return "unknown";
}

MapType map_type_of(SampleType t) {
  switch (t) {
    case SampleType::kUint8: return MapType::kUint8;
    case SampleType::kUint16: return MapType::kUint16;
    case SampleType::kInt8: return MapType::kInt8;
    case SampleType::kInt16: return MapType::kInt16;
    case SampleType::kFloat32: return MapType::kFloat32;
    case SampleType::kFloat64: return MapType::kFloat64;
  }
  return MapType::kUint8;
}

uint64_t answer_bytes(uint64_t parts, uint32_t channels, SampleType type, const StatsRequest& request) {
  // Upper bounds of the protobuf encoding: 10 bytes a varint, 9 a double,
  // 160 for a channel's fixed fields and a part's key.
  uint64_t per_channel = 160;
  if (request.histogram) per_channel += uint64_t{10} * request.hist.bins;
  if (request.distribution) per_channel += uint64_t{20} * request.percentiles.size();
  if (request.merge_state && !is_float(type)) per_channel += uint64_t{10} << type_bits(type);
  // A dense joint histogram lists every bin; a sparse one at most one
  // (index, count) pair per pixel, which only counting tells.
  const uint64_t joint = request.joint.total_bins() <= kDenseJointBins ? uint64_t{10} * request.joint.total_bins() : 0;
  const unsigned __int128 total =
      static_cast<unsigned __int128>(parts) * (uint64_t{channels} * per_channel + 64 + joint);
  return total > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(total);
}

namespace {

std::string rect_text(const Rect& r) {
  return std::to_string(r.x) + "," + std::to_string(r.y) + "," + std::to_string(r.width) + "," +
         std::to_string(r.height);
}

bool is_label_type(MapType t) {
  return t == MapType::kUint8 || t == MapType::kUint16 || t == MapType::kUint32 || t == MapType::kInt32;
}

}  // namespace

void validate(const Layout& layout, const Parts& parts) {
  auto invalid = [](const std::string& m) { fail(ErrorCode::kInvalidArgument, m); };
  auto too_many = [&](const std::string& what, uint64_t n) {
    fail_limit(std::to_string(n) + " " + what + " is more than the limit of " +
                                            std::to_string(parts.max_parts) + " parts (--max-parts)");
  };
  switch (parts.kind) {
    case PartsKind::kWhole: return;
    case PartsKind::kRects:
      if (parts.rects.empty()) invalid("no rectangles: give at least one, or none of parts");
      if (parts.rects.size() > parts.max_parts) too_many("rectangles", parts.rects.size());
      for (size_t i = 0; i < parts.rects.size(); ++i) {
        const Rect& r = parts.rects[i];
        const std::string name = "rectangle " + std::to_string(i + 1) + " (" + rect_text(r) + ")";
        if (r.width == 0 || r.height == 0) invalid(name + " has no area");
        uint64_t right, bottom;
        if (__builtin_add_overflow(r.x, r.width, &right) || __builtin_add_overflow(r.y, r.height, &bottom) ||
            right > layout.width || bottom > layout.height)
          invalid(name + " is not inside the " + std::to_string(layout.width) + "x" + std::to_string(layout.height) +
                  " image");
      }
      return;
    case PartsKind::kTiles: {
      if (parts.columns == 0 || parts.rows == 0)
        invalid("tiles need at least 1 column and 1 row, got " + std::to_string(parts.columns) + "x" +
                std::to_string(parts.rows));
      const uint64_t n = uint64_t{parts.columns} * parts.rows;
      if (n > parts.max_parts) too_many("tiles (" + std::to_string(parts.columns) + "x" + std::to_string(parts.rows) + ")", n);
      if (parts.columns > layout.width || parts.rows > layout.height)
        invalid("a grid of " + std::to_string(parts.columns) + "x" + std::to_string(parts.rows) +
                " tiles does not fit the " + std::to_string(layout.width) + "x" + std::to_string(layout.height) +
                " image: every tile needs a pixel");
      return;
    }
    case PartsKind::kMask:
    case PartsKind::kLabels: {
      const char* what = parts.kind == PartsKind::kMask ? "mask" : "label image";
      const PartMapView& m = parts.map;
      if (!m.data) invalid(std::string("the ") + what + " has no data");
      if (m.width != layout.width || m.height != layout.height)
        invalid(std::string("the ") + what + " is " + std::to_string(m.width) + "x" + std::to_string(m.height) +
                " and the image " + std::to_string(layout.width) + "x" + std::to_string(layout.height) +
                ": they must be the same size");
      if (m.channels < 1 || m.channels > 4 || m.channel >= m.channels)
        invalid(std::string("the ") + what + "'s channel " + std::to_string(m.channel) + " of " +
                std::to_string(m.channels) + " does not exist");
      if (m.row_stride && m.row_stride < m.width * m.channels * map_sample_size(m.type))
        invalid(std::string("the ") + what + "'s row stride is less than a row");
      if (parts.kind == PartsKind::kLabels && !is_label_type(m.type))
        invalid(std::string("labels are uint8, uint16, uint32 or int32 samples, not ") + to_string(m.type));
      return;
    }
  }
}

ImageView rect_view(const ImageView& image, const Rect& roi) {
  const Layout& l = image.layout;
  return ImageView{static_cast<const uint8_t*>(image.data) + roi.y * l.stride() + roi.x * l.pixel_bytes(),
                   Layout{roi.width, roi.height, l.channels, l.type, l.stride()}};
}

void to_image_positions(std::vector<ChannelStats>& channels, const Rect& roi, uint64_t width) {
  for (ChannelStats& c : channels)
    if (c.has_positions) {
      c.min_at = image_position(c.min_at, roi, width);
      c.max_at = image_position(c.max_at, roi, width);
    }
}

Rect tile_rect(const Parts& parts, const Layout& layout, uint32_t column, uint32_t row) {
  Rect r;
  r.x = tile_edge(column, layout.width, parts.columns);
  r.width = tile_edge(column + 1, layout.width, parts.columns) - r.x;
  r.y = tile_edge(row, layout.height, parts.rows);
  r.height = tile_edge(row + 1, layout.height, parts.rows) - r.y;
  return r;
}

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
      count_ = parts.columns * parts.rows;
      column_of_.resize(layout.width);
      row_of_.resize(layout.height);
      for (uint32_t c = 0; c < parts.columns; ++c)
        for (uint64_t x = tile_edge(c, layout.width, parts.columns); x < tile_edge(c + 1, layout.width, parts.columns); ++x)
          column_of_[x] = c;
      for (uint32_t r = 0; r < parts.rows; ++r)
        for (uint64_t y = tile_edge(r, layout.height, parts.rows); y < tile_edge(r + 1, layout.height, parts.rows); ++y)
          row_of_[y] = r;
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

namespace {
// Value counts when the statistics need every value, or when the histogram
// is every value anyway (8-bit samples, 256 bins over the type's range):
// the moments then follow from the counts, and nothing else need be counted.
bool wants_values(SampleType type, const StatsRequest& request) {
  return request.distribution || request.shape || request.merge_state || !request.channel_hists.empty() ||
         (request.histogram && !request.hist.explicit_range && request.hist.bins == (uint32_t{1} << type_bits(type)));
}
}  // namespace

PartCounts PartCounts::shaped(uint32_t parts, uint32_t channels, SampleType type, const StatsRequest& request) {
  PartCounts c;
  c.parts = parts;
  c.channels = channels;
  const size_t n = size_t{parts} * channels;
  c.moments.assign(n, IntMoments{});
  c.positions = request.positions;
  if (c.positions) {
    c.min_at.assign(n, UINT64_MAX);
    c.max_at.assign(n, UINT64_MAX);
  }
  if (wants_values(type, request)) {
    c.values = uint32_t{1} << type_bits(type);
    c.value_counts.assign(n * c.values, 0);
  } else if (request.histogram) {
    c.bins = request.hist.bins;
    c.binned.assign(n * c.bins, 0);
    c.underflow.assign(n, 0);
    c.overflow.assign(n, 0);
  }
  return c;
}

uint64_t part_count_bytes(uint32_t parts, uint32_t channels, SampleType type, const StatsRequest& request) {
  uint64_t per = sizeof(IntMoments) + (request.positions ? 16 : 0);
  if (wants_values(type, request))
    per += uint64_t{8} << type_bits(type);
  else if (request.histogram)
    per += uint64_t{8} * request.hist.bins + 16;
  return uint64_t{parts} * channels * per;
}

void check_part_count_bytes(uint32_t parts, uint32_t channels, SampleType type, const StatsRequest& request) {
  const uint64_t bytes = part_count_bytes(parts, channels, type, request);
  if (bytes > kMaxPartCountBytes)
    fail(ErrorCode::kResourceExhausted,
         "counting " + std::to_string(parts) + " parts of " + std::to_string(channels) + " " + to_string(type) +
             " channels would take " + std::to_string(bytes >> 20) + " MiB, more than " +
             std::to_string(kMaxPartCountBytes >> 20) +
             " MiB: ask for fewer parts, or leave out the distribution, shape and merge state");
}

uint64_t PartCounts::bytes() const {
  return moments.size() * sizeof(IntMoments) + (min_at.size() + max_at.size() + binned.size() + underflow.size() +
                                                 overflow.size() + value_counts.size()) * 8;
}

void PartCounts::add(const PartCounts& o) {
  // Sets of tens of thousands of parts, one per thread: merged on every core.
  tbb::parallel_for(tbb::blocked_range<size_t>(0, moments.size(), 4096), [&](const tbb::blocked_range<size_t>& range) {
    for (size_t i = range.begin(); i < range.end(); ++i) {
      if (bins)
        for (size_t k = i * bins; k < (i + 1) * bins; ++k) binned[k] += o.binned[k];
      if (!underflow.empty()) {
        underflow[i] += o.underflow[i];
        overflow[i] += o.overflow[i];
      }
      if (values)
        for (size_t k = i * values; k < (i + 1) * values; ++k) value_counts[k] += o.value_counts[k];
      IntMoments& a = moments[i];
      const IntMoments& b = o.moments[i];
      if (b.n == 0) continue;
      if (positions) {
        if (a.n == 0 || b.min < a.min || (b.min == a.min && o.min_at[i] < min_at[i])) min_at[i] = o.min_at[i];
        if (a.n == 0 || b.max > a.max || (b.max == a.max && o.max_at[i] < max_at[i])) max_at[i] = o.max_at[i];
      }
      if (a.n == 0) {
        a = b;
      } else {
        a.n += b.n;
        a.min = std::min(a.min, b.min);
        a.max = std::max(a.max, b.max);
        a.sum += b.sum;
        a.sumsq += b.sumsq;
      }
    }
  });
}

std::vector<int32_t> bin_table(SampleType type, const HistogramSpec& spec) {
  const uint32_t bits = type_bits(type);
  const size_t values = size_t{1} << bits;
  std::vector<int32_t> table(values);
  if (!spec.explicit_range) {
    for (size_t i = 0; i < values; ++i)
      table[i] = static_cast<int32_t>(type_range_bin(static_cast<uint32_t>(i), spec.bins, bits));
    return table;
  }
  const RangeBinner binner = RangeBinner::make(spec.lo, spec.hi, spec.bins);
  const int64_t value_lo = type_lo(type);
  for (size_t i = 0; i < values; ++i) {
    const double v = static_cast<double>(value_lo + static_cast<int64_t>(i));
    table[i] = v < spec.lo ? kUnderflowBin : v >= spec.hi ? kOverflowBin : static_cast<int32_t>(binner(v));
  }
  return table;
}

Partial partial_of_part(const PartCounts& counts, uint32_t part, SampleType type, const StatsRequest& request) {
  Partial p;
  p.type = type;
  for (uint32_t c = 0; c < counts.channels; ++c) {
    const size_t i = size_t{part} * counts.channels + c;
    ChannelPartial cp;
    if (counts.values) {
      cp = partial_of_values(&counts.value_counts[i * counts.values], type, request, c);
    } else {
      cp.ints = counts.moments[i];
      if (request.histogram) {
        set_histogram_range(cp.histogram, type, request.hist, 0, 0);
        cp.histogram.counts.assign(counts.binned.begin() + i * counts.bins,
                                   counts.binned.begin() + (i + 1) * counts.bins);
        cp.histogram.underflow = counts.underflow[i];
        cp.histogram.overflow = counts.overflow[i];
      }
    }
    if (counts.positions && counts.moments[i].n) {
      cp.extremes.any = true;
      cp.extremes.min = static_cast<double>(counts.moments[i].min);
      cp.extremes.max = static_cast<double>(counts.moments[i].max);
      cp.extremes.min_at = counts.min_at[i];
      cp.extremes.max_at = counts.max_at[i];
    }
    p.channels.push_back(std::move(cp));
  }
  return p;
}

PartStats part_key(const Parts& parts, const PartIndex* index, const Layout& layout, uint32_t part) {
  PartStats s;
  switch (parts.kind) {
    case PartsKind::kRects: s.roi = parts.rects.at(part); break;
    case PartsKind::kTiles:
      s.is_tile = true;
      s.column = part % parts.columns;
      s.row = part / parts.columns;
      s.roi = tile_rect(parts, layout, s.column, s.row);
      break;
    case PartsKind::kLabels:
      s.has_label = true;
      s.label = index->labels().at(part);
      break;
    default: break;
  }
  return s;
}

Result result_of_parts(const PartCounts& counts, const PartIndex& index, const Parts& parts, const Layout& layout,
                       const StatsRequest& request, const char* engine) {
  StatsRequest per_part = request;
  per_part.unique_colors = false;
  per_part.summary = false;
  per_part.luminance = false;
  if (parts.kind == PartsKind::kMask) {
    StatsRequest masked = request;
    masked.unique_colors = false;
    masked.luminance = false;
    return result_of(partial_of_part(counts, 0, layout.type, masked), masked, engine);
  }
  Result r;
  r.engine = engine;
  r.parts.resize(counts.parts);
  // Tens of thousands of labels: the answers are made on every core too.
  tbb::parallel_for(uint32_t{0}, counts.parts, [&](uint32_t p) {
    PartStats s = part_key(parts, &index, layout, p);
    s.channels = result_of(partial_of_part(counts, p, layout.type, per_part), per_part, engine).channels;
    r.parts[p] = std::move(s);
  });
  return r;
}

void check_answer_bytes(uint64_t parts, const Layout& layout, const Parts& spec, const StatsRequest& request) {
  auto mib = [](uint64_t b) {
    char s[32];
    std::snprintf(s, sizeof s, "%.1f MiB", b / 1048576.0);
    return std::string(s);
  };
  // Each part's joint histogram is counted whole (64-bit counters) before
  // anything is sent.
  const unsigned __int128 joint = static_cast<unsigned __int128>(parts) * request.joint.total_bins() * 8;
  if (joint > kMaxPartCountBytes)
    fail_limit("joint histograms of " + std::to_string(request.joint.total_bins()) + " bins for " +
               std::to_string(parts) + " parts would take " +
               (joint > static_cast<unsigned __int128>(UINT64_MAX) ? std::string("more than 2^64 bytes") : mib(static_cast<uint64_t>(joint))) +
               ", more than " + mib(kMaxPartCountBytes) + ": ask for fewer bins or fewer parts");
  const uint64_t bytes = answer_bytes(parts, layout.channels, layout.type, request);
  if (bytes <= spec.max_answer_bytes) return;
  fail_limit("the answer for " + std::to_string(parts) + " parts would take about " + mib(bytes) +
             ", more than the largest message (" + mib(spec.max_answer_bytes) +
             "): ask for fewer parts or fewer statistics (the histogram and merge state are the large ones)");
}

StatsRequest per_part_request(StatsRequest request) {
  request.unique_colors = false;
  request.summary = false;
  request.luminance = false;
  return request;
}

Result analyze_each_rect(const ImageView& image, const Parts& parts, const StatsRequest& request, const char* engine,
                         bool parallel, const std::function<Result(const ImageView&, const StatsRequest&)>& analyze) {
  const Layout& l = image.layout;
  const uint32_t n = parts.kind == PartsKind::kTiles ? parts.columns * parts.rows
                                                     : static_cast<uint32_t>(parts.rects.size());
  const StatsRequest per_part = per_part_request(request);
  Result r;
  r.engine = engine;
  r.parts.resize(n);
  auto one = [&](uint32_t i) {
    PartStats s = part_key(parts, nullptr, l, i);
    Result whole = analyze(rect_view(image, s.roi), per_part);
    s.channels = std::move(whole.channels);
    s.has_joint = whole.has_joint;
    s.joint = std::move(whole.joint);
    to_image_positions(s.channels, s.roi, l.width);
    r.parts[i] = std::move(s);
  };
  if (parallel)
    tbb::parallel_for(uint32_t{0}, n, one);
  else
    for (uint32_t i = 0; i < n; ++i) one(i);
  return r;
}

}  // namespace imgstat
