// The 8-bit colour measures' per-row loops (quality.cpp, hashes.cpp), for
// 3- and 4-channel images whose R, G and B lie in the order RGB or BGR:
// with the channels known at compile time the rows become vector code, and
// an AVX2 copy is chosen at run time where the CPU has it. Integer
// arithmetic only: each loop's answer is the scalar formula's, whatever
// the vector width.
#pragma once

#include <cstdint>

namespace imgstat {

// Sums of one piece of a row, of rg = R - G and yb2 = R + G - 2 B.
struct ColourRowSums {
  int64_t rg = 0, rg_sq = 0, yb2 = 0, yb2_sq = 0;
  bool unequal = false;  // some pixel with R, G and B not all equal
};

// Sums of the Laplacian (0 1 0 / 1 -4 1 / 0 1 0, BORDER_REFLECT_101) of one
// grey row, and of the row itself.
struct LaplacianRowSums {
  int64_t grey = 0, grey_sq = 0, lap = 0, lap_sq = 0;
};

// Pixels a call of colour() or keys() takes at most.
constexpr uint64_t kColourRowPiece = 1024;

struct QualityRows {
  // OpenCV's RGB2GRAY of w pixels: (9798 R + 19235 G + 3735 B + 16384) >> 15.
  void (*grey)(const uint8_t* pixels, uint64_t w, uint8_t* out);
  // PIL's convert("L"): (19595 R + 38470 G + 7471 B + 0x8000) >> 16.
  void (*pil_l)(const uint8_t* pixels, uint64_t w, uint8_t* out);
  // R, G, B of each pixel, three bytes a pixel (PIL's RGB).
  void (*pil_rgb)(const uint8_t* pixels, uint64_t w, uint8_t* out);
  // Adds n <= kColourRowPiece pixels' rg and yb2 sums to sums, and writes
  // each pixel's cleanvision brightness key >> kBrightnessShift to keys.
  void (*colour)(const uint8_t* pixels, uint64_t n, ColourRowSums* sums, uint16_t* keys);
  // Only the keys.
  void (*keys)(const uint8_t* pixels, uint64_t n, uint16_t* keys);
};

// The loops for `channels` channels with R, G, B at rgb[0..2]; null where
// they are not 3 or 4 channels in RGB or BGR order (the generic loops then).
const QualityRows* quality_rows(uint32_t channels, const uint32_t* rgb);

// Adds the Laplacian sums of grey row `mid` (w pixels; up and down the rows
// above and below, reflected at the image's edges by the caller).
void laplacian_row(const uint8_t* up, const uint8_t* mid, const uint8_t* down, uint64_t w, LaplacianRowSums* sums);

}  // namespace imgstat
