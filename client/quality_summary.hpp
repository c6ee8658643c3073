// --aggregate with --stats quality: cleanvision's verdicts over a dataset.
// How many images have each issue and which (the first kMaxListed of
// each), and odd sizes judged as cleanvision judges them over the whole
// dataset: from every image's size sqrt(w) sqrt(h), q1 and q3 (numpy's
// linear percentiles), the band [q1 - 3 IQR, q3 + 3 IQR] with its middle
// and width; an image's score 1 - clip(|size - middle| / width, 0, 1), an
// issue below 0.5 (every size equal: the width 0, the score against the
// size itself, an issue below 1).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "imgstat/v1/imgstat.pb.h"

namespace imgstat::client {

class QualitySummary {
 public:
  // Files listed per issue; the counts go on.
  static constexpr size_t kMaxListed = 1000;
  // One image's answer (its quality measures, where it has them).
  void add(const std::string& file, const v1::AnalyzeResponse& r);
  bool empty() const { return images_ == 0; }
  // {"images", "issues": {name: count}, "flagged": {name: [files]}, "odd_size": {...}}
  std::string json() const;
  std::string table() const;
  // Each issue's count and first kMaxListed files, odd_size included.
  struct Verdicts {
    std::map<std::string, uint64_t> counts;
    std::map<std::string, std::vector<std::string>> listed;
    double q1 = 0, q3 = 0, lower = 0, upper = 0;
  };
  Verdicts verdicts() const;

 private:
  uint64_t images_ = 0;       // with cleanvision's properties (8-bit)
  uint64_t measured_ = 0;     // with quality measures at all
  std::map<std::string, uint64_t> counts_;
  std::map<std::string, std::vector<std::string>> listed_;
  // size -> (images, the first kMaxListed of them)
  std::map<double, std::pair<uint64_t, std::vector<std::string>>> sizes_;
};

}  // namespace imgstat::client
