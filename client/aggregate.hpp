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
  // options: what the merged answers report (statistics, bins, range, percentiles).
  explicit Aggregation(const v1::Options& options);
  // What each file's call asks for instead.
  const v1::Options& part_options() const { return part_options_; }
  // One file's answer; false with *why when it cannot join (no merge state,
  // counts that do not add up): that file then counts as failed.
  bool add(const v1::AnalyzeResponse& response, std::string* why);
  // The state merged so far (proto Partial, its `done` left to the caller),
  // and another such state merged in: throws kInvalidArgument where it is
  // of another version or made with other options, does not fit its own
  // shapes, or would take more than kMaxPartialBytes of counts to merge.
  v1::Partial partial() const;
  void merge(const v1::Partial& partial);
  // One outcome per kind of image, in the order each kind was first met.
  std::vector<Outcome> outcomes() const;
  // Why a statistic asked for is missing from every float group (float
  // histograms need --range; float distributions are not merged).
  std::vector<std::string> notes() const;

 private:
  bool add_or_throw(const v1::AnalyzeResponse& response);
  size_t group_of(v1::SampleType type, uint32_t channels, std::vector<std::string> names, uint32_t image_channels);
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
  // A group's outcomes (by label, then whole images), added to out.
  void group_outcomes(const Group& g, std::vector<Outcome>& out) const;
  void add_joint(Group& g, const v1::JointHistogram& h);
  StatsRequest request_;
  v1::Options part_options_;
  v1::Options made_with_;  // made_with_of(options): what partials must share
  std::vector<Group> groups_;
  std::map<std::pair<int, uint32_t>, size_t> index_;  // (sample type, channels) -> group
  uint64_t files_without_parts_ = 0;
};

// A partial's file: the proto's binary form. Written whole or not at all
// (a temporary beside it, synced, renamed over it), so that a pass stopped
// while writing leaves the one before. False with *why when it cannot be.
bool write_partial(const std::string& path, const v1::Partial& partial, std::string* why);
bool read_partial(const std::string& path, v1::Partial* partial, std::string* why);

}  // namespace imgstat::client
