#include "support/alloc_watch.hpp"

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define IMGSTAT_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define IMGSTAT_ASAN 1
#endif

namespace {
std::atomic<int> g_watching{0};
std::atomic<uint64_t> g_largest{0};
std::atomic<bool> g_seen{false};

void saw(size_t bytes) {
  g_seen.store(true, std::memory_order_relaxed);
  if (g_watching.load(std::memory_order_relaxed) == 0) return;
  uint64_t now = g_largest.load(std::memory_order_relaxed);
  while (bytes > now && !g_largest.compare_exchange_weak(now, bytes, std::memory_order_relaxed)) {
  }
}
}  // namespace

#ifdef IMGSTAT_ASAN
#include <sanitizer/allocator_interface.h>
namespace {
void on_malloc(const volatile void*, size_t bytes) { saw(bytes); }
void on_free(const volatile void*) {}
const int g_hooked = __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
}  // namespace
#else
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void __libc_free(void*);
void* __libc_memalign(size_t, size_t);

void* malloc(size_t n) {
  saw(n);
  return __libc_malloc(n);
}
void* calloc(size_t k, size_t n) {
  saw(n && k > SIZE_MAX / n ? SIZE_MAX : k * n);
  return __libc_calloc(k, n);
}
void* realloc(void* p, size_t n) {
  saw(n);
  return __libc_realloc(p, n);
}
void free(void* p) { __libc_free(p); }
void* memalign(size_t a, size_t n) {
  saw(n);
  return __libc_memalign(a, n);
}
void* aligned_alloc(size_t a, size_t n) {
  saw(n);
  return __libc_memalign(a, n);
}
int posix_memalign(void** out, size_t a, size_t n) {
  saw(n);
  if (a % sizeof(void*) != 0 || (a & (a - 1)) != 0) return EINVAL;
  void* p = __libc_memalign(a, n);
  if (!p && n) return ENOMEM;
  *out = p;
  return 0;
}
void* valloc(size_t n) {
  saw(n);
  return __libc_memalign(4096, n);
}
void* pvalloc(size_t n) {
  saw(n);
  return __libc_memalign(4096, (n + 4095) & ~size_t{4095});
}
}
#endif

namespace imgstat::testing {

AllocWatch::AllocWatch() {
  g_largest.store(0);
  g_watching.fetch_add(1);
}
AllocWatch::~AllocWatch() { g_watching.fetch_sub(1); }
uint64_t AllocWatch::largest() const { return g_largest.load(); }

bool AllocWatch::works() {
  void* volatile p = std::malloc(24);
  std::free(p);
  return g_seen.load();
}

}  // namespace imgstat::testing
