#include "report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "decode/opencv_codecs.hpp"

namespace imgstat::client {
namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string number(double v, int digits = 6) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*g", digits, v);
  return text;
}

std::string base64(const std::string& bytes) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(bytes[i]) << 16) | (static_cast<uint8_t>(bytes[i + 1]) << 8) |
                       static_cast<uint8_t>(bytes[i + 2]);
    for (int k = 18; k >= 0; k -= 6) out += kAlphabet[(v >> k) & 63];
  }
  if (i < bytes.size()) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

// A 24-bit BMP of a BGR image: what every browser shows from a data URI,
// written without an encoder.
std::string bmp_of(const cv::Mat& bgr) {
  const int w = bgr.cols, h = bgr.rows, row = (w * 3 + 3) / 4 * 4;
  const uint32_t size = 54 + static_cast<uint32_t>(row * h);
  std::string out(54, '\0');
  auto put = [&](size_t at, uint32_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out[at + i] = static_cast<char>((v >> (8 * i)) & 255);
  };
  out[0] = 'B', out[1] = 'M';
  put(2, size, 4), put(10, 54, 4), put(14, 40, 4), put(18, static_cast<uint32_t>(w), 4),
      put(22, static_cast<uint32_t>(h), 4), put(26, 1, 2), put(28, 24, 2);
  for (int y = h - 1; y >= 0; --y) {  // bottom-up
    std::string line(static_cast<size_t>(row), '\0');
    std::copy_n(bgr.ptr<char>(y), w * 3, line.begin());
    out += line;
  }
  return out;
}

// A thumbnail of a local file as a data URI, or "" where it is not a file
// OpenCV's codecs read (URLs, shard members, formats of its own).
std::string thumbnail(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return "";
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.empty() || bytes.size() > (size_t{256} << 20)) return "";
  try {
    const cv::Mat buf(1, static_cast<int>(bytes.size()), CV_8U, bytes.data());
    cv::Mat image = opencv_codecs::imdecode(buf, cv::IMREAD_COLOR);
    if (image.empty()) return "";
    const double scale = static_cast<double>(Report::kThumbnailSide) / std::max(image.cols, image.rows);
    cv::Mat small;
    if (scale < 1)
      cv::resize(image, small, cv::Size(std::max(1, static_cast<int>(image.cols * scale)),
                                        std::max(1, static_cast<int>(image.rows * scale))), 0, 0, cv::INTER_AREA);
    else
      small = image;
    return "data:image/bmp;base64," + base64(bmp_of(small));
  } catch (const std::exception&) {
    return "";
  }
}

std::string figure(const std::string& file) {
  const std::string uri = thumbnail(file);
  std::string name = file.substr(file.find_last_of('/') == std::string::npos ? 0 : file.find_last_of('/') + 1);
  return "<figure>" + (uri.empty() ? "<div class=none>no thumbnail</div>" : "<img src=\"" + uri + "\" alt=\"" + escape(name) + "\">") +
         "<figcaption title=\"" + escape(file) + "\">" + escape(name) + "</figcaption></figure>";
}

const char* colour_of(const std::string& channel) {
  if (channel == "R") return "#d33";
  if (channel == "G") return "#2a2";
  if (channel == "B") return "#33d";
  if (channel == "A") return "#888";
  return "#444";
}

// A histogram as an SVG of one polyline per channel (counts scaled to the
// highest bin of all), the bins' range under it.
std::string histogram_svg(const v1::AnalyzeResponse& r) {
  constexpr int kW = 520, kH = 160;
  uint64_t top = 1;
  for (const v1::ChannelStats& c : r.channels())
    for (uint64_t v : c.histogram().counts()) top = std::max(top, v);
  std::string svg = "<svg class=hist viewBox=\"0 0 " + std::to_string(kW) + " " + std::to_string(kH + 18) +
                    "\" width=\"" + std::to_string(kW) + "\" height=\"" + std::to_string(kH + 18) + "\">";
  svg += "<rect width=\"" + std::to_string(kW) + "\" height=\"" + std::to_string(kH) + "\" fill=\"#fafafa\" stroke=\"#ccc\"/>";
  for (const v1::ChannelStats& c : r.channels()) {
    const auto& counts = c.histogram().counts();
    if (counts.empty()) continue;
    std::string points;
    for (int i = 0; i < counts.size(); ++i) {
      const double x = (i + 0.5) * kW / counts.size();
      const double y = kH - static_cast<double>(counts[i]) / static_cast<double>(top) * (kH - 4);
      points += number(x, 5) + "," + number(y, 5) + " ";
    }
    svg += "<polyline fill=\"none\" stroke-width=\"1.5\" stroke=\"" + std::string(colour_of(c.name())) + "\" points=\"" +
           points + "\"><title>" + escape(c.name()) + "</title></polyline>";
  }
  if (r.channels_size() > 0 && r.channels(0).has_histogram()) {
    const v1::Histogram& h = r.channels(0).histogram();
    svg += "<text x=\"0\" y=\"" + std::to_string(kH + 14) + "\">" + number(h.lo()) + "</text><text x=\"" +
           std::to_string(kW) + "\" y=\"" + std::to_string(kH + 14) + "\" text-anchor=\"end\">" + number(h.hi()) + "</text>";
  }
  return svg + "</svg>";
}

// The distribution of one measure over the images: 24 bins over its range.
std::string measure_svg(const std::string& name, const std::vector<double>& values) {
  constexpr int kW = 240, kH = 90, kBins = 24;
  const auto [lo_it, hi_it] = std::minmax_element(values.begin(), values.end());
  const double lo = *lo_it, hi = *hi_it;
  std::vector<uint64_t> bins(kBins, 0);
  for (double v : values) {
    int b = hi > lo ? static_cast<int>((v - lo) / (hi - lo) * kBins) : 0;
    ++bins[static_cast<size_t>(std::clamp(b, 0, kBins - 1))];
  }
  const uint64_t top = std::max<uint64_t>(1, *std::max_element(bins.begin(), bins.end()));
  std::string svg = "<div class=measure><h4>" + escape(name) + "</h4><svg viewBox=\"0 0 " + std::to_string(kW) + " " +
                    std::to_string(kH + 16) + "\" width=\"" + std::to_string(kW) + "\" height=\"" +
                    std::to_string(kH + 16) + "\">";
  for (int b = 0; b < kBins; ++b) {
    const double h = static_cast<double>(bins[b]) / static_cast<double>(top) * kH;
    svg += "<rect x=\"" + number(b * kW / double(kBins), 5) + "\" y=\"" + number(kH - h, 5) + "\" width=\"" +
           number(kW / double(kBins) - 1, 5) + "\" height=\"" + number(h, 5) + "\" fill=\"#58a\"><title>" +
           std::to_string(bins[b]) + " images</title></rect>";
  }
  svg += "<text x=\"0\" y=\"" + std::to_string(kH + 13) + "\">" + number(lo, 4) + "</text><text x=\"" +
         std::to_string(kW) + "\" y=\"" + std::to_string(kH + 13) + "\" text-anchor=\"end\">" + number(hi, 4) + "</text>";
  return svg + "</svg></div>";
}

const char* kStyle = R"(body{font:14px system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}
h1{font-size:1.5em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:.25em .6em;text-align:right}th{background:#f3f3f3}
pre{background:#f6f6f6;padding:.6em;overflow-x:auto}figure{display:inline-block;margin:.3em;text-align:center;width:110px;vertical-align:top}
figure img{max-width:96px;max-height:96px;border:1px solid #ccc}figcaption{font-size:11px;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.none{width:96px;height:60px;background:#eee;font-size:11px;line-height:60px;margin:auto}.measure{display:inline-block;margin:.5em}
.measure h4{margin:.2em 0;font-size:12px}svg text{font-size:11px;fill:#555}.group{border:1px solid #ddd;margin:.5em 0;padding:.3em}
button{font-size:12px})";

}  // namespace

void Report::add(const std::string& file, const v1::AnalyzeResponse& r) {
  (void)file;
  ++images_;
  if (!r.has_quality()) return;
  const v1::QualityStats& q = r.quality();
  measures_["laplacian_variance"].push_back(q.laplacian_variance());
  measures_["rms_contrast"].push_back(q.rms_contrast());
  if (q.has_colourfulness()) measures_["colourfulness"].push_back(q.colourfulness());
  if (q.has_cleanvision()) {
    const v1::CleanvisionProperties& c = q.cleanvision();
    measures_["brightness"].push_back(c.brightness());
    measures_["blurriness"].push_back(c.blurriness());
    measures_["entropy"].push_back(c.entropy());
    measures_["dark_score"].push_back(c.dark_score());
    measures_["light_score"].push_back(c.light_score());
  }
}

bool Report::write(const std::string& path, const std::vector<Outcome>& merged, const QualitySummary& quality,
                   const DuplicateFinder* duplicates, std::string* error) const {
  std::string h = "<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>imgstat report</title><style>";
  h += kStyle;
  h += "</style></head><body><h1>imgstat report</h1><p id=summary>" + std::to_string(images_) + " images";
  h += merged.empty() ? "" : ", " + std::to_string(merged.size()) + " kind" + (merged.size() == 1 ? "" : "s") + " of image";
  h += ".</p>";
  // The exact statistics and histograms of each kind.
  h += "<section id=statistics><h2>Dataset statistics</h2>";
  for (const Outcome& o : merged) {
    if (!o.ok) continue;
    const v1::AnalyzeResponse& r = o.response;
    h += "<h3>" + escape(o.file) + ": " + std::to_string(o.images) + " images, " + std::to_string(r.channel_count()) +
         " channels</h3><table><tr><th>channel</th><th>samples</th><th>min</th><th>max</th><th>mean</th><th>stddev</th></tr>";
    std::string means, stds;
    const double scale = r.sample_type() == v1::SAMPLE_TYPE_UINT8 ? 255 : r.sample_type() == v1::SAMPLE_TYPE_UINT16 ? 65535 : 1;
    for (const v1::ChannelStats& c : r.channels()) {
      h += "<tr><th>" + escape(c.name()) + "</th><td>" + std::to_string(c.count()) + "</td><td>" + number(c.min()) +
           "</td><td>" + number(c.max()) + "</td><td>" + number(c.mean(), 10) + "</td><td>" + number(c.stddev(), 10) +
           "</td></tr>";
      means += (means.empty() ? "" : ", ") + number(c.mean() / scale, 8);
      stds += (stds.empty() ? "" : ", ") + number(c.stddev() / scale, 8);
    }
    h += "</table><p>For normalization (" + std::string(scale == 1 ? "in sample units" : "as fractions of the type's largest value") +
         "):</p><pre class=normalize>mean = [" + means + "]\nstd = [" + stds + "]</pre>";
    h += "<div class=histograms>" + histogram_svg(r) + "</div>";
  }
  h += "</section>";
  // The per-image measures and the images each issue flags.
  if (!measures_.empty()) {
    h += "<section id=measures><h2>Quality measures per image</h2>";
    for (const auto& [name, values] : measures_) h += measure_svg(name, values);
    h += "</section>";
    const QualitySummary::Verdicts v = quality.verdicts();
    h += "<section id=issues><h2>Images flagged</h2>";
    for (const auto& [issue, count] : v.counts) {
      h += "<h3>" + escape(issue) + ": " + std::to_string(count) + "</h3><div class=flagged>";
      const auto listed = v.listed.find(issue);
      if (listed != v.listed.end())
        for (size_t i = 0; i < listed->second.size() && i < kThumbnails; ++i) h += figure(listed->second[i]);
      h += "</div>";
    }
    if (v.counts.empty()) h += "<p>No image has an issue.</p>";
    h += "</section>";
  }
  if (duplicates) {
    const DuplicateFinder::Groups g = duplicates->groups();
    h += "<section id=duplicates><h2>Duplicates</h2><p>" + std::to_string(g.exact.size()) +
         " groups of equal pixels, " + std::to_string(g.near.size()) + " groups of near duplicates.</p>";
    for (const auto* kind : {&g.exact, &g.near}) {
      h += std::string("<h3>") + (kind == &g.exact ? "Exact" : "Near") + "</h3>";
      for (size_t i = 0; i < kind->size() && i < kThumbnails; ++i) {
        h += "<div class=group>";
        for (size_t j = 0; j < (*kind)[i].size() && j < 6; ++j) h += figure((*kind)[i][j]);
        if ((*kind)[i].size() > 6) h += "<p>and " + std::to_string((*kind)[i].size() - 6) + " more</p>";
        h += "</div>";
      }
    }
    h += "</section>";
  }
  h += "<footer><p>Made by imgstat-client --report.</p></footer></body></html>\n";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << h;
  out.close();
  if (!out) {
    *error = "cannot write " + path;
    return false;
  }
  return true;
}

}  // namespace imgstat::client
