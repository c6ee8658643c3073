#include "decode/facts.hpp"

#include <algorithm>
#include <cstring>

namespace imgstat {
namespace {

uint32_t be16(const uint8_t* p) { return uint32_t{p[0]} << 8 | p[1]; }
uint32_t be32(const uint8_t* p) { return be16(p) << 16 | be16(p + 2); }
uint32_t le16(const uint8_t* p) { return uint32_t{p[1]} << 8 | p[0]; }
uint32_t le32(const uint8_t* p) { return le16(p + 2) << 16 | le16(p); }

bool starts_with(const uint8_t* p, size_t n, const char* s, size_t len) { return n >= len && std::memcmp(p, s, len) == 0; }

// The JPEG standard's example luminance table (ITU-T T.81 Annex K, K.1), in
// zigzag order as DQT segments store it: what the IJG library scales by
// quality, so a file's table tells the quality it was written at.
constexpr uint16_t kStdLuma[64] = {16, 11, 12, 14, 12, 10, 16, 14, 13, 14, 18, 17, 16, 19, 24, 40,
                                   26, 24, 22, 22, 24, 49, 35, 37, 29, 40, 58, 51, 61, 60, 57, 51,
                                   56, 55, 64, 72, 92, 78, 64, 68, 87, 69, 55, 56, 80, 109, 81, 87,
                                   95, 98, 103, 104, 103, 62, 77, 113, 121, 112, 100, 120, 92, 101, 103, 99};

void read_png(const uint8_t* p, size_t n, Facts& f, const std::function<void(uint64_t, uint64_t)>& release) {
  size_t at = 8, read = 0;
  while (at + 8 <= n) {
    if (release && at - read >= (size_t{4} << 20)) release(read, at), read = at;
    const uint32_t len = be32(p + at);
    const uint8_t* type = p + at + 4;
    const uint8_t* body = p + at + 8;
    if (len > n - at - 8) break;  // a chunk past the end: stop, keep what was read
    if (std::memcmp(type, "IHDR", 4) == 0 && len >= 13) {
      f.bit_depth = body[8];
      switch (body[9]) {
        case 0: f.color_type = "gray"; break;
        case 2: f.color_type = "rgb"; break;
        case 3: f.color_type = "palette"; break;
        case 4: f.color_type = "gray+alpha"; break;
        case 6: f.color_type = "rgba"; break;
      }
      f.progressive = body[12] == 1;
    } else if (std::memcmp(type, "PLTE", 4) == 0) {
      f.palette_size = len / 3;
    } else if (std::memcmp(type, "iCCP", 4) == 0) {
      f.icc_profile = true;
    } else if (std::memcmp(type, "eXIf", 4) == 0) {
      f.exif_orientation = exif_orientation(body, len);
    } else if (std::memcmp(type, "acTL", 4) == 0 && len >= 8) {
      f.frames = be32(body);
    } else if (std::memcmp(type, "fcTL", 4) == 0 && len >= 26) {  // delay_num / delay_den seconds (den 0: 100)
      const uint32_t num = be16(body + 20), den = be16(body + 22);
      f.duration_ms += uint64_t{num} * 1000 / (den ? den : 100);
    } else if (std::memcmp(type, "IEND", 4) == 0) {
      break;
    }
    at += size_t{len} + 12;
  }
}

void read_jpeg(const uint8_t* p, size_t n, Facts& f) {
  uint16_t luma[64] = {};
  bool have_luma = false;
  uint32_t components = 0, h0 = 0, v0 = 0;
  bool other_components_1x1 = true;
  int adobe_transform = -1;
  size_t at = 2;
  while (at + 4 <= n) {
    if (p[at] != 0xff) break;
    const uint8_t marker = p[at + 1];
    if (marker == 0xff) {  // fill byte
      ++at;
      continue;
    }
    if (marker == 0xd8 || marker == 0x01 || (marker >= 0xd0 && marker <= 0xd7)) {
      at += 2;
      continue;
    }
    const uint32_t len = be16(p + at + 2);
    if (len < 2 || len > n - at - 2) break;
    const uint8_t* body = p + at + 4;
    const size_t blen = len - 2;
    if (marker == 0xda || marker == 0xd9) break;  // scan data or the end: no more headers
    if (marker == 0xe1 && starts_with(body, blen, "Exif\0\0", 6)) {
      f.exif_orientation = exif_orientation(body + 6, blen - 6);
    } else if (marker == 0xe2 && starts_with(body, blen, "ICC_PROFILE\0", 12)) {
      f.icc_profile = true;
    } else if (marker == 0xee && starts_with(body, blen, "Adobe", 5) && blen >= 12) {
      adobe_transform = body[11];
    } else if (marker == 0xdb) {  // quantization tables: Pq/Tq, then 64 values of 8 or 16 bits
      size_t t = 0;
      while (t < blen) {
        const uint32_t precision = body[t] >> 4, id = body[t] & 15;
        const size_t bytes = precision ? 128 : 64;
        if (bytes > blen - t - 1) break;
        if (id == 0) {
          for (int i = 0; i < 64; ++i) luma[i] = static_cast<uint16_t>(precision ? be16(body + t + 1 + 2 * i) : body[t + 1 + i]);
          have_luma = true;
        }
        t += 1 + bytes;
      }
    } else if (marker >= 0xc0 && marker <= 0xcf && marker != 0xc4 && marker != 0xc8 && marker != 0xcc) {
      if (blen >= 6) {
        f.bit_depth = body[0];
        components = body[5];
        f.progressive = marker == 0xc2 || marker == 0xc6 || marker == 0xca || marker == 0xce;
        for (uint32_t c = 0; c < components && 6 + 3 * c + 2 < blen; ++c) {
          const uint32_t h = body[6 + 3 * c + 1] >> 4, v = body[6 + 3 * c + 1] & 15;
          if (c == 0) {
            h0 = h;
            v0 = v;
          } else if (c < 3 && (h != 1 || v != 1)) {
            other_components_1x1 = false;
          }
        }
      }
    }
    at += 2 + len;
  }
  switch (components) {
    case 1: f.color_type = "gray"; break;
    case 3: f.color_type = adobe_transform == 0 ? "rgb" : "ycbcr"; break;
    case 4: f.color_type = adobe_transform == 2 ? "ycck" : "cmyk"; break;
  }
  if (components >= 3 && other_components_1x1) {
    if (h0 == 1 && v0 == 1) f.chroma_subsampling = "4:4:4";
    if (h0 == 2 && v0 == 1) f.chroma_subsampling = "4:2:2";
    if (h0 == 2 && v0 == 2) f.chroma_subsampling = "4:2:0";
    if (h0 == 1 && v0 == 2) f.chroma_subsampling = "4:4:0";
    if (h0 == 4 && v0 == 1) f.chroma_subsampling = "4:1:1";
  }
  if (have_luma) f.jpeg_quality = estimate_jpeg_quality(luma);
}

// RIFF WebP: the VP8X header's flags, ICCP and EXIF chunks, and the coded
// bit stream's kind (VP8L lossless keeps alpha).
void read_webp(const uint8_t* p, size_t n, Facts& f) {
  f.bit_depth = 8;
  size_t at = 12;
  while (at + 8 <= n) {
    const uint32_t len = le32(p + at + 4);
    if (len > n - at - 8) break;
    const uint8_t* body = p + at + 8;
    if (std::memcmp(p + at, "ICCP", 4) == 0) f.icc_profile = true;
    if (std::memcmp(p + at, "EXIF", 4) == 0) {  // some writers keep JPEG's "Exif\0\0" prefix
      const size_t skip = starts_with(body, len, "Exif\0\0", 6) ? 6 : 0;
      f.exif_orientation = exif_orientation(body + skip, len - skip);
    }
    if (std::memcmp(p + at, "VP8X", 4) == 0 && len >= 1) f.color_type = body[0] & 0x10 ? "rgba" : "rgb";
    if (std::memcmp(p + at, "VP8 ", 4) == 0 && f.color_type.empty()) f.color_type = "rgb";
    if (std::memcmp(p + at, "ANMF", 4) == 0) {
      ++f.frames;
      if (len >= 15) f.duration_ms += body[12] | body[13] << 8 | uint32_t{body[14]} << 16;
    }
    if (std::memcmp(p + at, "VP8L", 4) == 0 && f.color_type.empty() && len >= 5)
      f.color_type = (body[4] & 0x10) ? "rgba" : "rgb";  // the alpha_is_used bit
    at += 8 + size_t{len} + (len & 1);
  }
}

// GIF: its image descriptors, walked block by block (extensions and image
// data are runs of sub-blocks), as far as the bytes go.
void read_gif(const uint8_t* p, size_t n, Facts& f) {
  if (n < 13) return;
  size_t at = 13 + (p[10] & 0x80 ? size_t{3} << ((p[10] & 7) + 1) : 0);  // the global colour table
  auto skip_blocks = [&]() {
    while (at < n && p[at] != 0) at += size_t{p[at]} + 1;
    ++at;
  };
  while (at < n) {
    if (p[at] == 0x3b) break;  // the trailer
    if (p[at] == 0x21) {       // an extension: its label, then sub-blocks
      // A graphic control block: flags, the delay in hundredths of a second.
      if (at + 6 <= n && p[at + 1] == 0xf9 && p[at + 2] >= 4) f.duration_ms += (p[at + 4] | p[at + 5] << 8) * 10u;
      at += 2;
      skip_blocks();
    } else if (p[at] == 0x2c) {  // an image: its descriptor, local table, LZW code size, data
      if (at + 10 > n) break;
      const uint8_t flags = p[at + 9];
      at += 10 + (flags & 0x80 ? size_t{3} << ((flags & 7) + 1) : 0) + 1;
      skip_blocks();
      ++f.frames;
    } else {
      break;  // damage: keep what was counted
    }
  }
}

}  // namespace

uint32_t exif_orientation(const uint8_t* p, size_t n) {
  if (n < 8) return 0;
  const bool little = std::memcmp(p, "II*\0", 4) == 0;
  if (!little && std::memcmp(p, "MM\0*", 4) != 0) return 0;
  auto u16 = [&](size_t at) { return little ? le16(p + at) : be16(p + at); };
  auto u32 = [&](size_t at) { return little ? le32(p + at) : be32(p + at); };
  const uint32_t ifd = u32(4);
  if (ifd > n - 2 || ifd < 8) return 0;
  const uint32_t entries = u16(ifd);
  for (uint32_t i = 0; i < entries; ++i) {
    const size_t e = size_t{ifd} + 2 + size_t{i} * 12;
    if (e + 12 > n) return 0;
    if (u16(e) == 0x0112 && u16(e + 2) == 3) {  // Orientation, SHORT: the value sits in the entry
      const uint32_t v = u16(e + 8);
      return v >= 1 && v <= 8 ? v : 0;
    }
  }
  return 0;
}

uint32_t estimate_jpeg_quality(const uint16_t* luma) {
  uint32_t best = 0;
  uint64_t best_error = UINT64_MAX;
  for (uint32_t q = 1; q <= 100; ++q) {
    const uint32_t scale = q < 50 ? 5000 / q : 200 - 2 * q;  // jpeg_quality_scaling()
    uint64_t error = 0;
    for (int i = 0; i < 64; ++i) {
      const uint32_t want = std::clamp<uint32_t>((kStdLuma[i] * scale + 50) / 100, 1, 255);
      error += static_cast<uint64_t>(std::abs(static_cast<int>(want) - static_cast<int>(luma[i])));
    }
    if (error < best_error) {
      best_error = error;
      best = q;
    }
  }
  // Tables of other encoders (Photoshop, cameras) are not scaled IJG ones:
  // no estimate when the nearest is off by more than 2 per value on average.
  return best_error <= 128 ? best : 0;
}

Facts read_facts(const uint8_t* data, size_t size, const std::function<void(uint64_t, uint64_t)>& release) {
  Facts f;
  if (starts_with(data, size, "\x89PNG\r\n\x1a\n", 8)) read_png(data, size, f, release);
  else if (size >= 4 && data[0] == 0xff && data[1] == 0xd8) read_jpeg(data, size, f);
  else if (size >= 12 && std::memcmp(data, "RIFF", 4) == 0 && std::memcmp(data + 8, "WEBP", 4) == 0) read_webp(data, size, f);
  else if (starts_with(data, size, "GIF8", 4)) read_gif(data, size, f);
  return f;
}

}  // namespace imgstat
