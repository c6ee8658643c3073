// The float histogram's bins, four samples at a time (built with -mavx2,
// called where the CPU has it: float_bins.hpp). The same operations as
// RangeBinner's operator() on each sample, so the same bins: a group of
// four with any sample not finite, outside an explicit range, within
// RangeBinner::kEdge of a bin's edge, or binned to a non-finite position
// goes to the scalar binner whole.
#include <immintrin.h>

#include "cpu/float_bins.hpp"

namespace imgstat::cpu {

void float_bins_avx2(const uint8_t* p, uint64_t n, const RangeBinner& b, bool explicit_range, uint64_t* lanes,
                     uint64_t* under, uint64_t* over) {
  const __m256d lo = _mm256_set1_pd(b.lo), hi = _mm256_set1_pd(b.hi), scale = _mm256_set1_pd(b.scale);
  const __m256d zero = _mm256_setzero_pd(), edge = _mm256_set1_pd(RangeBinner::kEdge);
  const __m256d far_edge = _mm256_set1_pd(1.0 - RangeBinner::kEdge);
  const __m256d last = _mm256_set1_pd(static_cast<double>(b.bins - 1));
  uint64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(reinterpret_cast<const float*>(p + 4 * i)));
    const __m256d t = _mm256_mul_pd(_mm256_sub_pd(v, lo), scale);
    const __m256d f = _mm256_floor_pd(t);
    const __m256d frac = _mm256_sub_pd(t, f);
    // Plain: v and t finite (x - x is 0), the fraction clear of both edges.
    __m256d plain = _mm256_and_pd(_mm256_cmp_pd(_mm256_sub_pd(v, v), zero, _CMP_EQ_OQ),
                                  _mm256_cmp_pd(_mm256_sub_pd(t, t), zero, _CMP_EQ_OQ));
    plain = _mm256_and_pd(plain, _mm256_cmp_pd(frac, edge, _CMP_GE_OQ));
    plain = _mm256_and_pd(plain, _mm256_cmp_pd(frac, far_edge, _CMP_LE_OQ));
    if (explicit_range)
      plain = _mm256_and_pd(plain, _mm256_and_pd(_mm256_cmp_pd(v, lo, _CMP_GE_OQ), _mm256_cmp_pd(v, hi, _CMP_LT_OQ)));
    if (_mm256_movemask_pd(plain) != 0xf) {
      float_bins_scalar(p + 4 * i, 4, b, explicit_range, lanes, under, over);
      continue;
    }
    // clamp(floor(t)): below 1 (nothing between 0 and 1 but 0) is bin 0, past the last bin the last.
    const __m128i bin = _mm256_cvttpd_epi32(_mm256_min_pd(_mm256_max_pd(f, zero), last));
    alignas(16) uint32_t k[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(k), bin);
    ++lanes[k[0] * kFloatBinLanes];
    ++lanes[k[1] * kFloatBinLanes + 1];
    ++lanes[k[2] * kFloatBinLanes + 2];
    ++lanes[k[3] * kFloatBinLanes + 3];
  }
  float_bins_scalar(p + 4 * i, n - i, b, explicit_range, lanes, under, over);
}

}  // namespace imgstat::cpu
