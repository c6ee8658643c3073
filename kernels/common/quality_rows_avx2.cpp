// quality_rows_impl.hpp compiled with -mavx2 (CMakeLists.txt), chosen at
// run time by quality_rows.cpp.
#include "common/quality_rows.hpp"

namespace imgstat {
namespace {
#include "common/quality_rows_impl.hpp"
}  // namespace

const QualityRows* quality_rows_avx2(uint32_t channels, const uint32_t* rgb) { return rows_for(channels, rgb); }

void laplacian_inner_avx2(const uint8_t* up, const uint8_t* mid, const uint8_t* down, uint64_t x0, uint64_t x1,
                          LaplacianRowSums* sums) {
  laplacian_inner(up, mid, down, x0, x1, sums);
}

}  // namespace imgstat
