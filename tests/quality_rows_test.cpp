// The quality measures' vector loops (common/quality_rows, the AVX2 copy
// where the CPU has it) and PIL's resize passes (common/pil_resample) against
// their scalar formulas written out here: odd widths, pieces' edges,
// unaligned rows, both channel orders, random data and the extremes where
// 32-bit sums come nearest to overflowing.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/pil_resample.hpp"
#include "common/quality.hpp"
#include "common/quality_rows.hpp"

namespace imgstat {
namespace {

std::vector<uint8_t> pixels_of(std::mt19937_64& rng, size_t n, int kind) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = kind == 0 ? static_cast<uint8_t>(rng()) : kind == 1 ? 255 : kind == 2 ? (i % 3 == 2 ? 0 : 255) : 77;
  return v;
}

TEST(QualityRows, EachLoopAsItsFormula) {
  std::mt19937_64 rng(5353);
  const uint32_t orders[2][3] = {{0, 1, 2}, {2, 1, 0}};
  for (uint32_t c : {3u, 4u})
    for (const auto& rgb : orders) {
      const QualityRows* rows = quality_rows(c, rgb);
      ASSERT_NE(rows, nullptr);
      for (uint64_t w : {1, 7, 8, 31, 33, 1023, 1024, 1025, 4099})
        for (int kind = 0; kind < 4; ++kind)  // random, all 255, R = G = 255 and B = 0 (largest |yb2|), constant
          for (size_t offset : {0, 1, 3}) {
            SCOPED_TRACE(std::to_string(c) + " channels, order " + std::to_string(rgb[0]) + ", width " +
                         std::to_string(w) + ", data " + std::to_string(kind) + ", offset " + std::to_string(offset));
            std::vector<uint8_t> buffer = pixels_of(rng, w * c + offset, kind);
            const uint8_t* p = buffer.data() + offset;
            std::vector<uint8_t> grey(w), l(w), pil(3 * w);
            rows->grey(p, w, grey.data());
            rows->pil_l(p, w, l.data());
            rows->pil_rgb(p, w, pil.data());
            ColourRowSums sums;
            std::vector<uint16_t> keys(w), keys_alone(w);
            for (uint64_t x0 = 0; x0 < w; x0 += kColourRowPiece) {
              const uint64_t m = std::min(kColourRowPiece, w - x0);
              rows->colour(p + x0 * c, m, &sums, keys.data() + x0);
              rows->keys(p + x0 * c, m, keys_alone.data() + x0);
            }
            int64_t rg = 0, rgq = 0, yb = 0, ybq = 0;
            bool unequal = false;
            for (uint64_t x = 0; x < w; ++x) {
              const int64_t r = p[x * c + rgb[0]], g = p[x * c + rgb[1]], b = p[x * c + rgb[2]];
              ASSERT_EQ(grey[x], (9798 * r + 19235 * g + 3735 * b + 16384) >> 15) << "pixel " << x;
              ASSERT_EQ(l[x], (19595 * r + 38470 * g + 7471 * b + 0x8000) >> 16) << "pixel " << x;
              ASSERT_EQ(pil[3 * x], r);
              ASSERT_EQ(pil[3 * x + 1], g);
              ASSERT_EQ(pil[3 * x + 2], b);
              const uint16_t key = static_cast<uint16_t>((241 * r * r + 691 * g * g + 68 * b * b) >> kBrightnessShift);
              ASSERT_EQ(keys[x], key) << "pixel " << x;
              ASSERT_EQ(keys_alone[x], key) << "pixel " << x;
              const int64_t d = r - g, e = r + g - 2 * b;
              rg += d, rgq += d * d, yb += e, ybq += e * e;
              unequal = unequal || d != 0 || e != 0;
            }
            EXPECT_EQ(sums.rg, rg);
            EXPECT_EQ(sums.rg_sq, rgq);
            EXPECT_EQ(sums.yb2, yb);
            EXPECT_EQ(sums.yb2_sq, ybq);
            EXPECT_EQ(sums.unequal, unequal);
          }
    }
  // Other layouts take the generic loops.
  const uint32_t other[3] = {1, 0, 2};
  EXPECT_EQ(quality_rows(3, other), nullptr);
  EXPECT_EQ(quality_rows(2, orders[0]), nullptr);
  EXPECT_EQ(quality_rows(5, orders[0]), nullptr);
}

TEST(QualityRows, LaplacianRowAsItsFormula) {
  std::mt19937_64 rng(5354);
  for (uint64_t w : {1, 2, 3, 17, 2047, 2049, 4100, 6007})
    for (int kind = 0; kind < 3; ++kind) {  // random; 255 between rows of 0 (|lap| 1020); constant
      SCOPED_TRACE("width " + std::to_string(w) + ", data " + std::to_string(kind));
      std::vector<uint8_t> up(w + 1), mid(w + 1), down(w + 1);
      for (uint64_t x = 0; x < w; ++x) {
        up[x] = kind == 0 ? static_cast<uint8_t>(rng()) : kind == 1 ? (x % 2 ? 255 : 0) : 9;
        mid[x + 1] = kind == 0 ? static_cast<uint8_t>(rng()) : kind == 1 ? (x % 2 ? 255 : 0) : 9;
        down[x] = kind == 0 ? static_cast<uint8_t>(rng()) : kind == 1 ? (x % 2 ? 255 : 0) : 9;
      }
      if (kind == 1)
        for (uint64_t x = 0; x < w; ++x) up[x] = down[x] = mid[x + 1] ? 0 : 255;
      const uint8_t* m = mid.data() + 1;  // unaligned
      LaplacianRowSums s;
      laplacian_row(up.data(), m, down.data(), w, &s);
      int64_t gs = 0, gsq = 0, ls = 0, lsq = 0;
      for (uint64_t x = 0; x < w; ++x) {
        // BORDER_REFLECT_101; a one-pixel row: the pixel itself.
        const int64_t left = w == 1 ? m[0] : x == 0 ? m[1] : m[x - 1];
        const int64_t right = w == 1 ? m[0] : x == w - 1 ? m[w - 2] : m[x + 1];
        const int64_t v = m[x], lap = left + right + up[x] + down[x] - 4 * v;
        gs += v, gsq += v * v, ls += lap, lsq += lap * lap;
      }
      EXPECT_EQ(s.grey, gs);
      EXPECT_EQ(s.grey_sq, gsq);
      EXPECT_EQ(s.lap, ls);
      EXPECT_EQ(s.lap_sq, lsq);
    }
}

// PIL's two passes written out: each output a sum of taps in fixed point.
PilImage resize_by_formula(const PilImage& in, int xsize, int ysize, PilFilter filter) {
  const PilPlan plan = pil_plan(in.w, in.h, xsize, ysize, filter);
  auto clip = [](int64_t v) {
    const int64_t s = v >> kPilPrecisionBits;
    return static_cast<uint8_t>(s < 0 ? 0 : s > 255 ? 255 : s);
  };
  PilImage h = in;
  int first = 0;
  if (xsize != in.w) {
    first = plan.first_row;
    h.w = xsize, h.h = plan.rows;
    h.px.assign(static_cast<size_t>(xsize) * plan.rows * in.bands, 0);
    for (int y = 0; y < plan.rows; ++y)
      for (int xx = 0; xx < xsize; ++xx)
        for (int b = 0; b < in.bands; ++b) {
          int64_t ss = 1 << (kPilPrecisionBits - 1);
          for (int t = 0; t < plan.horizontal.bounds[2 * xx + 1]; ++t)
            ss += static_cast<int64_t>(in.at(plan.horizontal.bounds[2 * xx] + t, y + first, b)) *
                  plan.horizontal.k[static_cast<size_t>(xx) * plan.horizontal.ksize + t];
          h.at(xx, y, b) = clip(ss);
        }
  }
  if (ysize == in.h) return h;
  PilImage o;
  o.w = h.w, o.h = ysize, o.bands = in.bands;
  o.px.assign(static_cast<size_t>(o.w) * ysize * in.bands, 0);
  for (int yy = 0; yy < ysize; ++yy)
    for (int x = 0; x < o.w; ++x)
      for (int b = 0; b < in.bands; ++b) {
        int64_t ss = 1 << (kPilPrecisionBits - 1);
        for (int t = 0; t < plan.vertical.bounds[2 * yy + 1]; ++t)
          ss += static_cast<int64_t>(h.at(x, plan.vertical.bounds[2 * yy] - first + t, b)) *
                plan.vertical.k[static_cast<size_t>(yy) * plan.vertical.ksize + t];
        o.at(x, yy, b) = clip(ss);
      }
  return o;
}

TEST(PilResize, VectorPassesAsTheFormula) {
  std::mt19937_64 rng(5355);
  struct Case { int w, h, xsize, ysize; PilFilter filter; };
  const Case cases[] = {{500, 375, 64, 48, PilFilter::kBicubic}, {500, 375, 32, 32, PilFilter::kLanczos},
                        {97, 61, 32, 32, PilFilter::kLanczos},   {13, 9, 5, 4, PilFilter::kBicubic},
                        {7, 300, 7, 20, PilFilter::kBicubic},    {301, 5, 64, 5, PilFilter::kLanczos},
                        {3, 17, 1, 1, PilFilter::kLanczos}};
  for (const Case& c : cases)
    for (int bands = 1; bands <= 4; ++bands)
      for (int kind = 0; kind < 3; ++kind) {  // random, 0/255 stripes (ringing clipped at both ends), constant
        SCOPED_TRACE(std::to_string(c.w) + "x" + std::to_string(c.h) + " to " + std::to_string(c.xsize) + "x" +
                     std::to_string(c.ysize) + ", " + std::to_string(bands) + " bands, data " + std::to_string(kind));
        PilImage in;
        in.w = c.w, in.h = c.h, in.bands = bands;
        in.px.resize(static_cast<size_t>(c.w) * c.h * bands);
        for (size_t i = 0; i < in.px.size(); ++i)
          in.px[i] = kind == 0 ? static_cast<uint8_t>(rng()) : kind == 1 ? ((i / bands / 3) % 2 ? 255 : 0) : 201;
        const PilImage got = pil_resize(in, c.xsize, c.ysize, c.filter);
        const PilImage want = resize_by_formula(in, c.xsize, c.ysize, c.filter);
        ASSERT_EQ(got.w, want.w);
        ASSERT_EQ(got.h, want.h);
        ASSERT_EQ(got.px, want.px);
      }
}

}  // namespace
}  // namespace imgstat
