// Rec. 709 luminance as one more channel. Integer samples: on offsets from
// the type's lowest value, Y = (13933 R + 46871 G + 4732 B + 32768) >> 16,
// the weights 0.2126, 0.7152 and 0.0722 in 16-bit fixed point (they sum to
// 65536, so Y stays in the type's range), the result a sample of the same
// type. Float samples: Y = 0.2126 R + 0.7152 G + 0.0722 B in float64, fused
// in a fixed order, as a float64 channel. Alpha plays no part.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "imgstat/engine.hpp"
#include "imgstat/types.hpp"

namespace imgstat {

constexpr uint32_t kLumaR = 13933, kLumaG = 46871, kLumaB = 4732;

IMGSTAT_HD uint32_t luma_offset(uint32_t r, uint32_t g, uint32_t b) {
  return static_cast<uint32_t>((uint64_t{kLumaR} * r + uint64_t{kLumaG} * g + uint64_t{kLumaB} * b + 32768) >> 16);
}
IMGSTAT_HD double luma_float(double r, double g, double b) { return fma(0.0722, b, fma(0.7152, g, 0.2126 * r)); }

// Whether a request for luminance gets one: 3 or 4 channels.
inline bool has_luminance(const Layout& layout, const StatsRequest& request) {
  return request.luminance && layout.channels >= 3 && request.rgb[0] < 3 && request.rgb[1] < 3 && request.rgb[2] < 3;
}

// The luminance plane of a 3 or 4 channel image, packed; rgb: the channels
// holding R, G and B.
std::vector<uint8_t> luminance_plane(const ImageView& image, const uint32_t* rgb);

// What the rest of a request asks of the luminance channel: its own
// statistics, not unique colours, a summary or another luminance.
StatsRequest luminance_request(const StatsRequest& request);

// Sets result.luminance from the engine's analysis of the plane, when asked.
void add_luminance(Engine& engine, const ImageView& image, const StatsRequest& request, Result& result);

}  // namespace imgstat
