#include <string>
#include <vector>

#include "render.hpp"
#include "render_text.hpp"

namespace imgstat::client {
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
  for (const v1::PlaneStats& p : r.planes())
    for (const v1::ChannelStats& c : p.channels()) {
      rows.push_back(&c);
      part_of.push_back(plane_name(p, nullptr));
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

}  // namespace imgstat::client
