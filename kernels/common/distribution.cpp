#include "common/distribution.hpp"

#include <cmath>
#include <limits>

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

// Statistics of the samples of values [a, b] (indices into counts, value
// lo + i), as numpy computes them over those samples in float64: what
// astropy's sigma clipping computes each round.
// counts[i] samples of value(i): the integer lo + i, or values[i] (float
// samples: their distinct values, ascending).
class ValueRange {
 public:
  ValueRange(const std::vector<uint64_t>& counts, int64_t lo, const std::vector<double>* values = nullptr)
      : counts_(counts), lo_(lo), values_(values) {}

  double value(size_t i) const { return values_ ? (*values_)[i] : static_cast<double>(lo_ + static_cast<int64_t>(i)); }

  uint64_t count(size_t a, size_t b) const {
    uint64_t n = 0;
    for (size_t i = a; i <= b; ++i) n += counts_[i];
    return n;
  }
  double mean(size_t a, size_t b, uint64_t n) const {
    if (values_) {
      long double sum = 0;
      for (size_t i = a; i <= b; ++i) sum += static_cast<long double>(counts_[i]) * (*values_)[i];
      return static_cast<double>(sum / static_cast<long double>(n));
    }
    __int128 sum = 0;  // exact: at most 2^40 samples of 16 bits
    for (size_t i = a; i <= b; ++i) sum += static_cast<__int128>(counts_[i]) * (lo_ + static_cast<int64_t>(i));
    return static_cast<double>(static_cast<long double>(sum) / static_cast<long double>(n));
  }
  double stddev(size_t a, size_t b, uint64_t n) const {
    const long double m = mean(a, b, n);
    long double m2 = 0;
    for (size_t i = a; i <= b; ++i) {
      if (!counts_[i]) continue;
      const long double d = static_cast<long double>(value(i)) - m;
      m2 += static_cast<long double>(counts_[i]) * d * d;
    }
    return static_cast<double>(std::sqrt(m2 / static_cast<long double>(n)));
  }
  // The k-th smallest sample (1-based) of [a, b].
  size_t at_rank(size_t a, size_t b, uint64_t k) const {
    uint64_t seen = 0;
    for (size_t i = a; i <= b; ++i) {
      seen += counts_[i];
      if (seen >= k) return i;
    }
    return b;
  }
  // numpy's median: the middle sample, or the mean of the two middle ones.
  double median(size_t a, size_t b, uint64_t n) const {
    if (n % 2) return value(at_rank(a, b, n / 2 + 1));
    return (value(at_rank(a, b, n / 2)) + value(at_rank(a, b, n / 2 + 1))) / 2;
  }
  // numpy's median of |v - centre| over [a, b]: deviations taken in
  // increasing order, outwards from the centre.
  double median_deviation(size_t a, size_t b, uint64_t n, double centre) const {
    auto kth = [&](uint64_t k) {
      // left: the highest index at or below the centre; right: the lowest above.
      int64_t left = static_cast<int64_t>(a) - 1, right = static_cast<int64_t>(b) + 1;
      for (size_t i = a; i <= b; ++i) {
        if (value(i) <= centre) {
          left = static_cast<int64_t>(i);
        } else {
          right = static_cast<int64_t>(i);
          break;
        }
      }
      uint64_t seen = 0;
      for (;;) {
        while (left >= static_cast<int64_t>(a) && !counts_[static_cast<size_t>(left)]) --left;
        while (right <= static_cast<int64_t>(b) && !counts_[static_cast<size_t>(right)]) ++right;
        const bool has_left = left >= static_cast<int64_t>(a), has_right = right <= static_cast<int64_t>(b);
        if (!has_left && !has_right) return 0.0;
        const double dl = has_left ? centre - value(static_cast<size_t>(left)) : INFINITY;
        const double dr = has_right ? value(static_cast<size_t>(right)) - centre : INFINITY;
        const bool take_left = dl <= dr;
        seen += counts_[static_cast<size_t>(take_left ? left : right)];
        if (seen >= k) return take_left ? dl : dr;
        if (take_left) {
          --left;
        } else {
          ++right;
        }
      }
    };
    if (n % 2) return kth(n / 2 + 1);
    return (kth(n / 2) + kth(n / 2 + 1)) / 2;
  }

 private:
  const std::vector<uint64_t>& counts_;
  int64_t lo_;
  const std::vector<double>* values_;
};

// astropy.stats.sigma_clipped_stats over the counts: rounds of bounds from
// the kept samples' centre and spread until a round leaves none out or
// maxiters have run, then the kept samples' mean, median and std; and the
// MAD of all of them. Exact but for the float64 rounding of the centre and
// spread, which numpy rounds too.
void describe_robust(const std::vector<uint64_t>& counts, int64_t value_lo, uint64_t n, const SigmaClipSpec& clip,
                     ChannelStats& s, const std::vector<double>* values = nullptr) {
  const ValueRange r(counts, value_lo, values);
  size_t a = 0, b = counts.size() - 1;
  while (!counts[a]) ++a;
  while (!counts[b]) --b;
  ChannelStats::Robust& out = s.robust;
  s.has_robust = true;
  out.mad = r.median_deviation(a, b, n, r.median(a, b, n));
  out.mad_std = out.mad * kMadStdScale;
  uint64_t kept = n;
  bool empty = false;
  uint32_t rounds = 0;
  while (clip.maxiters < 0 || rounds < static_cast<uint32_t>(clip.maxiters)) {
    ++rounds;
    const double centre = clip.centre_mean ? r.mean(a, b, kept) : r.median(a, b, kept);
    const double spread =
        clip.spread_mad_std ? r.median_deviation(a, b, kept, r.median(a, b, kept)) * kMadStdScale : r.stddev(a, b, kept);
    // As astropy: max = centre; min = max - spread * sigma_lower; max += spread * sigma_upper.
    const double lower = centre - spread * clip.sigma_lower;
    double upper = centre;
    upper += spread * clip.sigma_upper;
    out.lower_bound = lower;
    out.upper_bound = upper;
    // The kept samples are those of one range of values: its new ends.
    size_t na = a, nb = b;
    while (na < b && !(counts[na] && r.value(na) >= lower)) ++na;
    while (nb > na && !(counts[nb] && r.value(nb) <= upper)) --nb;
    if (!counts[na] || !(r.value(na) >= lower) || !(r.value(nb) <= upper)) {  // every sample left out
      empty = true;
      kept = 0;
      break;
    }
    const uint64_t now = r.count(na, nb);
    const bool changed = now != kept;
    a = na, b = nb, kept = now;
    if (!changed) break;
  }
  out.iterations = rounds;
  out.count = kept;
  if (empty) {  // as astropy's: NaN statistics of no samples
    out.mean = out.median = out.stddev = std::numeric_limits<double>::quiet_NaN();
    uint64_t low = 0;
    for (size_t i = 0; i < counts.size(); ++i)
      if (counts[i] && r.value(i) < out.lower_bound) low += counts[i];
    out.clipped_low = low;
    out.clipped_high = n - low;
    return;
  }
  out.clipped_low = a ? r.count(0, a - 1) : 0;
  out.clipped_high = b + 1 < counts.size() ? r.count(b + 1, counts.size() - 1) : 0;
  out.mean = r.mean(a, b, kept);
  out.median = r.median(a, b, kept);
  out.stddev = r.stddev(a, b, kept);
}

}  // namespace

void describe_robust_samples(const std::vector<double>& sorted, const SigmaClipSpec& clip, ChannelStats& s) {
  if (sorted.empty()) return;
  std::vector<double> values;
  std::vector<uint64_t> counts;
  for (double v : sorted) {
    if (!values.empty() && values.back() == v) {
      ++counts.back();
    } else {
      values.push_back(v);
      counts.push_back(1);
    }
  }
  describe_robust(counts, 0, sorted.size(), clip, s, &values);
}

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
  if (request.robust) describe_robust(counts, value_lo, n, request.sigma_clip, s);
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
