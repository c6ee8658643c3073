// XXH3's AVX2 loop (about twice its SSE2 one), compiled apart with -mavx2
// and chosen at run time by hashes.cpp. Only xxhash's own static C code is
// here: no inline C++ function compiled for AVX2 that the linker could
// pick for callers on machines without it.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace imgstat {

void xxh3_128_update_avx2(XXH3_state_t* state, const void* data, size_t bytes) {
  XXH3_128bits_update(state, data, bytes);
}

}  // namespace imgstat
