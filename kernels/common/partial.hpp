// What a stream has accumulated part way through an image, in one form both
// engines produce: the checkpoint from which the CPU engine carries on when
// the GPU fails in the middle of a stream. Two parts of one image merge
// exactly for integer samples and as the engines merge their own pieces for
// floats, so an answer finished from a checkpoint is the answer the CPU
// engine gives for the whole image (to the last count; float sums to
// rounding).
#pragma once

#include <optional>
#include <vector>

#include "common/moments.hpp"
#include "imgstat/engine.hpp"

namespace imgstat {

struct ChannelPartial {
  IntMoments ints;      // integer samples
  FloatMoments floats;  // float samples
  Histogram histogram;  // counts and explicit-range under/overflow; the range is set at the end
};

struct Partial {
  SampleType type = SampleType::kUint8;
  std::vector<ChannelPartial> channels;
};

// Counts per value of one channel (value = type_lo + index) as a partial.
ChannelPartial partial_of_values(const uint64_t* counts, SampleType type, const StatsRequest& request);
// An empty image's partial: adds nothing when merged.
Partial empty_partial(SampleType type, uint32_t channels, const StatsRequest& request);
void merge(Partial& into, const Partial& from);
std::vector<ChannelStats> finalize(const Partial& partial, const StatsRequest& request);

// A stream that can say what it has accumulated so far. partial() is empty
// when that cannot be known before the end: floats binned over their own
// [min, max] need every sample first.
class CheckpointStream : public StreamAnalysis {
 public:
  virtual std::optional<Partial> partial() = 0;
};

}  // namespace imgstat
