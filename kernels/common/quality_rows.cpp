#include "common/quality_rows.hpp"

#include "common/quality.hpp"

namespace imgstat {

const QualityRows* quality_rows_avx2(uint32_t channels, const uint32_t* rgb);
void laplacian_inner_avx2(const uint8_t* up, const uint8_t* mid, const uint8_t* down, uint64_t x0, uint64_t x1,
                          LaplacianRowSums* sums);

namespace {
#include "common/quality_rows_impl.hpp"

static_assert(kBucketShift == kBrightnessShift, "the loops' brightness buckets are quality.hpp's");

bool avx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
}  // namespace

const QualityRows* quality_rows(uint32_t channels, const uint32_t* rgb) {
  return avx2() ? quality_rows_avx2(channels, rgb) : rows_for(channels, rgb);
}

void laplacian_row(const uint8_t* up, const uint8_t* mid, const uint8_t* down, uint64_t w, LaplacianRowSums* s) {
  if (w == 0) return;
  auto at = [&](uint64_t x, int32_t left, int32_t right) {
    const int32_t v = mid[x];
    const int32_t lap = left + right + up[x] + down[x] - 4 * v;
    s->grey += v, s->grey_sq += v * v, s->lap += lap, s->lap_sq += lap * lap;
  };
  if (w == 1) {  // the pixel itself on both sides
    at(0, mid[0], mid[0]);
    return;
  }
  at(0, mid[1], mid[1]);
  if (w > 2) {
    if (avx2()) laplacian_inner_avx2(up, mid, down, 1, w - 1, s);
    else laplacian_inner(up, mid, down, 1, w - 1, s);
  }
  at(w - 1, mid[w - 2], mid[w - 2]);
}

}  // namespace imgstat
