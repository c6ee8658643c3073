#include "render.hpp"

namespace imgstat::client {
namespace {

double type_max(v1::SampleType t) {
  switch (t) {
    case v1::SAMPLE_TYPE_UINT8: return 255;
    case v1::SAMPLE_TYPE_UINT16: return 65535;
    case v1::SAMPLE_TYPE_INT8: return 127;
    case v1::SAMPLE_TYPE_INT16: return 32767;
    default: return 1;
  }
}

void scale_channel(v1::ChannelStats& c, double k) {
  if (c.has_min()) c.set_min(c.min() / k);
  if (c.has_max()) c.set_max(c.max() / k);
  if (c.has_sum()) c.set_sum(c.sum() / k);
  c.clear_sum_int();  // no longer an integer
  if (c.has_mean()) c.set_mean(c.mean() / k);
  if (c.has_stddev()) c.set_stddev(c.stddev() / k);
  if (c.has_median()) c.set_median(c.median() / k);
  if (c.has_mode()) c.set_mode(c.mode() / k);
  if (c.has_bin_error()) c.set_bin_error(c.bin_error() / k);
  for (v1::Percentile& p : *c.mutable_percentiles()) p.set_value(p.value() / k);
  if (c.has_histogram()) {
    c.mutable_histogram()->set_lo(c.histogram().lo() / k);
    c.mutable_histogram()->set_hi(c.histogram().hi() / k);
  }
}

}  // namespace

void normalize(Outcome& o) {
  if (!o.ok) return;
  v1::AnalyzeResponse& r = o.response;
  const double k = type_max(r.sample_type());
  o.normalized = true;
  o.exact_sums.clear();
  for (v1::ChannelStats& c : *r.mutable_channels()) scale_channel(c, k);
  if (r.has_summary()) scale_channel(*r.mutable_summary(), k);
  if (r.has_luminance()) scale_channel(*r.mutable_luminance(), k);
  for (v1::PartStats& p : *r.mutable_parts())
    for (v1::ChannelStats& c : *p.mutable_channels()) scale_channel(c, k);
}

}  // namespace imgstat::client
