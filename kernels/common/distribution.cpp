#include "common/distribution.hpp"

#include <cmath>

#include "common/moments.hpp"

namespace imgstat {

uint64_t percentile_rank(double p, uint64_t n) {
  // p * n / 100 in long double is exact for the p users write (50, 99.5)
  // times any n below 2^40, so p = 50 of an even n lands on the lower middle.
  const long double k = std::ceil(static_cast<long double>(p) * static_cast<long double>(n) / 100.0L);
  if (k < 1) return 1;
  if (k > static_cast<long double>(n)) return n;
  return static_cast<uint64_t>(k);
}

namespace {

// Index of the bin holding the sample of rank k (1-based).
size_t bin_of_rank(const std::vector<uint64_t>& counts, uint64_t k) {
  uint64_t seen = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    seen += counts[i];
    if (seen >= k) return i;
  }
  return counts.size() - 1;
}

size_t fullest(const std::vector<uint64_t>& counts) {
  size_t best = 0;
  for (size_t i = 1; i < counts.size(); ++i)
    if (counts[i] > counts[best]) best = i;
  return best;
}

double entropy_bits(const std::vector<uint64_t>& counts, uint64_t n) {
  long double h = 0;
  const long double total = static_cast<long double>(n);
  for (uint64_t c : counts)
    if (c) {
      const long double p = static_cast<long double>(c) / total;
      h -= p * std::log2(p);
    }
  return static_cast<double>(h);
}

void set_shape(long double n, long double m2, long double m3, long double m4, ChannelStats& s) {
  if (!(m2 > 0)) return;  // all samples equal: both undefined
  const long double var = m2 / n;
  s.has_shape = true;
  s.skewness = static_cast<double>(m3 / n / (var * std::sqrt(var)));
  s.kurtosis = static_cast<double>(m4 / n / (var * var) - 3);
}

}  // namespace

void describe_values(const std::vector<uint64_t>& counts, int64_t value_lo, const StatsRequest& request,
                     ChannelStats& s) {
  uint64_t n = 0;
  long double sum = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    n += counts[i];
    sum += static_cast<long double>(counts[i]) * static_cast<long double>(value_lo + static_cast<int64_t>(i));
  }
  if (n == 0) return;
  auto value = [&](size_t i) { return static_cast<double>(value_lo + static_cast<int64_t>(i)); };
  if (request.distribution) {
    s.has_distribution = true;
    s.median = value(bin_of_rank(counts, percentile_rank(50, n)));
    for (double p : request.percentiles) s.percentiles.emplace_back(p, value(bin_of_rank(counts, percentile_rank(p, n))));
    s.mode = value(fullest(counts));
    s.entropy = entropy_bits(counts, n);
    s.bin_error = 0;
  }
  if (request.shape) {
    // Two passes over at most 65536 values in long double: the same numbers
    // on every engine, since the counts are.
    const long double nd = static_cast<long double>(n), mean = sum / nd;
    long double m2 = 0, m3 = 0, m4 = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      if (!counts[i]) continue;
      const long double d = static_cast<long double>(value_lo + static_cast<int64_t>(i)) - mean, d2 = d * d;
      const long double c = static_cast<long double>(counts[i]);
      m2 += c * d2;
      m3 += c * d2 * d;
      m4 += c * d2 * d2;
    }
    set_shape(nd, m2, m3, m4, s);
  }
}

void describe_fine(const std::vector<uint64_t>& fine, const FloatMoments& m, const StatsRequest& request,
                   ChannelStats& s) {
  if (m.n == 0 || fine.empty() || !request.distribution) return;
  const double lo = canonical_zero(m.min), hi = canonical_zero(m.max);
  // Halved first so that float64 ranges wider than a double stay finite.
  const double width = (hi * 0.5 - lo * 0.5) / static_cast<double>(fine.size()) * 2;
  auto value_of_rank = [&](uint64_t k) {
    if (k <= 1) return lo;  // the smallest sample is min itself
    if (k >= m.n) return hi;
    const double mid = lo + (static_cast<double>(bin_of_rank(fine, k)) + 0.5) * width;
    return mid < lo ? lo : mid > hi ? hi : mid;
  };
  s.has_distribution = true;
  s.median = value_of_rank(percentile_rank(50, m.n));
  for (double p : request.percentiles) s.percentiles.emplace_back(p, value_of_rank(percentile_rank(p, m.n)));
  const double mode = lo + (static_cast<double>(fullest(fine)) + 0.5) * width;
  s.mode = lo == hi ? lo : mode > hi ? hi : mode;
  s.entropy = entropy_bits(fine, m.n);
  s.bin_error = width / 2;
}

void describe_shape(const FloatMoments& m, ChannelStats& s) {
  if (m.n == 0 || !std::isfinite(m.m4)) return;
  set_shape(static_cast<long double>(m.n), m.m2, m.m3, m.m4, s);
}

}  // namespace imgstat
