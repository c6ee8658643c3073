#include "core/malloc_tuning.hpp"

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace imgstat {

void tune_malloc_for_large_messages() {
#if defined(__GLIBC__)
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables && std::strstr(tunables, "glibc.malloc.")) return;
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMallocMmapThreshold));
  mallopt(M_TRIM_THRESHOLD, static_cast<int>(kMallocTrimThreshold));
#endif
}

}  // namespace imgstat
