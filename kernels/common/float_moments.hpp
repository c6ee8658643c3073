// Mergeable moments of float samples, shared by the CPU engine and CUDA
// device code so that both combine partial results with the same arithmetic.
#pragma once

#include <cmath>
#include <cstdint>

#include "imgstat/types.hpp"

namespace imgstat {

// mean and m2 (sum of squared deviations from the mean) rather than a raw sum
// of squares, which cancels catastrophically when the mean dwarfs the spread;
// merged by Chan et al.'s formula in any order.
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
};

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
    return;
  }
  const double na = static_cast<double>(a.n), nb = static_cast<double>(b.n);
  const double n = na + nb;
  const double delta = b.mean - a.mean;
  a.mean += delta * (nb / n);
  a.m2 += b.m2 + delta * delta * (na * nb / n);
  a.n += b.n;
  a.min = b.min < a.min ? b.min : a.min;
  a.max = b.max > a.max ? b.max : a.max;
  compensated_add(a.sum, a.sum_comp, b.sum);
  compensated_add(a.sum, a.sum_comp, b.sum_comp);
}

// Moments of n finite samples given as sums of (v - shift) and its square,
// shift being one of the samples (so the sums keep their precision).
IMGSTAT_HD FloatMoments moments_from_shifted(uint64_t n, double shift, double s1, double s2, double min,
                                             double max, double sum) {
  FloatMoments m;
  m.n = n;
  if (n == 0) return m;
  const double nd = static_cast<double>(n);
  m.min = min;
  m.max = max;
  m.sum = sum;
  m.mean = shift + s1 / nd;
  m.m2 = s2 - s1 * (s1 / nd);
  return m;
}

}  // namespace imgstat
