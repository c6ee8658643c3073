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

// The helpers below visit (index, count) of every non-empty bin in order, so
// that dense value counts and sparse fine bins give the same answers.
template <class Visit>
void each_dense(const std::vector<uint64_t>& counts, Visit&& visit) {
  for (size_t i = 0; i < counts.size(); ++i)
    if (counts[i] && !visit(i, counts[i])) return;
}
template <class Visit>
void each_sparse(const std::vector<FineBin>& bins, Visit&& visit) {
  for (const FineBin& b : bins)
    if (!visit(size_t{b.bin}, b.count)) return;
}

// Index of the bin holding the sample of rank k (1-based); `last` where the
// counts hold fewer than k.
template <class Each>
size_t bin_of_rank(Each&& each, uint64_t k, size_t last) {
  uint64_t seen = 0;
  size_t found = last;
  each([&](size_t i, uint64_t c) {
    seen += c;
    if (seen < k) return true;
    found = i;
    return false;
  });
  return found;
}

// The first of the fullest bins.
template <class Each>
size_t fullest(Each&& each) {
  size_t best = 0;
  uint64_t most = 0;
  each([&](size_t i, uint64_t c) {
    if (c > most) best = i, most = c;
    return true;
  });
  return best;
}

template <class Each>
double entropy_bits(Each&& each, uint64_t n) {
  long double h = 0;
  const long double total = static_cast<long double>(n);
  each([&](size_t, uint64_t c) {
    const long double p = static_cast<long double>(c) / total;
    h -= p * std::log2(p);
    return true;
  });
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
    auto each = [&](auto&& visit) { each_dense(counts, visit); };
    auto at_rank = [&](uint64_t k) { return value(bin_of_rank(each, k, counts.size() - 1)); };
    s.has_distribution = true;
    s.median = at_rank(percentile_rank(50, n));
    for (double p : request.percentiles) s.percentiles.emplace_back(p, at_rank(percentile_rank(p, n)));
    s.mode = value(fullest(each));
    s.entropy = entropy_bits(each, n);
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

void describe_fine(const std::vector<FineBin>& fine, const FloatMoments& m, const StatsRequest& request,
                   ChannelStats& s) {
  if (m.n == 0 || fine.empty() || !request.distribution) return;
  const double lo = canonical_zero(m.min), hi = canonical_zero(m.max);
  // Halved first so that float64 ranges wider than a double stay finite.
  const double width = (hi * 0.5 - lo * 0.5) / static_cast<double>(kFineBins) * 2;
  auto each = [&](auto&& visit) { each_sparse(fine, visit); };
  auto value_of_rank = [&](uint64_t k) {
    if (k <= 1) return lo;  // the smallest sample is min itself
    if (k >= m.n) return hi;
    const double mid = lo + (static_cast<double>(bin_of_rank(each, k, kFineBins - 1)) + 0.5) * width;
    return mid < lo ? lo : mid > hi ? hi : mid;
  };
  s.has_distribution = true;
  s.median = value_of_rank(percentile_rank(50, m.n));
  for (double p : request.percentiles) s.percentiles.emplace_back(p, value_of_rank(percentile_rank(p, m.n)));
  const double mode = lo + (static_cast<double>(fullest(each)) + 0.5) * width;
  s.mode = lo == hi ? lo : mode > hi ? hi : mode;
  s.entropy = entropy_bits(each, m.n);
  s.bin_error = width / 2;
}

void describe_shape(const FloatMoments& m, ChannelStats& s) {
  if (m.n == 0 || !std::isfinite(m.m4)) return;
  set_shape(static_cast<long double>(m.n), m.m2, m.m3, m.m4, s);
}

}  // namespace imgstat
