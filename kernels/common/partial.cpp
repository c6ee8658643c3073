#include "common/partial.hpp"

#include <algorithm>
#include <bit>

#include "common/distribution.hpp"

namespace imgstat {

ChannelPartial partial_of_values(const uint64_t* counts, SampleType type, const StatsRequest& request,
                                 uint32_t channel) {
  const size_t values = size_t{1} << type_bits(type);
  ChannelPartial p;
  p.ints = moments_of_values(counts, values, type_lo(type));
  if (request.histogram) p.histogram = bin_values(counts, values, type, hist_of(request, channel));
  if (counts_every_value(request)) p.values.assign(counts, counts + values);
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

// Counts of one kind from two parts; a part that asked for none has none.
void add_counts(std::vector<uint64_t>& a, const std::vector<uint64_t>& b, const char* what) {
  if (b.empty()) return;
  if (a.empty()) {
    a = b;
    return;
  }
  if (a.size() != b.size()) fail(ErrorCode::kInternal, std::string("merging ") + what + " of different sizes");
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
}

void or_words(std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  if (b.empty()) return;
  if (a.empty()) {
    a = b;
    return;
  }
  if (a.size() != b.size()) fail(ErrorCode::kInternal, "merging colour sets of different sizes");
  for (size_t i = 0; i < a.size(); ++i) a[i] |= b[i];
}

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
    add_counts(a.values, b.values, "value counts");
    if (!b.fine.empty()) fail(ErrorCode::kInternal, "fine bins of floats cannot be merged");
    if (!b.samples.empty()) {  // the samples of both, still ascending
      const size_t mid = a.samples.size();
      a.samples.insert(a.samples.end(), b.samples.begin(), b.samples.end());
      std::inplace_merge(a.samples.begin(), a.samples.begin() + static_cast<std::ptrdiff_t>(mid), a.samples.end());
    }
    merge(a.extremes, b.extremes);
  }
  or_words(into.colors, from.colors);
  add_counts(into.joint, from.joint, "joint histograms");
  into.joint_outside += from.joint_outside;
}

void offset_positions(Partial& partial, uint64_t first) {
  for (ChannelPartial& c : partial.channels) {
    c.extremes.min_at += first;
    c.extremes.max_at += first;
  }
}

std::vector<ChannelStats> finalize(const Partial& partial, const StatsRequest& request) {
  std::vector<ChannelStats> out;
  out.reserve(partial.channels.size());
  for (uint32_t c = 0; c < partial.channels.size(); ++c) {
    const ChannelPartial& p = partial.channels[c];
    const bool floats = is_float(partial.type);
    if (floats && request.robust && p.samples.size() != p.floats.n)  // merged images' (--aggregate), or a part's
      fail(ErrorCode::kUnimplemented, std::string("robust statistics (sigma clipping) of ") + to_string(partial.type) +
                                          " samples are computed for one whole image at a time, not merged over "
                                          "images or parts (integer samples are)");
    ChannelStats s = floats ? finalize(p.floats, request) : finalize(p.ints, request);
    if (floats) {
      describe_fine(p.fine, p.floats, request, s);
      if (request.robust) describe_robust_samples(p.samples, request.sigma_clip, s);
      if (request.shape) describe_shape(p.floats, s);
    } else {
      describe_values(p.values, type_lo(partial.type), request, s);
    }
    if (request.merge_state) {
      s.has_merge_state = true;
      if (floats)
        s.moments = p.floats;
      else
        s.value_counts = p.values;
    }
    if (request.positions && p.extremes.any) {
      s.has_positions = true;
      s.min_at = p.extremes.min_at;
      s.max_at = p.extremes.max_at;
    }
    if (request.histogram) {
      s.histogram = p.histogram;
      const bool any = floats && p.floats.n > 0;
      set_histogram_range(s.histogram, partial.type, hist_of(request, c), any ? canonical_zero(p.floats.min) : 0,
                          any ? canonical_zero(p.floats.max) : 0);
    }
    out.push_back(std::move(s));
  }
  return out;
}

namespace {

// All channels as one: exact for integers (moments and value counts add),
// Chan's and Pebay's merge for floats, whose fine bins cover different
// ranges and so give no distribution.
ChannelStats summary_of(const Partial& partial, const StatsRequest& request) {
  StatsRequest r = request;
  r.histogram = false;
  r.positions = false;
  r.merge_state = false;
  ChannelPartial all;
  for (const ChannelPartial& c : partial.channels) {
    merge(all.floats, c.floats);
    if (c.ints.n == 0) continue;
    if (all.ints.n == 0) {
      all.ints = c.ints;
    } else {
      all.ints.n += c.ints.n;
      all.ints.min = std::min(all.ints.min, c.ints.min);
      all.ints.max = std::max(all.ints.max, c.ints.max);
      all.ints.sum += c.ints.sum;
      all.ints.sumsq += c.ints.sumsq;
    }
    add_counts(all.values, c.values, "value counts");
  }
  Partial one;
  one.type = partial.type;
  one.channels.push_back(std::move(all));
  return finalize(one, r).front();
}

}  // namespace

Result result_of(const Partial& partial, const StatsRequest& request, const char* engine) {
  Result r;
  r.channels = finalize(partial, request);
  r.engine = engine;
  if (request.unique_colors && !partial.colors.empty()) {
    r.has_unique_colors = true;
    for (uint64_t w : partial.colors) r.unique_colors += static_cast<uint64_t>(std::popcount(w));
  }
  if (request.summary) {
    r.has_summary = true;
    r.summary = summary_of(partial, request);
  }
  if (request.joint.axes) {
    r.has_joint = true;
    r.joint.spec = request.joint;
    r.joint.counts = partial.joint;
    r.joint.counts.resize(request.joint.total_bins(), 0);  // an empty image counted nothing
    r.joint.outside = partial.joint_outside;
  }
  return r;
}

}  // namespace imgstat
