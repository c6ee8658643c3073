#include "decode/large_buffers.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <new>
#include <opencv2/core.hpp>
#include <unordered_map>
#include <vector>

namespace imgstat {
namespace {

// Under AddressSanitizer every buffer stays malloc's, so that its
// redzones catch a decoder writing past an image (the fuzz targets).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCached = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kCached = false;
#else
constexpr bool kCached = true;
#endif
#else
constexpr bool kCached = true;
#endif

using Clock = std::chrono::steady_clock;
constexpr size_t kHugePage = size_t{2} << 20;

class LargeBufferAllocator final : public cv::MatAllocator {
 public:
  cv::UMatData* allocate(int dims, const int* sizes, int type, void* data0, size_t* step, cv::AccessFlag,
                         cv::UMatUsageFlags) const override {
    // As OpenCV's StdMatAllocator lays a matrix out.
    size_t total = CV_ELEM_SIZE(type);
    for (int i = dims - 1; i >= 0; --i) {
      if (step) {
        if (data0 && step[i] != cv::Mat::AUTO_STEP) {
          CV_Assert(total <= step[i]);
          total = step[i];
        } else {
          step[i] = total;
        }
      }
      total *= static_cast<size_t>(sizes[i]);
    }
    uint8_t* data = static_cast<uint8_t*>(data0);
    if (!data) data = kCached && total >= kLargeBufferBytes ? take(total) : static_cast<uint8_t*>(cv::fastMalloc(total));
    auto* u = new cv::UMatData(this);
    u->data = u->origdata = data;
    u->size = total;
    if (data0) u->flags |= cv::UMatData::USER_ALLOCATED;
    return u;
  }

  bool allocate(cv::UMatData* u, cv::AccessFlag, cv::UMatUsageFlags) const override { return u != nullptr; }

  void deallocate(cv::UMatData* u) const override {
    if (!u) return;
    CV_Assert(u->urefcount == 0 && u->refcount == 0);
    if (!(u->flags & cv::UMatData::USER_ALLOCATED)) {
      if (!give_back(u->origdata)) cv::fastFree(u->origdata);
      u->origdata = nullptr;
    }
    delete u;
  }

  void set_idle_bytes(uint64_t bytes) {
    std::vector<Idle> freed;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      max_idle_ = bytes;
      trim(Clock::now(), freed);
    }
    unmap(freed);
  }

  LargeBufferUsage usage() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return LargeBufferUsage{idle_bytes_, reused_, mapped_};
  }

  void release_idle() {
    std::vector<Idle> freed;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      freed.swap(idle_);
      idle_bytes_ = 0;
    }
    unmap(freed);
  }

 private:
  struct Idle {
    uint8_t* data;
    size_t capacity;
    Clock::time_point since;
  };

  uint8_t* take(size_t bytes) const {
    const size_t capacity = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    std::vector<Idle> freed;
    uint8_t* found = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // The smallest idle buffer that holds it and is not over twice its
      // size (a small image does not pin a huge one).
      auto best = idle_.end();
      for (auto it = idle_.begin(); it != idle_.end(); ++it)
        if (it->capacity >= capacity && it->capacity <= 2 * capacity &&
            (best == idle_.end() || it->capacity < best->capacity))
          best = it;
      if (best != idle_.end()) {
        found = best->data;
        idle_bytes_ -= best->capacity;
        idle_.erase(best);
        ++reused_;
      }
      trim(Clock::now(), freed);
    }
    unmap(freed);
    if (found) return found;
    void* p = mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) CV_Error(cv::Error::StsNoMem, "could not map " + std::to_string(capacity) + " bytes");
#ifdef MADV_HUGEPAGE
    madvise(p, capacity, MADV_HUGEPAGE);  // advice: refused where THP is off, and then ignored
#endif
    std::lock_guard<std::mutex> lock(mutex_);
    mapped_sizes_[p] = capacity;
    ++mapped_;
    return static_cast<uint8_t*>(p);
  }

  // False where `data` is not one of ours (OpenCV's fastMalloc'd).
  bool give_back(void* data) const {
    std::vector<Idle> freed;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto it = mapped_sizes_.find(data);
      if (it == mapped_sizes_.end()) return false;
      const size_t capacity = it->second;
      idle_.push_back(Idle{static_cast<uint8_t*>(data), capacity, Clock::now()});
      idle_bytes_ += capacity;
      trim(Clock::now(), freed);
    }
    unmap(freed);
    return true;
  }

  // Under the lock: the oldest idle buffers past the cap or past their
  // time, taken out for unmap().
  void trim(Clock::time_point now, std::vector<Idle>& freed) const {
    const auto old = now - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kIdleLargeBufferSeconds));
    std::sort(idle_.begin(), idle_.end(), [](const Idle& a, const Idle& b) { return a.since < b.since; });
    size_t drop = 0;
    uint64_t bytes = idle_bytes_;
    while (drop < idle_.size() && (bytes > max_idle_ || idle_[drop].since < old)) bytes -= idle_[drop++].capacity;
    freed.insert(freed.end(), idle_.begin(), idle_.begin() + static_cast<std::ptrdiff_t>(drop));
    idle_.erase(idle_.begin(), idle_.begin() + static_cast<std::ptrdiff_t>(drop));
    idle_bytes_ = bytes;
  }

  void unmap(const std::vector<Idle>& freed) const {
    if (freed.empty()) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const Idle& i : freed) mapped_sizes_.erase(i.data);
    }
    for (const Idle& i : freed) munmap(i.data, i.capacity);
  }

  mutable std::mutex mutex_;
  mutable std::vector<Idle> idle_;
  mutable std::unordered_map<void*, size_t> mapped_sizes_;
  mutable uint64_t idle_bytes_ = 0, reused_ = 0, mapped_ = 0;
  uint64_t max_idle_ = 0;
};

LargeBufferAllocator& instance() {
  static auto* a = new LargeBufferAllocator;  // never destroyed: matrices may outlive static destructors
  return *a;
}

}  // namespace

void use_large_buffer_cache(uint64_t idle_bytes) {
  instance().set_idle_bytes(idle_bytes);
  cv::Mat::setDefaultAllocator(&instance());
}

cv::MatAllocator* large_buffer_allocator() { return &instance(); }

LargeBufferUsage large_buffer_usage() { return instance().usage(); }

bool large_buffers_cached() { return kCached; }

void release_idle_large_buffers() { instance().release_idle(); }

}  // namespace imgstat
