#include "decode/png/png.hpp"

#include <cstdlib>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace imgstat {
namespace {

// ---- unfiltering ------------------------------------------------------------
// Sub, Average and Paeth depend on the pixel to the left: one pixel at a time,
// its bytes in one vector (16-bit lanes for the arithmetic).

#if defined(__SSE2__)
// Loads and stores of W bytes, W >= the pixel's: a 3- or 6-byte pixel moves
// as 4 or 8 bytes, the bytes past it written back as they were read.
template <int W>
__m128i load_bytes(const uint8_t* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, W);
  return _mm_unpacklo_epi8(_mm_cvtsi64_si128(static_cast<long long>(v)), _mm_setzero_si128());
}
template <int W>
void store_bytes(uint8_t* p, __m128i v) {
  const uint64_t x = static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_packus_epi16(v, v)));
  std::memcpy(p, &x, W);
}
__m128i abs16(__m128i x) { return _mm_max_epi16(x, _mm_sub_epi16(_mm_setzero_si128(), x)); }
__m128i low_byte(__m128i x) { return _mm_and_si128(x, _mm_set1_epi16(0xff)); }
template <int kBpp>
__m128i pixel_lanes() {  // 16-bit lanes of the pixel's bytes
  alignas(16) int16_t m[8] = {};
  for (int i = 0; i < kBpp; ++i) m[i] = -1;
  return _mm_load_si128(reinterpret_cast<const __m128i*>(m));
}

// The prediction of each filter from left a, up b, up-left c.
enum class Filter { kSub, kAvg, kPaeth };
template <Filter F>
__m128i predict(__m128i a, __m128i b, __m128i c) {
  if constexpr (F == Filter::kSub) return a;
  if constexpr (F == Filter::kAvg) return _mm_srli_epi16(_mm_add_epi16(a, b), 1);
  if constexpr (F == Filter::kPaeth) {
    const __m128i bc = _mm_sub_epi16(b, c), ac = _mm_sub_epi16(a, c);
    const __m128i pa = abs16(bc), pb = abs16(ac), pc = abs16(_mm_add_epi16(bc, ac));
    const __m128i least = _mm_min_epi16(pa, _mm_min_epi16(pb, pc));
    // Paeth's ties: a before b before c.
    const __m128i take_a = _mm_cmpeq_epi16(least, pa);
    const __m128i take_b = _mm_andnot_si128(take_a, _mm_cmpeq_epi16(least, pb));
    const __m128i take_c = _mm_andnot_si128(_mm_or_si128(take_a, take_b), _mm_set1_epi16(-1));
    return _mm_or_si128(_mm_or_si128(_mm_and_si128(take_a, a), _mm_and_si128(take_b, b)), _mm_and_si128(take_c, c));
  }
}

template <int kBpp, Filter F>
void unfilter_pixels(uint8_t* row, const uint8_t* prev, size_t n) {
  constexpr int kWide = kBpp == 3 ? 4 : kBpp == 6 ? 8 : kBpp;
  const __m128i keep = pixel_lanes<kBpp>();
  __m128i a = _mm_setzero_si128(), c = _mm_setzero_si128();
  size_t i = 0;
  // Wide moves while they stay inside the row, then the last pixel exactly.
  for (; i + kWide <= n; i += kBpp) {
    const __m128i b = F == Filter::kSub ? c : load_bytes<kWide>(prev + i);
    a = low_byte(_mm_add_epi16(load_bytes<kWide>(row + i), _mm_and_si128(predict<F>(a, b, c), keep)));
    store_bytes<kWide>(row + i, a);
    c = b;
  }
  for (; i < n; i += kBpp) {
    const __m128i b = F == Filter::kSub ? c : load_bytes<kBpp>(prev + i);
    a = low_byte(_mm_add_epi16(load_bytes<kBpp>(row + i), _mm_and_si128(predict<F>(a, b, c), keep)));
    store_bytes<kBpp>(row + i, a);
    c = b;
  }
}
// Sub of pixels of 1, 2, 4 or 8 bytes: a running sum of each byte lane,
// sixteen bytes at a time (the shifted adds of a prefix sum, the last
// pixel of the previous sixteen carried into the first), so that a row is
// not a chain of one add a pixel (a 16-bit label map's rows are all Sub).
template <int kBpp>
void unfilter_sub_prefix(uint8_t* row, size_t n) {
  __m128i carry = _mm_setzero_si128();  // the last pixel so far, in lanes 0 .. kBpp-1
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m128i v = _mm_add_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i)), carry);
    v = _mm_add_epi8(v, _mm_slli_si128(v, kBpp));
    if constexpr (kBpp * 2 < 16) v = _mm_add_epi8(v, _mm_slli_si128(v, kBpp * 2));
    if constexpr (kBpp * 4 < 16) v = _mm_add_epi8(v, _mm_slli_si128(v, kBpp * 4));
    if constexpr (kBpp * 8 < 16) v = _mm_add_epi8(v, _mm_slli_si128(v, kBpp * 8));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(row + i), v);
    carry = _mm_srli_si128(v, 16 - kBpp);
  }
  for (size_t k = i; k < n; ++k) row[k] = static_cast<uint8_t>(row[k] + (k >= kBpp ? row[k - kBpp] : 0));
}

template <int kBpp>
bool unfilter_simd(uint8_t filter, uint8_t* row, const uint8_t* prev, size_t n) {
  switch (filter) {
    case 1:
      if constexpr (16 % kBpp == 0)
        unfilter_sub_prefix<kBpp>(row, n);
      else
        unfilter_pixels<kBpp, Filter::kSub>(row, nullptr, n);
      return true;
    case 3: unfilter_pixels<kBpp, Filter::kAvg>(row, prev, n); return true;
    case 4: unfilter_pixels<kBpp, Filter::kPaeth>(row, prev, n); return true;
  }
  return false;
}
#endif

void unfilter_scalar(uint8_t filter, uint8_t* row, const uint8_t* prev, size_t n, uint32_t bpp) {
  switch (filter) {
    case 1:
      for (size_t i = bpp; i < n; ++i) row[i] = static_cast<uint8_t>(row[i] + row[i - bpp]);
      break;
    case 3:
      for (size_t i = 0; i < n; ++i) {
        const unsigned left = i >= bpp ? row[i - bpp] : 0;
        row[i] = static_cast<uint8_t>(row[i] + ((left + prev[i]) >> 1));
      }
      break;
    case 4:
      for (size_t i = 0; i < n; ++i) {
        const int a = i >= bpp ? row[i - bpp] : 0, b = prev[i], c = i >= bpp ? prev[i - bpp] : 0;
        const int pa = std::abs(b - c), pb = std::abs(a - c), pc = std::abs(a + b - 2 * c);
        const int pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
        row[i] = static_cast<uint8_t>(row[i] + pred);
      }
      break;
  }
}

}  // namespace

bool png_unfilter_row(uint8_t filter, uint8_t* row, const uint8_t* prev, size_t row_bytes, uint32_t bpp) {
  if (filter > 4) return false;
  if (filter == 0) return true;
  if (!prev) {  // the first row: the row above is zeros
    if (filter == 2) return true;
    if (filter == 4) filter = 1;  // Paeth of (a, 0, 0) is a
    if (filter == 3) {
      for (size_t i = bpp; i < row_bytes; ++i) row[i] = static_cast<uint8_t>(row[i] + (row[i - bpp] >> 1));
      return true;
    }
  }
  if (filter == 2) {
    for (size_t i = 0; i < row_bytes; ++i) row[i] = static_cast<uint8_t>(row[i] + prev[i]);
    return true;
  }
#if defined(__SSE2__)
  switch (bpp) {
    case 1: return unfilter_simd<1>(filter, row, prev, row_bytes);
    case 2: return unfilter_simd<2>(filter, row, prev, row_bytes);
    case 3: return unfilter_simd<3>(filter, row, prev, row_bytes);
    case 4: return unfilter_simd<4>(filter, row, prev, row_bytes);
    case 6: return unfilter_simd<6>(filter, row, prev, row_bytes);
    case 8: return unfilter_simd<8>(filter, row, prev, row_bytes);
  }
#endif
  unfilter_scalar(filter, row, prev, row_bytes, bpp);
  return true;
}

}  // namespace imgstat
