#include "render.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

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

std::string render_table(const Outcome& o, bool color) {
  const char* bold = color ? "\033[1m" : "";
  const char* dim = color ? "\033[2m" : "";
  const char* reset = color ? "\033[0m" : "";
  const v1::AnalyzeResponse& r = o.response;
  const bool flt = is_float_type(r.sample_type());
  std::string out;
  char line[512];
  const std::string decoder = r.decoder().empty() ? "" : ", decoder " + r.decoder();
  char check[48] = "";
  if (r.has_check_time()) std::snprintf(check, sizeof check, " (check %.2f ms)", ms(r.check_time()));
  std::snprintf(line, sizeof line, "%s%s%s: %s %llux%llu, %u channel%s, %s  %s(engine %s%s, decode %.2f ms%s, compute %.2f ms)%s\n",
                bold, o.file.c_str(), reset, r.format().c_str(), static_cast<unsigned long long>(r.width()),
                static_cast<unsigned long long>(r.height()), r.channel_count(), r.channel_count() == 1 ? "" : "s",
                sample_type_name(r.sample_type()).c_str(), dim, r.engine().c_str(), decoder.c_str(),
                ms(r.decode_time()), check, ms(r.compute_time()), reset);
  out += line;
  for (const std::string& w : r.warnings()) out += "  warning: " + w + "\n";
  std::snprintf(line, sizeof line, "  %-7s %14s %14s %14s %16s %16s%s\n", "channel", "count", "min", "max", "mean",
                "stddev", flt ? "   nan/+inf/-inf" : "");
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
    if (flt)
      out += "   " + std::to_string(c.nan_count()) + "/" + std::to_string(c.posinf_count()) + "/" +
             std::to_string(c.neginf_count());
    out += "\n";
  }
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
  return out;
}

std::string render_json(const Outcome& o) {
  using nlohmann::json;
  json j;
  j["file"] = o.file;
  j["ok"] = o.ok;
  if (!o.ok) {
    j["code"] = o.code;
    j["error"] = o.error;
    return j.dump();
  }
  const v1::AnalyzeResponse& r = o.response;
  const bool flt = is_float_type(r.sample_type());
  j["format"] = r.format();
  j["width"] = r.width();
  j["height"] = r.height();
  j["channel_count"] = r.channel_count();
  j["sample_type"] = sample_type_name(r.sample_type());
  j["engine"] = r.engine();
  j["decoder"] = r.decoder();
  j["decode_ms"] = ms(r.decode_time());
  if (r.has_check_time()) j["check_ms"] = ms(r.check_time());
  j["compute_ms"] = ms(r.compute_time());
  j["warnings"] = json::array();
  for (const std::string& w : r.warnings()) j["warnings"].push_back(w);
  j["channels"] = json::array();
  for (const v1::ChannelStats& c : r.channels()) {
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
    if (flt) {
      ch["nan_count"] = c.nan_count();
      ch["inf_count"] = c.posinf_count() + c.neginf_count();
      ch["posinf_count"] = c.posinf_count();
      ch["neginf_count"] = c.neginf_count();
    }
    j["channels"].push_back(ch);
  }
  return j.dump();
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
         "nan_count,posinf_count,neginf_count\n";
}

std::string render_csv(const Outcome& o) {
  const std::string file = csv_field(o.file);
  if (!o.ok) return file + ",false," + csv_field(o.code) + "," + csv_field(o.error) + ",,,,,,,,,,,,,,,,\n";
  const v1::AnalyzeResponse& r = o.response;
  const bool flt = is_float_type(r.sample_type());
  const std::string image = file + ",true,,," + csv_field(r.format()) + "," + std::to_string(r.width()) + "," +
                            std::to_string(r.height()) + "," + sample_type_name(r.sample_type()) + "," +
                            csv_field(r.engine()) + "," + csv_field(r.decoder()) + ",";
  std::string out;
  for (const v1::ChannelStats& c : r.channels()) {
    out += image + csv_field(c.name()) + "," + std::to_string(c.count()) + ",";
    out += (c.has_min() ? csv_number(c.min(), !flt) : "") + ",";
    out += (c.has_max() ? csv_number(c.max(), !flt) : "") + ",";
    out += (c.has_sum_int() ? std::to_string(c.sum_int()) : c.has_sum() ? csv_number(c.sum(), false) : "") + ",";
    out += (c.has_mean() ? csv_number(c.mean(), false) : "") + ",";
    out += (c.has_stddev() ? csv_number(c.stddev(), false) : "") + ",";
    out += flt ? std::to_string(c.nan_count()) + "," + std::to_string(c.posinf_count()) + "," +
                     std::to_string(c.neginf_count())
               : std::string(",,");
    out += "\n";
  }
  return out;
}

}  // namespace imgstat::client
