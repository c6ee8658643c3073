#include "cuda/cuda_engine.hpp"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <thread>
#include <chrono>
#include <cstring>
#include <optional>
#include <vector>

#include "common/luminance.hpp"
#include "cuda/analysis.hpp"
#include "cuda/cuda_check.hpp"
#include "common/parts.hpp"
#include "common/background.hpp"
#include "common/hashes.hpp"
#include "common/quality.hpp"
#include "cuda/dispatch/dispatch.hpp"
#include "cuda/parts.hpp"
#include "cuda/quality.hpp"
#include "cuda/stream.hpp"
#include "cuda/tuning/host.hpp"
#include "cuda/workspace.hpp"

namespace imgstat::cuda {
namespace {

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
    pool_.emplace(options.device, dev_, budget_, options.workspaces, options.workspaces_at_start);
    lane_pieces_ = std::make_unique<LanePieces>(options.device);
    gpu_ = GpuContext{options.device, dev_, &budget_, &*pool_, &arena_, lane_pieces_.get()};
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
      if (is_float(t)) continue;
      // The part kernels: a mask, 16- and 32-bit labels, tiles; with and without positions.
      const ImageView view{pixels.data(), Layout{64, 64, 3, t, 0}};
      std::vector<uint32_t> labels(64 * 64);
      for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<uint32_t>(i % 5);
      Parts parts;
      parts.kind = PartsKind::kMask;
      parts.map = PartMapView{pixels.data(), 64, 64, 1, 0, MapType::kUint8, 0};
      for (const StatsRequest& r : {StatsRequest{}, all}) {
        parts.kind = PartsKind::kMask;
        parts.map = PartMapView{pixels.data(), 64, 64, 1, 0, MapType::kUint8, 0};
        analyze_parts(view, parts, r);
        parts.kind = PartsKind::kLabels;
        parts.map = PartMapView{labels.data(), 64, 64, 1, 0, MapType::kUint32, 0};
        analyze_parts(view, parts, r);
        parts.map = PartMapView{labels.data(), 64, 64, 2, 0, MapType::kUint16, 0};
        analyze_parts(view, parts, r);
        parts.kind = PartsKind::kTiles;
        parts.columns = parts.rows = 2;
        analyze_parts(view, parts, r);
      }
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

  // Per-channel histogram ranges are the engine's own words to itself
  // (measured_request()), not a caller's: refused as the CPU's would be.
  static void refuse_channel_hists(const StatsRequest& request) {
    if (!request.channel_hists.empty()) fail(ErrorCode::kUnimplemented, "per-channel histograms are the CPU's");
  }
  // What only the CPU engine computes (kUnimplemented: the fallback engine
  // takes it there, as no fault): per-channel histograms, and sigma
  // clipping of float samples, which needs every sample sorted.
  static void refuse_cpu_only(const Layout& layout, const StatsRequest& request) {
    refuse_channel_hists(request);
    if (request.robust && is_float(measured_layout(layout, request).type))
      fail(ErrorCode::kUnimplemented, "sigma clipping of float samples is the CPU's");
  }

  Result analyze(const ImageView& image, const StatsRequest& request) override {
    validate(image.layout, request);
    refuse_cpu_only(image.layout, request);
    if (!image.data) fail(ErrorCode::kInvalidArgument, "image data is null");
    IMGSTAT_CUDA(cudaSetDevice(options_.device));
    Result result =
        has_luminance(image.layout, request) ? analyze_uploaded(image, request) : analyze_streamed(image, request);
    // Quality measures are the host's for now (common/quality.cpp): the
    // same code, so the same bits, as the CPU engine.
    add_host_measures(image, request, result);
    return result;
  }

  // Through the staging ring, chunk by chunk: the image is never whole on the device.
  Result analyze_streamed(const ImageView& image, const StatsRequest& request) {
    const Layout& l = image.layout;
    GpuAnalysis analysis(gpu_, l, request, kAnalyzeWait);
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

  // Packed pixels are read straight into the staging ring; padded rows and
  // the luminance (whole pixels on the device) go as a stream does.
  Result analyze_read(const Layout& layout, const StatsRequest& request, const ByteReader& read) override {
    if (layout.stride() != layout.row_bytes() || has_luminance(layout, request))
      return Engine::analyze_read(layout, request, read);
    validate(layout, request);
    refuse_cpu_only(layout, request);
    IMGSTAT_CUDA(cudaSetDevice(options_.device));
    GpuAnalysis analysis(gpu_, layout, request, kAnalyzeWait);
    analysis.add_read(read, 0, layout.pixels());
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

  // Rectangles are views analyzed as images are; masks, labels and tiles of
  // integer samples go to the part kernels; the rest is the CPU's
  // (kUnimplemented: the fallback engine takes it there, as no fault).
  Result analyze_parts(const ImageView& image, const Parts& parts, const StatsRequest& request) override {
    if (parts.kind == PartsKind::kWhole) return analyze(image, request);
    validate(image.layout, request);
    refuse_cpu_only(image.layout, request);
    if (!image.data) fail(ErrorCode::kInvalidArgument, "image data is null");
    validate(image.layout, parts);
    IMGSTAT_CUDA(cudaSetDevice(options_.device));
    if (parts.kind == PartsKind::kRects) {
      check_answer_bytes(parts.rects.size(), image.layout, parts, request);
      return analyze_each_rect(image, parts, request, "cuda", false,
                               [this](const ImageView& v, const StatsRequest& r) { return analyze_streamed(v, r); });
    }
    if (!part_kernels_take(image.layout, parts))
      fail(ErrorCode::kUnimplemented,
           "parts of float images, tiles of volumes, and parts of images of 2^32 pixels or more are the CPU's");
    return analyze_parts_on_gpu(gpu_, image, parts, request);
  }


  // Host memory: a whole image goes through the fixed staging ring; masks,
  // labels and tiles bring their counts back (analyze_parts_on_gpu): the
  // counts, the kernels' accumulators and slots, a joint histogram a part,
  // and a mask of another type as a byte a pixel. Colour spaces and floats
  // go to the device or to the CPU engine (its own bound).
  uint64_t working_bytes(const Layout& image, const StatsRequest& asked, const Parts* parts) const override {
    // A joint histogram's counts come back: the copy, the partial, the result.
    const uint64_t joint_counts = asked.joint.axes ? 3 * (asked.joint.total_bins() + 1) * 8 : 0;
    if (!parts || parts->kind == PartsKind::kWhole) {
      // The host's measures (quality, meshes, hashes), of a device image
      // from its copy on the host.
      const uint32_t threads = std::thread::hardware_concurrency();
      uint64_t host = 0;
      if (asked.quality) host += quality_working_bytes(image, threads);
      if (asked.hashes) host += hashes_working_bytes(image);
      host += background_working_bytes(image, asked.background, threads);
      if (host) host += image.pixels() * image.pixel_bytes();
      return joint_counts + host;
    }
    if (parts->kind == PartsKind::kRects) return joint_counts;
    // Float parts are the CPU engine's (analyze_parts says UNIMPLEMENTED):
    // its estimate is theirs, not counts of 2^32 float values.
    if (!part_kernels_take(image, *parts)) return joint_counts;
    const Layout l = measured_layout(image, asked);
    const StatsRequest request = measured_request(asked, image);
    uint64_t count = 1;
    if (parts->kind == PartsKind::kTiles) count = parts->tile_count();
    if (parts->kind == PartsKind::kLabels) {
      const size_t bits = map_sample_size(parts->map.type) * 8;
      count = std::min<uint64_t>(parts->max_parts, bits <= 16 ? uint64_t{1} << bits : l.pixels());
    }
    count = std::min<uint64_t>(count, UINT32_MAX);
    // Sets past kMaxPartCountBytes are refused on the labels found: the
    // estimate from the most labels the map's type holds stops there.
    const uint64_t set = std::min(kMaxPartCountBytes, part_count_bytes(static_cast<uint32_t>(count), l.channels, l.type, request));
    const uint64_t accums = count * l.channels * sizeof(PartAccum);
    const uint64_t joint = request.joint.axes ? count * (request.joint.total_bins() + 1) * 8 : 0;
    return l.pixels() + 2 * set + accums + joint;
  }

  bool takes_device_images() const override { return !device_lost(options_.device); }
  bool measures_on_device(const Layout& layout, const StatsRequest& request) const override {
    return cuda::measures_on_device(layout, request);
  }

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
    refuse_cpu_only(given.layout, request);
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
      GpuAnalysis analysis(gpu_, image.layout, request, kDeviceImageWait);
      analysis.add_device(static_cast<const uint8_t*>(image.data), image.layout.pixels());
      result = analysis.finish();
    }
    if (has_luminance(image.layout, request)) {
      result.has_luminance = true;
      result.luminance = device_luminance(image, request);
    }
    if (measures_on_device(image.layout, request)) {
      device_measures(image, request, dev_, budget_, result);
    } else if (needs_host_measures(request)) {  // measured on the host (see analyze()), from a copy of the pixels
      // On this thread's stream: the legacy default stream's copy would wait
      // for, and hold up, every other call's work on the device.
      std::vector<uint8_t> host(image.layout.pixels() * image.layout.pixel_bytes());
      IMGSTAT_CUDA(cudaMemcpyAsync(host.data(), image.data, host.size(), cudaMemcpyDeviceToHost, cudaStreamPerThread));
      IMGSTAT_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
      add_host_measures(ImageView{host.data(), image.layout}, request, result);
    }
    return result;
  }

  Result analyze_parts_device(const DeviceImageView& image, const Parts& parts, const StatsRequest& request) override {
    if (parts.kind == PartsKind::kWhole) return analyze_device(image, request);
    validate(image.layout, request);
    refuse_cpu_only(image.layout, request);
    if (!image.data) fail(ErrorCode::kInvalidArgument, "image data is null");
    if (image.device >= 0 && image.device != options_.device)
      fail(ErrorCode::kFailedPrecondition, "pixels on GPU " + std::to_string(image.device) +
                                               " given to the engine of GPU " + std::to_string(options_.device));
    validate(image.layout, parts);
    if (parts.kind == PartsKind::kRects || !part_kernels_take(image.layout, parts))
      fail(ErrorCode::kUnimplemented, "rectangles, parts of float images and tiles of volumes in GPU memory");
    IMGSTAT_CUDA(cudaSetDevice(options_.device));
    return analyze_device_parts_on_gpu(gpu_, image, parts, request);
  }

  // The luminance channel of pixels in device memory, computed there.
  ChannelStats device_luminance(const DeviceImageView& image, const StatsRequest& request) {
    const Layout plane{image.layout.width, image.layout.height, 1, luminance_type(image.layout.type), 0};
    const DeviceBuffer out(budget_, plane.pixels() * plane.pixel_bytes(), "the luminance plane");
    launch_luminance(static_cast<const uint8_t*>(image.data), image.layout.pixels(), image.layout.channels,
                     image.layout.type, request.rgb, out.data(), dev_, cudaStreamPerThread);
    IMGSTAT_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
    GpuAnalysis analysis(gpu_, plane, luminance_request(request), kDeviceImageWait);
    analysis.add_device(static_cast<const uint8_t*>(out.data()), plane.pixels());
    return analysis.finish().channels.front();
  }

 private:
  CudaOptions options_;
  DeviceBudget budget_;
  tbb::task_arena arena_;
  DeviceInfo dev_{};
  EngineInfo info_;
  std::optional<WorkspacePool> pool_;  // made once the device is set up
  std::unique_ptr<LanePieces> lane_pieces_;
  GpuContext gpu_;
};

std::unique_ptr<StreamAnalysis> CudaEngine::open_stream(const Layout& layout, const StatsRequest& request) {
  validate(layout, request);
  refuse_cpu_only(layout, request);
  IMGSTAT_CUDA(cudaSetDevice(options_.device));
  return open_cuda_stream(gpu_, layout, request);
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
    o.workspaces = options.cuda_workspaces;
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
