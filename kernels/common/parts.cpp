#include "common/parts.hpp"

#include <tbb/enumerable_thread_specific.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstdio>
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
      const std::string grid = std::to_string(parts.columns) + "x" + std::to_string(parts.rows) +
                               (parts.slabs ? "x" + std::to_string(parts.slabs) : std::string());
      uint64_t height = layout.height, planes = 1;
      if (parts.slabs) {
        if (parts.plane_height == 0 || layout.height % parts.plane_height != 0)
          invalid("tiles of a volume need planes of equal height");
        height = parts.plane_height;
        planes = layout.height / parts.plane_height;
      }
      const uint64_t n = parts.tile_count();
      if (n > parts.max_parts) too_many("tiles (" + grid + ")", n);
      if (parts.columns > layout.width || parts.rows > height || parts.slabs > planes)
        invalid("a grid of " + grid + " tiles does not fit the " + std::to_string(layout.width) + "x" +
                std::to_string(height) + (parts.slabs ? "x" + std::to_string(planes) + " volume" : std::string(" image")) +
                ": every tile needs a pixel");
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
  const uint64_t height = parts.slabs ? parts.plane_height : layout.height;
  Rect r;
  r.x = tile_edge(column, layout.width, parts.columns);
  r.width = tile_edge(column + 1, layout.width, parts.columns) - r.x;
  r.y = tile_edge(row, height, parts.rows);
  r.height = tile_edge(row + 1, height, parts.rows) - r.y;
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

