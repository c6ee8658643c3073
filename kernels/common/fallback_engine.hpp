// A GPU engine backed by the CPU engine: an image the GPU cannot take (out
// of its memory, a failed launch, a lost device) is computed on the CPU, the
// Result says "cpu", and the caller is told why. Bad input is not retried:
// the CPU would refuse it the same way.
//
// A stream that fails part way carries on on the CPU from its last
// checkpoint: every checkpoint_bytes of pixels the GPU's accumulators are
// brought to the host and the pixels since are kept, so the bytes held per
// stream stay small whatever its size. Floats binned over their own range
// cannot be checkpointed (the bins need every sample's min and max first);
// such streams keep all their pixels, within retain_limit for the whole
// engine, and beyond it a fault fails the call as before.
//
// A stream that pauses (its client has not sent more) checkpoints and hands
// its buffer of kept pixels back, so a stalled stream holds none; buffers
// given back wait for the next stream up to spare_bytes, their pages
// already touched (a buffer over glibc's mmap threshold, new for every
// chunk of a slow client, costs a page fault a page).
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "imgstat/engine.hpp"

namespace imgstat {

// Kept pixels: grown without zeroing what is about to be copied over.
template <class T>
struct UninitializedAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) > 0) ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using KeptBuffer = std::vector<uint8_t, UninitializedAllocator<uint8_t>>;

struct FallbackTuning {
  uint64_t checkpoint_bytes = uint64_t{32} << 20;
  uint64_t retain_limit = uint64_t{1} << 30;
  uint64_t spare_bytes = uint64_t{128} << 20;  // kept-pixel buffers waiting for a stream
};

class FallbackEngine final : public Engine {
 public:
  FallbackEngine(std::unique_ptr<Engine> primary, std::unique_ptr<Engine> backup,
                 std::function<void(const std::string&)> on_fallback, FallbackTuning tuning = {});

  EngineInfo info() const override;
  Result analyze(const ImageView& image, const StatsRequest& request) override;
  Result analyze_parts(const ImageView& image, const Parts& parts, const StatsRequest& request) override;
  // The CPU starts over from the first byte: nothing read is kept.
  Result analyze_read(const Layout& layout, const StatsRequest& request, const ByteReader& read) override;
  std::unique_ptr<StreamAnalysis> open_stream(const Layout& layout, const StatsRequest& request) override;
  bool takes_device_images() const override { return !lost_ && primary_->takes_device_images(); }
  bool measures_on_device(const Layout& layout, const StatsRequest& request) const override {
    return !lost_ && primary_->measures_on_device(layout, request);
  }
  EngineUsage usage() const override;
  Result analyze_device(const DeviceImageView& image, const StatsRequest& request) override;
  Result analyze_parts_device(const DeviceImageView& image, const Parts& parts, const StatsRequest& request) override;
  std::shared_ptr<void> pin_host_memory(const void* data, size_t bytes) override {
    return lost_ ? nullptr : primary_->pin_host_memory(data, bytes);
  }
  std::shared_ptr<void> open_ipc_memory(const std::string& handle, uint64_t bytes) override {
    if (lost_) fail(ErrorCode::kUnavailable, "the GPU was lost: GPU memory cannot be read");
    return primary_->open_ipc_memory(handle, bytes);
  }

  std::shared_ptr<Placement> placement() const override { return primary_->placement(); }

  // A call may end on either engine. A stream's pixels kept for the CPU
  // should the GPU fail are bounded apart, by FallbackTuning::retain_limit.
  uint64_t working_bytes(const Layout& layout, const StatsRequest& request, const Parts* parts) const override {
    return std::max(primary_->working_bytes(layout, request, parts), backup_->working_bytes(layout, request, parts));
  }
  uint64_t stream_bytes(const Layout& layout, const StatsRequest& request) const override {
    return primary_->stream_bytes(layout, request);
  }

  // For FallbackStream: what the primary's failure means, told once.
  void primary_failed(const Error& e);
  Engine& backup() { return *backup_; }
  const FallbackTuning& tuning() const { return tuning_; }
  // Bytes of pixels kept by streams that cannot checkpoint: false when
  // `bytes` more would pass retain_limit.
  bool try_retain(uint64_t bytes);
  void unretain(uint64_t bytes) { retained_ -= bytes; }
  // A buffer for a stream's kept pixels: one a stream gave back, or empty.
  KeptBuffer take_buffer();
  void give_buffer(KeptBuffer buffer);

 private:
  // fn(primary), or after its fault fn(backup); not after bad input, nor
  // where source_failed() says the fault was the input's source's.
  template <class Fn>
  auto either(Fn&& fn, const std::function<bool()>& source_failed = {});

  std::unique_ptr<Engine> primary_;
  std::unique_ptr<Engine> backup_;
  std::function<void(const std::string&)> on_fallback_;
  FallbackTuning tuning_;
  std::atomic<bool> lost_{false};
  std::atomic<uint64_t> retained_{0};
  std::atomic<uint64_t> fallbacks_{0};
  std::mutex spare_mu_;
  std::vector<KeptBuffer> spare_;
  uint64_t spare_held_ = 0;  // their capacities
};

}  // namespace imgstat
