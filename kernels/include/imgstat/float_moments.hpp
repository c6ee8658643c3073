// Mergeable moments of float samples, shared by the CPU engine and CUDA
// device code so that both combine partial results with the same arithmetic.
#pragma once

#include <cmath>
#include <cstdint>

#include "imgstat/types.hpp"

namespace imgstat {

// mean and m2..m4 (sums of powers of deviations from the mean) rather than
// raw power sums, which cancel catastrophically when the mean dwarfs the
// spread; merged by Chan et al.'s and Pebay's formulas in any order.
struct FloatMoments {
  uint64_t n = 0;
  uint64_t nan = 0;
  uint64_t posinf = 0;
  uint64_t neginf = 0;
  double min = 0;
  double max = 0;
  double sum = 0;       // compensated: sum + sum_comp is the running total
  double sum_comp = 0;  // Neumaier's correction term
  double mean = 0;
  double m2 = 0;
  double m3 = 0;  // for skewness
  double m4 = 0;  // for kurtosis
};

// Where a channel's extremes first occur: the row-major pixel index of the
// first finite sample equal to min and of the first equal to max. The
// earlier of two equal extremes wins a merge, so any order finds the first.
struct Extremes {
  bool any = false;
  double min = 0;
  double max = 0;
  uint64_t min_at = 0;
  uint64_t max_at = 0;
};

IMGSTAT_HD void merge(Extremes& a, const Extremes& b) {
  if (!b.any) return;
  if (!a.any) {
    a = b;
    return;
  }
  if (b.min < a.min || (b.min == a.min && b.min_at < a.min_at)) {
    a.min = b.min;
    a.min_at = b.min_at;
  }
  if (b.max > a.max || (b.max == a.max && b.max_at < a.max_at)) {
    a.max = b.max;
    a.max_at = b.max_at;
  }
}

// Neumaier's compensated addition of x into (sum, comp).
IMGSTAT_HD void compensated_add(double& sum, double& comp, double x) {
  const double t = sum + x;
  comp += (fabs(sum) >= fabs(x)) ? (sum - t) + x : (x - t) + sum;
  sum = t;
}

IMGSTAT_HD void merge(FloatMoments& a, const FloatMoments& b) {
  a.nan += b.nan;
  a.posinf += b.posinf;
  a.neginf += b.neginf;
  if (b.n == 0) return;
  if (a.n == 0) {
    a.n = b.n;
    a.min = b.min;
    a.max = b.max;
    a.sum = b.sum;
    a.sum_comp = b.sum_comp;
    a.mean = b.mean;
    a.m2 = b.m2;
    a.m3 = b.m3;
    a.m4 = b.m4;
    return;
  }
  const double na = static_cast<double>(a.n), nb = static_cast<double>(b.n);
  const double n = na + nb;
  const double delta = b.mean - a.mean;
  const double d_n = delta / n;
  const double d2 = delta * d_n * na * nb;  // delta^2 na nb / n
  // Pebay (2008): m4 and m3 first, from the parts' old m2 and m3.
  a.m4 += b.m4 + d2 * d_n * d_n * (na * na - na * nb + nb * nb) + 6 * d_n * d_n * (na * na * b.m2 + nb * nb * a.m2) +
          4 * d_n * (na * b.m3 - nb * a.m3);
  a.m3 += b.m3 + d2 * d_n * (na - nb) + 3 * d_n * (na * b.m2 - nb * a.m2);
  a.mean += delta * (nb / n);
  a.m2 += b.m2 + d2;
  a.n += b.n;
  a.min = b.min < a.min ? b.min : a.min;
  a.max = b.max > a.max ? b.max : a.max;
  compensated_add(a.sum, a.sum_comp, b.sum);
  compensated_add(a.sum, a.sum_comp, b.sum_comp);
}

// Moments of n finite samples given as sums sk of (v - shift)^k, shift being
// one of the samples (so the sums keep their precision).
IMGSTAT_HD FloatMoments moments_from_shifted(uint64_t n, double shift, double s1, double s2, double s3, double s4,
                                             double min, double max, double sum) {
  FloatMoments m;
  m.n = n;
  if (n == 0) return m;
  const double nd = static_cast<double>(n);
  const double a = s1 / nd;  // mean - shift
  m.min = min;
  m.max = max;
  m.sum = sum;
  m.mean = shift + a;
  m.m2 = s2 - s1 * a;
  m.m3 = s3 - 3 * a * s2 + 2 * nd * a * a * a;
  m.m4 = s4 - 4 * a * s3 + 6 * a * a * s2 - 3 * nd * a * a * a * a;
  return m;
}

}  // namespace imgstat
