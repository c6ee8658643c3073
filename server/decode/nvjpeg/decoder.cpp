// The nvJPEG decoder: one thread owns the library's handles and states and
// decodes what callers queue, in batches. Files the hardware backend takes
// (baseline Huffman) go to it together in one call; the rest go one by one
// to the GPU hybrid backend (batching does not pay there).
#include <cuda_runtime.h>

#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "decode/gpu_jpeg.hpp"
#include "decode/nvjpeg/api.hpp"
#include "imgstat/trace.hpp"

namespace imgstat {
namespace {

using nvjpeg::Api;
using nvjpeg::Status;

// The first frame header's first component: sampling factors 1x1? A gray
// JPEG may declare 2x2 (legal, and meaningless with one component).
bool gray_sampling_is_1x1(const uint8_t* p, size_t n) {
  size_t i = 2;
  while (i + 4 <= n) {
    if (p[i] != 0xff) return false;
    const uint8_t marker = p[i + 1];
    if (marker == 0xff) {
      ++i;
      continue;
    }
    const size_t len = (size_t{p[i + 2]} << 8) | p[i + 3];
    const bool sof = marker >= 0xc0 && marker <= 0xcf && marker != 0xc4 && marker != 0xc8 && marker != 0xcc;
    if (sof) return i + 11 < n && len >= 11 && p[i + 11] == 0x11;  // component 0's H and V nibbles
    if (marker == 0xda || marker == 0xd9) return false;
    i += 2 + len;
  }
  return false;
}

std::string cuda_text(cudaError_t e) { return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")"; }

class NvjpegTicket final : public GpuJpegDecoder::Ticket {
 public:
  NvjpegTicket(std::mutex& mu, std::condition_variable& changed, uint32_t& expected)
      : mu_(mu), changed_(changed), expected_(expected) {}
  ~NvjpegTicket() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!taken) {
      --expected_;
      changed_.notify_all();
    }
  }
  bool taken = false;  // the batcher has counted it off

 private:
  std::mutex& mu_;
  std::condition_variable& changed_;
  uint32_t& expected_;
};

struct Job {
  const uint8_t* data;
  size_t size;
  NvjpegTicket* ticket;
  std::promise<GpuDecodedImage> done;
  // Filled by the batcher.
  int width = 0, height = 0, channels = 0;
  bool hardware = false;
  uint8_t* pixels = nullptr;
  nvjpeg::Planes planes{};
  Status status = nvjpeg::kSuccess;
  std::string error;  // set: refused before decoding
};

class NvjpegDecoder final : public GpuJpegDecoder {
 public:
  NvjpegDecoder(const Api& api, std::string soname, const GpuJpegOptions& options)
      : api_(api), soname_(std::move(soname)), options_(options) {
    check_cuda(cudaSetDevice(options_.device), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    // The hardware backend exists only on GPUs with JPEG engines (A100, H100, H200...).
    if (api_.create_ex(nvjpeg::kBackendHardware, nullptr, nullptr, 0, &hw_) == nvjpeg::kSuccess &&
        api_.state_create(hw_, &hw_state_) == nvjpeg::kSuccess &&
        api_.stream_create(hw_, &parsed_) == nvjpeg::kSuccess) {
      hardware_ = true;
    }
    check(api_.create_ex(nvjpeg::kBackendDefault, nullptr, nullptr, 0, &gpu_), "nvjpegCreateEx");
    check(api_.state_create(gpu_, &gpu_state_), "nvjpegJpegStateCreate");
    int major = 0, minor = 0, patch = 0;
    api_.get_property(0, &major);
    api_.get_property(1, &minor);
    api_.get_property(2, &patch);
    version_ = std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
    thread_ = std::thread([this] { run(); });
  }

  ~NvjpegDecoder() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
    if (parsed_) api_.stream_destroy(parsed_);
    if (hw_state_) api_.state_destroy(hw_state_);
    if (hw_) api_.destroy(hw_);
    if (gpu_state_) api_.state_destroy(gpu_state_);
    if (gpu_) api_.destroy(gpu_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::unique_ptr<Ticket> announce() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++expected_;
    return std::make_unique<NvjpegTicket>(mu_, changed_, expected_);
  }

  GpuDecodedImage decode(Ticket& ticket, const uint8_t* data, size_t size) override {
    auto job = std::make_shared<Job>();
    job->data = data;
    job->size = size;
    job->ticket = &static_cast<NvjpegTicket&>(ticket);
    std::future<GpuDecodedImage> result = job->done.get_future();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) fail(ErrorCode::kUnavailable, "the GPU JPEG decoder is shutting down");
      queue_.push_back(job);
    }
    changed_.notify_all();
    return result.get();
  }

  std::string description() const override {
    return "nvJPEG " + version_ + " (" + soname_ + "), " + (hardware_ ? "hardware backend" : "GPU hybrid backend");
  }

 private:
  static void check_cuda(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
      cudaGetLastError();
      fail(ErrorCode::kUnavailable, std::string(what) + ": " + cuda_text(e));
    }
  }
  static void check(Status s, const char* what) {
    if (s != nvjpeg::kSuccess) fail(ErrorCode::kUnavailable, std::string(what) + ": " + nvjpeg::status_name(s));
  }

  // Takes the next batch: what is queued, after waiting at most the window
  // from the first arrival for announced JPEGs still on their way.
  std::vector<std::shared_ptr<Job>> next_batch() {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return {};
    const auto until = std::chrono::steady_clock::now() + options_.batch_window;
    changed_.wait_until(lock, until, [this] {
      return stopping_ || queue_.size() >= options_.batch_max || expected_ <= queue_.size();
    });
    std::vector<std::shared_ptr<Job>> batch;
    while (!queue_.empty() && batch.size() < options_.batch_max) {
      batch.push_back(queue_.front());
      queue_.pop_front();
      batch.back()->ticket->taken = true;
      --expected_;
    }
    return batch;
  }

  void run() {
    const cudaError_t device = cudaSetDevice(options_.device);
    for (;;) {
      std::vector<std::shared_ptr<Job>> batch = next_batch();
      if (batch.empty()) return;
      try {
        if (device != cudaSuccess) fail(ErrorCode::kUnavailable, "cudaSetDevice: " + cuda_text(device));
        decode_batch(batch);
      } catch (const Error& e) {
        // Nothing of this batch was answered yet: every caller decodes on the CPU.
        for (auto& job : batch) {
          if (job->pixels) cudaFreeAsync(job->pixels, stream_);
          job->done.set_exception(std::make_exception_ptr(e));
        }
        cudaStreamSynchronize(stream_);
        cudaGetLastError();
      }
    }
  }

  // Size, channels, backend and device memory for one job; false when nvJPEG
  // will not take it.
  bool prepare(Job& job) {
    int widths[nvjpeg::kMaxComponents] = {}, heights[nvjpeg::kMaxComponents] = {}, components = 0;
    nvjpeg::Subsampling css = nvjpeg::kCssUnknown;
    Status s = api_.get_image_info(gpu_, job.data, job.size, &components, &css, widths, heights);
    if (s != nvjpeg::kSuccess) {
      job.error = std::string("nvJPEG could not read the header: ") + nvjpeg::status_name(s);
      return false;
    }
    if (components != 1 && components != 3) {
      job.error = "nvJPEG: " + std::to_string(components) + " components (CMYK or YCCK) are decoded on the CPU";
      return false;
    }
    if (css == nvjpeg::kCssUnknown) {
      job.error = "nvJPEG: unknown chroma subsampling";
      return false;
    }
    if (components == 1 && !gray_sampling_is_1x1(job.data, job.size)) {
      // Measured: the hardware backend returns wrong pixels for these.
      job.error = "nvJPEG: a gray JPEG with sampling factors other than 1x1 is decoded on the CPU";
      return false;
    }
    job.width = widths[0];
    job.height = heights[0];
    job.channels = components == 1 ? 1 : 3;
    if (hardware_) {
      int unsupported = 1;
      if (api_.stream_parse(hw_, job.data, job.size, 0, 0, parsed_) == nvjpeg::kSuccess &&
          api_.batched_supported(hw_, parsed_, &unsupported) == nvjpeg::kSuccess)
        job.hardware = unsupported == 0;
    }
    const size_t pitch = static_cast<size_t>(job.width) * job.channels;
    check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&job.pixels), pitch * job.height, stream_),
               "cudaMallocAsync for decoded pixels");
    job.planes.channel[0] = job.pixels;
    job.planes.pitch[0] = pitch;
    return true;
  }

  // One state serves every call: its buffers are reused by the next call,
  // so each call's work must be over before the next one starts.
  void decode_one(Job& job) {
    job.hardware = false;
    job.status = api_.decode(gpu_, gpu_state_, job.data, job.size,
                             job.channels == 1 ? nvjpeg::kOutputY : nvjpeg::kOutputRgbi, &job.planes, stream_);
    check_cuda(cudaStreamSynchronize(stream_), "nvJPEG decode");
  }

  void decode_batch(std::vector<std::shared_ptr<Job>>& batch) {
    TraceRange range("nvjpeg batch");
    std::vector<Job*> groups[2];  // hardware: gray, color
    for (auto& job : batch) {
      if (!prepare(*job)) continue;
      if (job->hardware)
        groups[job->channels == 1 ? 0 : 1].push_back(job.get());
      else
        decode_one(*job);
    }
    for (int g = 0; g < 2; ++g) {
      std::vector<Job*>& jobs = groups[g];
      if (jobs.empty()) continue;
      const nvjpeg::OutputFormat format = g == 0 ? nvjpeg::kOutputY : nvjpeg::kOutputRgbi;
      std::vector<const unsigned char*> data;
      std::vector<size_t> sizes;
      std::vector<nvjpeg::Planes> planes;
      for (Job* j : jobs) {
        data.push_back(j->data);
        sizes.push_back(j->size);
        planes.push_back(j->planes);
      }
      Status s = api_.batched_initialize(hw_, hw_state_, static_cast<int>(jobs.size()), 1, format);
      if (s == nvjpeg::kSuccess) s = api_.decode_batched(hw_, hw_state_, data.data(), sizes.data(), planes.data(), stream_);
      check_cuda(cudaStreamSynchronize(stream_), "nvJPEG batched decode");
      if (s != nvjpeg::kSuccess)
        for (Job* j : jobs) decode_one(*j);  // the hybrid backend, one by one
    }
    check_cuda(cudaStreamSynchronize(stream_), "nvJPEG decode");
    for (auto& job : batch) {
      if (!job->error.empty()) {
        job->done.set_exception(std::make_exception_ptr(Error(ErrorCode::kUnimplemented, job->error)));
        continue;
      }
      if (job->status != nvjpeg::kSuccess) {
        cudaFreeAsync(job->pixels, stream_);
        job->pixels = nullptr;
        job->done.set_exception(std::make_exception_ptr(
            Error(ErrorCode::kUnimplemented, std::string("nvJPEG: ") + nvjpeg::status_name(job->status))));
        continue;
      }
      GpuDecodedImage out;
      out.decoder = job->hardware ? "nvjpeg-hardware" : "nvjpeg-cuda";
      out.view.data = job->pixels;
      out.view.layout = Layout{static_cast<uint64_t>(job->width), static_cast<uint64_t>(job->height),
                               static_cast<uint32_t>(job->channels), SampleType::kUint8, 0};
      cudaStream_t stream = stream_;
      out.memory = std::shared_ptr<void>(job->pixels, [stream](void* p) { cudaFreeAsync(p, stream); });
      job->pixels = nullptr;
      job->done.set_value(std::move(out));
    }
  }

  const Api& api_;
  std::string soname_;
  std::string version_;
  GpuJpegOptions options_;
  cudaStream_t stream_ = nullptr;
  nvjpeg::Handle hw_ = nullptr, gpu_ = nullptr;
  nvjpeg::State hw_state_ = nullptr, gpu_state_ = nullptr;
  nvjpeg::JpegStream parsed_ = nullptr;
  bool hardware_ = false;

  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<Job>> queue_;
  uint32_t expected_ = 0;  // announced and not yet taken
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<GpuJpegDecoder> open_gpu_jpeg_decoder(const GpuJpegOptions& options, std::string* why_not) {
  std::string soname;
  const nvjpeg::Api* api = nvjpeg::load(why_not, &soname);
  if (!api) return nullptr;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || options.device >= count) {
    cudaGetLastError();
    if (why_not) *why_not = "no usable CUDA device";
    return nullptr;
  }
  try {
    return std::make_unique<NvjpegDecoder>(*api, soname, options);
  } catch (const Error& e) {
    if (why_not) *why_not = e.what();
    return nullptr;
  }
}

}  // namespace imgstat
