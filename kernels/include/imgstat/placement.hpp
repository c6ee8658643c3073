// Where work goes among the GPUs one server computes on (--cuda-devices):
// one slot per GPU listed (a GPU listed twice is two slots), each with the
// calls on it now. The engine and the GPU JPEG decoder share it, so a JPEG
// is decoded and computed on the same GPU and both count towards its load.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace imgstat {

// One slot as monitoring sees it (GetServerInfo, metrics, the log).
struct GpuStatus {
  int device = 0;  // the CUDA ordinal
  std::string name;
  uint64_t memory_bytes = 0;
  std::string compute_capability;
  bool in_service = true;
  std::string out_of_service_reason;  // why it was taken out
  uint64_t images = 0;     // images it computed
  uint32_t in_flight = 0;  // decodes and analyses on it now
};

class Placement {
 public:
  // told: called once for each slot taken out, with what to log.
  Placement(std::vector<GpuStatus> slots, std::function<void(const std::string&)> told = {});

  size_t size() const { return slots_.size(); }
  int device(size_t slot) const { return slots_[slot].status.device; }
  bool in_service(size_t slot) const { return !slots_[slot].out.load(); }

  // A slot's share of the load, held while the work runs.
  class Hold {
   public:
    Hold() = default;
    Hold(Placement* owner, size_t slot);
    Hold(Hold&& o) noexcept;
    Hold& operator=(Hold&& o) noexcept;
    ~Hold();
    size_t slot() const { return slot_; }
    explicit operator bool() const { return owner_ != nullptr; }

   private:
    void release();
    Placement* owner_ = nullptr;
    size_t slot_ = 0;
  };

  // The least loaded slot in service that `allowed` accepts (ties go round
  // the slots in turn); an empty Hold when there is none.
  Hold take(const std::function<bool(size_t)>& allowed = {});
  // The share of a slot already chosen: a stream that computes again after
  // waiting for its client, on the GPU that holds what it counted.
  Hold hold(size_t slot);
  // After a fault that left the slot's GPU unusable: no more work goes there.
  void take_out(size_t slot, const std::string& why);
  void count_image(size_t slot) { ++slots_[slot].images; }
  std::vector<GpuStatus> status() const;

 private:
  struct Slot {
    GpuStatus status;
    std::atomic<uint32_t> in_flight{0};
    std::atomic<uint64_t> images{0};
    std::atomic<bool> out{false};
  };
  std::vector<Slot> slots_;
  std::atomic<uint64_t> turn_{0};
  std::function<void(const std::string&)> told_;
  mutable std::mutex mu_;  // the reasons
};

}  // namespace imgstat
