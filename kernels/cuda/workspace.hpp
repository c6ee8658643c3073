// A CUDA engine's device memory: the budget it is charged to, buffers for
// one call, and the workspaces (streams, staging ring and result buffers)
// that analyses borrow one at a time from the pool.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "imgstat/engine.hpp"

#include "common/moments.hpp"
#include "cuda/dispatch/dispatch.hpp"
#include "cuda/tuning/host.hpp"
#include "imgstat/engine.hpp"

namespace imgstat::cuda {

// Device results of one analysis, and their pinned host mirror; counts last,
// so one copy brings everything back with just the counts in use.
struct Results {
  unsigned long long underflow[kMaxChannels];
  unsigned long long overflow[kMaxChannels];
  IntAccum ints[kMaxChannels];
  FloatMoments running[kSlots * kMaxChannels];
  Extremes extremes[kSlots * kMaxChannels];
  unsigned long long counts[kMaxChannels * kMaxBins];
};

// Buffers of the statistics asked for less often, on the device and their
// pinned host mirror; a workspace allocates them the first time.
struct ExtraBuffers {
  unsigned long long fine[kMaxChannels * kFineBins];
  unsigned long long colors[(uint64_t{1} << 24) / 64];
};

// The device bytes an engine may hold (0: no limit), and what it holds.
class DeviceBudget {
 public:
  explicit DeviceBudget(uint64_t limit) : limit_(limit) {}
  // Throws kResourceExhausted, naming `what`, when `bytes` more would pass the limit.
  void take(uint64_t bytes, const char* what);
  void give(uint64_t bytes) { used_ -= bytes; }
  uint64_t used() const { return used_; }

 private:
  uint64_t limit_;
  std::atomic<uint64_t> used_{0};
};

// Device memory for one call, charged to the engine's budget while held.
class DeviceBuffer {
 public:
  DeviceBuffer(DeviceBudget& budget, uint64_t bytes, const std::string& what);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return data_; }

 private:
  DeviceBudget& budget_;
  uint64_t bytes_;
  void* data_ = nullptr;
};

// Streams, staging ring and result buffers for one image at a time.
struct Workspace {
  Workspace(const DeviceInfo& dev, DeviceBudget& budget);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // The buffers of the statistics asked for less often, the first time.
  void ensure_extra();
  // n events for the pieces of a read spread over every core (add_read's
  // lanes), made the first time so many are asked for.
  void ensure_piece_events(size_t n);
  // The driver maps pinned pages into the process as the CPU first touches
  // them: a server touches its workspaces at start, so that its idle
  // resident figure is what it holds, not something its first calls add.
  void touch();

  std::array<cudaStream_t, kSlots> streams{};
  std::array<cudaEvent_t, kSlots> slot_free{};  // the slot's last transfer and kernels are done
  std::array<cudaEvent_t, kSlots> stream_done{};
  cudaEvent_t reset_done{};
  std::vector<cudaEvent_t> piece_free;  // a read's pinned piece is free to fill again
  std::array<uint8_t*, kSlots> pinned{};
  std::array<uint8_t*, kSlots> device_slot{};
  std::array<FloatMoments*, kSlots> partials{};
  std::array<Extremes*, kSlots> extreme_partials{};
  Results* device_results = nullptr;
  Results* host_results = nullptr;
  ExtraBuffers* device_extra = nullptr;
  ExtraBuffers* host_extra = nullptr;

 private:
  void release();
  DeviceBudget* budget_;
};

// Larger pinned pieces for a read in lanes (GpuAnalysis::add_read_in_lanes),
// the engine's, made the first time a read needs them and kept: one read at
// a time has them, others cut their workspace's slots into smaller pieces.
// Small pieces cost the copy engine a fixed time each (a 4 GiB read in
// 745 KiB pieces: 0.111 s against 0.085 s in 4 MiB ones).
class LanePieces {
 public:
  explicit LanePieces(int device) : device_(device) {}
  ~LanePieces();
  LanePieces(const LanePieces&) = delete;
  LanePieces& operator=(const LanePieces&) = delete;

  // For `lanes` lanes while the returned lock is held; an empty lock where
  // another read has them.
  std::unique_lock<std::mutex> take(int lanes);
  uint8_t* piece(size_t i) const { return pinned_ + i * kLanePieceBytes; }
  cudaEvent_t free_again(size_t i) const { return events_[i]; }

 private:
  int device_;
  std::mutex mu_;
  uint8_t* pinned_ = nullptr;
  size_t pieces_ = 0;
  std::vector<cudaEvent_t> events_;  // a piece's last copy is over
};

// An engine's workspaces, lent to one analysis at a time. One is made at
// start and the others as calls at once first need them (a process that
// analyzes one image, as the CLI's --local, pins a quarter); or, for a
// server, all of them at start, within the memory limit, their pinned pages
// touched, and never more (EngineOptions::cuda_workspaces_at_start).
class WorkspacePool {
 public:
  WorkspacePool(int device, const DeviceInfo& info, DeviceBudget& budget, int most, bool all_at_start);
  // A workspace, waiting at most `wait`; kResourceExhausted when none came.
  // Whoever holds one is computing (a stream gives its back while it waits
  // for its client), but the workers that would free one may be the ones
  // waiting here: a bounded wait, then the CPU engine (through
  // FallbackEngine), keeps that from ever deadlocking.
  Workspace* acquire(std::chrono::milliseconds wait);
  void release(Workspace* ws);

 private:
  int device_;
  DeviceInfo info_;
  DeviceBudget& budget_;
  int most_;
  std::mutex mu_;
  std::condition_variable available_;
  std::vector<std::unique_ptr<Workspace>> free_;
  int created_ = 0;  // made so far, free or lent
};

}  // namespace imgstat::cuda
