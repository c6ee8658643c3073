// --aggregate: the statistics of many files' pixels together, as one
// analysis of all of them at once would give. With --labels, each label's
// pixels over all files: a segmentation dataset's per-class statistics. Each file's answer carries
// its merge state; files of one sample type and channel count merge into
// one answer, and each other kind of image gets an answer of its own.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "imgstat/merge.hpp"
#include "imgstat/v1/imgstat.pb.h"
#include "render.hpp"

namespace imgstat::client {

class Aggregation {
 public:
  // options: what the merged answers report (statistics, bins, range, percentiles).
  explicit Aggregation(const v1::Options& options);
  // What each file's call asks for instead.
  const v1::Options& part_options() const { return part_options_; }
  // One file's answer; false with *why when it cannot join (no merge state,
  // counts that do not add up): that file then counts as failed.
  bool add(const v1::AnalyzeResponse& response, std::string* why);
  // One outcome per kind of image, in the order each kind was first met.
  std::vector<Outcome> outcomes() const;
  // Why a statistic asked for is missing from every float group (float
  // histograms need --range; float distributions are not merged).
  std::vector<std::string> notes() const;

 private:
  bool add_or_throw(const v1::AnalyzeResponse& response);
  struct Group {
    v1::SampleType type;
    std::vector<std::string> names;
    Merger merger;
    // --labels: each label merged over every file (files without parts go to merger).
    std::map<int64_t, Merger> labels;
    uint64_t label_files = 0;
    // Options.joint: the files' joint histograms added bin by bin.
    std::optional<v1::JointHistogram> joint;
    std::vector<uint64_t> joint_counts;
  };
  static uint64_t check_joint(const Group& g, const v1::JointHistogram& h);
  void add_joint(Group& g, const v1::JointHistogram& h);
  StatsRequest request_;
  v1::Options part_options_;
  std::vector<Group> groups_;
  std::map<std::pair<int, uint32_t>, size_t> index_;  // (sample type, channels) -> group
  uint64_t files_without_parts_ = 0;
};

}  // namespace imgstat::client
