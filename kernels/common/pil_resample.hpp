// Pillow's (9.4) Image.resize of 8-bit images, to the bit: its
// coefficients normalized in double, then summed in fixed point of 22 bits,
// a horizontal pass over the rows the vertical one reads, then the vertical
// pass (Resample.c). What cleanvision's blurriness (bicubic) and
// imagehash's perceptual hash (Lanczos) shrink images with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "imgstat/types.hpp"

namespace imgstat {

enum class PilFilter : uint8_t { kBicubic, kLanczos };

// A PIL image of `bands` interleaved 8-bit channels.
struct PilImage {
  int w = 0, h = 0, bands = 1;
  std::vector<uint8_t> px;
  uint8_t& at(int x, int y, int b) { return px[(static_cast<size_t>(y) * w + x) * bands + b]; }
  uint8_t at(int x, int y, int b) const { return px[(static_cast<size_t>(y) * w + x) * bands + b]; }
};

// One pass's coefficients: for output i, taps k[i * ksize ..] over the
// inputs from bounds[2 i] on, bounds[2 i + 1] of them; sums in fixed point
// of kPilPrecisionBits.
constexpr int kPilPrecisionBits = 32 - 8 - 2;
struct PilCoeffs {
  int ksize = 0;
  std::vector<int> bounds;
  std::vector<int32_t> k;
};

// Image.resize's plan from w x h to xsize x ysize: the horizontal pass over
// input rows first_row .. first_row + rows (the rows the vertical pass
// reads), then the vertical pass over them. Kept per thread for the last
// sizes asked (a dataset's images share them).
struct PilPlan {
  int w = 0, h = 0, xsize = 0, ysize = 0;
  PilCoeffs horizontal, vertical;
  int first_row = 0, rows = 0;
};
const PilPlan& pil_plan(int w, int h, int xsize, int ysize, PilFilter filter);

// Image.resize((xsize, ysize), filter) of the whole image; no premultiplying
// here (callers with alpha premultiply as Image.resize does).
PilImage pil_resize(const PilImage& in, int xsize, int ysize, PilFilter filter);

// PIL's RGB(A) to L: ITU-R 601-2 in 16-bit fixed point.
IMGSTAT_HD uint8_t pil_l(uint32_t r, uint32_t g, uint32_t b) {
  return static_cast<uint8_t>((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
}

}  // namespace imgstat
