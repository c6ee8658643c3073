#include "common/partial.hpp"

#include <algorithm>

namespace imgstat {

ChannelPartial partial_of_values(const uint64_t* counts, SampleType type, const StatsRequest& request) {
  const size_t values = size_t{1} << type_bits(type);
  ChannelPartial p;
  p.ints = moments_of_values(counts, values, type_lo(type));
  if (request.histogram) p.histogram = bin_values(counts, values, type, request.hist);
  return p;
}

Partial empty_partial(SampleType type, uint32_t channels, const StatsRequest& request) {
  Partial p;
  p.type = type;
  p.channels.resize(channels);
  if (request.histogram)
    for (ChannelPartial& c : p.channels) c.histogram.counts.assign(request.hist.bins, 0);
  return p;
}

namespace {

void merge(IntMoments& a, const IntMoments& b) {
  if (b.n == 0) return;
  if (a.n == 0) {
    a = b;
    return;
  }
  a.n += b.n;
  a.min = std::min(a.min, b.min);
  a.max = std::max(a.max, b.max);
  a.sum += b.sum;
  a.sumsq += b.sumsq;
}

}  // namespace

void merge(Partial& into, const Partial& from) {
  if (into.type != from.type || into.channels.size() != from.channels.size())
    fail(ErrorCode::kInternal, "merging partial results of different images");
  for (size_t c = 0; c < into.channels.size(); ++c) {
    ChannelPartial& a = into.channels[c];
    const ChannelPartial& b = from.channels[c];
    if (is_float(into.type))
      merge(a.floats, b.floats);
    else
      merge(a.ints, b.ints);
    if (a.histogram.counts.size() != b.histogram.counts.size())
      fail(ErrorCode::kInternal, "merging histograms of different bin counts");
    for (size_t i = 0; i < a.histogram.counts.size(); ++i) a.histogram.counts[i] += b.histogram.counts[i];
    a.histogram.underflow += b.histogram.underflow;
    a.histogram.overflow += b.histogram.overflow;
  }
}

std::vector<ChannelStats> finalize(const Partial& partial, const StatsRequest& request) {
  std::vector<ChannelStats> out;
  out.reserve(partial.channels.size());
  for (const ChannelPartial& p : partial.channels) {
    const bool floats = is_float(partial.type);
    ChannelStats s = floats ? finalize(p.floats, request) : finalize(p.ints, request);
    if (request.histogram) {
      s.histogram = p.histogram;
      const bool any = floats && p.floats.n > 0;
      set_histogram_range(s.histogram, partial.type, request.hist, any ? canonical_zero(p.floats.min) : 0,
                          any ? canonical_zero(p.floats.max) : 0);
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace imgstat
