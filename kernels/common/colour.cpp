#include "common/colour.hpp"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <memory>

namespace imgstat {
namespace {

// cvRound: half to even, as OpenCV rounds its table entries.
int round_even(double v) { return static_cast<int>(std::nearbyint(v)); }

ColourTables build_tables() {
  ColourTables t{};
  for (int i = 1; i < 256; ++i) {
    t.sdiv[i] = round_even((255 << 12) / (1.0 * i));
    t.hdiv180[i] = round_even((180 << 12) / (6.0 * i));
    t.hdiv256[i] = round_even((256 << 12) / (6.0 * i));
  }
  // OpenCV builds these with its software float (float32) and double
  // arithmetic, each step rounded as written: the same steps here in IEEE
  // float and double give the same tables, which the tests check through
  // all 2^24 colours.
  const double gamma_threshold = 809.0 / 20000.0, gamma_shift = 11.0 / 200.0, gamma_power = 12.0 / 5.0,
               gamma_low = 323.0 / 25.0;
  for (int i = 0; i < 256; ++i) {
    const double x = static_cast<float>(i) / 255.0f;
    const double g = x <= gamma_threshold ? x / gamma_low : std::pow((x + gamma_shift) / (1.0 + gamma_shift), gamma_power);
    t.gamma[i] = static_cast<uint16_t>(round_even(255.0f * 8.0f * static_cast<float>(g)));
  }
  const float scale = 1.0f / (255.0f * 8.0f), threshold = 216.0f / 24389.0f, slope = 841.0f / 108.0f,
              bias = 16.0f / 116.0f;
  for (int i = 0; i < kLabCbrtTableSize; ++i) {
    const float x = scale * static_cast<float>(i);
    // OpenCV's software cube root rounds toward zero, not to nearest: the
    // two differ in this table where 32768 f lands within an ulp of a half
    // (indices 49 and 324).
    float f = std::fma(x, slope, bias);
    if (!(x < threshold)) {
      const double exact = std::cbrt(static_cast<double>(x));
      f = static_cast<float>(exact);
      if (static_cast<double>(f) > exact) f = std::nextafter(f, 0.0f);
    }
    t.cbrt[i] = static_cast<uint16_t>(round_even(32768.0f * f));
  }
  // sRGB to XYZ (D65) over the white point, in 1 << 12 fixed point, from
  // the float32 constants.
  static const float kRgbToXyz[9] = {0.412453f, 0.357580f, 0.180423f, 0.212671f, 0.715160f,
                                     0.072169f, 0.019334f, 0.119193f, 0.950227f};
  static const float kWhite[3] = {0.950456f, 1.0f, 1.088754f};
  for (int row = 0; row < 3; ++row)
    for (int col = 0; col < 3; ++col)
      t.lab[row * 3 + col] = round_even((4096.0f * kRgbToXyz[row * 3 + col]) / kWhite[row]);
  return t;
}

// OpenCV's table for float Lab: L, a, b at each of 33^3 grid points of
// (B, G, R) in [0, 1], L * 2^14 / 100 and (a + 128) * 2^14 / 256 rounded,
// each step a float32 operation as OpenCV's software float does them.
struct LabTable {
  int16_t v[33][33][33][3];
};

float srgb_to_linear(float x) {
  const double xd = x;
  return static_cast<float>(xd <= 809.0 / 20000.0 ? xd / (323.0 / 25.0)
                                                  : std::pow((xd + 11.0 / 200.0) / (1.0 + 11.0 / 200.0), 12.0 / 5.0));
}

float cbrt_toward_zero(float x) {
  const double exact = std::cbrt(static_cast<double>(x));
  float f = static_cast<float>(exact);
  if (static_cast<double>(f) > exact) f = std::nextafter(f, 0.0f);
  return f;
}

std::unique_ptr<LabTable> build_lab_table() {
  auto t = std::make_unique<LabTable>();
  static const float kRgbToXyz[9] = {0.412453f, 0.357580f, 0.180423f, 0.212671f, 0.715160f,
                                     0.072169f, 0.019334f, 0.119193f, 0.950227f};
  const float white[3] = {1.0f / 0.950456f, 1.0f, 1.0f / 1.088754f};
  float d[9];  // rows X, Y, Z; columns B, G, R
  for (int i = 0; i < 3; ++i) {
    d[i * 3 + 2] = white[i] * kRgbToXyz[i * 3];
    d[i * 3 + 1] = white[i] * kRgbToXyz[i * 3 + 1];
    d[i * 3] = white[i] * kRgbToXyz[i * 3 + 2];
  }
  const float threshold = 216.0f / 24389.0f, slope = 841.0f / 108.0f, bias = 16.0f / 116.0f, k = 24389.0f / 27.0f;
  auto f = [&](float v) { return v > threshold ? cbrt_toward_zero(v) : std::fma(v, slope, bias); };
  for (int p = 0; p < 33; ++p)
    for (int q = 0; q < 33; ++q)
      for (int r = 0; r < 33; ++r) {
        const float B = srgb_to_linear(static_cast<float>(p) / 32.0f), G = srgb_to_linear(static_cast<float>(q) / 32.0f),
                    R = srgb_to_linear(static_cast<float>(r) / 32.0f);
        const float X = (B * d[0] + G * d[1]) + R * d[2], Y = (B * d[3] + G * d[4]) + R * d[5],
                    Z = (B * d[6] + G * d[7]) + R * d[8];
        const float fx = f(X), fy = f(Y), fz = f(Z);
        const float L = Y > threshold ? 116.0f * fy - 16.0f : k * Y;
        const float a = 500.0f * (fx - fy), b = 200.0f * (fy - fz);
        t->v[p][q][r][0] = static_cast<int16_t>(round_even(16384.0f * L / 100.0f));
        t->v[p][q][r][1] = static_cast<int16_t>(round_even(16384.0f * (a + 128.0f) / 256.0f));
        t->v[p][q][r][2] = static_cast<int16_t>(round_even(16384.0f * (b + 128.0f) / 256.0f));
      }
  // Entries whose scaled value lies within a float32 step of a half: OpenCV
  // 4.6 computes pow and the cube root in its own software float, whose last
  // bit differs from the C library's, and rounds these the other way. Found
  // by comparing every grid point with cvtColor (Colour.FloatLabTableIsOpenCvs
  // checks all 107,811): {B, G, R, channel, OpenCV's entry minus ours}.
  static const int8_t kNearTies[][5] = {
      {2, 11, 28, 1, +1},  {2, 25, 7, 2, -1},   {5, 13, 10, 2, -1},  {6, 14, 23, 1, +1},  {7, 19, 3, 1, +1},
      {9, 0, 26, 1, +1},   {9, 10, 10, 0, +1},  {9, 30, 14, 1, -1},  {10, 18, 31, 1, +1}, {13, 3, 19, 1, +1},
      {13, 32, 21, 1, +1}, {14, 30, 11, 0, +1}, {15, 11, 0, 1, +1},  {17, 3, 32, 1, +1},  {18, 32, 27, 1, -1},
      {19, 8, 28, 0, -1},  {19, 17, 26, 1, -1}, {21, 8, 9, 0, +1},   {21, 13, 29, 2, +1}, {23, 25, 15, 1, -1},
      {23, 30, 4, 1, -1},  {24, 8, 2, 2, +1},   {25, 3, 20, 2, -1},  {25, 18, 25, 2, -1}, {25, 30, 17, 1, +1},
      {26, 12, 8, 0, -1},  {27, 23, 14, 0, -1}, {28, 29, 25, 2, +1}, {28, 30, 19, 1, +1}, {28, 30, 21, 1, +1},
      {29, 7, 10, 1, -1},  {30, 8, 1, 1, +1},   {31, 3, 31, 2, +1},  {31, 28, 20, 1, -1}};
  for (const auto& e : kNearTies) t->v[e[0]][e[1]][e[2]][e[3]] = static_cast<int16_t>(t->v[e[0]][e[1]][e[2]][e[3]] + e[4]);
  return t;
}

}  // namespace

const int16_t* lab_f_table() {
  static const std::unique_ptr<LabTable> table = build_lab_table();
  return &table->v[0][0][0][0];
}

const ColourTables& colour_tables() {
  static const ColourTables tables = build_tables();
  return tables;
}

const char* to_string(ColourSpace space) {
  switch (space) {
    case ColourSpace::kNone: return "";
    case ColourSpace::kHsv: return "hsv";
    case ColourSpace::kHsvFull: return "hsv-full";
    case ColourSpace::kHls: return "hls";
    case ColourSpace::kLab: return "lab";
    case ColourSpace::kYCrCb: return "ycrcb";
    case ColourSpace::kGray: return "gray";
  }
  return "";
}

bool parse_colour_space(const std::string& name, ColourSpace* out) {
  for (ColourSpace s : {ColourSpace::kHsv, ColourSpace::kHsvFull, ColourSpace::kHls, ColourSpace::kLab,
                        ColourSpace::kYCrCb, ColourSpace::kGray}) {
    if (name == to_string(s)) {
      *out = s;
      return true;
    }
  }
  return false;
}

uint32_t colour_channels(ColourSpace space) {
  return space == ColourSpace::kNone ? 0 : space == ColourSpace::kGray ? 1 : 3;
}

std::vector<std::string> colour_channel_names(ColourSpace space, bool alpha) {
  std::vector<std::string> names;
  switch (space) {
    case ColourSpace::kHsv:
    case ColourSpace::kHsvFull: names = {"H", "S", "V"}; break;
    case ColourSpace::kHls: names = {"H", "L", "S"}; break;
    case ColourSpace::kLab: names = {"L", "a", "b"}; break;
    case ColourSpace::kYCrCb: names = {"Y", "Cr", "Cb"}; break;
    case ColourSpace::kGray: names = {"Gray"}; break;
    case ColourSpace::kNone: break;
  }
  if (alpha) names.push_back("A");
  return names;
}

void colour_channel_range(ColourSpace space, uint32_t channel, SampleType type, double* lo, double* hi) {
  const bool bytes = type == SampleType::kUint8;
  *lo = 0;
  *hi = bytes ? 256 : 1;
  if (channel >= colour_channels(space)) return;  // alpha
  switch (space) {
    case ColourSpace::kHsv:
      if (channel == 0) *hi = bytes ? 180 : 360;
      break;
    case ColourSpace::kHls:
      // OpenCV rounds HLS hue from float: 359.5 degrees and up give 180.
      if (channel == 0) *hi = bytes ? 181 : 360;
      break;
    case ColourSpace::kHsvFull:
      if (channel == 0 && !bytes) *hi = 360;
      break;
    case ColourSpace::kLab:
      if (!bytes) {
        *lo = channel == 0 ? 0 : -128;
        *hi = channel == 0 ? 100 : 128;
      }
      break;
    default: break;
  }
}

namespace {

template <ColourSpace S, uint32_t C>
void convert8(const uint8_t* src, uint64_t pixels, const uint32_t* rgb, const ColourTables& t, uint8_t* out) {
  constexpr uint32_t kOut = S == ColourSpace::kGray ? 1 : 3;
  constexpr uint32_t kStep = kOut + (C == 4 ? 1 : 0);
  const uint32_t order[3] = {rgb[0], rgb[1], rgb[2]};
  for (uint64_t i = 0; i < pixels; ++i) {
    convert_pixel8<S>(src + i * C, order, t, out + i * kStep);
    if constexpr (C == 4) out[i * kStep + kOut] = src[i * C + 3];
  }
}

// HSV in blocks: the pixels taken apart into one array per channel, the
// same integer steps as rgb_to_hsv8() over those arrays (which the
// compiler turns into vector code, the divisor lookups as gathers), put
// together again. 3.7 times a pixel at a time on AVX2.
constexpr uint32_t kBlock = 64;

// kOrder: 0 for R, G, B stored in that order, 1 for B, G, R (as OpenCV
// decodes), 2 for any other; known orders let the channel loads vectorize.
template <uint32_t C, int kOrder>
__attribute__((always_inline)) inline void convert_hsv8(const uint8_t* src, uint64_t pixels, const uint32_t* rgb, const int32_t* sdiv, const int32_t* hdiv,
                  int hue_range, uint8_t* out) {
  constexpr uint32_t kStep = 3 + (C == 4 ? 1 : 0);
  const uint32_t cr = kOrder == 0 ? 0 : kOrder == 1 ? 2 : rgb[0], cg = kOrder == 2 ? rgb[1] : 1,
                 cb = kOrder == 0 ? 2 : kOrder == 1 ? 0 : rgb[2];
  int32_t r[kBlock], g[kBlock], b[kBlock], h[kBlock], s[kBlock], v[kBlock];
  for (uint64_t at = 0; at < pixels; at += kBlock) {
    const uint32_t m = static_cast<uint32_t>(std::min<uint64_t>(kBlock, pixels - at));
    const uint8_t* p = src + at * C;
    for (uint32_t i = 0; i < m; ++i) {
      r[i] = p[i * C + cr];
      g[i] = p[i * C + cg];
      b[i] = p[i * C + cb];
    }
    // The last block's unused lanes are computed too (and dropped): zeros,
    // not whatever the arrays held.
    for (uint32_t i = m; i < kBlock; ++i) r[i] = g[i] = b[i] = 0;
    for (uint32_t i = 0; i < kBlock; ++i) {
      const int R = r[i], G = g[i], B = b[i];
      const int V = R > G ? (R > B ? R : B) : (G > B ? G : B);
      const int lo = R < G ? (R < B ? R : B) : (G < B ? G : B);
      const int diff = V - lo;
      const int vr = V == R ? -1 : 0, vg = V == G ? -1 : 0;
      int H = (vr & (G - B)) + (~vr & ((vg & (B - R + 2 * diff)) + (~vg & (R - G + 4 * diff))));
      H = (H * hdiv[diff & 255] + (1 << 11)) >> 12;
      H += H < 0 ? hue_range : 0;
      h[i] = H < 0 ? 0 : H > 255 ? 255 : H;
      s[i] = (diff * sdiv[V & 255] + (1 << 11)) >> 12;
      v[i] = V;
    }
    uint8_t* q = out + at * kStep;
    for (uint32_t i = 0; i < m; ++i) {
      q[i * kStep] = static_cast<uint8_t>(h[i]);
      q[i * kStep + 1] = static_cast<uint8_t>(s[i]);
      q[i * kStep + 2] = static_cast<uint8_t>(v[i]);
      if constexpr (C == 4) q[i * kStep + 3] = p[i * C + 3];
    }
  }
}

// The vector copies for AVX2 machines: target_clones reaches only the
// function it marks, so each block loop is its own non-template function.
__attribute__((target_clones("avx2,fma", "default"))) void convert_hsv8_3(const uint8_t* src, uint64_t pixels,
                                                                          const uint32_t* rgb, const int32_t* sdiv,
                                                                          const int32_t* hdiv, int range, uint8_t* out) {
  if (rgb[0] == 0 && rgb[1] == 1 && rgb[2] == 2)
    convert_hsv8<3, 0>(src, pixels, rgb, sdiv, hdiv, range, out);
  else if (rgb[0] == 2 && rgb[1] == 1 && rgb[2] == 0)
    convert_hsv8<3, 1>(src, pixels, rgb, sdiv, hdiv, range, out);
  else
    convert_hsv8<3, 2>(src, pixels, rgb, sdiv, hdiv, range, out);
}
__attribute__((target_clones("avx2,fma", "default"))) void convert_hsv8_4(const uint8_t* src, uint64_t pixels,
                                                                          const uint32_t* rgb, const int32_t* sdiv,
                                                                          const int32_t* hdiv, int range, uint8_t* out) {
  if (rgb[0] == 0 && rgb[1] == 1 && rgb[2] == 2)
    convert_hsv8<4, 0>(src, pixels, rgb, sdiv, hdiv, range, out);
  else if (rgb[0] == 2 && rgb[1] == 1 && rgb[2] == 0)
    convert_hsv8<4, 1>(src, pixels, rgb, sdiv, hdiv, range, out);
  else
    convert_hsv8<4, 2>(src, pixels, rgb, sdiv, hdiv, range, out);
}

template <ColourSpace S, uint32_t C>
void convert_f(const uint8_t* src, uint64_t pixels, const uint32_t* rgb, uint8_t* out) {
  const int16_t* lab = S == ColourSpace::kLab ? lab_f_table() : nullptr;
  constexpr uint32_t kOut = S == ColourSpace::kGray ? 1 : 3;
  constexpr uint32_t kStep = kOut + (C == 4 ? 1 : 0);
  for (uint64_t i = 0; i < pixels; ++i) {
    float px[C], o[kStep];
    std::memcpy(px, src + i * C * sizeof(float), sizeof(px));
    convert_rgb_f<S>(px[rgb[0]], px[rgb[1]], px[rgb[2]], lab, o);
    if constexpr (C == 4) o[kOut] = px[3];
    std::memcpy(out + i * kStep * sizeof(float), o, sizeof(o));
  }
}

}  // namespace

// A second copy for AVX2 machines (hardware fused multiply-add and wider
// registers), chosen at load time; this file is compiled without
// floating-point contraction, so both copies give the same bytes.
__attribute__((target_clones("avx2,fma", "default")))
void convert_pixels(ColourSpace space, SampleType type, const uint8_t* src, uint64_t pixels, uint32_t channels,
                    const uint32_t* rgb, uint8_t* out) {
  const ColourTables& t = colour_tables();
  with_colour_space(space, [&](auto s) {
    constexpr ColourSpace S = decltype(s)::value;
    if (type == SampleType::kUint8 && (S == ColourSpace::kHsv || S == ColourSpace::kHsvFull)) {
      const int32_t* hdiv = S == ColourSpace::kHsv ? t.hdiv180 : t.hdiv256;
      const int range = S == ColourSpace::kHsv ? 180 : 256;
      if (channels == 4)
        convert_hsv8_4(src, pixels, rgb, t.sdiv, hdiv, range, out);
      else
        convert_hsv8_3(src, pixels, rgb, t.sdiv, hdiv, range, out);
    } else if (type == SampleType::kUint8) {
      if (channels == 4)
        convert8<S, 4>(src, pixels, rgb, t, out);
      else
        convert8<S, 3>(src, pixels, rgb, t, out);
    } else {
      if (channels == 4)
        convert_f<S, 4>(src, pixels, rgb, out);
      else
        convert_f<S, 3>(src, pixels, rgb, out);
    }
  });
}

}  // namespace imgstat
