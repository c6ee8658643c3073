#include "cpu/parts.hpp"

#include <tbb/parallel_for.h>

#include <cstring>
#include <vector>

#include "common/colour.hpp"
#include "common/parts.hpp"
#include "cpu/analysis.hpp"
#include "cpu/part_counter.hpp"

namespace imgstat::cpu {
namespace {

// One view, analyzed whole on the calling thread's arena.
Result analyze_view(const ImageView& view, const StatsRequest& request) {
  auto analysis = make_analysis(view.layout, request);
  const std::vector<Piece> pieces = pieces_of(view);
  analysis->add_all(pieces);
  if (analysis->wants_second_pass()) analysis->add_second_pass(pieces);
  return analysis->finish();
}

// A mask over integer samples: the runs of selected pixels go to one
// analysis as pieces, exactly as a whole image's pieces do.
Result analyze_masked_runs(const ImageView& image, const PartIndex& index, const PartMapView& map,
                           const StatsRequest& request) {
  const Layout& l = image.layout;
  auto analysis = make_analysis(l, request);
  const uint64_t blocks = (l.height + kPartRowsPerBlock - 1) / kPartRowsPerBlock;
  // A one-channel byte mask (the usual kind) is scanned as it is; others
  // through the index.
  const bool bytes = map.type == MapType::kUint8 && map.channels == 1;
  tbb::parallel_for(uint64_t{0}, blocks, [&](uint64_t b) {
    std::vector<uint32_t> part(bytes ? 0 : l.width);
    std::vector<Piece> runs;
    for (uint64_t y = b * kPartRowsPerBlock; y < std::min(l.height, (b + 1) * kPartRowsPerBlock); ++y) {
      const uint8_t* m = static_cast<const uint8_t*>(map.data) + y * map.stride();
      if (!bytes) index.row(y, 0, l.width, part.data());
      auto in = [&](uint64_t x) { return bytes ? m[x] != 0 : part[x] != kNoPart; };
      const uint8_t* row = static_cast<const uint8_t*>(image.data) + y * l.stride();
      for (uint64_t x = 0; x < l.width;) {
        if (!in(x)) {
          ++x;
          continue;
        }
        uint64_t end = x + 1;
        while (end < l.width && in(end)) ++end;
        runs.push_back(Piece{row + x * l.pixel_bytes(), 1, l.stride(), end - x, y * l.width + x, l.width});
        x = end;
      }
    }
    if (!runs.empty()) analysis->add_all(runs);
  });
  return analysis->finish();
}

// Float samples of a mask, labels or tiles: each part's pixels gathered in
// row-major order, then analyzed as a 1 x n image (so as a whole image of
// those pixels is); positions map back through the gathered indices.
Result analyze_gathered(const ImageView& image, const PartIndex& index, const Parts& parts,
                        const StatsRequest& request) {
  const Layout& l = image.layout;
  const uint64_t pb = l.pixel_bytes();
  const uint32_t n = index.count();
  // Blocks of rows counted, then scattered, in parallel: each block's
  // pixels of a part go after those of the blocks before it, so each
  // part's pixels stay in row-major order (its positions, its float sums'
  // order). Few blocks where parts are many: a block's starts are n long.
  const uint64_t blocks = std::max<uint64_t>(1, std::min<uint64_t>((l.height + kPartRowsPerBlock - 1) / kPartRowsPerBlock,
                                                                    std::max<uint64_t>(1, (uint64_t{64} << 20) / 8 / (uint64_t{n} + 1))));
  const uint64_t rows_per_block = (l.height + blocks - 1) / blocks;
  std::vector<uint64_t> starts(blocks * (uint64_t{n} + 1), 0);  // [block][part]: counts, then where each block's go
  tbb::parallel_for(uint64_t{0}, blocks, [&](uint64_t b) {
    std::vector<uint32_t> part(l.width);
    uint64_t* count = &starts[b * (uint64_t{n} + 1)];
    for (uint64_t y = b * rows_per_block; y < std::min(l.height, (b + 1) * rows_per_block); ++y) {
      index.row(y, 0, l.width, part.data());
      for (uint64_t x = 0; x < l.width; ++x)
        if (part[x] != kNoPart) ++count[part[x]];
    }
  });
  std::vector<uint64_t> offset(size_t{n} + 1, 0);
  for (uint32_t p = 0; p < n; ++p) {
    uint64_t at = offset[p];
    for (uint64_t b = 0; b < blocks; ++b) {
      uint64_t& c = starts[b * (uint64_t{n} + 1) + p];
      const uint64_t k = c;
      c = at;
      at += k;
    }
    offset[p + 1] = at;
  }
  std::vector<uint8_t> pixels(offset[n] * pb);
  std::vector<uint64_t> at(request.positions ? offset[n] : 0);
  tbb::parallel_for(uint64_t{0}, blocks, [&](uint64_t b) {
    std::vector<uint32_t> part(l.width);
    uint64_t* next = &starts[b * (uint64_t{n} + 1)];
    for (uint64_t y = b * rows_per_block; y < std::min(l.height, (b + 1) * rows_per_block); ++y) {
      index.row(y, 0, l.width, part.data());
      const uint8_t* row = static_cast<const uint8_t*>(image.data) + y * l.stride();
      auto scatter = [&](auto sample) {  // a pixel's bytes as one value where they fit one
        using T = decltype(sample);
        for (uint64_t x = 0; x < l.width; ++x) {
          const uint32_t p = part[x];
          if (p == kNoPart) continue;
          const uint64_t to = next[p]++;
          if constexpr (sizeof(T) == 1) {
            std::memcpy(&pixels[to * pb], row + x * pb, pb);
          } else {
            T v;
            std::memcpy(&v, row + x * sizeof(T), sizeof(T));
            std::memcpy(&pixels[to * sizeof(T)], &v, sizeof(T));
          }
          if (!at.empty()) at[to] = y * l.width + x;
        }
      };
      switch (pb) {
        case 2: scatter(uint16_t{}); break;
        case 4: scatter(uint32_t{}); break;
        case 8: scatter(uint64_t{}); break;
        default: scatter(uint8_t{}); break;
      }
    }
  });
  const bool mask = parts.kind == PartsKind::kMask;
  StatsRequest per_part = mask ? request : per_part_request(request);
  per_part.unique_colors = false;
  per_part.luminance = false;
  auto analyze_part = [&](uint32_t p) {
    const uint64_t count = offset[p + 1] - offset[p];
    Result res = count == 0 ? result_of(empty_partial(l.type, l.channels, per_part), per_part, "cpu")
                            : analyze_view(ImageView{&pixels[offset[p] * pb], Layout{count, 1, l.channels, l.type, 0}},
                                           per_part);
    for (ChannelStats& c : res.channels)
      if (c.has_positions) {
        c.min_at = at[offset[p] + c.min_at];
        c.max_at = at[offset[p] + c.max_at];
      }
    return res;
  };
  if (mask) {
    Result r = analyze_part(0);
    r.engine = "cpu";
    return r;
  }
  Result r;
  r.engine = "cpu";
  r.parts.resize(n);
  tbb::parallel_for(uint32_t{0}, n, [&](uint32_t p) {
    PartStats s = part_key(parts, &index, l, p);
    Result whole = analyze_part(p);
    s.channels = std::move(whole.channels);
    s.has_joint = whole.has_joint;
    s.joint = std::move(whole.joint);
    r.parts[p] = std::move(s);
  });
  return r;
}

template <uint32_t C>
PartCounts count_parts_c(const ImageView& image, const PartIndex& index, const StatsRequest& request) {
  switch (image.layout.type) {
    case SampleType::kUint8: return PartCounter<uint8_t, C>(image, index, request).count();
    case SampleType::kInt8: return PartCounter<int8_t, C>(image, index, request).count();
    case SampleType::kUint16: return PartCounter<uint16_t, C>(image, index, request).count();
    case SampleType::kInt16: return PartCounter<int16_t, C>(image, index, request).count();
    default: fail(ErrorCode::kInternal, "part counts are for integer samples");
  }
}

PartCounts count_parts(const ImageView& image, const PartIndex& index, const StatsRequest& request) {
  switch (image.layout.channels) {
    case 1: return count_parts_c<1>(image, index, request);
    case 2: return count_parts_c<2>(image, index, request);
    case 3: return count_parts_c<3>(image, index, request);
    default: return count_parts_c<4>(image, index, request);
  }
}

}  // namespace

Result analyze_parts_on_cpu(const ImageView& image, const Parts& parts, const StatsRequest& request) {
  if (request.colour_space != ColourSpace::kNone) {
    // Parts of a colour space: the image converted whole, then measured as
    // any other (a mask of its own alpha still reads the original).
    const Layout measured = measured_layout(image.layout, request);
    std::vector<uint8_t> converted(measured.pixels() * measured.pixel_bytes());
    const uint64_t row_out = measured.row_bytes();
    tbb::parallel_for(uint64_t{0}, image.layout.height, [&](uint64_t y) {
      convert_pixels(request.colour_space, image.layout.type,
                     static_cast<const uint8_t*>(image.data) + y * image.layout.stride(), image.layout.width,
                     image.layout.channels, request.rgb, converted.data() + y * row_out);
    });
    return analyze_parts_on_cpu(ImageView{converted.data(), measured}, parts, measured_request(request, image.layout));
  }
  const Layout& l = image.layout;
  // A volume's tiles are no rectangles of its planes one below the other:
  // they go through the part index, as labels do.
  if (parts.kind == PartsKind::kRects || (parts.kind == PartsKind::kTiles && !parts.slabs)) {
    check_answer_bytes(parts.kind == PartsKind::kTiles ? parts.tile_count() : parts.rects.size(), l, parts, request);
    return analyze_each_rect(image, parts, request, "cpu", true, analyze_view);
  }
  std::optional<PartIndex> built;
  const PartIndex& index = index_of(l, parts, built);
  if (parts.kind != PartsKind::kMask) check_answer_bytes(index.count(), l, parts, request);
  // Joint histograms per label come with each label's pixels gathered.
  if (is_float(l.type) || (request.joint.axes && parts.kind == PartsKind::kLabels))
    return analyze_gathered(image, index, parts, measured_request(request, l));
  if (parts.kind == PartsKind::kMask) {
    StatsRequest masked = request;
    masked.unique_colors = false;
    masked.luminance = false;
    return analyze_masked_runs(image, index, parts.map, masked);
  }
  check_part_count_bytes(index.count(), l.channels, l.type, request);
  return result_of_parts(count_parts(image, index, request), index, parts, l, request, "cpu");
}

}  // namespace imgstat::cpu
