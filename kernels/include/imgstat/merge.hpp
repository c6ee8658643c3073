// Statistics of many images' pixels together, from each image's merge state
// (StatsRequest::merge_state): the answer one analysis of all their pixels
// at once would give. Integer samples merge their counts of every value, so
// everything is exact; float samples merge their moments by the engines' own
// pairwise formulas, and histograms over an explicit range add. Float
// histograms over the channels' own [min, max] and float distributions need
// every sample's bin in one range and are not given.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "imgstat/engine.hpp"

namespace imgstat {

class Merger {
 public:
  // What the merged answer reports; merge_state, positions, unique colours
  // and the luminance are left out (they do not merge), and for floats the
  // histogram (unless over an explicit range) and the distribution.
  Merger(SampleType type, uint32_t channels, const StatsRequest& request);
  ~Merger();
  Merger(Merger&&) noexcept;
  Merger& operator=(Merger&&) noexcept;

  // What each image's analysis must be asked for so that add() can take it.
  static StatsRequest part_request(const StatsRequest& request);
  // The request the merged answer follows, as the constructor trims it.
  const StatsRequest& request() const { return request_; }

  // One image's channels, as an engine answered part_request(), or the
  // state() of a merge of `images` images. Throws InvalidArgument when they
  // do not fit (another type or channel count, no merge state, counts of
  // the wrong size, or totals past 64 bits).
  void add(const std::vector<ChannelStats>& channels, uint64_t images = 1);
  // What has been merged, channel by channel, as one image's answer to
  // part_request() would carry it: another Merger's add(state(), images())
  // merges this one into it (a Partial's groups, kept or sent elsewhere).
  std::vector<ChannelStats> state() const;
  uint64_t images() const { return images_; }
  Result result() const;
  // The exact sum of a channel of integer samples, in decimal (ChannelStats'
  // sum_int holds it only within 64 bits); empty for floats.
  std::string exact_sum(size_t channel) const;
  std::string exact_summary_sum() const;

 private:
  struct State;
  SampleType type_;
  uint32_t channels_;
  StatsRequest request_;
  uint64_t images_ = 0;
  std::unique_ptr<State> state_;
};

}  // namespace imgstat
