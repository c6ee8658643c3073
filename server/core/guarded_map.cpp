#include "guarded_map.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>

namespace imgstat {

namespace {

// The mappings the handler knows, in slots it reads without locks (a signal
// handler may take none): a slot's range is set before it is published by
// `live`, and unpublished before the mapping goes.
constexpr int kSlots = 256;
struct Slot {
  std::atomic<bool> live{false};
  std::atomic<uintptr_t> begin{0}, end{0};
  std::atomic<bool> cut{false};
};
Slot g_slots[kSlots];
struct sigaction g_previous;
std::once_flag g_installed;

void on_sigbus(int signo, siginfo_t* info, void* context) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& s : g_slots) {
    if (!s.live.load(std::memory_order_acquire)) continue;
    const uintptr_t begin = s.begin.load(std::memory_order_relaxed), end = s.end.load(std::memory_order_relaxed);
    if (at < begin || at >= end) continue;
    // Zero pages from the faulting page to the mapping's end: the read goes
    // on (and finds zeros), and the call is failed once it is done.
    const uintptr_t page = at & ~static_cast<uintptr_t>(sysconf(_SC_PAGESIZE) - 1);
    s.cut.store(true, std::memory_order_relaxed);
    if (mmap(reinterpret_cast<void*>(page), end - page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) !=
        MAP_FAILED)
      return;
    break;
  }
  // Not ours (or not mendable): whoever handled SIGBUS before, else the default.
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) return g_previous.sa_sigaction(signo, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN && g_previous.sa_handler) {
    return g_previous.sa_handler(signo);
  }
  signal(SIGBUS, SIG_DFL);  // the faulting access is made again, and ends the process as SIGBUS does
}

void install() {
  struct sigaction a = {};
  a.sa_sigaction = on_sigbus;
  a.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&a.sa_mask);
  sigaction(SIGBUS, &a, &g_previous);
}

uint64_t file_size(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

}  // namespace

std::unique_ptr<GuardedMap> GuardedMap::map(int fd, uint64_t offset, uint64_t size) {
  if (fd < 0 || size == 0) return nullptr;
  std::call_once(g_installed, install);
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t start = offset / page * page;
  std::unique_ptr<GuardedMap> m(new GuardedMap);
  m->length_ = offset - start + size;
  // A free slot's begin is 0; claiming it sets 1 (not yet live).
  int slot = -1;
  for (int i = 0; i < kSlots && slot < 0; ++i) {
    uintptr_t free_slot = 0;
    if (g_slots[i].begin.compare_exchange_strong(free_slot, 1)) slot = i;
  }
  if (slot < 0) return nullptr;
  void* p = mmap(nullptr, m->length_, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(start));
  if (p == MAP_FAILED) {
    g_slots[slot].begin.store(0);
    return nullptr;
  }
  m->fd_ = fd;
  m->slot_ = slot;
  m->base_ = static_cast<uint8_t*>(p);
  m->data_ = m->base_ + (offset - start);
  m->size_ = size;
  m->end_in_file_ = offset + size;
  Slot& s = g_slots[slot];
  s.cut.store(false, std::memory_order_relaxed);
  s.begin.store(reinterpret_cast<uintptr_t>(m->base_), std::memory_order_relaxed);
  s.end.store(reinterpret_cast<uintptr_t>(m->base_) + m->length_, std::memory_order_relaxed);
  s.live.store(true, std::memory_order_release);
  return m;
}

GuardedMap::~GuardedMap() {
  Slot& s = g_slots[slot_];
  s.live.store(false, std::memory_order_release);
  munmap(base_, length_);
  s.end.store(0, std::memory_order_relaxed);
  s.begin.store(0, std::memory_order_release);  // free for the next mapping
}

void GuardedMap::release(uint64_t begin, uint64_t end) const {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t skew = static_cast<uint64_t>(data_ - base_);
  begin = (begin + skew + page - 1) / page * page;
  end = std::min(end + skew, length_) / page * page;
  if (end > begin) madvise(base_ + begin, end - begin, MADV_DONTNEED);
}

bool GuardedMap::cut() const {
  return g_slots[slot_].cut.load(std::memory_order_acquire) || file_size(fd_) < end_in_file_;
}

}  // namespace imgstat
