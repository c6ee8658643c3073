#include "cuda/workspace.hpp"

#include <cstring>

#include "cuda/cuda_check.hpp"
#include "imgstat/trace.hpp"

namespace imgstat::cuda {

void DeviceBudget::take(uint64_t bytes, const char* what) {
  uint64_t used = used_.load();
  if (limit_ == 0) {
    used_ += bytes;
    return;
  }
  do {
    if (used + bytes > limit_)
      fail(ErrorCode::kResourceExhausted, std::string(what) + " needs " + std::to_string(bytes >> 20) +
                                              " MiB of GPU memory beyond the engine's limit of " +
                                              std::to_string(limit_ >> 20) + " MiB");
  } while (!used_.compare_exchange_weak(used, used + bytes));
}

DeviceBuffer::DeviceBuffer(DeviceBudget& budget, uint64_t bytes, const std::string& what)
    : budget_(budget), bytes_(bytes) {
  budget_.take(bytes_, what.c_str());
  if (cudaMalloc(&data_, bytes_) != cudaSuccess) {
    cudaGetLastError();
    budget_.give(bytes_);
    fail(ErrorCode::kResourceExhausted, "GPU out of memory for " + what);
  }
}

DeviceBuffer::~DeviceBuffer() {
  IMGSTAT_CUDA_REPORT(cudaFree(data_));
  budget_.give(bytes_);
}

namespace {
constexpr uint64_t kWorkspaceDeviceBytes = kSlots * kDeviceSlotBytes + sizeof(Results);
}  // namespace

Workspace::Workspace(const DeviceInfo& dev, DeviceBudget& budget) : budget_(&budget) {
  budget.take(kWorkspaceDeviceBytes, "a workspace");
  try {
    const size_t partials = float_partials_needed(kMaxChannels, dev);
    for (int k = 0; k < kSlots; ++k) {
      IMGSTAT_CUDA(cudaStreamCreateWithFlags(&streams[k], cudaStreamNonBlocking));
      IMGSTAT_CUDA(cudaEventCreateWithFlags(&slot_free[k], cudaEventDisableTiming));
      IMGSTAT_CUDA(cudaEventCreateWithFlags(&stream_done[k], cudaEventDisableTiming));
      IMGSTAT_CUDA(cudaMallocHost(&pinned[k], kSlotBytes));
      IMGSTAT_CUDA(cudaMalloc(&device_slot[k], kDeviceSlotBytes));
      IMGSTAT_CUDA(cudaMalloc(&this->partials[k], partials * sizeof(FloatMoments)));
      IMGSTAT_CUDA(cudaMalloc(&extreme_partials[k], partials * sizeof(Extremes)));
    }
    IMGSTAT_CUDA(cudaEventCreateWithFlags(&reset_done, cudaEventDisableTiming));
    IMGSTAT_CUDA(cudaMalloc(&device_results, sizeof(Results)));
    IMGSTAT_CUDA(cudaMallocHost(&host_results, sizeof(Results)));
  } catch (...) {
    release();  // what was made before the failure
    throw;
  }
}

Workspace::~Workspace() { release(); }

void Workspace::release() {
  for (int k = 0; k < kSlots; ++k) {
    if (streams[k]) IMGSTAT_CUDA_REPORT(cudaStreamSynchronize(streams[k]));
    if (streams[k]) IMGSTAT_CUDA_REPORT(cudaStreamDestroy(streams[k]));
    if (slot_free[k]) IMGSTAT_CUDA_REPORT(cudaEventDestroy(slot_free[k]));
    if (stream_done[k]) IMGSTAT_CUDA_REPORT(cudaEventDestroy(stream_done[k]));
    if (pinned[k]) IMGSTAT_CUDA_REPORT(cudaFreeHost(pinned[k]));
    if (device_slot[k]) IMGSTAT_CUDA_REPORT(cudaFree(device_slot[k]));
    if (partials[k]) IMGSTAT_CUDA_REPORT(cudaFree(partials[k]));
    if (extreme_partials[k]) IMGSTAT_CUDA_REPORT(cudaFree(extreme_partials[k]));
  }
  if (device_extra) {
    IMGSTAT_CUDA_REPORT(cudaFree(device_extra));
    budget_->give(sizeof(ExtraBuffers));
  }
  if (host_extra) IMGSTAT_CUDA_REPORT(cudaFreeHost(host_extra));
  if (reset_done) IMGSTAT_CUDA_REPORT(cudaEventDestroy(reset_done));
  for (cudaEvent_t e : piece_free) IMGSTAT_CUDA_REPORT(cudaEventDestroy(e));
  if (device_results) IMGSTAT_CUDA_REPORT(cudaFree(device_results));
  if (host_results) IMGSTAT_CUDA_REPORT(cudaFreeHost(host_results));
  budget_->give(kWorkspaceDeviceBytes);
}

void Workspace::ensure_extra() {
  if (device_extra) return;
  budget_->take(sizeof(ExtraBuffers), "the distribution and colour buffers");
  if (cudaMalloc(&device_extra, sizeof(ExtraBuffers)) != cudaSuccess) {
    cudaGetLastError();
    device_extra = nullptr;
    budget_->give(sizeof(ExtraBuffers));
    fail(ErrorCode::kResourceExhausted, "GPU out of memory for the distribution and colour buffers");
  }
  IMGSTAT_CUDA(cudaMallocHost(&host_extra, sizeof(ExtraBuffers)));
}

void Workspace::ensure_piece_events(size_t n) {
  while (piece_free.size() < n) {
    cudaEvent_t e;
    IMGSTAT_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    piece_free.push_back(e);
  }
}

void Workspace::touch() {
  for (uint8_t* p : pinned) std::memset(p, 0, kSlotBytes);
  std::memset(static_cast<void*>(host_results), 0, sizeof(Results));
  if (host_extra) std::memset(static_cast<void*>(host_extra), 0, sizeof(ExtraBuffers));
}

LanePieces::~LanePieces() {
  if (!pinned_ && events_.empty()) return;
  IMGSTAT_CUDA_REPORT(cudaSetDevice(device_));
  for (cudaEvent_t e : events_) {
    IMGSTAT_CUDA_REPORT(cudaEventSynchronize(e));
    IMGSTAT_CUDA_REPORT(cudaEventDestroy(e));
  }
  if (pinned_) IMGSTAT_CUDA_REPORT(cudaFreeHost(pinned_));
}

std::unique_lock<std::mutex> LanePieces::take(int lanes) {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock) return lock;
  const size_t wanted = 2 * static_cast<size_t>(lanes);
  if (pieces_ < wanted) {
    // Larger: the pieces in flight are over (each event waited on), then freed.
    for (cudaEvent_t e : events_) IMGSTAT_CUDA(cudaEventSynchronize(e));
    if (pinned_) IMGSTAT_CUDA(cudaFreeHost(pinned_));
    pinned_ = nullptr;
    pieces_ = 0;
    void* p = nullptr;
    if (cudaMallocHost(&p, wanted * kLanePieceBytes) != cudaSuccess) {
      cudaGetLastError();  // no pinned memory to spare: the workspace's slots serve
      return {};
    }
    pinned_ = static_cast<uint8_t*>(p);
    pieces_ = wanted;
  }
  while (events_.size() < pieces_) {
    cudaEvent_t e;
    IMGSTAT_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    events_.push_back(e);
  }
  return lock;
}

WorkspacePool::WorkspacePool(int device, const DeviceInfo& info, DeviceBudget& budget, int most, bool all_at_start)
    : device_(device), info_(info), budget_(budget), most_(std::max(1, most)) {
  free_.push_back(std::make_unique<Workspace>(info_, budget_));
  if (all_at_start) {
    try {
      free_.back()->ensure_extra();
      while (static_cast<int>(free_.size()) < most_) {
        auto ws = std::make_unique<Workspace>(info_, budget_);
        ws->ensure_extra();
        free_.push_back(std::move(ws));
      }
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kResourceExhausted) throw;  // the limit: as many as fit
    }
    for (auto& ws : free_) ws->touch();
    most_ = static_cast<int>(free_.size());
  }
  created_ = static_cast<int>(free_.size());
}

Workspace* WorkspacePool::acquire(std::chrono::milliseconds wait) {
  TraceRange range("gpu workspace wait");
  std::unique_lock<std::mutex> lock(mu_);
  if (free_.empty() && created_ < most_) {
    ++created_;
    lock.unlock();
    try {
      IMGSTAT_CUDA(cudaSetDevice(device_));
      return new Workspace(info_, budget_);
    } catch (...) {
      std::lock_guard<std::mutex> relock(mu_);
      --created_;
      throw;
    }
  }
  if (!available_.wait_for(lock, wait, [this] { return !free_.empty(); }))
    fail(ErrorCode::kResourceExhausted, "all " + std::to_string(most_) + " GPU workspaces are busy");
  Workspace* ws = free_.back().release();
  free_.pop_back();
  return ws;
}

void WorkspacePool::release(Workspace* ws) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_.emplace_back(ws);
  }
  available_.notify_one();
}

}  // namespace imgstat::cuda
