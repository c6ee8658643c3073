#include <cstring>

#include "decode/png/internal.hpp"

namespace imgstat::png {

Converter::Converter(const Header& h)
    : width(h.width), bit_depth(h.bit_depth), colour_type(h.colour_type), out_channels(0), lut(h.palette) {
  switch (h.colour_type) {
    case kGray: out_channels = 1; break;  // tRNS ignored, as OpenCV's decode does
    case kGrayAlpha:
    case kRgbAlpha: out_channels = 4; break;
    case kRgb:
      trans = h.trans_count > 0 && h.trans_colour;
      if (trans) std::memcpy(trans_rgb, h.trans_rgb, sizeof trans_rgb);
      out_channels = trans ? 4 : 3;
      break;
    case kPalette: out_channels = h.trans_count > 0 ? 4 : 3; break;
  }
}

void Converter::row(const uint8_t* in, uint8_t* out) const {
  const uint32_t w = width;
  if (colour_type == kPalette) {
    const int per_byte = 8 / bit_depth, mask = (1 << bit_depth) - 1;
    for (uint32_t x = 0; x < w; ++x) {
      const uint32_t idx =
          bit_depth == 8 ? in[x] : (in[x / per_byte] >> (8 - bit_depth * (x % per_byte + 1))) & mask;
      std::memcpy(out + size_t{x} * out_channels, lut[idx], out_channels);
    }
    return;
  }
  if (bit_depth == 8) {
    switch (colour_type) {
      case kGrayAlpha:
        for (uint32_t x = 0; x < w; ++x) {
          const uint8_t g = in[2 * x], a = in[2 * x + 1];
          uint8_t* o = out + 4 * size_t{x};
          o[0] = o[1] = o[2] = g;
          o[3] = a;
        }
        return;
      case kRgb:
        if (trans) {
          for (uint32_t x = 0; x < w; ++x) {
            const uint8_t* p = in + 3 * size_t{x};
            uint8_t* o = out + 4 * size_t{x};
            o[0] = p[0], o[1] = p[1], o[2] = p[2];
            o[3] = p[0] == (trans_rgb[0] & 0xff) && p[1] == (trans_rgb[1] & 0xff) && p[2] == (trans_rgb[2] & 0xff)
                       ? 0 : 255;
          }
          return;
        }
        break;
    }
    std::memcpy(out, in, size_t{w} * out_channels);
    return;
  }
  // 16-bit: big-endian in the file, native (little-endian) out.
  auto sample = [](const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); };
  auto* o = reinterpret_cast<uint16_t*>(out);
  switch (colour_type) {
    case kGrayAlpha:
      for (uint32_t x = 0; x < w; ++x) {
        const uint16_t g = sample(in + 4 * size_t{x}), a = sample(in + 4 * size_t{x} + 2);
        o[4 * size_t{x}] = o[4 * size_t{x} + 1] = o[4 * size_t{x} + 2] = g;
        o[4 * size_t{x} + 3] = a;
      }
      return;
    case kRgb:
      if (trans) {
        for (uint32_t x = 0; x < w; ++x) {
          const uint16_t r = sample(in + 6 * size_t{x}), g = sample(in + 6 * size_t{x} + 2),
                         b = sample(in + 6 * size_t{x} + 4);
          uint16_t* p = o + 4 * size_t{x};
          p[0] = r, p[1] = g, p[2] = b;
          p[3] = r == trans_rgb[0] && g == trans_rgb[1] && b == trans_rgb[2] ? 0 : 65535;
        }
        return;
      }
      break;
  }
  const size_t samples = size_t{w} * out_channels;
  for (size_t i = 0; i < samples; ++i) o[i] = sample(in + 2 * i);
}

}  // namespace imgstat::png
