// The merge of many inputs' answers into one state (proto Partial): the
// statistics of all their pixels together, as one analysis of all of them at
// once would give. The CLI's and Python's --aggregate merge servers' answers
// with it; the server's Aggregate call merges its own. Each answer carries
// its merge state; inputs of one sample type and channel count merge into
// one group, each other kind of image into a group of its own, and with
// labels each label's pixels over every input.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "imgstat/merge.hpp"
#include "imgstat/v1/imgstat.pb.h"

namespace imgstat {

// A Partial's format (proto Partial.version).
constexpr uint32_t kPartialVersion = 1;
// The most memory a partial's counts may take to merge (its groups' and
// labels' value counts or bins, 8 bytes each): a file's sizes are untrusted.
constexpr uint64_t kMaxPartialBytes = uint64_t{8} << 30;
// The most channels an image has (the engines'), merged or in a partial.
constexpr uint32_t kMaxMergedChannels = 4;

// The options a Partial's made_with holds for options given (Partial.made_with).
v1::Options made_with_of(const v1::Options& options);

class Aggregation {
 public:
  struct Group {
    v1::SampleType type;
    std::vector<std::string> names;
    Merger merger;
    // Labels: each label merged over every input (inputs without parts go to merger).
    std::map<int64_t, Merger> labels;
    uint64_t label_files = 0;
    // Options.joint: the inputs' joint histograms added bin by bin.
    std::optional<v1::JointHistogram> joint;
    std::vector<uint64_t> joint_counts;
    // The least `order` of the answers merged into it (add's): partial()
    // lists groups by it, so that answers merged as they complete give the
    // groups in the order of their inputs.
    uint64_t first = UINT64_MAX;
  };

  // options: what the merged answers report (statistics, bins, range, percentiles).
  explicit Aggregation(const v1::Options& options);
  // What each input's analysis is asked for instead.
  const v1::Options& part_options() const { return part_options_; }
  // One input's answer; false with *why when it cannot join (no merge state,
  // counts that do not add up): that input then counts as failed. order:
  // the input's place among those merged (see Group::first).
  bool add(const v1::AnalyzeResponse& response, std::string* why, uint64_t order = UINT64_MAX);
  // The state merged so far (proto Partial, its `done` left to the caller),
  // and another such state merged in: throws kInvalidArgument where it is
  // of another version or made with other options, does not fit its own
  // shapes, or would take more than kMaxPartialBytes of counts to merge.
  v1::Partial partial() const;
  void merge(const v1::Partial& partial);

  const StatsRequest& request() const { return request_; }
  const std::vector<Group>& groups() const { return groups_; }
  uint64_t files_without_parts() const { return files_without_parts_; }

 private:
  bool add_or_throw(const v1::AnalyzeResponse& response, uint64_t order);
  size_t group_of(v1::SampleType type, uint32_t channels, std::vector<std::string> names, uint32_t image_channels);
  static uint64_t check_joint(const Group& g, const v1::JointHistogram& h);
  void add_joint(Group& g, const v1::JointHistogram& h);
  StatsRequest request_;
  v1::Options part_options_;
  v1::Options made_with_;  // made_with_of(options): what partials must share
  std::vector<Group> groups_;
  std::map<std::pair<int, uint32_t>, size_t> index_;  // (sample type, channels) -> group
  uint64_t files_without_parts_ = 0;
};

}  // namespace imgstat
