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

#include "common/distribution.hpp"
#include "common/moments.hpp"
#include "imgstat/engine.hpp"

namespace imgstat {

struct ChannelPartial {
  IntMoments ints;      // integer samples
  FloatMoments floats;  // float samples
  Histogram histogram;  // counts and explicit-range under/overflow; the range is set at the end
  // Integer samples with distribution or shape asked for: the count of every
  // value (value = type_lo + index).
  std::vector<uint64_t> values;
  // Float samples with distribution asked for: the non-empty of kFineBins
  // bins over [min, max], in bin order. Kept sparse because a small part's
  // few samples would otherwise cost all 65536 bins to zero, add and scan.
  std::vector<FineBin> fine;
  // Float samples with robust statistics asked for: every finite sample of
  // one image, ascending (a merge of images' partials has none: refused).
  std::vector<double> samples;
  Extremes extremes;  // positions asked for
};

struct Partial {
  SampleType type = SampleType::kUint8;
  std::vector<ChannelPartial> channels;
  // unique_colors asked for, 8-bit samples: one bit per colour seen
  // (color_key()), as 64-bit words.
  std::vector<uint64_t> colors;
  // StatsRequest::joint: row-major counts, and the pixels outside them.
  std::vector<uint64_t> joint;
  uint64_t joint_outside = 0;
};

// The words of the colour bitset for `channels` channels of 8-bit samples,
// and the key of one pixel: gray, or R | G << 8 | B << 16; alpha is not part
// of a colour.
inline size_t color_words(uint32_t channels) { return channels >= 3 ? (size_t{1} << 24) / 64 : 256 / 64; }
IMGSTAT_HD uint32_t color_key(const uint8_t* pixel, uint32_t channels) {
  return channels >= 3 ? pixel[0] | pixel[1] << 8 | pixel[2] << 16 : pixel[0];
}

// Counts per value of one channel (value = type_lo + index) as a partial.
// `channel`: which of the request's histograms (hist_of()) bins it.
ChannelPartial partial_of_values(const uint64_t* counts, SampleType type, const StatsRequest& request,
                                 uint32_t channel = 0);
// The non-empty of `bins` dense counts, in bin order.
template <class Count>
std::vector<FineBin> fine_bins_of(const Count* counts, uint32_t bins) {
  std::vector<FineBin> out;
  for (uint32_t i = 0; i < bins; ++i)
    if (counts[i]) out.push_back(FineBin{i, static_cast<uint64_t>(counts[i])});
  return out;
}
// An empty image's partial: adds nothing when merged.
Partial empty_partial(SampleType type, uint32_t channels, const StatsRequest& request);
void merge(Partial& into, const Partial& from);
// Positions found by an analysis of the pixels from `first` on.
void offset_positions(Partial& partial, uint64_t first);
std::vector<ChannelStats> finalize(const Partial& partial, const StatsRequest& request);
// Everything the request asked for: the channels, unique colours and the summary.
Result result_of(const Partial& partial, const StatsRequest& request, const char* engine);

// A stream that can say what it has accumulated so far. partial() is empty
// when that cannot be known before the end: floats binned over their own
// [min, max] need every sample first.
class CheckpointStream : public StreamAnalysis {
 public:
  virtual std::optional<Partial> partial() = 0;
};

}  // namespace imgstat
