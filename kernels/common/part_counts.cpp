// Per-part counts and what they answer: shaped for a request, added up,
// each part's Partial, the Result of every part.
#include "common/parts.hpp"

#include <tbb/enumerable_thread_specific.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <string>

#include "imgstat/binning.hpp"

namespace imgstat {

namespace {
// Value counts when the statistics need every value, or when the histogram
// is every value anyway (8-bit samples, 256 bins over the type's range):
// the moments then follow from the counts, and nothing else need be counted.
bool wants_values(SampleType type, const StatsRequest& request) {
  return counts_every_value(request) || !request.channel_hists.empty() ||
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
      s.row = part / parts.columns % parts.rows;
      s.roi = tile_rect(parts, layout, s.column, s.row);
      if (parts.slabs) {
        const uint64_t planes = layout.height / parts.plane_height;
        s.slab = part / parts.columns / parts.rows;
        s.z = tile_edge(s.slab, planes, parts.slabs);
        s.depth = tile_edge(s.slab + 1, planes, parts.slabs) - s.z;
      }
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


}  // namespace imgstat
