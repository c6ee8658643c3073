// A photo-like RGB uint8 test image for the benchmarks: each channel a
// smooth gradient with noise of +-10 (runs of equal values are short, as
// in photographs), from a fixed seed, so that every run measures the same
// pixels.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace imgstat::bench {

// Channel c at (x, y): 128 + amplitude * sin(x (c + 1) / x_period + c * phase)
//                              * cos(y / (y_period + c * y_period_step)).
struct Gradient {
  double amplitude = 90, x_period = 700, y_period = 500;
  double phase = 0, y_period_step = 0;
};

inline std::vector<uint8_t> photo_rgb(uint64_t w, uint64_t h, const Gradient& g) {
  std::vector<uint8_t> img(w * h * 3);
  std::mt19937 rng(5);
  for (uint64_t y = 0; y < h; ++y)
    for (uint64_t x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        img[(y * w + x) * 3 + c] = static_cast<uint8_t>(std::clamp<int>(
            static_cast<int>(128 + g.amplitude * std::sin((x * (c + 1)) / g.x_period + c * g.phase) *
                                       std::cos(y / (g.y_period + c * g.y_period_step))) +
                static_cast<int>(rng() % 21) - 10,
            0, 255));
  return img;
}

}  // namespace imgstat::bench
