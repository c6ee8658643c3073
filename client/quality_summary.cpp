#include "quality_summary.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace imgstat::client {

namespace {

// numpy's linear percentile of a multiset given as value -> count.
template <class Map>
double percentile(const Map& sizes, uint64_t n, double p) {
  const double vi = static_cast<double>(n - 1) * (p / 100.0);
  const uint64_t lo = static_cast<uint64_t>(std::floor(vi));
  auto at = [&](uint64_t rank) {
    uint64_t seen = 0;
    for (const auto& [v, e] : sizes) {
      seen += e.first;
      if (rank < seen) return v;
    }
    return sizes.rbegin()->first;
  };
  const double a = at(std::min(lo, n - 1)), b = at(std::min(lo + 1, n - 1));
  const double t = vi >= static_cast<double>(n - 1) ? 0.0 : vi - static_cast<double>(lo);
  const double d = b - a;
  return t >= 0.5 ? b - d * (1 - t) : a + d * t;
}

}  // namespace

void QualitySummary::add(const std::string& file, const v1::AnalyzeResponse& r) {
  if (!r.has_quality()) return;
  ++measured_;
  if (!r.quality().has_cleanvision()) return;
  const v1::CleanvisionProperties& c = r.quality().cleanvision();
  ++images_;
  for (const auto& [on, name] : {std::pair{c.is_dark_issue(), "dark"}, {c.is_light_issue(), "light"},
                                 {c.is_blurry_issue(), "blurry"}, {c.is_low_information_issue(), "low_information"},
                                 {c.is_odd_aspect_ratio_issue(), "odd_aspect_ratio"},
                                 {c.is_grayscale_issue(), "grayscale"}}) {
    if (!on) continue;
    ++counts_[name];
    std::vector<std::string>& l = listed_[name];
    if (l.size() < kMaxListed) l.push_back(file);
  }
  auto& [count, files] = sizes_[c.size()];
  ++count;
  if (files.size() < kMaxListed) files.push_back(file);
}

QualitySummary::Verdicts QualitySummary::verdicts() const {
  Verdicts v;
  v.counts = counts_;
  v.listed = listed_;
  for (const char* name : {"dark", "light", "blurry", "low_information", "odd_aspect_ratio", "grayscale", "odd_size"})
    v.counts.emplace(name, 0);
  if (images_ == 0) return v;
  // cleanvision's SizeProperty.get_scores with its iqr_factor 3.
  v.q1 = percentile(sizes_, images_, 25);
  v.q3 = percentile(sizes_, images_, 75);
  const double iqr = v.q3 - v.q1;
  v.lower = v.q1 - 3.0 * iqr;
  v.upper = v.q3 + 3.0 * iqr;
  const double mid = (v.lower + v.upper) / 2, gap = v.upper - v.lower;
  const double norm = gap > 0 ? gap : mid, threshold = gap > 0 ? 0.5 : 1.0;
  std::vector<std::string>& odd = v.listed["odd_size"];
  for (const auto& [size, e] : sizes_) {
    const double score = 1 - std::clamp(std::abs(size - mid) / norm, 0.0, 1.0);
    if (!(score < threshold)) continue;
    v.counts["odd_size"] += e.first;
    for (const std::string& f : e.second)
      if (odd.size() < kMaxListed) odd.push_back(f);
  }
  return v;
}

std::string QualitySummary::json() const {
  const Verdicts v = verdicts();
  nlohmann::json j;
  j["images"] = images_;
  j["images_measured"] = measured_;
  j["issues"] = v.counts;
  nlohmann::json flagged = nlohmann::json::object();
  for (const auto& [name, files] : v.listed)
    if (!files.empty()) flagged[name] = files;
  j["flagged"] = flagged;
  j["odd_size"] = {{"q1", v.q1}, {"q3", v.q3}, {"lower", v.lower}, {"upper", v.upper}};
  return nlohmann::json{{"dataset_quality", j}}.dump();
}

std::string QualitySummary::table() const {
  const Verdicts v = verdicts();
  std::string out = "cleanvision's issues over " + std::to_string(images_) + " 8-bit images:";
  for (const char* name : {"dark", "light", "blurry", "low_information", "odd_aspect_ratio", "grayscale", "odd_size"})
    out += std::string(" ") + name + " " + std::to_string(v.counts.at(name)) + ",";
  out.back() = '\n';
  for (const auto& [name, files] : v.listed) {
    if (files.empty()) continue;
    out += "  " + name + ":";
    for (size_t i = 0; i < files.size() && i < 10; ++i) out += " " + files[i];
    if (v.counts.at(name) > 10) out += " (and " + std::to_string(v.counts.at(name) - 10) + " more: --json lists them)";
    out += "\n";
  }
  return out;
}

}  // namespace imgstat::client
