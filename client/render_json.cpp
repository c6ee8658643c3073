#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <map>
#include <string_view>
#include <vector>

#include "render.hpp"
#include "render_text.hpp"

namespace imgstat::client {
namespace {

// A JSON object written as nlohmann::json dumps one (its keys in order, its
// numbers and strings through its serializer) without building one: --json
// renders every answer, and nlohmann's maps of a 640x480 RGB answer cost
// about 88 µs, more than the rest of the client's work on it together.
class Fields {
 public:
  void raw(std::string_view key, std::string value) { fields_.emplace_back(key, std::move(value)); }
  void u64(std::string_view key, uint64_t v) { raw(key, std::to_string(v)); }
  void i64(std::string_view key, int64_t v) { raw(key, std::to_string(v)); }
  void f64(std::string_view key, double v) { raw(key, nlohmann::json(v).dump()); }
  void str(std::string_view key, const std::string& v) { raw(key, nlohmann::json(v).dump()); }
  void null(std::string_view key) { raw(key, "null"); }
  std::string text() {
    std::stable_sort(fields_.begin(), fields_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    size_t n = 2;
    for (const auto& [k, v] : fields_) n += k.size() + v.size() + 4;
    std::string out;
    out.reserve(n);
    out += '{';
    for (size_t i = 0; i < fields_.size(); ++i) {
      if (i) out += ',';
      out += '"';
      out += fields_[i].first;  // keys are ours: nothing to escape
      out += "\":";
      out += fields_[i].second;
    }
    out += '}';
    return out;
  }

 private:
  std::vector<std::pair<std::string_view, std::string>> fields_;
};

// Options.background's meshes, one object per channel, each mesh as rows
// of values (photutils' background_mesh and background_rms_mesh).
std::string background_text(const v1::AnalyzeResponse& r) {
  nlohmann::json all = nlohmann::json::array();
  for (const v1::BackgroundMesh& m : r.background()) {
    auto rows = [&](const auto& v) {
      nlohmann::json out = nlohmann::json::array();
      for (uint64_t i = 0; i < m.rows() && !v.empty(); ++i)
        out.push_back(nlohmann::json::array_t(v.begin() + static_cast<int64_t>(i * m.columns()),
                                              v.begin() + static_cast<int64_t>((i + 1) * m.columns())));
      return out;
    };
    all.push_back({{"channel", m.channel()},
                   {"rows", m.rows()},
                   {"columns", m.columns()},
                   {"box_rows", m.box_rows()},
                   {"box_columns", m.box_columns()},
                   {"background_median", m.background_median()},
                   {"background_rms_median", m.background_rms_median()},
                   {"boxes_excluded", m.boxes_excluded()},
                   {"background", rows(m.background())},
                   {"background_rms", rows(m.background_rms())},
                   {"excluded", rows(m.excluded())}});
  }
  return all.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// STATISTIC_HASHES: lower-case hex, the phash as imagehash's str() writes it.
std::string hashes_text(const v1::ImageHashes& h) {
  nlohmann::json j = {{"pixels", hex_of(h.pixels())}};
  if (h.has_phash()) {
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h.phash()));
    j["phash"] = text;
  }
  return j.dump();
}

// STATISTIC_QUALITY's measures; the per-channel shares keyed by channel
// name are the channels' own (in their order).
std::string quality_text(const v1::QualityStats& q) {
  Fields o;
  o.f64("laplacian_variance", q.laplacian_variance());
  o.f64("rms_contrast", q.rms_contrast());
  if (q.has_colourfulness()) o.f64("colourfulness", q.colourfulness());
  auto list = [](const auto& v) {
    std::string s = "[";
    for (double x : v) s += (s.size() > 1 ? "," : "") + nlohmann::json(x).dump();
    return s + "]";
  };
  o.raw("share_at_min", list(q.share_at_min()));
  o.raw("share_at_max", list(q.share_at_max()));
  if (q.has_cleanvision()) {
    const v1::CleanvisionProperties& c = q.cleanvision();
    Fields v;
    v.f64("brightness", c.brightness());
    for (const v1::Percentile& p : c.brightness_percentiles()) {
      static const char* kNames[] = {"brightness_perc_1", "brightness_perc_5", "brightness_perc_10",
                                     "brightness_perc_15", "brightness_perc_90", "brightness_perc_95",
                                     "brightness_perc_99"};
      for (const char* name : kNames)
        if (std::string(name) == "brightness_perc_" + std::to_string(static_cast<int>(p.p()))) v.f64(name, p.value());
    }
    v.f64("dark_score", c.dark_score());
    v.raw("is_dark_issue", c.is_dark_issue() ? "true" : "false");
    v.f64("light_score", c.light_score());
    v.raw("is_light_issue", c.is_light_issue() ? "true" : "false");
    v.f64("blurriness", c.blurriness());
    v.f64("blurriness_grayscale_std", c.blurriness_grayscale_std());
    v.f64("blurry_score", c.blurry_score());
    v.raw("is_blurry_issue", c.is_blurry_issue() ? "true" : "false");
    v.f64("entropy", c.entropy());
    v.f64("low_information_score", c.low_information_score());
    v.raw("is_low_information_issue", c.is_low_information_issue() ? "true" : "false");
    v.f64("aspect_ratio", c.aspect_ratio());
    v.f64("odd_aspect_ratio_score", c.aspect_ratio());
    v.raw("is_odd_aspect_ratio_issue", c.is_odd_aspect_ratio_issue() ? "true" : "false");
    v.f64("size", c.size());
    v.raw("is_grayscale_issue", c.is_grayscale_issue() ? "true" : "false");
    o.raw("cleanvision", v.text());
  }
  return o.text();
}

// A channel's object. flt: values print as floats; float_samples: NaN and
// Inf counts apply; exact_sum, where given, is the sum's digits (--aggregate's
// exact sums, which may pass 64 bits: JSON integers have no size limit).
// stack: positions are in a stack of planes, and name theirs.
std::string channel_text(const v1::ChannelStats& c, bool flt, bool float_samples, const std::string& exact_sum = {},
                         bool stack = false) {
  Fields ch;
  auto sample = [&](std::string_view key, double v) {
    if (flt)
      ch.f64(key, v);
    else
      ch.i64(key, static_cast<int64_t>(v));
  };
  ch.str("name", c.name());
  ch.u64("count", c.count());
  if (c.has_min()) sample("min", c.min()); else ch.null("min");
  if (c.has_max()) sample("max", c.max()); else ch.null("max");
  if (!exact_sum.empty()) ch.raw("sum", exact_sum);
  else if (c.has_sum_int()) ch.i64("sum", c.sum_int());
  else if (c.has_sum()) ch.f64("sum", c.sum());
  else ch.null("sum");
  if (c.has_mean()) ch.f64("mean", c.mean()); else ch.null("mean");
  if (c.has_stddev()) ch.f64("stddev", c.stddev()); else ch.null("stddev");
  if (c.has_median()) {
    sample("median", c.median());
    std::string ps = "[";
    for (const v1::Percentile& p : c.percentiles()) {
      Fields one;
      one.f64("p", p.p());
      if (flt) one.f64("value", p.value()); else one.i64("value", static_cast<int64_t>(p.value()));
      if (ps.size() > 1) ps += ',';
      ps += one.text();
    }
    ch.raw("percentiles", ps + "]");
    sample("mode", c.mode());
    ch.f64("entropy", c.entropy());
    ch.f64("bin_error", c.bin_error());
  }
  if (c.has_skewness()) {
    ch.f64("skewness", c.skewness());
    ch.f64("kurtosis", c.kurtosis());
  }
  if (c.has_robust()) {
    const v1::RobustStats& q = c.robust();
    Fields r;
    r.f64("mean", q.mean());
    r.f64("median", q.median());
    r.f64("stddev", q.stddev());
    r.u64("count", q.count());
    r.u64("clipped_low", q.clipped_low());
    r.u64("clipped_high", q.clipped_high());
    r.u64("iterations", q.iterations());
    r.f64("lower_bound", q.lower_bound());
    r.f64("upper_bound", q.upper_bound());
    r.f64("mad", q.mad());
    r.f64("mad_std", q.mad_std());
    ch.raw("robust", r.text());
  }
  if (c.has_min_position()) {
    auto at = [stack](const v1::Position& p) {
      return "{\"x\":" + std::to_string(p.x()) + ",\"y\":" + std::to_string(p.y()) +
             (stack ? ",\"plane\":" + std::to_string(p.plane()) : std::string()) + "}";
    };
    ch.raw("min_position", at(c.min_position()));
    ch.raw("max_position", at(c.max_position()));
  }
  if (c.has_histogram()) {
    const v1::Histogram& h = c.histogram();
    std::string counts;
    counts.reserve(static_cast<size_t>(h.counts_size()) * 8 + 2);
    counts += '[';
    char digits[24];
    for (int i = 0; i < h.counts_size(); ++i) {
      if (i) counts += ',';
      const auto end = std::to_chars(digits, digits + sizeof digits, h.counts(i)).ptr;
      counts.append(digits, end);
    }
    counts += ']';
    Fields hj;
    hj.raw("counts", std::move(counts));
    hj.f64("lo", h.lo());
    hj.f64("hi", h.hi());
    hj.u64("underflow", h.underflow());
    hj.u64("overflow", h.overflow());
    ch.raw("histogram", hj.text());
  } else {
    ch.null("histogram");
  }
  if (float_samples) {
    ch.u64("nan_count", c.nan_count());
    ch.u64("inf_count", c.posinf_count() + c.neginf_count());
    ch.u64("posinf_count", c.posinf_count());
    ch.u64("neginf_count", c.neginf_count());
  }
  return ch.text();
}

template <class... T>
std::string json_array(const T&... v) {
  std::string out = "[";
  ((out += (out.size() > 1 ? "," : "") + std::to_string(v)), ...);
  return out + "]";
}

// A joint histogram's channels, bins and ranges; its counts dense up to
// 65,536 bins, then the nonzero (index, count) pairs.
nlohmann::json joint_json(const v1::JointHistogram& h) {
  using nlohmann::json;
  json j;
  j["channels"] = h.channels();
  j["bins"] = h.bins();
  j["ranges"] = json::array();
  for (const v1::HistogramRange& r : h.ranges()) j["ranges"].push_back({r.lo(), r.hi()});
  if (h.nonzero_index_size() > 0 || h.counts_size() == 0) {
    j["nonzero"] = json::array();
    for (int i = 0; i < h.nonzero_index_size(); ++i) j["nonzero"].push_back({h.nonzero_index(i), h.nonzero_count(i)});
  } else {
    j["counts"] = h.counts();
  }
  j["outside"] = h.outside();
  return j;
}

// The parts of an answer: {"roi": [x, y, w, h]}, {"label": N} or
// {"tile": [c, r], "roi": [...]} (a stack's: {"tile": [c, r, s], "roi",
// "box"}), each with its channels.
std::string parts_text(const v1::AnalyzeResponse& r, bool flt) {
  std::string parts = "[";
  for (const v1::PartStats& p : r.parts()) {
    Fields j;
    if (p.has_label()) j.i64("label", p.label());
    if (p.has_tile() && p.has_box())
      j.raw("tile", json_array(p.tile().column(), p.tile().row(), p.tile().slab()));
    else if (p.has_tile())
      j.raw("tile", json_array(p.tile().column(), p.tile().row()));
    if (p.has_roi()) j.raw("roi", json_array(p.roi().x(), p.roi().y(), p.roi().width(), p.roi().height()));
    if (p.has_box())
      j.raw("box", json_array(p.box().x(), p.box().y(), p.box().z(), p.box().width(), p.box().height(), p.box().depth()));
    std::string channels = "[";
    for (const v1::ChannelStats& c : p.channels()) {
      if (channels.size() > 1) channels += ',';
      channels += channel_text(c, flt, is_float_type(r.sample_type()), {}, r.facts().planes_answered() > 1);
    }
    j.raw("channels", channels + "]");
    if (p.has_joint()) j.raw("joint", joint_json(p.joint()).dump());
    if (parts.size() > 1) parts += ',';
    parts += j.text();
  }
  return parts + "]";
}

// --aggregate's answer: the images merged, their kind, the channels and the
// summary, with sums exact however large.
std::string aggregate_text(const Outcome& o, bool flt) {
  const v1::AnalyzeResponse& r = o.response;
  const bool float_samples = is_float_type(r.sample_type());
  auto exact = [&](size_t k) { return k < o.exact_sums.size() ? o.exact_sums[k] : std::string(); };
  Fields j;
  j.str("file", o.file);
  j.raw("ok", "true");
  j.raw("aggregate", "true");
  j.u64("images", o.images);
  j.u64("channel_count", r.channel_count());
  j.str("sample_type", sample_type_name(r.sample_type()));
  std::string channels = "[";
  size_t k = 0;
  for (const v1::ChannelStats& c : r.channels()) {
    if (channels.size() > 1) channels += ',';
    channels += channel_text(c, flt, float_samples, exact(k++));
  }
  j.raw("channels", channels + "]");
  if (r.has_summary()) j.raw("summary", channel_text(r.summary(), flt, float_samples, exact(k)));
  if (r.has_joint()) j.raw("joint", joint_json(r.joint()).dump());
  if (r.parts_size() || o.parts) j.raw("parts", parts_text(r, flt));
  return j.text();
}

}  // namespace

std::string render_json(const Outcome& o) {
  using nlohmann::json;
  Fields j;
  j.str("file", o.file);
  j.raw("ok", o.ok ? "true" : "false");
  if (!o.ok) {
    j.str("code", o.code);
    j.str("error", o.error);
    return j.text();
  }
  const v1::AnalyzeResponse& r = o.response;
  const bool flt = is_float_type(r.sample_type()) || o.normalized;
  const bool float_samples = is_float_type(r.sample_type());
  if (o.images > 0) return aggregate_text(o, flt);
  j.str("format", r.format());
  j.u64("width", r.width());
  j.u64("height", r.height());
  j.u64("channel_count", r.channel_count());
  j.str("sample_type", sample_type_name(r.sample_type()));
  j.str("engine", r.engine());
  if (r.has_device()) j.i64("device", r.device());
  j.str("decoder", r.decoder());
  j.f64("decode_ms", ms(r.decode_time()));
  if (r.has_check_time()) j.f64("check_ms", ms(r.check_time()));
  j.f64("compute_ms", ms(r.compute_time()));
  j.raw("warnings", json(std::vector<std::string>(r.warnings().begin(), r.warnings().end())).dump());
  const bool stack = r.facts().planes_answered() > 1;
  std::string channels = "[";
  for (const v1::ChannelStats& c : r.channels()) {
    if (channels.size() > 1) channels += ',';
    channels += channel_text(c, flt, float_samples, {}, stack);
  }
  j.raw("channels", channels + "]");
  if (r.has_facts()) {
    const v1::ImageFacts& f = r.facts();
    json facts{{"bit_depth", f.bit_depth()},          {"color_type", f.color_type()},
                        {"palette_size", f.palette_size()},    {"jpeg_quality", f.jpeg_quality()},
                        {"chroma_subsampling", f.chroma_subsampling()}, {"progressive", f.progressive()},
                        {"icc_profile", f.icc_profile()},      {"exif_orientation", f.exif_orientation()}};
    // Only files of several planes say so: one plane's answer reads as before.
    if (f.planes() > 1) {
      facts["planes"] = f.planes();
      facts["planes_answered"] = f.planes_answered();
    }
    if (f.reduced_pages()) facts["reduced_pages"] = f.reduced_pages();
    if (f.series_count() > 1) {
      facts["series_count"] = f.series_count();
      facts["series"] = f.series();
    }
    if (f.levels() > 1) {
      facts["levels"] = f.levels();
      facts["level"] = f.level();
    }
    if (f.duration_ms()) facts["duration_ms"] = f.duration_ms();
    if (!f.keywords().empty()) {
      // In the order of the header's words, not the map's: sorted for a stable output.
      std::map<std::string, std::string> sorted(f.keywords().begin(), f.keywords().end());
      facts["keywords"] = sorted;
    }
    if (f.has_stack_axes()) {
      const v1::StackAxes& a = f.stack_axes();
      facts["stack_axes"] = {{"source", a.source()}, {"order", a.order()}, {"z", a.z()}, {"c", a.c()}, {"t", a.t()}};
    }
    j.raw("facts", facts.dump());
  }
  if (r.has_unique_colors()) j.u64("unique_colors", r.unique_colors());
  if (r.has_luminance()) j.raw("luminance", channel_text(r.luminance(), flt, float_samples));
  if (r.has_summary()) j.raw("summary", channel_text(r.summary(), flt, float_samples));
  if (r.has_quality()) j.raw("quality", quality_text(r.quality()));
  if (r.background_size()) j.raw("background", background_text(r));
  if (r.has_hashes()) j.raw("hashes", hashes_text(r.hashes()));
  if (r.has_joint()) j.raw("joint", joint_json(r.joint()).dump());
  if (r.parts_size() || o.parts) j.raw("parts", parts_text(r, flt));
  if (r.planes_size()) {
    std::string planes = "[";
    for (const v1::PlaneStats& p : r.planes()) {
      Fields pj;
      pj.u64("index", p.index());
      if (p.delay_ms()) pj.u64("delay_ms", p.delay_ms());
      if (r.facts().has_stack_axes()) {
        pj.u64("z", p.z());
        pj.u64("c", p.c());
        pj.u64("t", p.t());
      }
      std::string channels = "[";
      for (const v1::ChannelStats& c : p.channels()) {
        if (channels.size() > 1) channels += ',';
        channels += channel_text(c, flt, float_samples);
      }
      pj.raw("channels", channels + "]");
      if (planes.size() > 1) planes += ',';
      planes += pj.text();
    }
    j.raw("planes", planes + "]");
  }
  return j.text();
}

}  // namespace imgstat::client
