// PNG files written chunk by chunk, so that tests control what encoders
// choose for them: every filter type on every row kind (chosen at random
// per row), the zlib window, how the data splits into IDAT chunks, extra
// chunks before or after the image data.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace imgstat::testing {

struct PngSpec {
  uint32_t width = 1, height = 1;
  int depth = 8;
  int colour = 2;              // PNG colour type: 0 gray, 2 RGB, 3 palette, 4 gray+alpha, 6 RGBA
  std::vector<uint8_t> rows;   // unfiltered, as stored: row_bytes() each, 16-bit big-endian
  std::string palette;         // PLTE body (RGB triples)
  std::string trns;            // tRNS body, when not empty
  std::vector<std::pair<std::string, std::string>> before, after;  // extra chunks around the image data
  int window_bits = 15;
  size_t idat_piece = 8192;    // IDAT chunk size
  int filters = 5;             // each row's filter drawn from 0 .. filters - 1 (2: None and Sub, as OpenCV's)

  uint32_t stored_channels() const { return colour == 2 ? 3 : colour == 4 ? 2 : colour == 6 ? 4 : 1; }
  size_t row_bytes() const { return (size_t{width} * stored_channels() * depth + 7) / 8; }
};

inline std::string png_chunk(const std::string& type, const std::string& body) {
  std::string c;
  const uint32_t n = static_cast<uint32_t>(body.size());
  for (int s = 24; s >= 0; s -= 8) c.push_back(static_cast<char>(n >> s));
  c += type + body;
  uint32_t crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(c.data() + 4), static_cast<uInt>(n + 4)));
  for (int s = 24; s >= 0; s -= 8) c.push_back(static_cast<char>(crc >> s));
  return c;
}

// Filtered image data: each row's filter type drawn from rng.
inline std::vector<uint8_t> png_filtered(const PngSpec& p, std::mt19937& rng) {
  const size_t n = p.row_bytes();
  const size_t bpp = std::max<size_t>(1, p.stored_channels() * p.depth / 8);
  std::vector<uint8_t> out;
  out.reserve(p.height * (n + 1));
  const std::vector<uint8_t> zeros(n, 0);
  for (uint32_t y = 0; y < p.height; ++y) {
    const uint8_t* x = p.rows.data() + y * n;
    const uint8_t* up = y ? x - n : zeros.data();
    const int f = static_cast<int>(rng() % static_cast<unsigned>(p.filters));
    out.push_back(static_cast<uint8_t>(f));
    for (size_t i = 0; i < n; ++i) {
      const int a = i >= bpp ? x[i - bpp] : 0, b = up[i], c = i >= bpp ? up[i - bpp] : 0;
      int pred = 0;
      switch (f) {
        case 1: pred = a; break;
        case 2: pred = b; break;
        case 3: pred = (a + b) / 2; break;
        case 4: {
          const int pa = std::abs(b - c), pb = std::abs(a - c), pc = std::abs(a + b - 2 * c);
          pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
        }
      }
      out.push_back(static_cast<uint8_t>(x[i] - pred));
    }
  }
  return out;
}

inline std::string write_png(const PngSpec& p, std::mt19937& rng) {
  const std::vector<uint8_t> raw = png_filtered(p, rng);
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, p.window_bits, 8, Z_DEFAULT_STRATEGY);
  std::string zdata(deflateBound(&z, raw.size()), '\0');
  z.next_in = const_cast<Bytef*>(raw.data());
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = reinterpret_cast<Bytef*>(zdata.data());
  z.avail_out = static_cast<uInt>(zdata.size());
  deflate(&z, Z_FINISH);
  zdata.resize(z.total_out);
  deflateEnd(&z);

  std::string ihdr;
  for (uint32_t v : {p.width, p.height})
    for (int s = 24; s >= 0; s -= 8) ihdr.push_back(static_cast<char>(v >> s));
  ihdr += {static_cast<char>(p.depth), static_cast<char>(p.colour), 0, 0, 0};
  std::string f = "\x89PNG\r\n\x1a\n";
  f += png_chunk("IHDR", ihdr);
  for (const auto& [type, body] : p.before) f += png_chunk(type, body);
  if (!p.palette.empty()) f += png_chunk("PLTE", p.palette);
  if (!p.trns.empty()) f += png_chunk("tRNS", p.trns);
  for (size_t at = 0; at < zdata.size() || at == 0; at += p.idat_piece) {
    f += png_chunk("IDAT", zdata.substr(at, p.idat_piece));
    if (zdata.empty()) break;
  }
  for (const auto& [type, body] : p.after) f += png_chunk(type, body);
  return f + png_chunk("IEND", "");
}

// Samples that are random but for runs of one value (so that a tRNS colour
// and repeated palette entries occur) and a smooth ramp (so that filters do
// real work).
inline PngSpec random_png(uint32_t width, uint32_t height, int depth, int colour, std::mt19937& rng) {
  PngSpec p;
  p.width = width;
  p.height = height;
  p.depth = depth;
  p.colour = colour;
  p.rows.resize(p.row_bytes() * height);
  for (size_t i = 0; i < p.rows.size(); ++i) {
    const uint32_t r = rng();
    p.rows[i] = (r & 3) == 0 ? static_cast<uint8_t>(i / 7) : (r & 3) == 1 ? 0x5a : static_cast<uint8_t>(r >> 8);
  }
  if (colour == 3) {
    const int entries = 1 << depth;
    for (int i = 0; i < entries * 3; ++i) p.palette.push_back(static_cast<char>(rng()));
  }
  return p;
}

}  // namespace imgstat::testing
