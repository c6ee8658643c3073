#include "core/response.hpp"

namespace imgstat {

void fill_channel(v1::ChannelStats* c, const ChannelStats& s, const StatsRequest& request, SampleType type,
                  uint64_t width) {
  c->set_count(s.count);
  if (is_float(type)) {
    c->set_nan_count(s.nan_count);
    c->set_posinf_count(s.posinf_count);
    c->set_neginf_count(s.neginf_count);
  }
  if (s.count > 0) {
    if (request.min_max) {
      c->set_min(s.min);
      c->set_max(s.max);
    }
    if (request.sum) {
      c->set_sum(s.sum);
      if (s.has_sum_int) c->set_sum_int(s.sum_int);
      c->set_mean(s.mean);
    }
    if (request.stddev) c->set_stddev(s.stddev);
  }
  if (s.has_distribution) {
    c->set_median(s.median);
    for (const auto& [p, v] : s.percentiles) {
      v1::Percentile* out = c->add_percentiles();
      out->set_p(p);
      out->set_value(v);
    }
    c->set_mode(s.mode);
    c->set_entropy(s.entropy);
    c->set_bin_error(s.bin_error);
  }
  if (s.has_shape) {
    c->set_skewness(s.skewness);
    c->set_kurtosis(s.kurtosis);
  }
  if (s.has_positions && width > 0) {
    c->mutable_min_position()->set_x(s.min_at % width);
    c->mutable_min_position()->set_y(s.min_at / width);
    c->mutable_max_position()->set_x(s.max_at % width);
    c->mutable_max_position()->set_y(s.max_at / width);
  }
  if (s.has_merge_state) {
    v1::MergeState* m = c->mutable_merge_state();
    if (is_float(type)) {
      m->set_count(s.moments.n);
      m->set_min(s.moments.min);
      m->set_max(s.moments.max);
      m->set_sum(s.moments.sum);
      m->set_sum_compensation(s.moments.sum_comp);
      m->set_mean(s.moments.mean);
      m->set_m2(s.moments.m2);
      m->set_m3(s.moments.m3);
      m->set_m4(s.moments.m4);
    } else {
      m->mutable_value_counts()->Assign(s.value_counts.begin(), s.value_counts.end());
    }
  }
  if (request.histogram) {
    v1::Histogram* h = c->mutable_histogram();
    h->mutable_counts()->Assign(s.histogram.counts.begin(), s.histogram.counts.end());
    h->set_lo(s.histogram.lo);
    h->set_hi(s.histogram.hi);
    h->set_underflow(s.histogram.underflow);
    h->set_overflow(s.histogram.overflow);
  }
}

ChannelStats merge_part_of(const v1::ChannelStats& c, SampleType type) {
  ChannelStats s;
  s.count = c.count();
  s.nan_count = c.nan_count();
  s.posinf_count = c.posinf_count();
  s.neginf_count = c.neginf_count();
  s.histogram.counts.assign(c.histogram().counts().begin(), c.histogram().counts().end());
  s.histogram.underflow = c.histogram().underflow();
  s.histogram.overflow = c.histogram().overflow();
  if (!c.has_merge_state()) return s;
  const v1::MergeState& m = c.merge_state();
  s.has_merge_state = true;
  if (is_float(type)) {
    s.moments.n = m.count();
    s.moments.nan = c.nan_count();
    s.moments.posinf = c.posinf_count();
    s.moments.neginf = c.neginf_count();
    s.moments.min = m.min();
    s.moments.max = m.max();
    s.moments.sum = m.sum();
    s.moments.sum_comp = m.sum_compensation();
    s.moments.mean = m.mean();
    s.moments.m2 = m.m2();
    s.moments.m3 = m.m3();
    s.moments.m4 = m.m4();
  } else {
    s.value_counts.assign(m.value_counts().begin(), m.value_counts().end());
  }
  return s;
}

}  // namespace imgstat
