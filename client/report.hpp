// --report FILE.html with --aggregate: one self-contained HTML file that
// opens offline (inline CSS and SVG, thumbnails as data URIs, no script
// needed to read it): the dataset's exact statistics per kind of image
// (mean and standard deviation ready to copy for normalization), its
// histograms per channel, the distributions of the per-image quality
// measures, the images each issue flags with thumbnails, and the duplicate
// groups.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "duplicates.hpp"
#include "quality_summary.hpp"
#include "render.hpp"

namespace imgstat::client {

class Report {
 public:
  // At most this many thumbnails per issue and per kind of duplicate.
  static constexpr size_t kThumbnails = 12;
  static constexpr int kThumbnailSide = 96;
  // One image's answer: its quality measures, where it has them.
  void add(const std::string& file, const v1::AnalyzeResponse& r);
  // Writes the report; false with *error set when the file cannot be written.
  bool write(const std::string& path, const std::vector<Outcome>& merged, const QualitySummary& quality,
             const DuplicateFinder* duplicates, std::string* error) const;

 private:
  uint64_t images_ = 0;
  std::map<std::string, std::vector<double>> measures_;  // name -> one value an image
};

}  // namespace imgstat::client
