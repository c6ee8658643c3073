#include "common/pil_resample.hpp"

#include <immintrin.h>

#include <cmath>

namespace imgstat {
namespace {


double pil_bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

double pil_sinc(double x) {
  if (x == 0.0) return 1.0;
  x = x * M_PI;
  return std::sin(x) / x;
}

double pil_lanczos(double x) {  // truncated sinc
  if (-3.0 <= x && x < 3.0) return pil_sinc(x) * pil_sinc(x / 3);
  return 0.0;
}

PilCoeffs pil_coeffs(int in_size, int out_size, PilFilter filter) {
  double (*kernel)(double) = filter == PilFilter::kLanczos ? pil_lanczos : pil_bicubic;
  const float in0 = 0.f, in1 = static_cast<float>(in_size);
  double scale = static_cast<double>(in1 - in0) / out_size;
  double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = (filter == PilFilter::kLanczos ? 3.0 : 2.0) * filterscale;
  PilCoeffs c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.bounds.resize(static_cast<size_t>(out_size) * 2);
  c.k.assign(static_cast<size_t>(out_size) * c.ksize, 0);
  std::vector<double> kk(c.ksize);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    double ww = 0.0;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    for (int x = 0; x < xmax; ++x) {
      const double w = kernel((x + xmin - center + 0.5) * ss);
      kk[x] = w;
      ww += w;
    }
    for (int x = 0; x < xmax; ++x)
      if (ww != 0.0) kk[x] /= ww;
    for (int x = 0; x < xmax; ++x)
      c.k[static_cast<size_t>(xx) * c.ksize + x] = kk[x] < 0
                                                        ? static_cast<int32_t>(-0.5 + kk[x] * (1 << kPilPrecisionBits))
                                                        : static_cast<int32_t>(0.5 + kk[x] * (1 << kPilPrecisionBits));
    c.bounds[xx * 2] = xmin;
    c.bounds[xx * 2 + 1] = xmax;
  }
  return c;
}

inline uint8_t pil_clip8(int32_t v) {
  const int32_t s = v >> kPilPrecisionBits;
  return static_cast<uint8_t>(s < 0 ? 0 : s > 255 ? 255 : s);
}

// One row of PIL's horizontal pass: output row `out` from input row `row`.
void horizontal_row(const uint8_t* row, int bands, const PilCoeffs& ch, int xsize, uint8_t* out) {
  for (int xx = 0; xx < xsize; ++xx, out += bands) {
    const int xmin = ch.bounds[xx * 2], xmax = ch.bounds[xx * 2 + 1];
    const int32_t* k = &ch.k[static_cast<size_t>(xx) * ch.ksize];
    const uint8_t* p = row + static_cast<size_t>(xmin) * bands;
    int32_t ss[4] = {1 << (kPilPrecisionBits - 1), 1 << (kPilPrecisionBits - 1), 1 << (kPilPrecisionBits - 1),
                     1 << (kPilPrecisionBits - 1)};
    if (bands == 3) {
      for (int x = 0; x < xmax; ++x, p += 3) ss[0] += p[0] * k[x], ss[1] += p[1] * k[x], ss[2] += p[2] * k[x];
    } else {
      for (int x = 0; x < xmax; ++x, p += bands)
        for (int b = 0; b < bands; ++b) ss[b] += p[b] * k[x];
    }
    for (int b = 0; b < bands; ++b) out[b] = pil_clip8(ss[b]);
  }
}

// Eight rows of the horizontal pass at once, a row in each lane of a
// vector: the taps are the same for every row, and integer sums in any
// order are PIL's. in_rows: the first input row; stride: bytes a row.
typedef int32_t Lanes8 __attribute__((vector_size(32), aligned(4)));

// Bytes [i, i + 8) of eight rows, each sample's eight rows widened into
// the eight lanes of lanes[(i + s) * 8 ...]: an 8x8 byte transpose.
__attribute__((target("avx2"))) inline void transpose8x8(const uint8_t* in, size_t stride, int32_t* lanes) {
  __m128i r[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + k * stride));
  const __m128i a0 = _mm_unpacklo_epi8(r[0], r[1]), a1 = _mm_unpacklo_epi8(r[2], r[3]);
  const __m128i a2 = _mm_unpacklo_epi8(r[4], r[5]), a3 = _mm_unpacklo_epi8(r[6], r[7]);
  const __m128i b0 = _mm_unpacklo_epi16(a0, a1), b1 = _mm_unpackhi_epi16(a0, a1);
  const __m128i b2 = _mm_unpacklo_epi16(a2, a3), b3 = _mm_unpackhi_epi16(a2, a3);
  const __m128i c[4] = {_mm_unpacklo_epi32(b0, b2), _mm_unpackhi_epi32(b0, b2), _mm_unpacklo_epi32(b1, b3),
                        _mm_unpackhi_epi32(b1, b3)};
  for (int k = 0; k < 4; ++k) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes + 16 * k), _mm256_cvtepu8_epi32(c[k]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes + 16 * k + 8), _mm256_cvtepu8_epi32(_mm_srli_si128(c[k], 8)));
  }
}

template <int kBands>
__attribute__((target("avx2"))) void horizontal_rows8_of(const uint8_t* in_rows, size_t stride, int w,
                                                          const PilCoeffs& ch, int xsize, uint8_t* out_rows,
                                                          size_t out_stride, std::vector<int32_t>& lanes) {
  const size_t samples = static_cast<size_t>(w) * kBands;
  lanes.resize(samples * 8);
  int32_t* to = lanes.data();
  size_t i = 0;
  for (; i + 8 <= samples; i += 8) transpose8x8(in_rows + i, stride, to + i * 8);
  for (; i < samples; ++i)
    for (int r = 0; r < 8; ++r) to[i * 8 + r] = in_rows[r * stride + i];
  const Lanes8* col = reinterpret_cast<const Lanes8*>(lanes.data());
  for (int xx = 0; xx < xsize; ++xx) {
    const int xmin = ch.bounds[xx * 2], xmax = ch.bounds[xx * 2 + 1];
    const int32_t* k = &ch.k[static_cast<size_t>(xx) * ch.ksize];
    Lanes8 acc[kBands];
    for (int b = 0; b < kBands; ++b) acc[b] = Lanes8{} + (1 << (kPilPrecisionBits - 1));
    const Lanes8* c = col + static_cast<size_t>(xmin) * kBands;
    for (int x = 0; x < xmax; ++x) {
      const Lanes8 kv = Lanes8{} + k[x];
      for (int b = 0; b < kBands; ++b) acc[b] += c[x * kBands + b] * kv;
    }
    for (int b = 0; b < kBands; ++b)
      for (int r = 0; r < 8; ++r) out_rows[r * out_stride + static_cast<size_t>(xx) * kBands + b] = pil_clip8(acc[b][r]);
  }
}

void horizontal_rows8(const uint8_t* in_rows, size_t stride, int w, int bands, const PilCoeffs& ch, int xsize,
                      uint8_t* out_rows, size_t out_stride, std::vector<int32_t>& lanes) {
  switch (bands) {
    case 1: return horizontal_rows8_of<1>(in_rows, stride, w, ch, xsize, out_rows, out_stride, lanes);
    case 2: return horizontal_rows8_of<2>(in_rows, stride, w, ch, xsize, out_rows, out_stride, lanes);
    case 3: return horizontal_rows8_of<3>(in_rows, stride, w, ch, xsize, out_rows, out_stride, lanes);
    default: return horizontal_rows8_of<4>(in_rows, stride, w, ch, xsize, out_rows, out_stride, lanes);
  }
}

}  // namespace

const PilPlan& pil_plan(int w, int h, int xsize, int ysize, PilFilter filter) {
  thread_local PilPlan kept[2];
  PilPlan& p = kept[filter == PilFilter::kLanczos];
  if (p.w == w && p.h == h && p.xsize == xsize && p.ysize == ysize) return p;
  p.w = w, p.h = h, p.xsize = xsize, p.ysize = ysize;
  p.horizontal = pil_coeffs(w, xsize, filter);
  p.vertical = pil_coeffs(h, ysize, filter);
  p.first_row = p.vertical.bounds[0];
  p.rows = p.vertical.bounds[ysize * 2 - 2] + p.vertical.bounds[ysize * 2 - 1] - p.first_row;
  return p;
}

namespace {

// One output row of the vertical pass: n samples, a whole input row a tap.
__attribute__((always_inline)) inline void vertical_row_of(const uint8_t* rows, size_t n, const int32_t* k, int taps,
                                                           int32_t* ss, uint8_t* out) {
  for (size_t i = 0; i < n; ++i) ss[i] = 1 << (kPilPrecisionBits - 1);
  for (int y = 0; y < taps; ++y) {
    const uint8_t* row = rows + static_cast<size_t>(y) * n;
    const int32_t kk = k[y];
    for (size_t i = 0; i < n; ++i) ss[i] += row[i] * kk;
  }
  for (size_t i = 0; i < n; ++i) out[i] = pil_clip8(ss[i]);
}

__attribute__((target("avx2"))) void vertical_row_avx2(const uint8_t* rows, size_t n, const int32_t* k, int taps,
                                                       int32_t* ss, uint8_t* out) {
  vertical_row_of(rows, n, k, taps, ss, out);
}

void vertical_row(const uint8_t* rows, size_t n, const int32_t* k, int taps, int32_t* ss, uint8_t* out) {
  vertical_row_of(rows, n, k, taps, ss, out);
}

PilImage vertical_pass(const PilImage& cur, const PilCoeffs& cv, int first_row, int ysize, bool avx2) {
  PilImage o;
  o.w = cur.w, o.h = ysize, o.bands = cur.bands;
  const size_t n = static_cast<size_t>(o.w) * o.bands;
  o.px.resize(n * o.h);
  thread_local std::vector<int32_t> ss;
  ss.resize(n);
  for (int yy = 0; yy < ysize; ++yy) {
    const int ymin = cv.bounds[yy * 2] - first_row, ymax = cv.bounds[yy * 2 + 1];
    const int32_t* k = &cv.k[static_cast<size_t>(yy) * cv.ksize];
    (avx2 ? vertical_row_avx2 : vertical_row)(&cur.px[static_cast<size_t>(ymin) * n], n, k, ymax, ss.data(),
                                             &o.px[static_cast<size_t>(yy) * n]);
  }
  return o;
}

}  // namespace

PilImage pil_resize(const PilImage& in, int xsize, int ysize, PilFilter filter) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  const bool horizontal = xsize != in.w, vertical = ysize != in.h;
  const PilPlan& plan = pil_plan(in.w, in.h, xsize, ysize, filter);
  const PilCoeffs& ch = plan.horizontal;
  const int ybox_first = plan.first_row;
  const PilImage* cur = &in;
  PilImage t;
  if (horizontal) {
    const int bands = in.bands;
    t.w = xsize, t.h = plan.rows, t.bands = bands;
    t.px.resize(static_cast<size_t>(t.w) * t.h * bands);
    const size_t in_stride = static_cast<size_t>(in.w) * bands, out_stride = static_cast<size_t>(xsize) * bands;
    int yy = 0;
    if (avx2) {
      thread_local std::vector<int32_t> lanes;
      for (; yy + 8 <= t.h; yy += 8)
        horizontal_rows8(&in.px[(yy + ybox_first) * in_stride], in_stride, in.w, bands, ch, xsize, &t.px[yy * out_stride],
                         out_stride, lanes);
    }
    for (; yy < t.h; ++yy) horizontal_row(&in.px[(yy + ybox_first) * in_stride], bands, ch, xsize, &t.px[yy * out_stride]);
    cur = &t;
  }
  if (!vertical) return *cur;
  return vertical_pass(*cur, plan.vertical, horizontal ? ybox_first : 0, ysize, avx2);
}

}  // namespace imgstat
