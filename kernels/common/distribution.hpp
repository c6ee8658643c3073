// Statistics of a channel's distribution, from counts both engines produce
// exactly (the count of every integer value, or float samples' fine bins),
// so that every engine reports the same numbers to the bit.
#pragma once

#include <cstdint>
#include <vector>

#include "imgstat/float_moments.hpp"
#include "imgstat/engine.hpp"

namespace imgstat {

// One non-empty bin of float samples' fine bins.
struct FineBin {
  uint32_t bin;
  uint64_t count;
};

// Median, percentiles, mode and entropy (request.distribution) and skewness
// and kurtosis (request.shape) of integer samples: counts[i] samples of
// value value_lo + i.
void describe_values(const std::vector<uint64_t>& counts, int64_t value_lo, const StatsRequest& request,
                     ChannelStats& s);

// Sigma-clipped statistics (ChannelStats::robust) of float samples: every
// finite one, ascending. As the integer samples' from their counts, over
// the distinct values.
void describe_robust_samples(const std::vector<double>& sorted, const SigmaClipSpec& clip, ChannelStats& s);

// Median, percentiles, mode and entropy of float samples from the non-empty
// of kFineBins bins over [m.min, m.max], in bin order.
void describe_fine(const std::vector<FineBin>& fine, const FloatMoments& m, const StatsRequest& request,
                   ChannelStats& s);

// Skewness and kurtosis of float samples from their central moments.
void describe_shape(const FloatMoments& m, ChannelStats& s);

// The rank, 1 to n, of the sample that is the p-th percentile (inverted CDF).
uint64_t percentile_rank(double p, uint64_t n);

}  // namespace imgstat
