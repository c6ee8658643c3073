#include "core/malloc_tuning.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

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

void limit_malloc_arenas(unsigned worker_threads) {
#if defined(__GLIBC__)
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables && std::strstr(tunables, "glibc.malloc.arena_max")) return;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  mallopt(M_ARENA_MAX, static_cast<int>(std::min(8 * cores, 2 * std::max(1u, worker_threads) + 4)));  // 8 a core: glibc's own
#else
  (void)worker_threads;
#endif
}

}  // namespace imgstat
