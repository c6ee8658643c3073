// The pieces of decode_png, for its files only: the header libpng reads,
// the walk over the image data's chunks, the conversion of rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "decode/inflate/parallel_inflate.hpp"

namespace imgstat::png {

// PNG's colour types, as png.h numbers them.
constexpr uint32_t kGray = 0, kRgb = 2, kPalette = 3, kGrayAlpha = 4, kRgbAlpha = 6;

inline uint32_t be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

inline uint32_t stored_channels(uint32_t colour_type) {
  switch (colour_type) {
    case kGrayAlpha: return 2;
    case kRgb: return 3;
    case kRgbAlpha: return 4;
  }
  return 1;  // gray, palette
}

// What the band decoder reads itself; the rest is libpng's, through OpenCV.
inline bool streamable(uint32_t bit_depth, uint32_t colour_type, bool interlaced) {
  if (interlaced) return false;  // Adam7's passes: libpng
  if (colour_type == kPalette) return bit_depth <= 8;
  return bit_depth == 8 || bit_depth == 16;  // gray under 8 bits: libpng's scaling
}

// What libpng read before the image data, copied out of its structs.
struct Header {
  uint32_t width = 0, height = 0;
  int bit_depth = 0, colour_type = 0;
  bool interlaced = false;
  size_t image_data_at = 0;  // the first IDAT chunk's offset
  int palette_size = 0;
  uint8_t palette[256][4] = {};  // index -> R,G,B,A (past the palette: 0,0,0; past tRNS: opaque)
  int trans_count = 0;
  bool trans_colour = false;  // a tRNS colour (gray or RGB images)
  uint16_t trans_rgb[3] = {0, 0, 0};
};

// png_read_info, as OpenCV's PngDecoder::readHeader calls it: false where
// libpng refuses the header (OpenCV will say why). Its warnings are kept
// as the default handler would print them, distinct, at most 8. What
// arrived throws is thrown again here.
bool read_header(const uint8_t* data, size_t size, const std::function<uint64_t(uint64_t)>& arrived,
                 std::vector<std::string>* warnings, Header* header);

// Rows converted as libpng's transformations that OpenCV asks for: palette
// to RGB or RGBA, tRNS to alpha for RGB and palette images, gray+alpha to
// RGBA, 16-bit samples to native order.
struct Converter {
  explicit Converter(const Header& h);
  void row(const uint8_t* in, uint8_t* out) const;

  uint32_t width;
  int bit_depth, colour_type;
  uint32_t out_channels;
  const uint8_t (*lut)[4];  // the header's palette
  bool trans = false;       // RGB tRNS: the colour made transparent
  uint16_t trans_rgb[3] = {0, 0, 0};
};

// The image data: the IDAT chunks from the first on, walked one at a time,
// each chunk's CRC checked, as far as a file still arriving has come
// (arrived waits for it). Whole, a chunk is a piece once its CRC is right.
// Arriving, a chunk's data is given in pieces as it comes (a file of one
// large IDAT is inflated while it arrives) and its CRC checked at its end,
// before the walk goes on: a wrong one ends the walk there, and the decode
// gives up rows it may have given. The walk ends at IEND, or bad where
// libpng would refuse or warn: a CRC, a chunk other than IDAT, IEND with
// data, a length past the file's end.
class ImageData {
 public:
  ImageData(const uint8_t* data, size_t size, size_t at, const std::function<uint64_t(uint64_t)>& arrived)
      : data_(data), size_(size), at_(at), arrived_(arrived) {}
  // One more piece of IDAT data into pieces(); false at the end of the walk.
  bool walk();
  const std::vector<StreamPiece>& pieces() const { return pieces_; }
  size_t offset() const { return at_; }  // where the walk is
  bool bad() const { return bad_; }

 private:
  bool give_part();
  bool stop(bool bad) {
    over_ = true;
    bad_ = bad;
    return false;
  }
  const uint8_t* data_;
  size_t size_;
  size_t at_;
  const std::function<uint64_t(uint64_t)>& arrived_;
  std::vector<StreamPiece> pieces_;
  uint64_t left_ = 0;      // arriving: the chunk's data not yet given
  bool in_chunk_ = false;  // arriving: its CRC not yet checked
  uint32_t crc_ = 0;
  bool over_ = false, bad_ = false;
};

}  // namespace imgstat::png
