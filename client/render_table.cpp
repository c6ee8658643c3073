#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "render.hpp"
#include "render_text.hpp"

namespace imgstat::client {
namespace {

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
  if (p.has_tile() && p.has_box()) {  // a stack's: its box, x,y,z,w,h,d
    const v1::Box& b = p.box();
    return "tile " + std::to_string(p.tile().column()) + "," + std::to_string(p.tile().row()) + "," +
           std::to_string(p.tile().slab()) + " (" + std::to_string(b.x()) + "," + std::to_string(b.y()) + "," +
           std::to_string(b.z()) + "," + std::to_string(b.width()) + "," + std::to_string(b.height()) + "," +
           std::to_string(b.depth()) + ")";
  }
  if (p.has_tile()) return "tile " + std::to_string(p.tile().column()) + "," + std::to_string(p.tile().row()) + " (" + roi + ")";
  return "roi " + roi;
}

// "plane 7", with its place where the file gives its stack's axes: "plane 7
// (z 1, c 1, t 0)"; without c where C is the planes' channels.
std::string plane_name(const v1::PlaneStats& p, const v1::StackAxes* axes) {
  std::string n = "plane " + std::to_string(p.index());
  if (!axes) return n;
  const bool c = axes->order().find('C') != std::string::npos;
  return n + " (z " + std::to_string(p.z()) + (c ? ", c " + std::to_string(p.c()) : std::string()) + ", t " +
         std::to_string(p.t()) + ")";
}

namespace {

// A part's or a plane's rows: one per channel, and with `draw` its histograms.
std::string named_rows(const std::string& name, const google::protobuf::RepeatedPtrField<v1::ChannelStats>& channels,
                       bool flt, bool draw, const char* dim, const char* reset) {
  std::string out;
  char line[512];
  for (const v1::ChannelStats& c : channels) {
    auto opt = [&](bool has, double v, bool as_sample) {
      return has ? (as_sample ? number(v, flt) : fmt("%.10g", v)) : std::string("-");
    };
    std::snprintf(line, sizeof line, "  %-28s %-7s %14llu %14s %14s %16s %16s\n", name.c_str(), c.name().c_str(),
                  static_cast<unsigned long long>(c.count()), opt(c.has_min(), c.min(), true).c_str(),
                  opt(c.has_max(), c.max(), true).c_str(), opt(c.has_mean(), c.mean(), false).c_str(),
                  opt(c.has_stddev(), c.stddev(), false).c_str());
    out += line;
  }
  if (!draw) return out;
  for (const v1::ChannelStats& c : channels) {
    if (!c.has_histogram() || c.count() == 0) continue;
    const Drawing d = drawing(c.histogram());
    std::snprintf(line, sizeof line, "  %-28s %-7s %s\n", "", c.name().c_str(), d.row.c_str());
    out += std::string(dim) + line + reset;
  }
  return out;
}

std::string rows_heading(const char* what) {
  char line[512];
  std::snprintf(line, sizeof line, "  %-28s %-7s %14s %14s %14s %16s %16s\n", what, "channel", "count", "min", "max",
                "mean", "stddev");
  return line;
}

// Parts: one row per part and channel; a few parts also draw their histograms.
std::string parts_table(const v1::AnalyzeResponse& r, bool flt, const char* dim, const char* reset) {
  std::string out = rows_heading("part");
  for (const v1::PartStats& p : r.parts()) out += named_rows(part_name(p), p.channels(), flt, r.parts_size() <= 4, dim, reset);
  return out;
}

// Each plane apart (--planes): one row per plane and channel.
std::string planes_table(const v1::AnalyzeResponse& r, bool flt, const char* dim, const char* reset) {
  std::string out = rows_heading("plane");
  for (const v1::PlaneStats& p : r.planes())
    out += named_rows(plane_name(p, r.facts().has_stack_axes() ? &r.facts().stack_axes() : nullptr), p.channels(), flt, r.planes_size() <= 4, dim, reset);
  return out;
}

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

// Colours of the terminal, or none.
struct Style {
  const char* bold;
  const char* dim;
  const char* reset;
};

// The first line: the file, its format, size and type, how long each step
// took; an aggregate's, how many samples a channel.
std::string title(const Outcome& o, const Style& s) {
  const v1::AnalyzeResponse& r = o.response;
  char line[512];
  if (o.images > 0) {  // --aggregate: no one file's format, size or timings
    const std::string samples =
        r.channels_size() ? std::to_string(r.channels(0).count() + r.channels(0).nan_count() +
                                           r.channels(0).posinf_count() + r.channels(0).neginf_count()) +
                                " samples a channel"
                          : "";
    std::snprintf(line, sizeof line, "%s%s%s: %s\n", s.bold, o.file.c_str(), s.reset, samples.c_str());
    return line;
  }
  const std::string decoder = (r.has_device() ? ", GPU " + std::to_string(r.device()) : std::string()) +
                              (r.decoder().empty() ? "" : ", decoder " + r.decoder());
  char check[48] = "";
  if (r.has_check_time()) std::snprintf(check, sizeof check, " (check %.2f ms)", ms(r.check_time()));
  std::snprintf(line, sizeof line,
                "%s%s%s: %s %llux%llu, %u channel%s, %s  %s(engine %s%s, decode %.2f ms%s, compute %.2f ms)%s\n",
                s.bold, o.file.c_str(), s.reset, r.format().c_str(), static_cast<unsigned long long>(r.width()),
                static_cast<unsigned long long>(r.height()), r.channel_count(), r.channel_count() == 1 ? "" : "s",
                sample_type_name(r.sample_type()).c_str(), s.dim, r.engine().c_str(), decoder.c_str(),
                ms(r.decode_time()), check, ms(r.compute_time()), s.reset);
  return line;
}

// The file's own account: what it stores and what it asks a viewer to do.
std::string facts_line(const v1::AnalyzeResponse& r, const Style& s) {
  const v1::ImageFacts& f = r.facts();
  // Raw pixels have no file: only a stack's planes are said.
  if (f.bit_depth() == 0)
    return f.planes() > 1 ? std::string(s.dim) + "  " + std::to_string(f.planes()) + " planes" + s.reset + "\n" : "";
  std::string facts = "  file: " + std::to_string(f.bit_depth()) + "-bit " + f.color_type();
  if (f.palette_size()) facts += ", " + std::to_string(f.palette_size()) + "-entry palette";
  if (!f.chroma_subsampling().empty()) facts += ", " + f.chroma_subsampling();
  if (f.jpeg_quality()) facts += ", quality ~" + std::to_string(f.jpeg_quality());
  if (f.progressive()) facts += r.format() == "PNG" ? ", interlaced" : ", progressive";
  if (f.icc_profile()) facts += ", ICC profile";
  if (f.exif_orientation()) facts += ", EXIF orientation " + std::to_string(f.exif_orientation()) + " (not applied)";
  if (f.planes() > 1) {
    facts += ", " + std::to_string(f.planes()) + " planes";
    if (f.planes_answered() < f.planes()) {
      const uint64_t first = r.planes_size() ? r.planes(0).index() : 0;
      facts += " (" + std::to_string(f.planes_answered()) + " answered" +
               (r.planes_size() ? ": " + std::to_string(first) + " to " + std::to_string(first + f.planes_answered() - 1)
                                : std::string()) + ")";
    }
  }
  if (f.duration_ms()) facts += ", " + std::to_string(f.duration_ms()) + " ms";
  if (f.has_stack_axes()) {
    const v1::StackAxes& a = f.stack_axes();
    facts += " (" + a.source() + " " + a.order() + ": " + std::to_string(a.z()) + " z, " + std::to_string(a.c()) +
             " c, " + std::to_string(a.t()) + " t)";
  }
  if (f.levels() > 1)
    facts += ", pyramid level " + std::to_string(f.level()) + " of " + std::to_string(f.levels());
  if (f.series_count() > 1)
    facts += ", series " + std::to_string(f.series()) + " of " + std::to_string(f.series_count());
  else if (f.reduced_pages())
    facts += ", " + std::to_string(f.reduced_pages()) + " reduced-resolution page" + (f.reduced_pages() == 1 ? "" : "s") +
             " left out";
  std::string keywords;
  if (!f.keywords().empty()) {
    // A science header's facts, on their own line: OBJECT, TELESCOP, EXPTIME...
    std::map<std::string, std::string> sorted(f.keywords().begin(), f.keywords().end());
    for (const auto& [key, value] : sorted) keywords += (keywords.empty() ? "  header: " : ", ") + key + "=" + value;
    keywords = std::string(s.dim) + keywords + s.reset + "\n";
  }
  return std::string(s.dim) + facts + s.reset + "\n" + keywords;
}

// A row per channel, then the luminance's and the summary's, which are
// returned with the channels for the rows below.
std::string moment_rows(const v1::AnalyzeResponse& r, bool flt, std::vector<const v1::ChannelStats*>* rows) {
  const bool float_samples = is_float_type(r.sample_type());
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "  %-7s %14s %14s %14s %16s %16s%s\n", "channel", "count", "min", "max", "mean",
                "stddev", float_samples ? "   nan/+inf/-inf" : "");
  out += line;
  // Ten significant digits: a float image's mean of 0.000123456789 keeps them.
  auto opt = [&](bool has, double v, bool as_sample) {
    return has ? (as_sample ? number(v, flt) : fmt("%.10g", v)) : std::string("-");
  };
  for (const v1::ChannelStats& c : r.channels()) {
    std::snprintf(line, sizeof line, "  %-7s %14llu %14s %14s %16s %16s", c.name().c_str(),
                  static_cast<unsigned long long>(c.count()), opt(c.has_min(), c.min(), true).c_str(),
                  opt(c.has_max(), c.max(), true).c_str(), opt(c.has_mean(), c.mean(), false).c_str(),
                  opt(c.has_stddev(), c.stddev(), false).c_str());
    out += line;
    if (float_samples)
      out += "   " + std::to_string(c.nan_count()) + "/" + std::to_string(c.posinf_count()) + "/" +
             std::to_string(c.neginf_count());
    out += "\n";
    rows->push_back(&c);
  }
  for (const v1::ChannelStats* extra :
       {r.has_luminance() ? &r.luminance() : nullptr, r.has_summary() ? &r.summary() : nullptr}) {
    if (!extra) continue;
    rows->push_back(extra);
    std::snprintf(line, sizeof line, "  %-7s %14llu %14s %14s %16s %16s\n", extra->name().c_str(),
                  static_cast<unsigned long long>(extra->count()), opt(extra->has_min(), extra->min(), true).c_str(),
                  opt(extra->has_max(), extra->max(), true).c_str(),
                  opt(extra->has_mean(), extra->mean(), false).c_str(),
                  opt(extra->has_stddev(), extra->stddev(), false).c_str());
    out += line;
  }
  return out;
}

// Median, mode, percentiles, entropy and the shape, where asked for.
std::string described_rows(const std::vector<const v1::ChannelStats*>& rows, bool flt, const Style& s) {
  const bool described = std::any_of(rows.begin(), rows.end(), [](const v1::ChannelStats* c) {
    return c->has_median() || c->has_skewness();
  });
  if (!described) return {};
  std::string out;
  char line[512];
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
    out += std::string("  ") + s.dim + "float median, mode and percentiles are within half a bin of 65536 (" +
           fmt("%.3g", first.bin_error()) + " for " + first.name() + ")" + s.reset + "\n";
  return out;
}

// Sigma-clipped statistics, where asked for.
std::string robust_rows(const std::vector<const v1::ChannelStats*>& rows) {
  std::string out;
  char line[512];
  for (const v1::ChannelStats* c : rows) {
    if (!c->has_robust()) continue;
    const v1::RobustStats& q = c->robust();
    std::snprintf(line, sizeof line,
                  "  %-7s sigma-clipped mean %.10g median %.10g stddev %.10g (%llu kept, %llu low and %llu high left "
                  "out, %u rounds); MAD %.10g, MAD-std %.10g\n",
                  c->name().c_str(), q.mean(), q.median(), q.stddev(), static_cast<unsigned long long>(q.count()),
                  static_cast<unsigned long long>(q.clipped_low()), static_cast<unsigned long long>(q.clipped_high()),
                  q.iterations(), q.mad(), q.mad_std());
    out += line;
  }
  return out;
}

// Background meshes, where asked for: each channel's medians (the full
// meshes are in --json and --background-map's files).
std::string background_rows(const v1::AnalyzeResponse& r) {
  std::string out;
  char line[512];
  for (const v1::BackgroundMesh& m : r.background()) {
    if (m.background().empty()) continue;
    std::snprintf(line, sizeof line,
                  "  background %s: median %.8g, RMS median %.6g (%llux%llu boxes of %llux%llu, %llu left out)\n",
                  m.channel().c_str(), m.background_median(), m.background_rms_median(),
                  static_cast<unsigned long long>(m.columns()), static_cast<unsigned long long>(m.rows()),
                  static_cast<unsigned long long>(m.box_columns()), static_cast<unsigned long long>(m.box_rows()),
                  static_cast<unsigned long long>(m.boxes_excluded()));
    out += line;
  }
  return out;
}

// Quality measures, where asked for: the measures, then cleanvision's
// issues by name.
std::string quality_rows(const v1::AnalyzeResponse& r) {
  if (!r.has_quality()) return "";
  const v1::QualityStats& q = r.quality();
  char line[512];
  std::snprintf(line, sizeof line, "  quality: sharpness (Laplacian variance) %.6g, RMS contrast %.4g", q.laplacian_variance(),
                q.rms_contrast());
  std::string out = line;
  if (q.has_colourfulness()) {
    std::snprintf(line, sizeof line, ", colourfulness %.4g", q.colourfulness());
    out += line;
  }
  out += "\n  at the type's min / max:";
  for (int i = 0; i < q.share_at_min_size() && i < r.channels_size(); ++i) {
    std::snprintf(line, sizeof line, " %s %.3g%% / %.3g%%", r.channels(i).name().c_str(), 100 * q.share_at_min(i),
                  100 * q.share_at_max(i));
    out += line;
  }
  out += "\n";
  if (q.has_cleanvision()) {
    const v1::CleanvisionProperties& c = q.cleanvision();
    std::string issues;
    for (const auto& [on, name] : {std::pair{c.is_dark_issue(), "dark"}, {c.is_light_issue(), "light"},
                                   {c.is_blurry_issue(), "blurry"}, {c.is_low_information_issue(), "low_information"},
                                   {c.is_odd_aspect_ratio_issue(), "odd_aspect_ratio"}, {c.is_grayscale_issue(), "grayscale"}})
      if (on) issues += std::string(issues.empty() ? "" : ", ") + name;
    std::snprintf(line, sizeof line,
                  "  cleanvision: dark %.3f, light %.3f, blurry %.3f, low information %.3f, aspect ratio %.3f; "
                  "issues: %s\n",
                  c.dark_score(), c.light_score(), c.blurry_score(), c.low_information_score(), c.aspect_ratio(),
                  issues.empty() ? "none" : issues.c_str());
    out += line;
  }
  return out;
}

std::string position_rows(const std::vector<const v1::ChannelStats*>& rows, bool stack) {
  std::string out;
  char line[512];
  for (const v1::ChannelStats* c : rows) {
    if (!c->has_min_position()) continue;
    auto at = [stack](const v1::Position& p) {
      return "(" + std::to_string(p.x()) + ", " + std::to_string(p.y()) +
             (stack ? ", plane " + std::to_string(p.plane()) : std::string()) + ")";
    };
    std::snprintf(line, sizeof line, "  %-7s first min at %s, first max at %s\n", c->name().c_str(),
                  at(c->min_position()).c_str(), at(c->max_position()).c_str());
    out += line;
  }
  return out;
}

// Each channel's histogram drawn over the bins it occupies, with their range.
std::string histogram_rows(const v1::AnalyzeResponse& r, bool flt, const Style& s) {
  std::string out;
  char line[512];
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
    std::snprintf(line, sizeof line, "  %-7s %s  %s[%s, %s%c%s", c.name().c_str(), d.row.c_str(), s.dim,
                  number(lo, true).c_str(), number(hi, true).c_str(), closed ? ']' : ')', s.reset);
    out += line;
    if (h.underflow() || h.overflow())
      out += "  below " + std::to_string(h.underflow()) + ", above " + std::to_string(h.overflow());
    out += "\n";
  }
  return out;
}

std::string part_count(int n) { return "  " + std::to_string(n) + " part" + (n == 1 ? "" : "s") + "\n"; }

}  // namespace

std::string render_table(const Outcome& o, bool color) {
  const Style s{color ? "\033[1m" : "", color ? "\033[2m" : "", color ? "\033[0m" : ""};
  const v1::AnalyzeResponse& r = o.response;
  const bool flt = is_float_type(r.sample_type()) || o.normalized;
  std::string out = title(o, s);
  if (r.has_facts()) out += facts_line(r, s);
  for (const std::string& w : r.warnings()) out += "  warning: " + w + "\n";
  if (r.parts_size() > 0 && r.channels_size() == 0)  // --aggregate --labels: the labels alone
    return out + part_count(r.parts_size()) + parts_table(r, flt, s.dim, s.reset);
  std::vector<const v1::ChannelStats*> rows;
  out += moment_rows(r, flt, &rows);
  out += described_rows(rows, flt, s);
  out += robust_rows(rows);
  out += position_rows(rows, r.facts().planes_answered() > 1);
  out += quality_rows(r);
  out += background_rows(r);
  if (r.has_hashes()) {
    out += "  hashes: pixels (XXH3-128) " + hex_of(r.hashes().pixels());
    if (r.hashes().has_phash()) {
      char text[40];
      std::snprintf(text, sizeof text, ", phash %016llx", static_cast<unsigned long long>(r.hashes().phash()));
      out += text;
    }
    out += "\n";
  }
  if (r.has_unique_colors()) out += "  unique colors: " + std::to_string(r.unique_colors()) + "\n";
  if (r.has_joint()) out += joint_table(r.joint());
  out += histogram_rows(r, flt, s);
  if (r.parts_size() > 0)  // the whole image's rows above, the parts' below
    out += part_count(r.parts_size()) + parts_table(r, flt, s.dim, s.reset);
  if (r.planes_size() > 0)  // the planes together above, each below
    out += planes_table(r, flt, s.dim, s.reset);
  return out;
}

}  // namespace imgstat::client
