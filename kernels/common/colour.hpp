// The colour conversions themselves, one function per space and sample
// type, shared by the CPU engine and CUDA device code so that both give the
// same bytes. Uint8 follows OpenCV 4.6's cvtColor to the bit: the integer
// paths (HSV, Lab, YCrCb, gray) with its fixed-point constants and tables,
// HLS in float32 as its vector code does it on AVX2 machines (with one
// fused multiply-add, which the scalar fallback of OpenCV lacks). The
// tables are built once on the host (colour_tables()) and copied to the
// GPU's shared memory by the kernels that use them.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "imgstat/colour.hpp"
#include "imgstat/types.hpp"

namespace imgstat {

constexpr int kLabCbrtTableSize = 3072;  // 256 * 3 / 2 << gamma shift 3

struct ColourTables {
  int32_t sdiv[256];     // HSV saturation: round((255 << 12) / v)
  int32_t hdiv180[256];  // HSV hue: round((180 << 12) / (6 diff))
  int32_t hdiv256[256];
  uint16_t gamma[256];   // sRGB to linear, 255 << 3 scale
  uint16_t cbrt[kLabCbrtTableSize];  // Lab's f(t), 1 << 15 scale
  // Lab's RGB to XYZ / white point in 1 << 12 fixed point: rows X, Y, Z,
  // columns R, G, B.
  int32_t lab[9];
};

// Built once, then read by every conversion.
const ColourTables& colour_tables();

namespace colour_detail {

IMGSTAT_HD uint8_t sat_u8(int v) { return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v); }
// OpenCV's saturate_cast<uchar>(float): round half to even, then clamp.
// On the host, adding and taking away 1.5 * 2^23 rounds |v| < 2^22 to
// even in the default rounding mode without a library call.
IMGSTAT_HD uint8_t sat_u8_round(float v) {
#if defined(__CUDA_ARCH__)
  return sat_u8(__float2int_rn(v));
#else
  if (!(v > -4194304.0f && v < 4194304.0f)) return v > 0 ? 255 : 0;
  constexpr float kBig = 12582912.0f;  // IEEE arithmetic: (v + kBig) - kBig is not folded
  const float r = (v + kBig) - kBig;
  return sat_u8(static_cast<int>(r));
#endif
}
IMGSTAT_HD int descale(int x, int n) { return (x + (1 << (n - 1))) >> n; }
IMGSTAT_HD float fma_f(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
// Plain IEEE float operations: nvcc would otherwise contract a * b + c
// into one fused operation where OpenCV rounds twice.
IMGSTAT_HD float mul_f(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
IMGSTAT_HD float add_f(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
IMGSTAT_HD float sub_f(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
IMGSTAT_HD float div_f(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
IMGSTAT_HD float max_f(float a, float b) { return a > b ? a : b; }
IMGSTAT_HD float min_f(float a, float b) { return a < b ? a : b; }

constexpr float kFltEpsilon = 1.19209290e-07f;

}  // namespace colour_detail

// 8-bit HSV; hue_range 180 (kHsv) or 256 (kHsvFull).
IMGSTAT_HD void rgb_to_hsv8(int r, int g, int b, const int32_t* sdiv, const int32_t* hdiv, int hue_range,
                            uint8_t* out) {
  using namespace colour_detail;
  const int v = r > g ? (r > b ? r : b) : (g > b ? g : b);
  const int vmin = r < g ? (r < b ? r : b) : (g < b ? g : b);
  const int diff = v - vmin;
  const int s = (diff * sdiv[v] + (1 << 11)) >> 12;
  // Masks rather than branches: hues of noise are unpredictable.
  const int vr = v == r ? -1 : 0, vg = v == g ? -1 : 0;
  int h = (vr & (g - b)) + (~vr & ((vg & (b - r + 2 * diff)) + (~vg & (r - g + 4 * diff))));
  h = (h * hdiv[diff] + (1 << 11)) >> 12;
  if (h < 0) h += hue_range;
  out[0] = sat_u8(h);
  out[1] = sat_u8(s);
  out[2] = static_cast<uint8_t>(v);
}

// Float HSV as OpenCV's vector code computes it: H in [0, 360), S and V as
// the input's scale.
IMGSTAT_HD void rgb_to_hsv_f(float r, float g, float b, float* out) {
  using namespace colour_detail;
  const float vmax = max_f(max_f(r, g), b), vmin = min_f(min_f(r, g), b);
  const float diff = sub_f(vmax, vmin);
  const float s = div_f(diff, add_f(fabsf(vmax), kFltEpsilon));
  const float h0 = vmax == r ? sub_f(g, b) : vmax == g ? sub_f(b, r) : sub_f(r, g);
  const float part = vmax == r ? (g < b ? 360.0f : 0.0f) : vmax == g ? 120.0f : 240.0f;
  const float inv = div_f(60.0f, add_f(diff, kFltEpsilon));
  out[0] = fma_f(h0, inv, part);
  out[1] = s;
  out[2] = vmax;
}

// Float HLS (vector form): H in [0, 360) times hue_scale, L and S in [0, 1]
// for inputs in [0, 1].
IMGSTAT_HD void rgb_to_hls_f(float r, float g, float b, float hue_scale, float* out) {
  using namespace colour_detail;
  const float vmax = max_f(max_f(r, g), b), vmin = min_f(min_f(r, g), b);
  const float diff = sub_f(vmax, vmin), sum = add_f(vmax, vmin);
  const float l = mul_f(sum, 0.5f);
  float h = 0, s = 0;
  if (diff > kFltEpsilon) {
    s = div_f(diff, l < 0.5f ? sum : sub_f(2.0f, sum));
    const float h0 = vmax == r ? sub_f(g, b) : vmax == g ? sub_f(b, r) : sub_f(r, g);
    const float part = vmax == r ? (g < b ? 360.0f : 0.0f) : vmax == g ? 120.0f : 240.0f;
    h = mul_f(fma_f(h0, div_f(60.0f, diff), part), hue_scale);
  }
  out[0] = h;
  out[1] = l;
  out[2] = s;
}

IMGSTAT_HD void rgb_to_hls8(int r, int g, int b, int hue_range, uint8_t* out) {
  using namespace colour_detail;
  constexpr float kInv255 = 1.0f / 255.0f;
  float hls[3];
  rgb_to_hls_f(mul_f(static_cast<float>(r), kInv255), mul_f(static_cast<float>(g), kInv255),
               mul_f(static_cast<float>(b), kInv255), static_cast<float>(hue_range) / 360.0f, hls);
  out[0] = sat_u8_round(hls[0]);
  out[1] = sat_u8_round(mul_f(hls[1], 255.0f));
  out[2] = sat_u8_round(mul_f(hls[2], 255.0f));
}

IMGSTAT_HD void rgb_to_lab8(int r, int g, int b, const uint16_t* gamma, const uint16_t* cbrt, const int32_t* c,
                            uint8_t* out) {
  using namespace colour_detail;
  const int R = gamma[r], G = gamma[g], B = gamma[b];
  const int fx = cbrt[descale(R * c[0] + G * c[1] + B * c[2], 12)];
  const int fy = cbrt[descale(R * c[3] + G * c[4] + B * c[5], 12)];
  const int fz = cbrt[descale(R * c[6] + G * c[7] + B * c[8], 12)];
  constexpr int kLScale = (116 * 255 + 50) / 100;
  constexpr int kLShift = -((16 * 255 * (1 << 15) + 50) / 100);
  out[0] = sat_u8(descale(kLScale * fy + kLShift, 15));
  out[1] = sat_u8(descale(500 * (fx - fy) + 128 * (1 << 15), 15));
  out[2] = sat_u8(descale(200 * (fy - fz) + 128 * (1 << 15), 15));
}

IMGSTAT_HD void rgb_to_ycrcb8(int r, int g, int b, uint8_t* out) {
  using namespace colour_detail;
  const int y = descale(r * 4899 + g * 9617 + b * 1868, 14);
  out[0] = sat_u8(y);
  out[1] = sat_u8(descale((r - y) * 11682 + (128 << 14), 14));
  out[2] = sat_u8(descale((b - y) * 9241 + (128 << 14), 14));
}

IMGSTAT_HD float rgb_to_gray_f(float r, float g, float b) {
  using namespace colour_detail;
  return add_f(add_f(mul_f(r, 0.299f), mul_f(g, 0.587f)), mul_f(b, 0.114f));
}

IMGSTAT_HD void rgb_to_ycrcb_f(float r, float g, float b, float* out) {
  using namespace colour_detail;
  const float y = rgb_to_gray_f(r, g, b);
  out[0] = y;
  out[1] = add_f(mul_f(sub_f(r, y), 0.713f), 0.5f);
  out[2] = add_f(mul_f(sub_f(b, y), 0.564f), 0.5f);
}

// Gray has its own 15-bit weights (0.299, 0.587, 0.114 summing to 1 << 15).
IMGSTAT_HD uint8_t rgb_to_gray8(int r, int g, int b) {
  return static_cast<uint8_t>(colour_detail::descale(r * 9798 + g * 19235 + b * 3735, 15));
}

// R, G, B into the space's channels at out.
template <ColourSpace S>
IMGSTAT_HD void convert_rgb8(int r, int g, int b, const ColourTables& t, uint8_t* out) {
  if constexpr (S == ColourSpace::kHsv) rgb_to_hsv8(r, g, b, t.sdiv, t.hdiv180, 180, out);
  else if constexpr (S == ColourSpace::kHsvFull) rgb_to_hsv8(r, g, b, t.sdiv, t.hdiv256, 256, out);
  else if constexpr (S == ColourSpace::kHls) rgb_to_hls8(r, g, b, 180, out);
  else if constexpr (S == ColourSpace::kLab) rgb_to_lab8(r, g, b, t.gamma, t.cbrt, t.lab, out);
  else if constexpr (S == ColourSpace::kYCrCb) rgb_to_ycrcb8(r, g, b, out);
  else out[0] = rgb_to_gray8(r, g, b);
}

// One pixel (R, G, B at rgb[0..2]) into the space's channels at out.
template <ColourSpace S>
IMGSTAT_HD void convert_pixel8(const uint8_t* px, const uint32_t* rgb, const ColourTables& t, uint8_t* out) {
  convert_rgb8<S>(px[rgb[0]], px[rgb[1]], px[rgb[2]], t, out);
}

// Float Lab as OpenCV 4.6 computes it for sRGB: not its formula but a
// 33^3 table of the formula (14-bit fixed point, lab_f_table()) interpolated
// trilinearly from the inputs clipped to [0, 1] and rounded to 14 bits;
// integer steps, then two exact float operations, so the same on the GPU.
constexpr int kLabGrid = 33;
IMGSTAT_HD void rgb_to_lab_f(float r, float g, float b, const int16_t* table, float* out) {
  using namespace colour_detail;
  auto fixed = [](float v) {
    v = v > 0.0f ? (v < 1.0f ? v : 1.0f) : 0.0f;  // NaN as 0, on either engine
    const float scaled = v * 16384.0f;          // exact: a power of two
#if defined(__CUDA_ARCH__)
    const int q = __float2int_rn(scaled);
#else
    const int q = static_cast<int>(std::nearbyint(scaled));
#endif
    return q;
  };
  const int c[3] = {fixed(b), fixed(g), fixed(r)};
  int at[3], w[3];
  for (int k = 0; k < 3; ++k) {
    at[k] = c[k] >> 9;        // the cell: 32 of them
    w[k] = (c[k] >> 5) & 15;  // where in it: 16 steps
  }
  for (int ch = 0; ch < 3; ++ch) {
    int64_t sum = 0;
    for (int corner = 0; corner < 8; ++corner) {
      const int dp = corner >> 2 & 1, dq = corner >> 1 & 1, dr = corner & 1;
      const int weight = (dp ? w[0] : 16 - w[0]) * (dq ? w[1] : 16 - w[1]) * (dr ? w[2] : 16 - w[2]);
      if (weight == 0) continue;
      const int p = at[0] + dp < 32 ? at[0] + dp : 32, q = at[1] + dq < 32 ? at[1] + dq : 32,
                rr = at[2] + dr < 32 ? at[2] + dr : 32;
      sum += int64_t{weight} * table[((p * kLabGrid + q) * kLabGrid + rr) * 3 + ch];
    }
    const float v = static_cast<float>(static_cast<int>((sum + (1 << 11)) >> 12));
    out[ch] = ch == 0 ? div_f(mul_f(v, 100.0f), 16384.0f) : sub_f(div_f(mul_f(v, 256.0f), 16384.0f), 128.0f);
  }
}

// OpenCV's 33^3 table for float Lab: entries (B, G, R) grid point major,
// L, a, b each. Built once on the host.
const int16_t* lab_f_table();

// R, G, B (float32) into the space's channels at out; `lab` is
// lab_f_table() or its device copy.
template <ColourSpace S>
IMGSTAT_HD void convert_rgb_f(float r, float g, float b, const int16_t* lab, float* out) {
  if constexpr (S == ColourSpace::kHsv || S == ColourSpace::kHsvFull) rgb_to_hsv_f(r, g, b, out);
  else if constexpr (S == ColourSpace::kHls) rgb_to_hls_f(r, g, b, 1.0f, out);
  else if constexpr (S == ColourSpace::kLab) rgb_to_lab_f(r, g, b, lab, out);
  else if constexpr (S == ColourSpace::kYCrCb) rgb_to_ycrcb_f(r, g, b, out);
  else out[0] = rgb_to_gray_f(r, g, b);
}

// Calls f(std::integral_constant<ColourSpace, S>) for the space at hand, so
// that loops over pixels are compiled once per space.
template <class F>
IMGSTAT_HD void with_colour_space(ColourSpace space, F&& f) {
  switch (space) {
    case ColourSpace::kHsv: f(std::integral_constant<ColourSpace, ColourSpace::kHsv>{}); break;
    case ColourSpace::kHsvFull: f(std::integral_constant<ColourSpace, ColourSpace::kHsvFull>{}); break;
    case ColourSpace::kHls: f(std::integral_constant<ColourSpace, ColourSpace::kHls>{}); break;
    case ColourSpace::kLab: f(std::integral_constant<ColourSpace, ColourSpace::kLab>{}); break;
    case ColourSpace::kYCrCb: f(std::integral_constant<ColourSpace, ColourSpace::kYCrCb>{}); break;
    case ColourSpace::kGray: f(std::integral_constant<ColourSpace, ColourSpace::kGray>{}); break;
    default: break;
  }
}

// Host: `pixels` whole pixels of `channels` (3 or 4) uint8 or float32
// samples at src (any alignment) into the space's channels at out, alpha
// (channel 3) appended.
void convert_pixels(ColourSpace space, SampleType type, const uint8_t* src, uint64_t pixels, uint32_t channels,
                    const uint32_t* rgb, uint8_t* out);

}  // namespace imgstat
