// Engine-independent pieces of a result: exact integer moments, mergeable
// float moments, and the step from either to ChannelStats. Both engines end
// here, so their answers agree to the bit wherever their inputs do.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "imgstat/float_moments.hpp"
#include "imgstat/engine.hpp"

namespace imgstat {

using int128 = __int128;
using uint128 = unsigned __int128;

// Below this many samples an integer channel's variance is computed from
// exact 128-bit integers; above it (many images merged) in long double.
constexpr uint64_t kExactVarianceSamples = uint64_t{1} << 41;

// Exact moments of an integer channel.
struct IntMoments {
  uint64_t n = 0;
  int64_t min = 0;
  int64_t max = 0;
  int128 sum = 0;
  uint128 sumsq = 0;
};

// -0.0 and 0.0 compare equal, so which one a min or max reduction keeps
// depends on its order; results report +0.0 so that every engine prints the same.
inline double canonical_zero(double v) { return v == 0 ? 0.0 : v; }

// Counts per value (value = value_lo + index) to moments and to the requested
// histogram. Used for 8-bit data on every engine and 16-bit data on the CPU
// (through partial_of_values).
IntMoments moments_of_values(const uint64_t* counts, size_t values, int64_t value_lo);
Histogram bin_values(const uint64_t* counts, size_t values, SampleType type,
                     const HistogramSpec& spec);
// The histogram's range as reported: automatic is the type range for
// integers, [min, max] for floats.
void set_histogram_range(Histogram& h, SampleType type, const HistogramSpec& spec,
                         double min, double max);

ChannelStats finalize(const IntMoments& m, const StatsRequest& request);
ChannelStats finalize(const FloatMoments& m, const StatsRequest& request);

}  // namespace imgstat
