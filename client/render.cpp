#include "render.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string_view>

namespace imgstat::client {
namespace {

bool is_float_type(v1::SampleType t) { return t == v1::SAMPLE_TYPE_FLOAT32 || t == v1::SAMPLE_TYPE_FLOAT64; }

std::string sample_type_name(v1::SampleType t) {
  switch (t) {
    case v1::SAMPLE_TYPE_UINT8: return "uint8";
    case v1::SAMPLE_TYPE_UINT16: return "uint16";
    case v1::SAMPLE_TYPE_INT8: return "int8";
    case v1::SAMPLE_TYPE_INT16: return "int16";
    case v1::SAMPLE_TYPE_FLOAT32: return "float32";
    case v1::SAMPLE_TYPE_FLOAT64: return "float64";
    default: return "unknown";
  }
}

double ms(const google::protobuf::Duration& d) { return d.seconds() * 1e3 + d.nanos() * 1e-6; }

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// s right-aligned in a field of width w.
std::string pad(const std::string& s, size_t w) { return s.size() >= w ? " " + s : std::string(w - s.size(), ' ') + s; }

// Numbers of the sample type: integers without a fraction, floats with
// enough digits to tell them apart.
std::string number(double v, bool flt) { return flt ? fmt("%.9g", v) : fmt("%.0f", v); }

// One row of block characters over the bins the data occupies (a 16-bit
// image's 0..65535 bins are mostly empty), folded into at most 64 columns.
// A column's height is its mean count per bin, so columns that fold
// unequal numbers of bins (300 bins into 64) do not draw a sawtooth.
struct Drawing {
  std::string row;
  int first = 0, last = -1;  // the bins drawn
};

Drawing drawing(const v1::Histogram& h) {
  static const char* kBlocks[] = {" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  Drawing d;
  const int bins = h.counts_size();
  while (d.first < bins && h.counts(d.first) == 0) ++d.first;
  d.last = bins - 1;
  while (d.last > d.first && h.counts(d.last) == 0) --d.last;
  if (d.first >= bins) return d;
  const int span = d.last - d.first + 1;
  const int columns = std::min(span, 64);
  std::vector<double> sum(columns, 0), width(columns, 0);
  for (int b = 0; b < span; ++b) {
    const size_t col = static_cast<size_t>(b) * columns / span;
    sum[col] += static_cast<double>(h.counts(d.first + b));
    width[col] += 1;
  }
  double top = 0;
  for (int c = 0; c < columns; ++c) top = std::max(top, sum[c] / width[c]);
  for (int c = 0; c < columns; ++c) {
    const int level = top > 0 ? static_cast<int>(std::ceil(8.0 * sum[c] / width[c] / top)) : 0;
    d.row += kBlocks[std::clamp(level, 0, 8)];
  }
  return d;
}

}  // namespace

std::string part_name(const v1::PartStats& p) {
  if (p.has_label()) return "label " + std::to_string(p.label());
  const v1::Rectangle& q = p.roi();
  const std::string roi = std::to_string(q.x()) + "," + std::to_string(q.y()) + "," + std::to_string(q.width()) + "," +
                          std::to_string(q.height());
  if (p.has_tile()) return "tile " + std::to_string(p.tile().column()) + "," + std::to_string(p.tile().row()) + " (" + roi + ")";
  return "roi " + roi;
}

namespace {

// Parts: one row per part and channel; a few parts also draw their histograms.
std::string parts_table(const v1::AnalyzeResponse& r, bool flt, const char* dim, const char* reset) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "  %-28s %-7s %14s %14s %14s %16s %16s\n", "part", "channel", "count", "min", "max",
                "mean", "stddev");
  out += line;
  const bool few = r.parts_size() <= 4;
  for (const v1::PartStats& p : r.parts()) {
    const std::string name = part_name(p);
    for (const v1::ChannelStats& c : p.channels()) {
      auto opt = [&](bool has, double v, bool as_sample) {
        return has ? (as_sample ? number(v, flt) : fmt("%.10g", v)) : std::string("-");
      };
      std::snprintf(line, sizeof line, "  %-28s %-7s %14llu %14s %14s %16s %16s\n", name.c_str(), c.name().c_str(),
                    static_cast<unsigned long long>(c.count()), opt(c.has_min(), c.min(), true).c_str(),
                    opt(c.has_max(), c.max(), true).c_str(), opt(c.has_mean(), c.mean(), false).c_str(),
                    opt(c.has_stddev(), c.stddev(), false).c_str());
      out += line;
    }
    if (!few) continue;
    for (const v1::ChannelStats& c : p.channels()) {
      if (!c.has_histogram() || c.count() == 0) continue;
      const Drawing d = drawing(c.histogram());
      std::snprintf(line, sizeof line, "  %-28s %-7s %s\n", "", c.name().c_str(), d.row.c_str());
      out += std::string(dim) + line + reset;
    }
  }
  return out;
}

}  // namespace

// A joint histogram's shape and its most populated bins, each as its
// lower bin edges.
std::string joint_table(const v1::JointHistogram& h) {
  std::vector<std::pair<uint64_t, uint64_t>> bins;  // (count, flat index)
  uint64_t total = 0;
  if (h.counts_size() > 0)
    for (int i = 0; i < h.counts_size(); ++i) {
      if (h.counts(i)) bins.push_back({h.counts(i), static_cast<uint64_t>(i)});
    }
  else
    for (int i = 0; i < h.nonzero_index_size(); ++i) bins.push_back({h.nonzero_count(i), h.nonzero_index(i)});
  for (const auto& b : bins) total += b.first;
  std::string shape, names;
  for (int a = 0; a < h.bins_size(); ++a) {
    shape += (a ? "x" : "") + std::to_string(h.bins(a));
    names += (a ? "," : "") + (a < h.channels_size() ? h.channels(a) : std::to_string(a));
  }
  std::string out = "  joint histogram " + names + ", " + shape + " bins: " + std::to_string(bins.size()) +
                    " not empty, " + std::to_string(h.outside()) + " pixels outside\n";
  std::sort(bins.begin(), bins.end(), [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  for (size_t k = 0; k < bins.size() && k < 8; ++k) {
    uint64_t rest = bins[k].second;
    std::vector<double> lo(h.bins_size());
    for (int a = h.bins_size(); a-- > 0;) {
      const uint64_t n = h.bins(a), i = rest % n;
      rest /= n;
      const v1::HistogramRange& r = h.ranges(a);
      lo[a] = r.lo() + (r.hi() - r.lo()) * static_cast<double>(i) / static_cast<double>(n);
    }
    std::string at;
    for (size_t a = 0; a < lo.size(); ++a) at += (a ? ", " : "") + fmt("%g", lo[a]);
    out += "    (" + at + ")" + pad(std::to_string(bins[k].first), 12) +
           fmt("  %.2f%%", total ? 100.0 * static_cast<double>(bins[k].first) / static_cast<double>(total) : 0.0) + "\n";
  }
  return out;
}

std::string render_table(const Outcome& o, bool color) {
  const char* bold = color ? "\033[1m" : "";
  const char* dim = color ? "\033[2m" : "";
  const char* reset = color ? "\033[0m" : "";
  const v1::AnalyzeResponse& r = o.response;
  const bool flt = is_float_type(r.sample_type()) || o.normalized;
  std::string out;
  char line[512];
  const std::string decoder = (r.has_device() ? ", GPU " + std::to_string(r.device()) : std::string()) +
                              (r.decoder().empty() ? "" : ", decoder " + r.decoder());
  char check[48] = "";
  if (r.has_check_time()) std::snprintf(check, sizeof check, " (check %.2f ms)", ms(r.check_time()));
  if (o.images > 0)  // --aggregate: no one file's format, size or timings
    std::snprintf(line, sizeof line, "%s%s%s: %s\n", bold, o.file.c_str(), reset,
                  r.channels_size() ? (std::to_string(r.channels(0).count() + r.channels(0).nan_count() +
                                                      r.channels(0).posinf_count() + r.channels(0).neginf_count()) +
                                       " samples a channel")
                                          .c_str()
                                    : "");
  else
  std::snprintf(line, sizeof line, "%s%s%s: %s %llux%llu, %u channel%s, %s  %s(engine %s%s, decode %.2f ms%s, compute %.2f ms)%s\n",
                bold, o.file.c_str(), reset, r.format().c_str(), static_cast<unsigned long long>(r.width()),
                static_cast<unsigned long long>(r.height()), r.channel_count(), r.channel_count() == 1 ? "" : "s",
                sample_type_name(r.sample_type()).c_str(), dim, r.engine().c_str(), decoder.c_str(),
                ms(r.decode_time()), check, ms(r.compute_time()), reset);
  out += line;
  if (r.has_facts()) {
    // The file's own account: what it stores and what it asks a viewer to do.
    const v1::ImageFacts& f = r.facts();
    std::string facts = "  file: " + std::to_string(f.bit_depth()) + "-bit " + f.color_type();
    if (f.palette_size()) facts += ", " + std::to_string(f.palette_size()) + "-entry palette";
    if (!f.chroma_subsampling().empty()) facts += ", " + f.chroma_subsampling();
    if (f.jpeg_quality()) facts += ", quality ~" + std::to_string(f.jpeg_quality());
    if (f.progressive()) facts += r.format() == "PNG" ? ", interlaced" : ", progressive";
    if (f.icc_profile()) facts += ", ICC profile";
    if (f.exif_orientation()) facts += ", EXIF orientation " + std::to_string(f.exif_orientation()) + " (not applied)";
    out += std::string(dim) + facts + reset + "\n";
  }
  for (const std::string& w : r.warnings()) out += "  warning: " + w + "\n";
  if (r.parts_size() > 0 && r.channels_size() == 0) {  // --aggregate --labels: the labels alone
    const int n = r.parts_size();
    out += "  " + std::to_string(n) + " part" + (n == 1 ? "" : "s") + "\n";
    return out + parts_table(r, flt, dim, reset);
  }
  std::snprintf(line, sizeof line, "  %-7s %14s %14s %14s %16s %16s%s\n", "channel", "count", "min", "max", "mean",
                "stddev", is_float_type(r.sample_type()) ? "   nan/+inf/-inf" : "");
  out += line;
  for (const v1::ChannelStats& c : r.channels()) {
    auto opt = [&](bool has, double v, bool as_sample) {
      // Ten significant digits: a float image's mean of 0.000123456789 keeps them.
      return has ? (as_sample ? number(v, flt) : fmt("%.10g", v)) : std::string("-");
    };
    std::snprintf(line, sizeof line, "  %-7s %14llu %14s %14s %16s %16s", c.name().c_str(),
                  static_cast<unsigned long long>(c.count()), opt(c.has_min(), c.min(), true).c_str(),
                  opt(c.has_max(), c.max(), true).c_str(), opt(c.has_mean(), c.mean(), false).c_str(),
                  opt(c.has_stddev(), c.stddev(), false).c_str());
    out += line;
    if (is_float_type(r.sample_type()))
      out += "   " + std::to_string(c.nan_count()) + "/" + std::to_string(c.posinf_count()) + "/" +
             std::to_string(c.neginf_count());
    out += "\n";
  }
  // The luminance and the summary are rows like the channels'.
  std::vector<const v1::ChannelStats*> rows;
  for (const v1::ChannelStats& c : r.channels()) rows.push_back(&c);
  for (const v1::ChannelStats* extra : {r.has_luminance() ? &r.luminance() : nullptr, r.has_summary() ? &r.summary() : nullptr}) {
    if (!extra) continue;
    rows.push_back(extra);
    std::snprintf(line, sizeof line, "  %-7s %14llu %14s %14s %16s %16s\n", extra->name().c_str(),
                  static_cast<unsigned long long>(extra->count()),
                  extra->has_min() ? number(extra->min(), flt).c_str() : "-",
                  extra->has_max() ? number(extra->max(), flt).c_str() : "-",
                  extra->has_mean() ? fmt("%.10g", extra->mean()).c_str() : "-",
                  extra->has_stddev() ? fmt("%.10g", extra->stddev()).c_str() : "-");
    out += line;
  }
  const bool described = std::any_of(rows.begin(), rows.end(), [](const v1::ChannelStats* c) {
    return c->has_median() || c->has_skewness();
  });
  if (described) {
    const v1::ChannelStats& first = *rows.front();
    std::snprintf(line, sizeof line, "  %-7s %14s %14s", "", "median", "mode");
    std::string head = line;
    for (const v1::Percentile& p : first.percentiles()) head += pad("p" + fmt("%g", p.p()), 14);
    head += pad("entropy", 10) + pad("skewness", 11) + pad("kurtosis", 11);
    out += head + "\n";
    for (const v1::ChannelStats* c : rows) {
      std::snprintf(line, sizeof line, "  %-7s %14s %14s", c->name().c_str(),
                    c->has_median() ? number(c->median(), flt).c_str() : "-",
                    c->has_mode() ? number(c->mode(), flt).c_str() : "-");
      std::string row = line;
      for (int i = 0; i < first.percentiles_size(); ++i)
        row += pad(i < c->percentiles_size() ? number(c->percentiles(i).value(), flt) : "-", 14);
      row += pad(c->has_entropy() ? fmt("%.4f", c->entropy()) : "-", 10);
      row += pad(c->has_skewness() ? fmt("%.5g", c->skewness()) : "-", 11);
      row += pad(c->has_kurtosis() ? fmt("%.5g", c->kurtosis()) : "-", 11);
      out += row + "\n";
    }
    if (flt && first.has_bin_error())
      out += std::string("  ") + dim + "float median, mode and percentiles are within half a bin of 65536 (" +
             fmt("%.3g", first.bin_error()) + " for " + first.name() + ")" + reset + "\n";
  }
  for (const v1::ChannelStats* c : rows) {
    if (!c->has_min_position()) continue;
    std::snprintf(line, sizeof line, "  %-7s first min at (%llu, %llu), first max at (%llu, %llu)\n", c->name().c_str(),
                  static_cast<unsigned long long>(c->min_position().x()),
                  static_cast<unsigned long long>(c->min_position().y()),
                  static_cast<unsigned long long>(c->max_position().x()),
                  static_cast<unsigned long long>(c->max_position().y()));
    out += line;
  }
  if (r.has_unique_colors()) out += "  unique colors: " + std::to_string(r.unique_colors()) + "\n";
  if (r.has_joint()) out += joint_table(r.joint());
  for (const v1::ChannelStats& c : r.channels()) {
    if (!c.has_histogram()) continue;
    const v1::Histogram& h = c.histogram();
    // Automatic float ranges hold their max; every other range is [lo, hi).
    const Drawing d = drawing(h);
    const int bins = h.counts_size();
    const double step = bins ? (h.hi() - h.lo()) / bins : 0;
    const double lo = d.first == 0 ? h.lo() : h.lo() + step * d.first;
    const double hi = d.last + 1 >= bins ? h.hi() : h.lo() + step * (d.last + 1);
    const bool closed = flt && d.last + 1 >= bins && h.underflow() == 0 && h.overflow() == 0 && c.has_max() &&
                        h.hi() == c.max();
    std::snprintf(line, sizeof line, "  %-7s %s  %s[%s, %s%c%s", c.name().c_str(), d.row.c_str(), dim,
                  number(lo, true).c_str(), number(hi, true).c_str(), closed ? ']' : ')', reset);
    out += line;
    if (h.underflow() || h.overflow())
      out += "  below " + std::to_string(h.underflow()) + ", above " + std::to_string(h.overflow());
    out += "\n";
  }
  if (r.parts_size() > 0) {  // the whole image's rows above, the parts' below
    const int n = r.parts_size();
    out += "  " + std::to_string(n) + " part" + (n == 1 ? "" : "s") + "\n" + parts_table(r, flt, dim, reset);
  }
  return out;
}

namespace {

// flt: values print as floats; float_samples: NaN and Inf counts apply.
nlohmann::json channel_json(const v1::ChannelStats& c, bool flt, bool float_samples) {
  using nlohmann::json;
  json ch;
  ch["name"] = c.name();
  ch["count"] = c.count();
  // Integer samples print as JSON integers, exactly.
  auto sample = [&](double v) { return flt ? json(v) : json(static_cast<int64_t>(v)); };
  ch["min"] = c.has_min() ? sample(c.min()) : json();
  ch["max"] = c.has_max() ? sample(c.max()) : json();
  ch["sum"] = c.has_sum_int() ? json(c.sum_int()) : c.has_sum() ? json(c.sum()) : json();
  ch["mean"] = c.has_mean() ? json(c.mean()) : json();
  ch["stddev"] = c.has_stddev() ? json(c.stddev()) : json();
  if (c.has_median()) {
    ch["median"] = sample(c.median());
    json ps = json::array();
    for (const v1::Percentile& p : c.percentiles()) ps.push_back({{"p", p.p()}, {"value", sample(p.value())}});
    ch["percentiles"] = ps;
    ch["mode"] = sample(c.mode());
    ch["entropy"] = c.entropy();
    ch["bin_error"] = c.bin_error();
  }
  if (c.has_skewness()) {
    ch["skewness"] = c.skewness();
    ch["kurtosis"] = c.kurtosis();
  }
  if (c.has_min_position()) {
    ch["min_position"] = {{"x", c.min_position().x()}, {"y", c.min_position().y()}};
    ch["max_position"] = {{"x", c.max_position().x()}, {"y", c.max_position().y()}};
  }
  if (c.has_histogram()) {
    const v1::Histogram& h = c.histogram();
    json hj;
    hj["counts"] = std::vector<uint64_t>(h.counts().begin(), h.counts().end());
    hj["lo"] = h.lo();
    hj["hi"] = h.hi();
    hj["underflow"] = h.underflow();
    hj["overflow"] = h.overflow();
    ch["histogram"] = hj;
  } else {
    ch["histogram"] = json();
  }
  if (float_samples) {
    ch["nan_count"] = c.nan_count();
    ch["inf_count"] = c.posinf_count() + c.neginf_count();
    ch["posinf_count"] = c.posinf_count();
    ch["neginf_count"] = c.neginf_count();
  }
  return ch;
}

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

// channel_json(c, flt, float_samples).dump(), written directly.
std::string channel_text(const v1::ChannelStats& c, bool flt, bool float_samples) {
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
  if (c.has_sum_int()) ch.i64("sum", c.sum_int()); else if (c.has_sum()) ch.f64("sum", c.sum()); else ch.null("sum");
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
  if (c.has_min_position()) {
    ch.raw("min_position", "{\"x\":" + std::to_string(c.min_position().x()) + ",\"y\":" +
                               std::to_string(c.min_position().y()) + "}");
    ch.raw("max_position", "{\"x\":" + std::to_string(c.max_position().x()) + ",\"y\":" +
                               std::to_string(c.max_position().y()) + "}");
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

// The parts of an answer: {"roi": [x, y, w, h]}, {"label": N} or
// {"tile": [c, r], "roi": [...]}, each with its channels.
// Counts dense up to 65,536 bins, then the nonzero (index, count) pairs.
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

nlohmann::json parts_json(const v1::AnalyzeResponse& r, bool flt) {
  using nlohmann::json;
  json parts = json::array();
  for (const v1::PartStats& p : r.parts()) {
    json j;
    if (p.has_label()) j["label"] = p.label();
    if (p.has_tile()) j["tile"] = {p.tile().column(), p.tile().row()};
    if (p.has_roi()) j["roi"] = {p.roi().x(), p.roi().y(), p.roi().width(), p.roi().height()};
    j["channels"] = json::array();
    for (const v1::ChannelStats& c : p.channels()) j["channels"].push_back(channel_json(c, flt, is_float_type(r.sample_type())));
    if (p.has_joint()) j["joint"] = joint_json(p.joint());
    parts.push_back(std::move(j));
  }
  return parts;
}

// --aggregate's answer: the images merged, their kind, the channels and the
// summary, with sums exact however large (JSON integers have no size limit;
// nlohmann's hold 64 bits, so a larger one is written into the text).
std::string aggregate_json(const Outcome& o, bool flt) {
  using nlohmann::json;
  const v1::AnalyzeResponse& r = o.response;
  json j;
  j["file"] = o.file;
  j["ok"] = true;
  j["aggregate"] = true;
  j["images"] = o.images;
  j["channel_count"] = r.channel_count();
  j["sample_type"] = sample_type_name(r.sample_type());
  std::vector<std::string> big;  // sums past 64 bits, by placeholder
  auto exact = [&](json& ch, size_t k) {
    if (k >= o.exact_sums.size() || o.exact_sums[k].empty()) return;
    const std::string& text = o.exact_sums[k];
    try {
      if (text[0] == '-')
        ch["sum"] = std::stoll(text);
      else
        ch["sum"] = std::stoull(text);
    } catch (const std::out_of_range&) {
      ch["sum"] = "\x01sum" + std::to_string(big.size()) + "\x01";
      big.push_back(text);
    }
  };
  j["channels"] = json::array();
  size_t k = 0;
  for (const v1::ChannelStats& c : r.channels()) {
    json ch = channel_json(c, flt, is_float_type(r.sample_type()));
    exact(ch, k++);
    j["channels"].push_back(ch);
  }
  if (r.has_summary()) {
    j["summary"] = channel_json(r.summary(), flt, is_float_type(r.sample_type()));
    exact(j["summary"], k);
  }
  if (r.has_joint()) j["joint"] = joint_json(r.joint());
  if (r.parts_size() || o.parts) j["parts"] = parts_json(r, flt);
  std::string text = j.dump();
  for (size_t i = 0; i < big.size(); ++i) {
    const std::string mark = "\"\\u0001sum" + std::to_string(i) + "\\u0001\"";
    const size_t at = text.find(mark);
    if (at != std::string::npos) text.replace(at, mark.size(), big[i]);
  }
  return text;
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
  if (o.images > 0) return aggregate_json(o, flt);
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
  std::string channels = "[";
  for (const v1::ChannelStats& c : r.channels()) {
    if (channels.size() > 1) channels += ',';
    channels += channel_text(c, flt, float_samples);
  }
  j.raw("channels", channels + "]");
  if (r.has_facts()) {
    const v1::ImageFacts& f = r.facts();
    j.raw("facts", json{{"bit_depth", f.bit_depth()},          {"color_type", f.color_type()},
                        {"palette_size", f.palette_size()},    {"jpeg_quality", f.jpeg_quality()},
                        {"chroma_subsampling", f.chroma_subsampling()}, {"progressive", f.progressive()},
                        {"icc_profile", f.icc_profile()},      {"exif_orientation", f.exif_orientation()}}
                       .dump());
  }
  if (r.has_unique_colors()) j.u64("unique_colors", r.unique_colors());
  if (r.has_luminance()) j.raw("luminance", channel_text(r.luminance(), flt, float_samples));
  if (r.has_summary()) j.raw("summary", channel_text(r.summary(), flt, float_samples));
  if (r.has_joint()) j.raw("joint", joint_json(r.joint()).dump());
  if (r.parts_size() || o.parts) j.raw("parts", parts_json(r, flt).dump());
  return j.text();
}

namespace {

std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\r\n") == std::string::npos) return v;
  std::string q = "\"";
  for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// Exact for integer samples and sums; floats with the digits to round-trip.
std::string csv_number(double v, bool integer) { return integer ? fmt("%.0f", v) : fmt("%.17g", v); }

}  // namespace

std::string render_csv_header() {
  return "file,ok,code,error,format,width,height,sample_type,engine,decoder,channel,count,min,max,sum,mean,stddev,"
         "nan_count,posinf_count,neginf_count,median,mode,entropy,skewness,kurtosis,min_x,min_y,max_x,max_y,"
         "unique_colors,part\n";
}

std::string render_csv(const Outcome& o) {
  const std::string file = csv_field(o.file);
  if (!o.ok) return file + ",false," + csv_field(o.code) + "," + csv_field(o.error) + std::string(27, ',') + "\n";
  const v1::AnalyzeResponse& r = o.response;
  const bool flt = is_float_type(r.sample_type()) || o.normalized;
  const std::string image = file + ",true,,," + csv_field(r.format()) + "," + std::to_string(r.width()) + "," +
                            std::to_string(r.height()) + "," + sample_type_name(r.sample_type()) + "," +
                            csv_field(r.engine()) + "," + csv_field(r.decoder()) + ",";
  std::string out;
  std::vector<const v1::ChannelStats*> rows;
  std::vector<std::string> part_of;  // the part column of each row
  for (const v1::ChannelStats& c : r.channels()) rows.push_back(&c);
  if (r.has_luminance()) rows.push_back(&r.luminance());
  if (r.has_summary()) rows.push_back(&r.summary());
  part_of.resize(rows.size());
  for (const v1::PartStats& p : r.parts())
    for (const v1::ChannelStats& c : p.channels()) {
      rows.push_back(&c);
      part_of.push_back(part_name(p));
    }
  for (size_t k = 0; k < rows.size(); ++k) {
    const v1::ChannelStats& c = *rows[k];
    // --aggregate's exact sums (channels, then the summary; no luminance there).
    const std::string exact = k < o.exact_sums.size() ? o.exact_sums[k] : "";
    out += image + csv_field(c.name()) + "," + std::to_string(c.count()) + ",";
    out += (c.has_min() ? csv_number(c.min(), !flt) : "") + ",";
    out += (c.has_max() ? csv_number(c.max(), !flt) : "") + ",";
    out += (!exact.empty() ? exact : c.has_sum_int() ? std::to_string(c.sum_int()) : c.has_sum() ? csv_number(c.sum(), false) : "") + ",";
    out += (c.has_mean() ? csv_number(c.mean(), false) : "") + ",";
    out += (c.has_stddev() ? csv_number(c.stddev(), false) : "") + ",";
    out += is_float_type(r.sample_type()) ? std::to_string(c.nan_count()) + "," + std::to_string(c.posinf_count()) + "," +
                     std::to_string(c.neginf_count())
               : std::string(",,");
    out += "," + (c.has_median() ? csv_number(c.median(), !flt) : "");
    out += "," + (c.has_mode() ? csv_number(c.mode(), !flt) : "");
    out += "," + (c.has_entropy() ? csv_number(c.entropy(), false) : "");
    out += "," + (c.has_skewness() ? csv_number(c.skewness(), false) : "");
    out += "," + (c.has_kurtosis() ? csv_number(c.kurtosis(), false) : "");
    if (c.has_min_position())
      out += "," + std::to_string(c.min_position().x()) + "," + std::to_string(c.min_position().y()) + "," +
             std::to_string(c.max_position().x()) + "," + std::to_string(c.max_position().y());
    else
      out += ",,,,";
    out += "," + (r.has_unique_colors() && part_of[k].empty() ? std::to_string(r.unique_colors()) : "");
    out += "," + csv_field(part_of[k]);
    out += "\n";
  }
  return out;
}

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
