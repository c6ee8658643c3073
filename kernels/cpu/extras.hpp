// Per-thread counting for the statistics that need each sample's place or
// its whole pixel: where min and max first occur, and the set of colours.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common/partial.hpp"
#include "common/pieces.hpp"

namespace imgstat::cpu {

template <class T, uint32_t C>
class ExtrasCounter {
 public:
  ExtrasCounter(bool positions, bool colors) : positions_(positions) {
    if (colors) colors_.assign(color_words(C), 0);
  }

  void add(const Piece& pc) {
    for (uint64_t r = 0; r < pc.rows; ++r) add_run(pc.base + r * pc.stride, pc.pixels, pc.first + r * pc.width);
  }

  const Extremes& extremes(uint32_t c) const { return extremes_[c]; }
  const std::vector<uint64_t>& colors() const { return colors_; }

 private:
  void add_run(const uint8_t* p, uint64_t pixels, uint64_t first) {
    if (positions_)
      for (uint32_t c = 0; c < C; ++c) scan(p, pixels, first, c);
    if (!colors_.empty()) {
      for (uint64_t i = 0; i < pixels; ++i) {
        const uint32_t key = color_key(p + i * C, C);
        colors_[key >> 6] |= uint64_t{1} << (key & 63);
      }
    }
  }

  // Strictly smaller (larger) replaces, so a run keeps its first extreme.
  void scan(const uint8_t* p, uint64_t pixels, uint64_t first, uint32_t c) {
    Extremes run;
    for (uint64_t i = 0; i < pixels; ++i) {
      T raw;
      std::memcpy(&raw, p + (i * C + c) * sizeof(T), sizeof(T));
      const double v = static_cast<double>(raw);
      if constexpr (std::is_floating_point_v<T>)
        if (!std::isfinite(v)) continue;
      if (!run.any) {
        run = Extremes{true, v, v, first + i, first + i};
        continue;
      }
      if (v < run.min) {
        run.min = v;
        run.min_at = first + i;
      } else if (v > run.max) {
        run.max = v;
        run.max_at = first + i;
      }
    }
    merge(extremes_[c], run);
  }

  bool positions_;
  Extremes extremes_[C];
  std::vector<uint64_t> colors_;
};

}  // namespace imgstat::cpu
