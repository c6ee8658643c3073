#include "decode/allocation_ceiling.hpp"

#include <cstdlib>
#include <new>

namespace {

// Constant-initialized: safe in allocations made before main or during a
// thread's exit.
thread_local size_t t_ceiling = 0;
thread_local size_t t_refused = 0;

void* allocate(size_t bytes, size_t alignment) {
  if (t_ceiling != 0 && bytes > t_ceiling) {
    t_refused = bytes;
    throw std::bad_alloc();
  }
  if (bytes == 0) bytes = 1;
  if (alignment < sizeof(void*)) alignment = sizeof(void*);
  for (;;) {
    void* p = nullptr;
    if (alignment <= alignof(std::max_align_t)) p = std::malloc(bytes);
    else if (posix_memalign(&p, alignment, bytes) != 0) p = nullptr;
    if (p) return p;
    const std::new_handler handler = std::get_new_handler();
    if (!handler) throw std::bad_alloc();
    handler();
  }
}

void* allocate_or_null(size_t bytes, size_t alignment) noexcept {
  try {
    return allocate(bytes, alignment);
  } catch (...) {
    return nullptr;
  }
}

}  // namespace

namespace imgstat {

size_t exchange_allocation_ceiling(size_t bytes) {
  const size_t before = t_ceiling;
  t_ceiling = bytes;
  t_refused = 0;
  return before;
}

size_t last_refused_allocation() { return t_refused; }

}  // namespace imgstat

void* operator new(size_t n) { return allocate(n, 0); }
void* operator new[](size_t n) { return allocate(n, 0); }
void* operator new(size_t n, const std::nothrow_t&) noexcept { return allocate_or_null(n, 0); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return allocate_or_null(n, 0); }
void* operator new(size_t n, std::align_val_t a) { return allocate(n, static_cast<size_t>(a)); }
void* operator new[](size_t n, std::align_val_t a) { return allocate(n, static_cast<size_t>(a)); }
void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate_or_null(n, static_cast<size_t>(a));
}
void* operator new[](size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate_or_null(n, static_cast<size_t>(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { std::free(p); }
