// OS/2 1.x BMPs (12-byte BITMAPCOREHEADER), which OpenCV 4.6 decodes wrongly.
#include <cstring>

#include "decode/decode.hpp"

namespace imgstat {
namespace {

uint32_t le16(const uint8_t* p) { return p[0] | (p[1] << 8); }
uint32_t le32(const uint8_t* p) { return le16(p) | (le16(p + 2) << 16); }

struct Rgb {
  uint8_t r, g, b;
};

// As OpenCV does for palette images: a palette of grays gives one channel.
cv::Mat expand_palette(const std::vector<uint8_t>& indices, int w, int h, const std::vector<Rgb>& palette) {
  bool gray = true;
  for (const Rgb& c : palette) gray = gray && c.r == c.g && c.g == c.b;
  cv::Mat m(h, w, gray ? CV_8UC1 : CV_8UC3);
  for (int y = 0; y < h; ++y) {
    uint8_t* row = m.ptr<uint8_t>(y);
    for (int x = 0; x < w; ++x) {
      const size_t i = indices[static_cast<size_t>(y) * w + x];
      const Rgb c = i < palette.size() ? palette[i] : Rgb{0, 0, 0};
      if (gray) {
        row[x] = c.r;
      } else {
        row[3 * x] = c.b;
        row[3 * x + 1] = c.g;
        row[3 * x + 2] = c.r;
      }
    }
  }
  return m;
}

}  // namespace

// OS/2 1.x BMPs (12-byte BITMAPCOREHEADER) store palette entries in 3 bytes;
// OpenCV 4.6 reads them as 4 and returns wrong colours.
cv::Mat decode_bmp_core(const uint8_t* d, size_t n, const DecodeOptions& options) {
  if (n < 26 || le32(d + 14) != 12) return {};
  const int w = static_cast<int>(le16(d + 18)), h = static_cast<int>(le16(d + 20));
  const uint32_t bpp = le16(d + 24), offset = le32(d + 10);
  if (bpp != 1 && bpp != 4 && bpp != 8) return {};
  if (w == 0 || h == 0) invalid_data("BMP: zero width or height");
  if (static_cast<uint64_t>(h) > options.max_pixels / static_cast<uint64_t>(w))
    fail(ErrorCode::kResourceExhausted, "BMP of " + std::to_string(w) + "x" + std::to_string(h) +
                                            " pixels is over the limit of " + std::to_string(options.max_pixels));
  if (offset < 26 || offset > n) invalid_data("BMP: pixel data offset outside the file");
  const size_t entries = std::min<size_t>(size_t{1} << bpp, (offset - 26) / 3);
  std::vector<Rgb> palette;
  for (size_t i = 0; i < entries; ++i) palette.push_back({d[26 + 3 * i + 2], d[26 + 3 * i + 1], d[26 + 3 * i]});
  const size_t row_bytes = ((static_cast<size_t>(w) * bpp + 31) / 32) * 4;
  if (offset + row_bytes * h > n) invalid_data("BMP: file ends before its pixel data does (truncated)");
  std::vector<uint8_t> indices(static_cast<size_t>(w) * h);
  for (int y = 0; y < h; ++y) {
    const uint8_t* row = d + offset + row_bytes * (h - 1 - y);  // bottom-up
    for (int x = 0; x < w; ++x) {
      const size_t bit = static_cast<size_t>(x) * bpp;
      const uint32_t byte = row[bit / 8];
      indices[static_cast<size_t>(y) * w + x] =
          static_cast<uint8_t>((byte >> (8 - bpp - bit % 8)) & ((1u << bpp) - 1));
    }
  }
  return expand_palette(indices, w, h, palette);
}

}  // namespace imgstat
