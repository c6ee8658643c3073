#include "common/moments.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "imgstat/binning.hpp"

namespace imgstat {

IntMoments moments_of_values(const uint64_t* counts, size_t values, int64_t value_lo) {
  IntMoments m;
  size_t first = values, last = 0;
  for (size_t i = 0; i < values; ++i) {
    const uint64_t c = counts[i];
    if (c == 0) continue;
    if (first == values) first = i;
    last = i;
    const int64_t v = value_lo + static_cast<int64_t>(i);
    m.n += c;
    m.sum += static_cast<int128>(v) * c;
    m.sumsq += static_cast<uint128>(static_cast<uint64_t>(v * v)) * c;
  }
  if (m.n) {
    m.min = value_lo + static_cast<int64_t>(first);
    m.max = value_lo + static_cast<int64_t>(last);
  }
  return m;
}

void set_histogram_range(Histogram& h, SampleType type, const HistogramSpec& spec,
                         double min, double max) {
  if (spec.explicit_range) {
    h.lo = spec.lo;
    h.hi = spec.hi;
  } else if (is_float(type)) {
    h.lo = min;
    h.hi = max;
  } else {
    h.lo = static_cast<double>(type_lo(type));
    h.hi = h.lo + std::ldexp(1.0, static_cast<int>(type_bits(type)));
  }
}

Histogram bin_values(const uint64_t* counts, size_t values, SampleType type,
                     const HistogramSpec& spec) {
  Histogram h;
  h.counts.assign(spec.bins, 0);
  set_histogram_range(h, type, spec, 0, 0);
  const int64_t value_lo = type_lo(type);
  if (!spec.explicit_range) {
    const uint32_t bits = type_bits(type);
    for (size_t i = 0; i < values; ++i)
      if (counts[i]) h.counts[type_range_bin(static_cast<uint32_t>(i), spec.bins, bits)] += counts[i];
    return h;
  }
  const RangeBinner binner = RangeBinner::make(spec.lo, spec.hi, spec.bins);
  for (size_t i = 0; i < values; ++i) {
    if (!counts[i]) continue;
    const double v = static_cast<double>(value_lo + static_cast<int64_t>(i));
    if (v < spec.lo)
      h.underflow += counts[i];
    else if (v >= spec.hi)
      h.overflow += counts[i];
    else
      h.counts[binner(v)] += counts[i];
  }
  return h;
}

ChannelStats finalize(const IntMoments& m, const StatsRequest& request) {
  ChannelStats s;
  s.count = m.n;
  if (m.n == 0) return s;
  if (request.min_max) {
    s.min = static_cast<double>(m.min);
    s.max = static_cast<double>(m.max);
  }
  const long double n = static_cast<long double>(m.n);
  if (request.sum) {
    s.sum = static_cast<double>(m.sum);
    if (m.sum >= std::numeric_limits<int64_t>::min() &&
        m.sum <= std::numeric_limits<int64_t>::max()) {
      s.has_sum_int = true;
      s.sum_int = static_cast<int64_t>(m.sum);
    }
    s.mean = static_cast<double>(static_cast<long double>(m.sum) / n);
  }
  if (request.stddev) {
    if (m.n < kExactVarianceSamples) {
      // n * sumsq - sum^2 = n^2 * variance, exact in 128 bits: n < 2^41 and
      // |v| <= 2^16 bound both terms by 2^114.
      const uint128 sum_abs = static_cast<uint128>(m.sum < 0 ? -m.sum : m.sum);
      const uint128 num = static_cast<uint128>(m.n) * m.sumsq - sum_abs * sum_abs;
      s.stddev = static_cast<double>(std::sqrt(static_cast<long double>(num)) / n);
    } else {
      // Many images together (imgstat-client --aggregate): n * sumsq would
      // pass 128 bits. With sum = a n + r (0 <= r < n), the squared
      // deviations from a, d = sumsq - 2 a sum + a^2 n, are exact and small,
      // and variance = d / n - (r / n)^2.
      int128 a = m.sum / static_cast<int128>(m.n), r = m.sum % static_cast<int128>(m.n);
      if (r < 0) {
        a -= 1;
        r += static_cast<int128>(m.n);
      }
      const int128 d = static_cast<int128>(m.sumsq) - 2 * a * m.sum + a * a * static_cast<int128>(m.n);
      const long double f = static_cast<long double>(r) / n;
      s.stddev = static_cast<double>(std::sqrt(std::max(0.0L, static_cast<long double>(d) / n - f * f)));
    }
  }
  return s;
}

ChannelStats finalize(const FloatMoments& m, const StatsRequest& request) {
  ChannelStats s;
  s.count = m.n;
  s.nan_count = m.nan;
  s.posinf_count = m.posinf;
  s.neginf_count = m.neginf;
  if (m.n == 0) return s;
  if (request.min_max) {
    s.min = canonical_zero(m.min);
    s.max = canonical_zero(m.max);
  }
  const double sum = m.sum + m.sum_comp;
  if (request.sum) {
    s.sum = sum;
    s.mean = sum / static_cast<double>(m.n);
  }
  if (request.stddev) {
    // Squares of float64 samples beyond ~1e154 overflow: say so with +Inf
    // rather than a wrong finite number.
    s.stddev = std::isfinite(m.m2) ? std::sqrt(std::max(0.0, m.m2) / static_cast<double>(m.n))
                                   : std::numeric_limits<double>::infinity();
  }
  return s;
}

}  // namespace imgstat
