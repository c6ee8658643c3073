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
// How long an image waits for a free workspace before the CPU takes it. A
// stream's session waits as long: it holds a workspace only while it has
// bytes to compute, never while its client is slow to send them (pause()).
constexpr std::chrono::milliseconds kAnalyzeWait{500};
constexpr std::chrono::milliseconds kStreamWait = kAnalyzeWait;
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

// Float pixels binned over their own range wait on the device for the
// second pass. A whole image's bytes are at hand: one buffer of its size. A
// stream's come as its client sends them: a piece each time a chunk goes up,
// so what a stream holds grows with what it was sent, never with what its
// header declared.
class KeptPixels {
 public:
  struct Piece {
    uint8_t* data;
    uint64_t first;     // the image's pixel index of the piece's first pixel
    uint64_t pixels;    // filled
    uint64_t capacity;  // pixels
  };
  KeptPixels(DeviceBudget& budget, uint64_t pixel_bytes, int device)
      : budget_(budget), pixel_bytes_(pixel_bytes), device_(device) {}
  ~KeptPixels() {
    if (pieces_.empty()) return;
    // Every session that wrote or read the pieces has synchronized.
    IMGSTAT_CUDA_REPORT(cudaSetDevice(device_));
    for (const Piece& p : pieces_) {
      IMGSTAT_CUDA_REPORT(cudaFreeAsync(p.data, cudaStreamPerThread));
      budget_.give(p.capacity * pixel_bytes_);
    }
    IMGSTAT_CUDA_REPORT(cudaStreamSynchronize(cudaStreamPerThread));
  }
  KeptPixels(const KeptPixels&) = delete;
  KeptPixels& operator=(const KeptPixels&) = delete;

  // Room for `pixels` more in one buffer, taken now.
  void reserve(uint64_t pixels, cudaStream_t s) { allocate(pixels, s); }
  // Where the next `pixels` go, ordered on s.
  uint8_t* append(uint64_t pixels, cudaStream_t s) {
    if (pieces_.empty() || pieces_.back().capacity - pieces_.back().pixels < pixels) allocate(pixels, s);
    Piece& p = pieces_.back();
    uint8_t* at = p.data + p.pixels * pixel_bytes_;
    p.pixels += pixels;
    total_ += pixels;
    return at;
  }
  const std::vector<Piece>& pieces() const { return pieces_; }

 private:
  void allocate(uint64_t pixels, cudaStream_t s) {
    const uint64_t bytes = pixels * pixel_bytes_;
    budget_.take(bytes, "this image");
    void* p = nullptr;
    if (cudaMallocAsync(&p, bytes, s) != cudaSuccess) {
      cudaGetLastError();
      budget_.give(bytes);
      fail(ErrorCode::kResourceExhausted, "GPU out of memory for " + std::to_string(bytes >> 20) +
                                              " MiB of a float image's pixels");
    }
    pieces_.push_back(Piece{static_cast<uint8_t*>(p), total_, 0, pixels});
  }

  DeviceBudget& budget_;
  uint64_t pixel_bytes_;
  int device_;
  uint64_t total_ = 0;
  std::vector<Piece> pieces_;
};

// Floats binned over [min, max] need every pixel before their second pass.
bool keeps_pixels(const Layout& layout, const StatsRequest& request) {
  return is_float(layout.type) && ((request.histogram && !request.hist.explicit_range) || request.distribution);
}

// Where one session of a stream sits in its image: it starts where the last
// one ended, and a float stream's pixels stay with the stream across sessions.
struct Session {
  uint64_t first = 0;           // the image's pixel index of the session's first pixel
  KeptPixels* kept = nullptr;   // keeps_pixels(): the stream's pieces
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

  // The driver maps pinned pages into the process as the CPU first touches
  // them: a server touches its workspaces at start, so that its idle
  // resident figure is what it holds, not something its first calls add.
  void touch() {
    for (uint8_t* p : pinned) std::memset(p, 0, kSlotBytes);
    std::memset(static_cast<void*>(host_results), 0, sizeof(Results));
    if (host_extra) std::memset(static_cast<void*>(host_extra), 0, sizeof(ExtraBuffers));
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

// One image's accumulation, or one session of a stream's: whole pixels in
// order, staged through the workspace's ring (or sent straight from pinned
// memory), kernels per chunk. It holds the workspace while it lives.
class GpuAnalysis {
 public:
  GpuAnalysis(CudaEngine& engine, const Layout& layout, const StatsRequest& request,
              std::chrono::milliseconds wait, const Session* session = nullptr);
  ~GpuAnalysis();
  GpuAnalysis(const GpuAnalysis&) = delete;
  GpuAnalysis& operator=(const GpuAnalysis&) = delete;

  void add(const uint8_t* pixels, uint64_t count);         // pageable memory: staged
  void add_pinned(const uint8_t* pixels, uint64_t count);  // page-locked memory: sent as is
  void add_device(const uint8_t* pixels, uint64_t count);  // already on the device: no transfer
  // Sends what is staged on its way (a session about to end).
  void flush();
  // What the pixels added so far add up to, waiting for their work to
  // finish; empty where that needs the rest of the image (floats binned over
  // their own range) or would disturb it (one-block images).
  std::optional<Partial> partial();
  Result finish();
  // The same, before result_of(): a stream merges it with its earlier sessions'.
  Partial finish_partial();

 private:
  void submit(const uint8_t* host, uint64_t pixels);
  // The passes that run on one chunk alone: `pixels` device pixels at dst,
  // the image's from `first` on, on the streams and buffers of `slot`.
  void launch_passes(const uint8_t* dst, uint64_t first, uint64_t pixels, int slot);
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
  uint64_t first_ = 0;     // the image's pixel index of this analysis's first pixel
  uint64_t sent_ = 0;      // pixels submitted
  // Floats binned over [min, max]: the pixels stay on the device, in the
  // stream's pieces or, for a whole image, in own_kept_. Pieces before
  // kept_before_ came in earlier sessions: finish() counts them again.
  std::optional<KeptPixels> own_kept_;
  KeptPixels* kept_ = nullptr;
  size_t kept_before_ = 0;
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
    // One workspace now and the others when calls at once first need them
    // (the CLI's --local pins a quarter), or all of them now, as far as the
    // memory limit allows, and never more (a server: see EngineOptions).
    free_.push_back(std::make_unique<Workspace>(dev_, budget_));
    max_workspaces_ = std::max(1, options.workspaces);
    if (options.workspaces_at_start) {
      try {
        free_.back()->ensure_extra();
        while (static_cast<int>(free_.size()) < max_workspaces_) {
          auto ws = std::make_unique<Workspace>(dev_, budget_);
          ws->ensure_extra();
          free_.push_back(std::move(ws));
        }
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kResourceExhausted) throw;
      }
      for (auto& ws : free_) ws->touch();
      max_workspaces_ = static_cast<int>(free_.size());
    }
    created_ = static_cast<int>(free_.size());
    if (options.workspaces_at_start) warm_up();
  }

  // Every pass once on a small image of each sample type: the kernels load
  // (and the driver takes what it needs for them) at start, not on a
  // server's first calls.
  void warm_up() {
    StatsRequest all;
    all.distribution = all.shape = all.positions = all.unique_colors = all.luminance = all.summary = true;
    std::vector<uint8_t> pixels(size_t{300} * 300 * 3 * 8);
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 7 % 61);
    for (SampleType t : {SampleType::kUint8, SampleType::kInt8, SampleType::kUint16, SampleType::kInt16,
                         SampleType::kFloat32, SampleType::kFloat64}) {
      analyze(ImageView{pixels.data(), Layout{300, 300, 3, t, 0}}, all);
      analyze(ImageView{pixels.data(), Layout{64, 64, 1, t, 0}}, StatsRequest{});  // one block
    }
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
    if (free_.empty() && created_ < max_workspaces_) {
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
      fail(ErrorCode::kResourceExhausted, "all " + std::to_string(max_workspaces_) + " GPU workspaces are busy");
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
  void use_device() { IMGSTAT_CUDA(cudaSetDevice(options_.device)); }
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
  int max_workspaces_ = 1;
};

GpuAnalysis::GpuAnalysis(CudaEngine& engine, const Layout& layout, const StatsRequest& request,
                         std::chrono::milliseconds wait, const Session* session)
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
    if (session) first_ = session->first;
    if (keeps_pixels(layout_, request_)) {
      if (session) {
        kept_ = session->kept;
        kept_before_ = kept_->pieces().size();
      } else {
        kept_ = &own_kept_.emplace(engine_.budget(), pixel_bytes_, engine_.device_ordinal());
        kept_->reserve(layout_.pixels(), ws_->streams[0]);
      }
    }
    used_[0] = true;
    // A session may end part way (its counts are read back): never one block.
    one_block_ = !session && sample_size(layout_.type) == 1 && layout_.pixels() * pixel_bytes_ <= kOneBlockHist8Bytes &&
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
  uint8_t* dst = kept_ ? kept_->append(pixels, s) : ws_->device_slot[slot_];
  IMGSTAT_CUDA(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, s));
  launch_passes(dst, first_ + sent_, pixels, slot_);
  IMGSTAT_CUDA(cudaEventRecord(ws_->slot_free[slot_], s));
  sent_ += pixels;
  slot_ = (slot_ + 1) % kSlots;
}

void GpuAnalysis::launch_passes(const uint8_t* dst, uint64_t first, uint64_t pixels, int slot) {
  const cudaStream_t s = ws_->streams[slot];
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
      launch_float_moments(dst, pixels, c, layout_.type, ws_->partials[slot], r->running + slot * kMaxChannels, dev, s);
      if (request_.histogram && request_.hist.explicit_range)
        launch_float_bins(dst, pixels, c, layout_.type, histogram_out(), nullptr, 0, dev, s);
      break;
  }
  if (request_.positions)
    launch_extremes(dst, pixels, first, c, layout_.type, ws_->extreme_partials[slot], r->extremes + slot * kMaxChannels,
                    dev, s);
  if (wants_colors()) launch_colors(dst, pixels, c, ws_->device_extra->colors, dev, s);
}

void GpuAnalysis::add_device(const uint8_t* p, uint64_t count) {
  flush();
  use_stream(slot_);
  cudaStream_t s = ws_->streams[slot_];
  if (one_block_) {  // the one-block kernel reads device memory as well as mapped host memory
    launch_hist8_one_block(p, count, layout_.channels, ws_->host_results->counts, s);
  } else if (kept_) {  // pass 2 needs the whole image in its own buffer
    uint8_t* dst = kept_->append(count, s);
    IMGSTAT_CUDA(cudaMemcpyAsync(dst, p, count * pixel_bytes_, cudaMemcpyDeviceToDevice, s));
    launch_passes(dst, first_ + sent_, count, slot_);
  } else {
    launch_passes(p, first_ + sent_, count, slot_);
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
  if (kept_ && finished_) {
    const std::vector<KeptPixels::Piece>& pieces = kept_->pieces();
    // Earlier sessions' counts went with their workspaces; their pixels did not.
    for (size_t i = 0; i < kept_before_; ++i) launch_passes(pieces[i].data, pieces[i].first, pieces[i].pixels, 0);
    for (const KeptPixels::Piece& piece : pieces) {
      if (request_.histogram && !request_.hist.explicit_range)
        launch_float_bins(piece.data, piece.pixels, layout_.channels, layout_.type, histogram_out(),
                          ws_->device_results->running, kSlots, engine_.device(), s0);
      if (fine) {
        HistogramOut f{ws_->device_extra->fine, nullptr, nullptr, kFineBins, false, 0, 0};
        launch_float_bins(piece.data, piece.pixels, layout_.channels, layout_.type, f, ws_->device_results->running,
                          kSlots, engine_.device(), s0);
      }
    }
  }
  const size_t needed =
      offsetof(Results, counts) + sizeof(unsigned long long) * histogram_out().bins * layout_.channels;
  if (!one_block_) IMGSTAT_CUDA(cudaMemcpyAsync(ws_->host_results, ws_->device_results, needed, cudaMemcpyDeviceToHost, s0));
  if (fine && kept_ && finished_)
    IMGSTAT_CUDA(cudaMemcpyAsync(ws_->host_extra->fine, ws_->device_extra->fine,
                                 sizeof(uint64_t) * kFineBins * layout_.channels, cudaMemcpyDeviceToHost, s0));
  if (wants_colors())
    IMGSTAT_CUDA(cudaMemcpyAsync(ws_->host_extra->colors, ws_->device_extra->colors, color_words(layout_.channels) * 8,
                                 cudaMemcpyDeviceToHost, s0));
  IMGSTAT_CUDA(cudaStreamSynchronize(s0));
}

std::optional<Partial> GpuAnalysis::partial() {
  if (finished_ || one_block_ || kept_) return std::nullopt;
  flush();
  collect();
  return partial_from_host();
}

Result GpuAnalysis::finish() { return result_of(finish_partial(), request_, "cuda"); }

Partial GpuAnalysis::finish_partial() {
  if (finished_) fail(ErrorCode::kInternal, "analysis finished twice");
  finished_ = true;
  flush();
  collect();
  synced_ = true;
  return partial_from_host();
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
      if (request_.distribution && kept_ && finished_)
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

// A stream computes in sessions: one takes a workspace when bytes arrive
// and gives it back when the caller pauses, what it counted merged into the
// stream's partial on the host. A stream waiting on its client holds no
// workspace, pinned slot or device buffer, so stalled callers neither make
// the server commit memory nor keep other calls off the GPU. Floats binned
// over their own range keep their pixels on the device, as they arrive,
// for the last session to count.
class CudaStream final : public CheckpointStream {
 public:
  CudaStream(CudaEngine& engine, const Layout& layout, const StatsRequest& request)
      : engine_(engine),
        layout_(layout),
        request_(request),
        destrider_(layout),
        keeps_(keeps_pixels(layout, request)),
        kept_(engine.budget(), layout.pixel_bytes(), engine.device_ordinal()),
        counted_(empty_partial(layout.type, layout.channels, request)) {}

  void feed(const void* data, size_t bytes) override {
    if (destrider_.consumed() + bytes > layout_.stride() * layout_.height)
      fail(ErrorCode::kInvalidArgument, "more data than the layout holds");
    engine_.use_device();  // feeds come on whichever thread the caller has
    destrider_.feed(static_cast<const uint8_t*>(data), bytes, [&](const uint8_t* p, uint64_t pixels, bool) {
      session().add(p, pixels);
      fed_ += pixels;
    });
  }

  void pause() override {
    if (!session_) return;
    engine_.use_device();
    if (keeps_)
      session_->flush();
    else
      merge(counted_, *session_->partial());
    session_.reset();
  }

  Result finish() override {
    if (!destrider_.complete())
      fail(ErrorCode::kInvalidArgument, "stream ended after " + std::to_string(destrider_.consumed()) +
                                            " bytes; the layout needs " + std::to_string(layout_.min_bytes()));
    engine_.use_device();
    if (keeps_) {  // the last session counts every piece
      const Result r = session().finish();
      session_.reset();  // a finished stream holds no workspace
      return r;
    }
    if (session_) {
      merge(counted_, session_->finish_partial());
      session_.reset();
    }
    return result_of(counted_, request_, "cuda");
  }

  std::optional<Partial> partial() override {
    if (keeps_) return std::nullopt;
    engine_.use_device();
    Partial p = counted_;
    if (session_) merge(p, *session_->partial());
    return p;
  }

 private:
  GpuAnalysis& session() {
    if (!session_) {
      const Session at{fed_, keeps_ ? &kept_ : nullptr};
      session_ = std::make_unique<GpuAnalysis>(engine_, layout_, request_, kStreamWait, &at);
    }
    return *session_;
  }

  CudaEngine& engine_;
  Layout layout_;
  StatsRequest request_;
  Destrider destrider_;
  bool keeps_;
  KeptPixels kept_;   // keeps_: every pixel so far, on the device
  Partial counted_;   // what ended sessions counted
  uint64_t fed_ = 0;  // pixels given to sessions
  std::unique_ptr<GpuAnalysis> session_;
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
    o.workspaces_at_start = options.cuda_workspaces_at_start;
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
