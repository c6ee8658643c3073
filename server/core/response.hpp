// The step from an engine's statistics to the contract's: one channel of an
// AnalyzeResponse. The analyzer answers with it, and the CLI's --aggregate
// writes its merged answers with it, so both read the same.
#pragma once

#include <cstdint>

#include "imgstat/engine.hpp"
#include "imgstat/v1/imgstat.pb.h"

namespace imgstat {

// What `request` asked for of `s`, a channel of `type` samples; width turns
// positions into (x, y) (0: none).
void fill_channel(v1::ChannelStats* c, const ChannelStats& s, const StatsRequest& request, SampleType type,
                  uint64_t width);

// The reverse, for what merges: count, NaN and Inf counts, the histogram and
// the merge state of a channel of `type` samples.
ChannelStats merge_part_of(const v1::ChannelStats& c, SampleType type);

}  // namespace imgstat
