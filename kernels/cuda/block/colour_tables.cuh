// A block's copy of the colour tables (HSV divisors, Lab gamma and cube
// root: under 10 KiB) in shared memory, where every thread's lookups with
// data-dependent indices cost no more than a register spill.
#pragma once

#include <cstdint>

#include "common/colour.hpp"

namespace imgstat::cuda {

__device__ __forceinline__ void load_colour_tables(ColourTables* shared, const ColourTables* global) {
  const uint32_t* from = reinterpret_cast<const uint32_t*>(global);
  uint32_t* to = reinterpret_cast<uint32_t*>(shared);
  for (uint32_t i = threadIdx.x; i < sizeof(ColourTables) / 4; i += blockDim.x) to[i] = __ldg(from + i);
  __syncthreads();
}

}  // namespace imgstat::cuda
