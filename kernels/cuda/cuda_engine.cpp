#include "cuda/cuda_engine.hpp"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <vector>

#include "common/luminance.hpp"
#include "common/moments.hpp"
#include "common/partial.hpp"
#include "common/pieces.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/dispatch/dispatch.hpp"

namespace imgstat::cuda {
namespace {

constexpr int kSlots = 3;
// Host copies land in 8 MiB pinned slots; pinned sources go straight to the
// device in 32 MiB pieces, few enough that their per-copy cost disappears.
constexpr uint64_t kSlotBytes = uint64_t{8} << 20;
constexpr uint64_t kDeviceSlotBytes = uint64_t{32} << 20;
constexpr uint32_t kMaxBins = 65536;
constexpr uint32_t kMaxChannels = kRunningStride;
// How long an image waits for a free workspace before the CPU takes it: a
// whole image briefly, a stream (which would hold it while its client sends)
// not at all.
constexpr std::chrono::milliseconds kAnalyzeWait{500};
constexpr std::chrono::milliseconds kStreamWait{0};
// An image already decoded into device memory holds no client and takes
// milliseconds; the CPU's alternative is decoding it again: wait longer.
constexpr std::chrono::milliseconds kDeviceImageWait{10000};
// Host copies into the staging ring are split across threads above this.
constexpr uint64_t kParallelCopyBytes = uint64_t{1} << 20;

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

class DeviceBudget {
 public:
  explicit DeviceBudget(uint64_t limit) : limit_(limit) {}
  void take(uint64_t bytes, const char* what) {
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
  void give(uint64_t bytes) { used_ -= bytes; }
  uint64_t used() const { return used_; }

 private:
  uint64_t limit_;
  std::atomic<uint64_t> used_{0};
};

// Device memory for one call, charged to the engine's budget while held.
class DeviceBuffer {
 public:
  DeviceBuffer(DeviceBudget& budget, uint64_t bytes, const std::string& what) : budget_(budget), bytes_(bytes) {
    budget_.take(bytes_, what.c_str());
    if (cudaMalloc(&data_, bytes_) != cudaSuccess) {
      cudaGetLastError();
      budget_.give(bytes_);
      fail(ErrorCode::kResourceExhausted, "GPU out of memory for " + what);
    }
  }
  ~DeviceBuffer() {
    IMGSTAT_CUDA_REPORT(cudaFree(data_));
    budget_.give(bytes_);
  }
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
  std::array<cudaStream_t, kSlots> streams{};
  std::array<cudaEvent_t, kSlots> slot_free{};  // the slot's last transfer and kernels are done
  std::array<cudaEvent_t, kSlots> stream_done{};
  cudaEvent_t reset_done{};
  std::array<uint8_t*, kSlots> pinned{};
  std::array<uint8_t*, kSlots> device_slot{};
  std::array<FloatMoments*, kSlots> partials{};
  std::array<Extremes*, kSlots> extreme_partials{};
  Results* device_results = nullptr;
  Results* host_results = nullptr;
  ExtraBuffers* device_extra = nullptr;
  ExtraBuffers* host_extra = nullptr;
  DeviceBudget* budget_ = nullptr;

  void ensure_extra() {
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

  Workspace(const DeviceInfo& dev, DeviceBudget& budget) : budget_(&budget) {
    budget.take(kSlots * kDeviceSlotBytes + sizeof(Results), "a workspace");
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
  }

  ~Workspace() {
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
    if (device_results) IMGSTAT_CUDA_REPORT(cudaFree(device_results));
    if (host_results) IMGSTAT_CUDA_REPORT(cudaFreeHost(host_results));
  }
};

// Bytes from p to the end of the device allocation holding it, from the
// driver (cuMemGetAddressRange, reached through the runtime: no libcuda link).
uint64_t allocation_bytes(const void* p) {
  using Fn = int (*)(unsigned long long* base, size_t* size, unsigned long long ptr);
  static const Fn range = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &f, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return Fn(nullptr);
    }
    return reinterpret_cast<Fn>(f);
  }();
  if (!range) fail(ErrorCode::kInternal, "the driver does not give cuMemGetAddressRange");
  unsigned long long base = 0;
  size_t size = 0;
  const auto at = static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(p));
  if (range(&base, &size, at) != 0 || at < base || at - base > size)
    fail(ErrorCode::kInvalidArgument, "the driver knows no allocation at the CUDA IPC handle's address");
  return base + size - at;
}

bool is_pinned(const void* p) {
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeHost;
}

class CudaEngine;

// One image's accumulation: whole pixels in order, staged through the
// workspace's ring (or sent straight from pinned memory), kernels per chunk.
class GpuAnalysis {
 public:
  GpuAnalysis(CudaEngine& engine, const Layout& layout, const StatsRequest& request,
              std::chrono::milliseconds wait);
  ~GpuAnalysis();
  GpuAnalysis(const GpuAnalysis&) = delete;
  GpuAnalysis& operator=(const GpuAnalysis&) = delete;

  void add(const uint8_t* pixels, uint64_t count);         // pageable memory: staged
  void add_pinned(const uint8_t* pixels, uint64_t count);  // page-locked memory: sent as is
  void add_device(const uint8_t* pixels, uint64_t count);  // already on the device: no transfer
  // What the pixels added so far add up to, waiting for their work to
  // finish; empty where that needs the rest of the image (floats binned over
  // their own range) or would disturb it (one-block images).
  std::optional<Partial> partial();
  Result finish();

 private:
  void submit(const uint8_t* host, uint64_t pixels);
  // The passes that run on one chunk alone, on device pixels at dst.
  void launch_passes(const uint8_t* dst, uint64_t pixels, cudaStream_t s);
  void flush();
  // Brings the accumulators to host_results once all work so far has run.
  void collect();
  Partial partial_from_host() const;
  void use_stream(int k);
  HistogramOut histogram_out() const;
  bool wants_colors() const { return request_.unique_colors && sample_size(layout_.type) == 1; }

  CudaEngine& engine_;
  Workspace* ws_;
  Layout layout_;  // of the pixel stream: channels and type; width = all pixels
  StatsRequest request_;
  uint64_t pixel_bytes_;
  uint64_t chunk_pixels_;   // a pinned slot's worth, a multiple of 16 pixels
  uint64_t direct_pixels_;  // a device slot's worth
  int slot_ = 0;            // the slot being filled or sent next
  bool used_[kSlots] = {};  // streams that carry work of this image
  uint64_t staged_ = 0;    // pixels in pinned[slot_]
  uint64_t sent_ = 0;      // pixels submitted
  uint8_t* whole_ = nullptr;  // floats binned over [min, max]: the image stays on the device
  uint64_t whole_bytes_ = 0;
  // A small 8-bit image: one chunk, one block that writes the counts into
  // pinned host memory, no reset, no copies.
  bool one_block_ = false;
  bool finished_ = false;
  bool synced_ = false;  // finish() waited for everything
  // 16-bit samples with a distribution or shape: the kernel counts every
  // value, and the requested histogram is binned from those on the host.
  bool values_ = false;
};

// Said once at start on a machine without a GPU: what is missing, in words.
std::string no_gpu_reason(cudaError_t e) {
  if (e != cudaErrorInsufficientDriver) return "the NVIDIA driver sees no GPU";
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!driver) return "no NVIDIA driver on this machine";
  dlclose(driver);
  return "the NVIDIA driver is older than CUDA " + std::to_string(CUDART_VERSION / 1000) + "." +
         std::to_string(CUDART_VERSION % 1000 / 10) + " needs";
}

class CudaEngine final : public Engine {
 public:
  explicit CudaEngine(const CudaOptions& options)
      : options_(options),
        budget_(options.memory_limit),
        arena_(options.host_threads ? static_cast<int>(options.host_threads) : tbb::task_arena::automatic) {
    int count = 0;
    const cudaError_t found = cudaGetDeviceCount(&count);
    if (found == cudaErrorInsufficientDriver || found == cudaErrorNoDevice || (found == cudaSuccess && count == 0)) {
      cudaGetLastError();
      fail(ErrorCode::kNotFound, no_gpu_reason(found));
    }
    IMGSTAT_CUDA(found);
    if (options.device < 0 || options.device >= count)
      fail(ErrorCode::kUnavailable, "no CUDA device " + std::to_string(options.device) + " (" +
                                        std::to_string(count) + " found)");
    IMGSTAT_CUDA(cudaSetDevice(options.device));
    // Measured (bench/NOTES.md): spinning gives small images their best
    // latency; blocking leaves more of the cores to the JPEG checks.
    const unsigned wait = options.wait == CudaWait::kYield   ? cudaDeviceScheduleYield
                          : options.wait == CudaWait::kBlock ? cudaDeviceScheduleBlockingSync
                                                             : cudaDeviceScheduleSpin;
    IMGSTAT_CUDA(cudaSetDeviceFlags(wait));
    cudaDeviceProp p;
    IMGSTAT_CUDA(cudaGetDeviceProperties(&p, options.device));
    dev_.sm_count = p.multiProcessorCount;
    info_.kind = "cuda";
    info_.device_name = p.name;
    info_.device_memory_bytes = p.totalGlobalMem;
    info_.compute_capability = std::to_string(p.major) + "." + std::to_string(p.minor);
    info_.threads = static_cast<uint32_t>(arena_.max_concurrency());
    // Keep what float images borrow from the stream-ordered pool instead of
    // returning it to the driver at every synchronization.
    cudaMemPool_t pool;
    IMGSTAT_CUDA(cudaDeviceGetDefaultMemPool(&pool, options.device));
    uint64_t keep = options.memory_limit ? options.memory_limit : UINT64_MAX;
    IMGSTAT_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    // One workspace now, the others when calls at once first need them: a
    // process that analyzes one image (the CLI's --local) pins 1/4 as much.
    free_.push_back(std::make_unique<Workspace>(dev_, budget_));
    created_ = 1;
  }

  EngineInfo info() const override { return info_; }
  bool usable() const override { return !device_lost(options_.device); }
  EngineUsage usage() const override {
    EngineUsage u;
    u.device_bytes_held = budget_.used();
    u.device_bytes_total = info_.device_memory_bytes;
    size_t free = 0, total = 0;
    // Asked from a monitoring thread: a failure here says nothing new.
    if (!device_lost(options_.device) && cudaSetDevice(options_.device) == cudaSuccess && cudaMemGetInfo(&free, &total) == cudaSuccess)
      u.device_bytes_free = free;
    else
      cudaGetLastError();
    u.gpu_lost = device_lost(options_.device);
    return u;
  }

  Result analyze(const ImageView& image, const StatsRequest& request) override {
    validate(image.layout, request);
    if (!image.data) fail(ErrorCode::kInvalidArgument, "image data is null");
    IMGSTAT_CUDA(cudaSetDevice(options_.device));
    if (has_luminance(image.layout, request)) return analyze_uploaded(image, request);
    return analyze_streamed(image, request);
  }

  // Through the staging ring, chunk by chunk: the image is never whole on the device.
  Result analyze_streamed(const ImageView& image, const StatsRequest& request) {
    const Layout& l = image.layout;
    GpuAnalysis analysis(*this, l, request, kAnalyzeWait);
    const auto* base = static_cast<const uint8_t*>(image.data);
    if (l.stride() == l.row_bytes()) {
      // Worth a driver call only where a direct transfer saves a copy.
      if (l.min_bytes() >= kSlotBytes && is_pinned(base))
        analysis.add_pinned(base, l.pixels());
      else
        analysis.add(base, l.pixels());
    } else {
      for (uint64_t y = 0; y < l.height; ++y) analysis.add(base + y * l.stride(), l.width);
    }
    return analysis.finish();
  }

  // The luminance needs whole pixels on the device: the image goes up packed
  // in one copy and is analyzed there, the luminance plane made by a kernel.
  Result analyze_uploaded(const ImageView& image, const StatsRequest& request) {
    Layout packed = image.layout;
    packed.row_stride = 0;
    const uint64_t bytes = packed.pixels() * packed.pixel_bytes();
    const DeviceBuffer device(budget_, bytes, "a " + std::to_string(bytes >> 20) + " MiB image");
    IMGSTAT_CUDA(cudaMemcpy2DAsync(device.data(), packed.row_bytes(), image.data, image.layout.stride(),
                                   packed.row_bytes(), packed.height, cudaMemcpyHostToDevice, cudaStreamPerThread));
    IMGSTAT_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
    return analyze_device(DeviceImageView{device.data(), packed}, request);
  }

  std::unique_ptr<StreamAnalysis> open_stream(const Layout& layout, const StatsRequest& request) override;

  bool takes_device_images() const override { return !device_lost(options_.device); }

  std::shared_ptr<void> pin_host_memory(const void* data, size_t bytes) override {
    if (device_lost(options_.device) || cudaSetDevice(options_.device) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    // Read-only: the pages are mapped PROT_READ, and the GPU only reads them.
    void* p = const_cast<void*>(data);
    if (cudaHostRegister(p, bytes, cudaHostRegisterPortable | cudaHostRegisterReadOnly) != cudaSuccess) {
      cudaGetLastError();  // not sticky: the memory is staged as any other
      return nullptr;
    }
    // Released on whichever thread drops the last reference: the device first.
    return std::shared_ptr<void>(p, [device = options_.device](void* q) {
      IMGSTAT_CUDA_REPORT(cudaSetDevice(device));
      IMGSTAT_CUDA_REPORT(cudaHostUnregister(q));
    });
  }

  std::shared_ptr<void> open_ipc_memory(const std::string& handle, uint64_t bytes) override {
    cudaIpcMemHandle_t h;
    if (handle.size() != sizeof(h))
      fail(ErrorCode::kInvalidArgument, "a CUDA IPC memory handle is " + std::to_string(sizeof(h)) + " bytes, not " +
                                            std::to_string(handle.size()));
    std::memcpy(&h, handle.data(), sizeof(h));
    if (device_lost(options_.device)) fail(ErrorCode::kUnavailable, "the GPU was lost");
    IMGSTAT_CUDA(cudaSetDevice(options_.device));
    void* p = nullptr;
    const cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      cudaGetLastError();  // a bad handle is the caller's, not a fault of the device
      fail(ErrorCode::kInvalidArgument, std::string("the CUDA IPC handle cannot be opened on device ") +
                                            std::to_string(options_.device) + ": " + cudaGetErrorString(e));
    }
    std::shared_ptr<void> opened(p, [device = options_.device](void* q) {
      IMGSTAT_CUDA_REPORT(cudaSetDevice(device));  // closed in the context that opened it
      IMGSTAT_CUDA_REPORT(cudaIpcCloseMemHandle(q));
    });
    // The caller says how large it is; the driver knows. Reading past the
    // allocation would fault the device for every caller.
    const uint64_t held = allocation_bytes(p);
    if (bytes > held)
      fail(ErrorCode::kInvalidArgument, "the CUDA allocation holds " + std::to_string(held) + " bytes, not the " +
                                            std::to_string(bytes) + " declared");
    return opened;
  }

  Result analyze_device(const DeviceImageView& given, const StatsRequest& request) override {
    validate(given.layout, request);
    if (!given.data) fail(ErrorCode::kInvalidArgument, "image data is null");
    if (given.device >= 0 && given.device != options_.device)
      fail(ErrorCode::kFailedPrecondition, "pixels on GPU " + std::to_string(given.device) +
                                               " given to the engine of GPU " + std::to_string(options_.device));
    IMGSTAT_CUDA(cudaSetDevice(options_.device));
    // Padded rows, or a start the vector loads cannot take (a region's
    // offset): packed into a buffer of the engine's first, device to device.
    std::unique_ptr<DeviceBuffer> packed;
    DeviceImageView image = given;
    if ((given.layout.row_stride != 0 && given.layout.row_stride != given.layout.row_bytes()) ||
        reinterpret_cast<uintptr_t>(given.data) % 16 != 0) {
      image.layout.row_stride = 0;
      packed = std::make_unique<DeviceBuffer>(budget_, image.layout.pixels() * image.layout.pixel_bytes(),
                                              "a packed copy of a device image");
      IMGSTAT_CUDA(cudaMemcpy2DAsync(packed->data(), image.layout.row_bytes(), given.data, given.layout.stride(),
                                     image.layout.row_bytes(), image.layout.height, cudaMemcpyDeviceToDevice,
                                     cudaStreamPerThread));
      IMGSTAT_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
      image.data = packed->data();
    }
    Result result;
    {
      GpuAnalysis analysis(*this, image.layout, request, kDeviceImageWait);
      analysis.add_device(static_cast<const uint8_t*>(image.data), image.layout.pixels());
      result = analysis.finish();
    }
    if (has_luminance(image.layout, request)) {
      result.has_luminance = true;
      result.luminance = device_luminance(image, request);
    }
    return result;
  }

  // The luminance channel of pixels in device memory, computed there.
  ChannelStats device_luminance(const DeviceImageView& image, const StatsRequest& request) {
    const Layout plane{image.layout.width, image.layout.height, 1, luminance_type(image.layout.type), 0};
    const DeviceBuffer out(budget_, plane.pixels() * plane.pixel_bytes(), "the luminance plane");
    launch_luminance(static_cast<const uint8_t*>(image.data), image.layout.pixels(), image.layout.channels,
                     image.layout.type, request.rgb, out.data(), dev_, cudaStreamPerThread);
    IMGSTAT_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
    GpuAnalysis analysis(*this, plane, luminance_request(request), kDeviceImageWait);
    analysis.add_device(static_cast<const uint8_t*>(out.data()), plane.pixels());
    return analysis.finish().channels.front();
  }

  // A workspace, waiting at most `wait`. Streams hold theirs until their
  // last chunk, and the workers that would finish them may be the ones
  // waiting here: a bounded wait, then the CPU engine (through
  // FallbackEngine), keeps that from ever deadlocking.
  Workspace* acquire(std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(mu_);
    if (free_.empty() && created_ < std::max(1, options_.workspaces)) {
      ++created_;
      lock.unlock();
      try {
        IMGSTAT_CUDA(cudaSetDevice(options_.device));
        return new Workspace(dev_, budget_);
      } catch (...) {
        std::lock_guard<std::mutex> relock(mu_);
        --created_;
        throw;
      }
    }
    if (!available_.wait_for(lock, wait, [this] { return !free_.empty(); }))
      fail(ErrorCode::kResourceExhausted,
           "all " + std::to_string(options_.workspaces) + " GPU workspaces are busy");
    Workspace* ws = free_.back().release();
    free_.pop_back();
    return ws;
  }

  void release(Workspace* ws) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_.emplace_back(ws);
    }
    available_.notify_one();
  }

  const DeviceInfo& device() const { return dev_; }
  DeviceBudget& budget() { return budget_; }
  int device_ordinal() const { return options_.device; }

  // Copies n bytes, split across threads when large.
  void copy(uint8_t* to, const uint8_t* from, uint64_t n) {
    if (n < 2 * kParallelCopyBytes) {
      std::memcpy(to, from, n);
      return;
    }
    const uint64_t pieces = (n + kParallelCopyBytes - 1) / kParallelCopyBytes;
    arena_.execute([&] {
      tbb::parallel_for(uint64_t{0}, pieces, [&](uint64_t i) {
        const uint64_t off = i * kParallelCopyBytes;
        std::memcpy(to + off, from + off, std::min(kParallelCopyBytes, n - off));
      });
    });
  }

 private:
  CudaOptions options_;
  DeviceBudget budget_;
  tbb::task_arena arena_;
  DeviceInfo dev_{};
  EngineInfo info_;
  std::mutex mu_;
  std::condition_variable available_;
  std::vector<std::unique_ptr<Workspace>> free_;
  int created_ = 0;  // workspaces made so far, free or lent
};

GpuAnalysis::GpuAnalysis(CudaEngine& engine, const Layout& layout, const StatsRequest& request,
                         std::chrono::milliseconds wait)
    : engine_(engine), ws_(engine.acquire(wait)), layout_(layout), request_(request) {
  layout_.width = layout.pixels();
  layout_.height = 1;
  layout_.row_stride = 0;
  pixel_bytes_ = layout_.pixel_bytes();
  chunk_pixels_ = std::max<uint64_t>(16, kSlotBytes / pixel_bytes_ / 16 * 16);
  direct_pixels_ = std::max<uint64_t>(16, kDeviceSlotBytes / pixel_bytes_ / 16 * 16);
  values_ = sample_size(layout_.type) == 2 && (request_.distribution || request_.shape || request_.merge_state);
  try {
    const bool floats = is_float(layout_.type);
    if (floats && ((request_.histogram && !request_.hist.explicit_range) || request_.distribution)) {
      whole_bytes_ = layout_.pixels() * pixel_bytes_;
      engine_.budget().take(whole_bytes_, "this image");
      if (cudaMallocAsync(&whole_, whole_bytes_, ws_->streams[0]) != cudaSuccess) {
        cudaGetLastError();
        engine_.budget().give(whole_bytes_);
        whole_bytes_ = 0;
        fail(ErrorCode::kResourceExhausted,
             "GPU out of memory for a " + std::to_string(layout_.pixels() * pixel_bytes_ >> 20) + " MiB float image");
      }
    }
    used_[0] = true;
    one_block_ = sample_size(layout_.type) == 1 && layout_.pixels() * pixel_bytes_ <= kOneBlockHist8Bytes &&
                 !request_.positions && !wants_colors();
    if (!one_block_) {
      cudaStream_t s0 = ws_->streams[0];
      launch_reset(histogram_out(), layout_.channels, ws_->device_results->ints, ws_->device_results->running,
                   kSlots * kMaxChannels, s0);
      if (request_.positions)
        IMGSTAT_CUDA(cudaMemsetAsync(ws_->device_results->extremes, 0, sizeof(Results::extremes), s0));
      if (wants_colors() || (floats && request_.distribution)) ws_->ensure_extra();
      if (wants_colors())
        IMGSTAT_CUDA(cudaMemsetAsync(ws_->device_extra->colors, 0, color_words(layout_.channels) * 8, s0));
      if (floats && request_.distribution)
        IMGSTAT_CUDA(cudaMemsetAsync(ws_->device_extra->fine, 0, sizeof(uint64_t) * kFineBins * layout_.channels, s0));
      IMGSTAT_CUDA(cudaEventRecord(ws_->reset_done, s0));
    }
  } catch (...) {
    if (whole_) {
      IMGSTAT_CUDA_REPORT(cudaFreeAsync(whole_, ws_->streams[0]));
      engine_.budget().give(whole_bytes_);
    }
    IMGSTAT_CUDA_REPORT(cudaStreamSynchronize(ws_->streams[0]));
    engine_.release(ws_);
    throw;
  }
}

GpuAnalysis::~GpuAnalysis() {
  // On success or failure alike: nothing of this image may run when the
  // workspace goes to the next one.
  if (!synced_)
    for (int k = 0; k < kSlots; ++k)
      if (used_[k]) IMGSTAT_CUDA_REPORT(cudaStreamSynchronize(ws_->streams[k]));
  if (whole_) {
    IMGSTAT_CUDA_REPORT(cudaFreeAsync(whole_, ws_->streams[0]));
    IMGSTAT_CUDA_REPORT(cudaStreamSynchronize(ws_->streams[0]));
    engine_.budget().give(whole_bytes_);
  }
  IMGSTAT_CUDA_REPORT(cudaGetLastError());
  engine_.release(ws_);
}

// A stream's first work of this image waits for the results to be reset.
void GpuAnalysis::use_stream(int k) {
  if (used_[k]) return;
  IMGSTAT_CUDA(cudaStreamWaitEvent(ws_->streams[k], ws_->reset_done, 0));
  used_[k] = true;
}

HistogramOut GpuAnalysis::histogram_out() const {
  Results* r = ws_->device_results;
  HistogramOut h;
  h.counts = r->counts;
  h.underflow = r->underflow;
  h.overflow = r->overflow;
  const bool bytes = sample_size(layout_.type) == 1;
  // 8-bit, and 16-bit with a distribution: counts per value, binned on the host.
  h.bins = bytes ? 256 : values_ ? 65536 : request_.hist.bins;
  h.explicit_range = request_.hist.explicit_range && !bytes && !values_;
  h.lo = request_.hist.lo;
  h.hi = request_.hist.hi;
  return h;
}

// One chunk from host memory (pinned) through the slot's stream: transfer,
// then the passes that can run on it alone.
void GpuAnalysis::submit(const uint8_t* host, uint64_t pixels) {
  use_stream(slot_);
  cudaStream_t s = ws_->streams[slot_];
  if (one_block_) {
    // Small 8-bit image: the kernel reads the pinned slot and writes the
    // pinned results straight over the bus; one launch, no copies.
    launch_hist8_one_block(host, pixels, layout_.channels, ws_->host_results->counts, s);
    sent_ += pixels;
    return;
  }
  const uint64_t bytes = pixels * pixel_bytes_;
  uint8_t* dst = whole_ ? whole_ + sent_ * pixel_bytes_ : ws_->device_slot[slot_];
  IMGSTAT_CUDA(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, s));
  launch_passes(dst, pixels, s);
  IMGSTAT_CUDA(cudaEventRecord(ws_->slot_free[slot_], s));
  sent_ += pixels;
  slot_ = (slot_ + 1) % kSlots;
}

void GpuAnalysis::launch_passes(const uint8_t* dst, uint64_t pixels, cudaStream_t s) {
  Results* r = ws_->device_results;
  const DeviceInfo& dev = engine_.device();
  const uint32_t c = layout_.channels;
  switch (layout_.type) {
    case SampleType::kUint8:
    case SampleType::kInt8:
      launch_hist8(dst, pixels, c, r->counts, dev, s);
      break;
    case SampleType::kUint16:
    case SampleType::kInt16: {
      HistogramOut h = histogram_out();
      if (!request_.histogram && !values_) h.counts = nullptr;
      launch_int16(dst, pixels, c, layout_.type == SampleType::kInt16, r->ints, h, dev, s);
      break;
    }
    case SampleType::kFloat32:
    case SampleType::kFloat64:
      launch_float_moments(dst, pixels, c, layout_.type, ws_->partials[slot_], r->running + slot_ * kMaxChannels, dev, s);
      if (request_.histogram && request_.hist.explicit_range)
        launch_float_bins(dst, pixels, c, layout_.type, histogram_out(), nullptr, 0, dev, s);
      break;
  }
  if (request_.positions)
    launch_extremes(dst, pixels, sent_, c, layout_.type, ws_->extreme_partials[slot_], r->extremes + slot_ * kMaxChannels,
                    dev, s);
  if (wants_colors()) launch_colors(dst, pixels, c, ws_->device_extra->colors, dev, s);
}

void GpuAnalysis::add_device(const uint8_t* p, uint64_t count) {
  flush();
  use_stream(slot_);
  cudaStream_t s = ws_->streams[slot_];
  if (one_block_) {  // the one-block kernel reads device memory as well as mapped host memory
    launch_hist8_one_block(p, count, layout_.channels, ws_->host_results->counts, s);
  } else if (whole_) {  // pass 2 needs the whole image in its own buffer
    uint8_t* dst = whole_ + sent_ * pixel_bytes_;
    IMGSTAT_CUDA(cudaMemcpyAsync(dst, p, count * pixel_bytes_, cudaMemcpyDeviceToDevice, s));
    launch_passes(dst, count, s);
  } else {
    launch_passes(p, count, s);
  }
  sent_ += count;
  if (!one_block_) {
    IMGSTAT_CUDA(cudaEventRecord(ws_->slot_free[slot_], s));
    slot_ = (slot_ + 1) % kSlots;
  }
}

void GpuAnalysis::flush() {
  if (staged_ == 0) return;
  submit(ws_->pinned[slot_], staged_);
  staged_ = 0;
}

void GpuAnalysis::add(const uint8_t* p, uint64_t count) {
  while (count > 0) {
    if (staged_ == 0) IMGSTAT_CUDA(cudaEventSynchronize(ws_->slot_free[slot_]));  // the slot's last use is over
    const uint64_t n = std::min(count, chunk_pixels_ - staged_);
    engine_.copy(ws_->pinned[slot_] + staged_ * pixel_bytes_, p, n * pixel_bytes_);
    staged_ += n;
    p += n * pixel_bytes_;
    count -= n;
    if (staged_ == chunk_pixels_) flush();
  }
}

void GpuAnalysis::add_pinned(const uint8_t* p, uint64_t count) {
  flush();
  while (count > 0) {
    const uint64_t n = std::min(count, direct_pixels_);
    submit(p, n);
    p += n * pixel_bytes_;
    count -= n;
  }
}

void GpuAnalysis::collect() {
  cudaStream_t s0 = ws_->streams[0];
  for (int k = 1; k < kSlots; ++k) {
    if (!used_[k]) continue;
    IMGSTAT_CUDA(cudaEventRecord(ws_->stream_done[k], ws_->streams[k]));
    IMGSTAT_CUDA(cudaStreamWaitEvent(s0, ws_->stream_done[k], 0));
  }
  const bool fine = is_float(layout_.type) && request_.distribution;
  if (whole_ && finished_) {
    if (request_.histogram && !request_.hist.explicit_range)
      launch_float_bins(whole_, layout_.pixels(), layout_.channels, layout_.type, histogram_out(),
                        ws_->device_results->running, kSlots, engine_.device(), s0);
    if (fine) {
      HistogramOut f{ws_->device_extra->fine, nullptr, nullptr, kFineBins, false, 0, 0};
      launch_float_bins(whole_, layout_.pixels(), layout_.channels, layout_.type, f, ws_->device_results->running,
                        kSlots, engine_.device(), s0);
    }
  }
  const size_t needed =
      offsetof(Results, counts) + sizeof(unsigned long long) * histogram_out().bins * layout_.channels;
  if (!one_block_) IMGSTAT_CUDA(cudaMemcpyAsync(ws_->host_results, ws_->device_results, needed, cudaMemcpyDeviceToHost, s0));
  if (fine && whole_ && finished_)
    IMGSTAT_CUDA(cudaMemcpyAsync(ws_->host_extra->fine, ws_->device_extra->fine,
                                 sizeof(uint64_t) * kFineBins * layout_.channels, cudaMemcpyDeviceToHost, s0));
  if (wants_colors())
    IMGSTAT_CUDA(cudaMemcpyAsync(ws_->host_extra->colors, ws_->device_extra->colors, color_words(layout_.channels) * 8,
                                 cudaMemcpyDeviceToHost, s0));
  IMGSTAT_CUDA(cudaStreamSynchronize(s0));
}

std::optional<Partial> GpuAnalysis::partial() {
  if (finished_ || one_block_ || whole_) return std::nullopt;
  flush();
  collect();
  return partial_from_host();
}

Result GpuAnalysis::finish() {
  if (finished_) fail(ErrorCode::kInternal, "analysis finished twice");
  finished_ = true;
  flush();
  collect();
  synced_ = true;
  return result_of(partial_from_host(), request_, "cuda");
}

Partial GpuAnalysis::partial_from_host() const {
  const Results* h = ws_->host_results;
  const HistogramOut out = histogram_out();
  const SampleType type = layout_.type;
  Partial p;
  p.type = type;
  if (wants_colors()) p.colors.assign(ws_->host_extra->colors, ws_->host_extra->colors + color_words(layout_.channels));
  for (uint32_t ch = 0; ch < layout_.channels; ++ch) {
    Extremes at;
    if (request_.positions)
      for (int k = 0; k < kSlots; ++k) merge(at, h->extremes[k * kMaxChannels + ch]);
    if (sample_size(type) == 1) {
      // Counts by raw byte; int8 flips the sign bit to index by v + 128.
      std::vector<uint64_t> values(256);
      const size_t flip = type == SampleType::kInt8 ? 0x80 : 0;
      for (size_t i = 0; i < 256; ++i) values[i ^ flip] = h->counts[ch * 256 + i];
      p.channels.push_back(partial_of_values(values.data(), type, request_));
      p.channels.back().extremes = at;
      continue;
    }
    if (values_) {  // counts by offset from the type's lowest value: exactly what partial_of_values takes
      std::vector<uint64_t> values(h->counts + ch * 65536, h->counts + (ch + 1) * 65536);
      p.channels.push_back(partial_of_values(values.data(), type, request_));
      p.channels.back().extremes = at;
      continue;
    }
    ChannelPartial c;
    c.extremes = at;
    if (!is_float(type)) {
      // Sums of offsets u = v - lo, exact: sum v = sum u + n lo,
      // sum v^2 = sum u^2 + 2 lo sum u + n lo^2.
      const IntAccum& a = h->ints[ch];
      const int128 lo = type_lo(type), n = sent_, su = a.sum;
      const uint128 squ = (static_cast<uint128>(a.sumsq_hi) << 64) | a.sumsq_lo;
      c.ints.n = sent_;
      c.ints.min = static_cast<int64_t>(a.min) + type_lo(type);
      c.ints.max = static_cast<int64_t>(a.max) + type_lo(type);
      c.ints.sum = su + n * lo;
      c.ints.sumsq = static_cast<uint128>(static_cast<int128>(squ) + 2 * lo * su + n * lo * lo);
    } else {
      for (int k = 0; k < kSlots; ++k) merge(c.floats, h->running[k * kMaxChannels + ch]);
      if (request_.distribution && whole_ && finished_)
        c.fine.assign(ws_->host_extra->fine + ch * kFineBins, ws_->host_extra->fine + (ch + 1) * kFineBins);
    }
    if (request_.histogram) {
      c.histogram.counts.assign(h->counts + ch * out.bins, h->counts + (ch + 1) * out.bins);
      if (out.explicit_range) {
        c.histogram.underflow = h->underflow[ch];
        c.histogram.overflow = h->overflow[ch];
      }
    }
    p.channels.push_back(std::move(c));
  }
  return p;
}

class CudaStream final : public CheckpointStream {
 public:
  CudaStream(CudaEngine& engine, const Layout& layout, const StatsRequest& request)
      : layout_(layout), destrider_(layout), analysis_(engine, layout, request, kStreamWait) {}

  void feed(const void* data, size_t bytes) override {
    if (destrider_.consumed() + bytes > layout_.stride() * layout_.height)
      fail(ErrorCode::kInvalidArgument, "more data than the layout holds");
    destrider_.feed(static_cast<const uint8_t*>(data), bytes,
                    [&](const uint8_t* p, uint64_t pixels, bool) { analysis_.add(p, pixels); });
  }

  Result finish() override {
    if (!destrider_.complete())
      fail(ErrorCode::kInvalidArgument, "stream ended after " + std::to_string(destrider_.consumed()) +
                                            " bytes; the layout needs " + std::to_string(layout_.min_bytes()));
    return analysis_.finish();
  }

  std::optional<Partial> partial() override { return analysis_.partial(); }

 private:
  Layout layout_;
  Destrider destrider_;
  GpuAnalysis analysis_;
};

std::unique_ptr<StreamAnalysis> CudaEngine::open_stream(const Layout& layout, const StatsRequest& request) {
  validate(layout, request);
  IMGSTAT_CUDA(cudaSetDevice(options_.device));
  return std::make_unique<CudaStream>(*this, layout, request);
}

}  // namespace

std::unique_ptr<Engine> make_engine(const CudaOptions& options) { return std::make_unique<CudaEngine>(options); }

}  // namespace imgstat::cuda

namespace imgstat {

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

std::unique_ptr<Engine> make_cuda_engine(const EngineOptions& options, std::string* why_not, bool* absent) {
  try {
    cuda::set_error_reporter(options.on_error);
    cuda::CudaOptions o;
    o.device = options.cuda_device;
    o.memory_limit = options.cuda_memory_limit;
    o.host_threads = options.cpu_threads;
    o.wait = options.cuda_wait;
    return cuda::make_engine(o);
  } catch (const Error& e) {
    if (why_not) *why_not = e.what();
    if (absent) *absent = e.code() == ErrorCode::kNotFound;
    return nullptr;
  } catch (const std::exception& e) {
    if (why_not) *why_not = e.what();
    return nullptr;
  }
}

}  // namespace imgstat
