#include "cpu/float_passes.hpp"

#include <algorithm>

namespace imgstat::cpu {

std::vector<GroupRuns> group_runs(const std::vector<Piece>& pieces, uint64_t pixel_bytes) {
  struct Run {
    uint64_t group;
    Piece piece;
  };
  std::vector<Run> runs;
  for (const Piece& pc : pieces)
    for (uint64_t r = 0; r < pc.rows; ++r) {
      const uint8_t* p = pc.base + r * pc.stride;
      uint64_t first = pc.first + r * pc.width, n = pc.pixels;
      while (n > 0) {
        const uint64_t group = first / kFloatGroupPixels;
        const uint64_t m = std::min(n, (group + 1) * kFloatGroupPixels - first);
        runs.push_back(Run{group, Piece{p, 1, 0, m, first, m}});
        p += m * pixel_bytes;
        first += m;
        n -= m;
      }
    }
  std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.piece.first < b.piece.first; });
  std::vector<GroupRuns> out;
  for (const Run& r : runs) {
    if (out.empty() || out.back().group != r.group) out.push_back(GroupRuns{r.group, {}});
    out.back().runs.push_back(r.piece);
  }
  return out;
}

}  // namespace imgstat::cpu
