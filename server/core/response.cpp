#include "core/response.hpp"

#include "core/validate.hpp"
#include "decode/decode.hpp"
#include "decode/facts.hpp"
#include "imgstat/colour.hpp"

namespace imgstat {

namespace {

// Channels in the answer's order (d.order), as the channels are.
void fill_quality(v1::QualityStats* o, const QualityStats& q, const Described& d) {
  o->set_laplacian_variance(q.laplacian_variance);
  o->set_rms_contrast(q.rms_contrast);
  if (q.has_colourfulness) o->set_colourfulness(q.colourfulness);
  for (uint32_t i : d.order) {
    o->add_share_at_min(q.share_at_min.at(i));
    o->add_share_at_max(q.share_at_max.at(i));
  }
  if (!q.has_cleanvision) return;
  const QualityStats::Cleanvision& c = q.cleanvision;
  v1::CleanvisionProperties* v = o->mutable_cleanvision();
  v->set_brightness(c.brightness);
  for (const auto& [p, value] : c.brightness_percentiles) {
    v1::Percentile* e = v->add_brightness_percentiles();
    e->set_p(p);
    e->set_value(value);
  }
  v->set_dark_score(c.dark_score);
  v->set_is_dark_issue(c.is_dark_issue);
  v->set_light_score(c.light_score);
  v->set_is_light_issue(c.is_light_issue);
  v->set_blurriness(c.blurriness);
  v->set_blurriness_grayscale_std(c.blurriness_grayscale_std);
  v->set_blurry_score(c.blurry_score);
  v->set_is_blurry_issue(c.is_blurry_issue);
  v->set_entropy(c.entropy);
  v->set_low_information_score(c.low_information_score);
  v->set_is_low_information_issue(c.is_low_information_issue);
  v->set_aspect_ratio(c.aspect_ratio);
  v->set_is_odd_aspect_ratio_issue(c.is_odd_aspect_ratio_issue);
  v->set_size(c.size);
  v->set_is_grayscale_issue(c.is_grayscale_issue);
}

}  // namespace

void fill_channel(v1::ChannelStats* c, const ChannelStats& s, const StatsRequest& request, SampleType type,
                  const PositionFrame& frame) {
  const uint64_t width = frame.width;
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
  if (s.has_robust) {
    const ChannelStats::Robust& q = s.robust;
    v1::RobustStats* o = c->mutable_robust();
    o->set_mean(q.mean);
    o->set_median(q.median);
    o->set_stddev(q.stddev);
    o->set_count(q.count);
    o->set_clipped_low(q.clipped_low);
    o->set_clipped_high(q.clipped_high);
    o->set_iterations(q.iterations);
    o->set_lower_bound(q.lower_bound);
    o->set_upper_bound(q.upper_bound);
    o->set_mad(q.mad);
    o->set_mad_std(q.mad_std);
  }
  if (s.has_positions && width > 0) {
    auto place = [&frame, width](v1::Position* p, uint64_t at) {
      const uint64_t row = at / width;
      p->set_x(at % width);
      if (frame.plane_height == 0) return p->set_y(row);
      p->set_y(row % frame.plane_height);
      p->set_plane(frame.first_plane + row / frame.plane_height);
    };
    place(c->mutable_min_position(), s.min_at);
    place(c->mutable_max_position(), s.max_at);
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

void set_joint_counts(v1::JointHistogram* out, const std::vector<uint64_t>& counts) {
  if (counts.size() <= kDenseJointBins) {
    out->mutable_counts()->Reserve(static_cast<int>(counts.size()));
    for (uint64_t c : counts) out->add_counts(c);
    return;
  }
  for (size_t i = 0; i < counts.size(); ++i)
    if (counts[i]) {
      out->add_nonzero_index(i);
      out->add_nonzero_count(counts[i]);
    }
}

void set_duration(google::protobuf::Duration* d, std::chrono::steady_clock::duration t) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t).count();
  d->set_seconds(ns / 1000000000);
  d->set_nanos(static_cast<int32_t>(ns % 1000000000));
}


Described describe_pixels(const std::string& format, const Layout& layout) {
  Described d{format, layout, {}, channel_names(layout.channels)};
  for (uint32_t c = 0; c < layout.channels; ++c) d.order.push_back(c);
  return d;
}

Described describe_raw(const v1::RawLayout& raw, uint64_t max_planes) {
  if (raw_planes_of(raw) > max_planes)
    fail(ErrorCode::kResourceExhausted, "raw.depth " + std::to_string(raw.depth()) + " is over the limit of " +
                                            std::to_string(max_planes) + " planes (--max-planes)");
  Described d = describe_pixels("raw", raw_layout_of(raw));
  d.planes = raw_planes_of(raw);
  return d;
}

// What the file says about itself; bit depth and colour type from the
// decoded pixels where its format did not say.
void fill_facts(v1::AnalyzeResponse& r, const uint8_t* data, size_t size, const Layout& layout,
                const std::function<void(uint64_t, uint64_t)>& release) {
  const Facts f = read_facts(data, size, release);
  v1::ImageFacts* out = r.mutable_facts();
  static const char* kColorTypes[] = {"", "gray", "gray+alpha", "rgb", "rgba"};
  out->set_bit_depth(f.bit_depth ? f.bit_depth : static_cast<uint32_t>(sample_size(layout.type) * 8));
  out->set_color_type(!f.color_type.empty() ? f.color_type : layout.channels <= 4 ? kColorTypes[layout.channels] : "");
  out->set_palette_size(f.palette_size);
  out->set_jpeg_quality(f.jpeg_quality);
  out->set_chroma_subsampling(f.chroma_subsampling);
  out->set_progressive(f.progressive);
  out->set_icc_profile(f.icc_profile);
  out->set_exif_orientation(f.exif_orientation);
  out->set_duration_ms(f.duration_ms);
}

void fill_boxes(v1::AnalyzeResponse& r, const std::vector<LabelBox>& boxes) {
  if (static_cast<size_t>(r.parts_size()) != boxes.size())
    fail(ErrorCode::kInternal, "label boxes: " + std::to_string(boxes.size()) + " boxes for " +
                                   std::to_string(r.parts_size()) + " labels");
  for (size_t i = 0; i < boxes.size(); ++i) {
    v1::PartStats* p = r.mutable_parts(static_cast<int>(i));
    const LabelBox& b = boxes[i];
    if (p->label() != b.label) fail(ErrorCode::kInternal, "label boxes: not in the parts' order");
    v1::Box* box = p->mutable_box();
    box->set_x(b.x);
    box->set_y(b.y);
    box->set_z(b.z);
    box->set_width(b.width);
    box->set_height(b.height);
    box->set_depth(b.depth);
  }
}

void fill_planes(v1::AnalyzeResponse& r, const Described& image, const std::vector<Result>& planes,
                 const StatsRequest& request) {
  if (planes.empty()) {
    v1::PlaneStats* p = r.add_planes();
    p->set_index(image.first_plane);
    *p->mutable_channels() = r.channels();
    return;
  }
  const Described d = measured(image, request);
  const PositionFrame frame{d.layout.width, 0, 0};
  for (size_t k = 0; k < planes.size(); ++k) {
    v1::PlaneStats* p = r.add_planes();
    p->set_index(d.first_plane + k);
    for (size_t i = 0; i < d.order.size() && !planes[k].channels.empty(); ++i) {
      v1::ChannelStats* c = p->add_channels();
      c->set_name(d.names[i]);
      fill_channel(c, planes[k].channels.at(d.order[i]), request, d.layout.type, frame);
    }
  }
}

void fill_plane_facts(v1::AnalyzeResponse& r, uint64_t planes, uint64_t answered, uint64_t reduced_pages,
                      const std::vector<uint32_t>& delays_ms) {
  for (int i = 0; i < r.planes_size() && static_cast<size_t>(i) < delays_ms.size(); ++i)
    r.mutable_planes(i)->set_delay_ms(delays_ms[static_cast<size_t>(i)]);
  v1::ImageFacts* f = r.mutable_facts();
  f->set_planes(planes);
  f->set_planes_answered(answered);
  f->set_reduced_pages(reduced_pages);
}

void fill_plane_facts(v1::AnalyzeResponse& r, const DecodePlan& plan, uint64_t answered) {
  fill_plane_facts(r, plan.planes, answered, plan.reduced_pages, plan.plane_delays_ms);
  if (plan.stored_bits) r.mutable_facts()->set_bit_depth(plan.stored_bits);
  for (const auto& [key, value] : plan.keywords) (*r.mutable_facts()->mutable_keywords())[key] = value;
  if (plan.pages_per_plane > 1) r.mutable_facts()->set_color_type("channels");
  if (plan.levels > 1) {
    r.mutable_facts()->set_levels(plan.levels);
    r.mutable_facts()->set_level(plan.level);
  }
  if (plan.series_count > 1) {
    r.mutable_facts()->set_series_count(plan.series_count);
    r.mutable_facts()->set_series(plan.series);
  }
  const StackAxes& a = plan.axes;
  if (a.source.empty()) return;
  v1::StackAxes* out = r.mutable_facts()->mutable_stack_axes();
  out->set_source(a.source);
  out->set_order(a.order);
  out->set_z(a.z);
  out->set_c(a.c);
  out->set_t(a.t);
  for (v1::PlaneStats& p : *r.mutable_planes()) {
    p.set_z(static_cast<uint32_t>(a.coordinate(p.index(), 'Z')));
    p.set_c(static_cast<uint32_t>(a.coordinate(p.index(), 'C')));
    p.set_t(static_cast<uint32_t>(a.coordinate(p.index(), 'T')));
  }
}

// The channels reported: a colour space's, in its order, or the image's.
Described measured(const Described& d, const StatsRequest& request) {
  if (request.colour_space == ColourSpace::kNone) return d;
  Described m = d;
  m.names = colour_channel_names(request.colour_space, d.layout.channels == 4);
  m.order.clear();
  for (uint32_t c = 0; c < m.names.size(); ++c) m.order.push_back(c);
  return m;
}

static void fill_joint(v1::JointHistogram* out, const JointHistogram& joint, const Described& d) {
  for (uint32_t a = 0; a < joint.spec.axes; ++a) {
    std::string name = std::to_string(joint.spec.channels[a]);
    for (size_t i = 0; i < d.order.size(); ++i)
      if (d.order[i] == joint.spec.channels[a]) name = d.names[i];
    out->add_channels(name);
    out->add_bins(joint.spec.bins[a]);
    v1::HistogramRange* range = out->add_ranges();
    range->set_lo(joint.spec.lo[a]);
    range->set_hi(joint.spec.hi[a]);
  }
  set_joint_counts(out, joint.counts);
  out->set_outside(joint.outside);
}

void fill_response(v1::AnalyzeResponse& r, const Described& image, const Result& result,
                   const StatsRequest& request, bool parts) {
  const Described d = measured(image, request);
  const std::vector<ChannelStats>& stats = result.channels;
  const PositionFrame frame{d.layout.width, d.planes > 1 ? d.plane_height() : 0, d.first_plane};
  r.set_format(d.format);
  r.set_width(d.layout.width);
  r.set_height(d.plane_height());
  r.set_channel_count(d.layout.channels);
  r.set_sample_type(proto_sample_type(d.layout.type));
  r.set_engine(result.engine);
  if (result.device >= 0) r.set_device(result.device);
  for (size_t i = 0; i < d.order.size() && !stats.empty(); ++i) {  // parts but a mask: no whole-image channels
    v1::ChannelStats* c = r.add_channels();
    c->set_name(d.names[i]);
    fill_channel(c, stats.at(d.order[i]), request, d.layout.type, frame);
  }
  if (result.has_unique_colors) r.set_unique_colors(result.unique_colors);
  if (result.has_joint) fill_joint(r.mutable_joint(), result.joint, d);
  if (result.has_summary) {
    StatsRequest all = request;
    all.histogram = false;
    r.mutable_summary()->set_name("all");
    fill_channel(r.mutable_summary(), result.summary, all, d.layout.type, {});
  }
  if (result.has_luminance) {
    r.mutable_luminance()->set_name("Y");
    fill_channel(r.mutable_luminance(), result.luminance, request, luminance_type(d.layout.type), frame);
  } else if (request.luminance) {
    r.add_warnings(d.layout.channels < 3 ? "no luminance: the image has " + std::to_string(d.layout.channels) +
                                               " channel" + (d.layout.channels == 1 ? "" : "s") + ", not R, G, B"
                   : parts ? "no luminance: it is not computed for parts of an image"
                           : "no luminance: it is not computed for streamed uploads");
  }
  if (result.has_quality) {
    fill_quality(r.mutable_quality(), result.quality, d);
  } else if (request.quality) {
    r.add_warnings(parts ? "no quality measures: they are not computed for parts of an image"
                         : "no quality measures: they are not computed for streamed uploads");
  }
  for (size_t i = 0; i < d.order.size() && d.order[i] < result.background.size(); ++i) {  // as the channels: reported order
    const BackgroundMesh& m = result.background[d.order[i]];
    v1::BackgroundMesh* o = r.add_background();
    o->set_channel(d.names[i]);
    o->set_rows(m.rows);
    o->set_columns(m.columns);
    o->set_box_rows(m.box_rows);
    o->set_box_columns(m.box_columns);
    *o->mutable_background() = {m.background.begin(), m.background.end()};
    *o->mutable_background_rms() = {m.rms.begin(), m.rms.end()};
    *o->mutable_excluded() = {m.excluded.begin(), m.excluded.end()};
    o->set_boxes_excluded(m.boxes_excluded);
    o->set_background_median(m.background_median);
    o->set_background_rms_median(m.rms_median);
    if (m.empty())
      r.add_warnings("no background mesh for channel " + o->channel() + ": every box has more than the exclude "
                     "percentile of its pixels masked or clipped");
  }
  if (result.has_hashes) {
    v1::ImageHashes* h = r.mutable_hashes();
    h->set_pixels(std::string(result.hashes.pixels.begin(), result.hashes.pixels.end()));
    if (result.hashes.has_phash) h->set_phash(result.hashes.phash);
  } else if (request.hashes) {
    r.add_warnings(parts ? "no hashes: they are not computed for parts of an image"
                         : "no hashes: they are not computed for streamed uploads");
  }
  if (request.background.enabled && result.background.empty())
    r.add_warnings(parts ? "no background meshes: they are not computed for parts of an image"
                         : "no background meshes: they are not computed for streamed uploads");
  if (parts && request.unique_colors && !result.has_unique_colors)
    r.add_warnings("no unique colours: they are not computed for parts of an image");
  for (const PartStats& p : result.parts) {
    v1::PartStats* out = r.add_parts();
    if (!p.has_label) {
      v1::Rectangle* roi = out->mutable_roi();
      roi->set_x(static_cast<uint32_t>(p.roi.x));
      roi->set_y(static_cast<uint32_t>(p.roi.y));
      roi->set_width(static_cast<uint32_t>(p.roi.width));
      roi->set_height(static_cast<uint32_t>(p.roi.height));
    }
    if (p.has_label) out->set_label(p.label);
    if (p.is_tile) {
      out->mutable_tile()->set_column(p.column);
      out->mutable_tile()->set_row(p.row);
    }
    if (p.is_tile && p.depth) {
      out->mutable_tile()->set_slab(p.slab);
      v1::Box* box = out->mutable_box();
      box->set_x(p.roi.x);
      box->set_y(p.roi.y);
      box->set_z(p.z);
      box->set_width(p.roi.width);
      box->set_height(p.roi.height);
      box->set_depth(p.depth);
    }
    for (size_t i = 0; i < d.order.size(); ++i) {
      v1::ChannelStats* c = out->add_channels();
      c->set_name(d.names[i]);
      fill_channel(c, p.channels.at(d.order[i]), request, d.layout.type, frame);
    }
    if (p.has_joint) fill_joint(out->mutable_joint(), p.joint, d);
  }
}

}  // namespace imgstat
