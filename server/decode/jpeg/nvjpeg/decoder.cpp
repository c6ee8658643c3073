// The nvJPEG decoder: lanes, threads that each own an nvJPEG state, decode
// what callers queue, in batches. It takes the files whose pixels and
// integrity it can vouch for (jpeg/verify.hpp: baseline Huffman, one scan,
// gray or YCbCr); the rest decode on the CPU. The caller's own thread reads
// the headers and unstuffs a small file's data for the check, so that a
// lane's time, the decoder's throughput, goes on the GPU's work. Files the
// hardware backend takes go to it together in one call, the rest one by one
// to the GPU hybrid backend (batching does not pay there). Beside the
// decode, on the SMs while the JPEG engines work, the entropy-coded data is
// checked as libjpeg checks it, and each lane's answering thread waits for
// those verdicts while the lane decodes its next batch; colour comes out as
// planes and is made RGB by libjpeg-turbo's own upsampling and conversion
// (gpu_check.cu).
#include <cuda_runtime.h>
#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "decode/jpeg/gpu.hpp"
#include "decode/jpeg/nvjpeg/api.hpp"
#include "decode/jpeg/nvjpeg/gpu_check.hpp"
#include "imgstat/trace.hpp"

namespace imgstat {
namespace {

using nvjpeg::Api;

// Launches of synchronizing rounds queued after a batch's first decode
// before its records come back; each block already converges within itself,
// so these only carry fixes across blocks. A batch that needs more gets
// them after its verdicts are read.
constexpr int kCheckRounds = 3;
// How long a lane spins on the GPU's work before it sleeps: a small batch
// is over sooner (and waking costs tens of microseconds), a batch of
// camera photos takes tens of milliseconds that a spinning core would burn.
constexpr std::chrono::microseconds kSpinBeforeSleep{2000};
// Files up to this size are unstuffed for the check by the calling thread,
// into a copy of their own, while the lanes decode other batches; larger
// ones by the lane, in its staging (no second copy of a large file).
constexpr size_t kCallerUnstuffsBytes = size_t{256} << 10;
// Batches a lane holds at once, decoded or waiting for their check: each
// has its pinned staging, as large as its files, kept for the next batch
// up to kStagingKeptBytes (a batch of small files fits).
constexpr int kSlotsPerLane = 3;
constexpr size_t kStagingKeptBytes = size_t{16} << 20;
using nvjpeg::Status;

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
  uint8_t* pixels = nullptr;      // packed output
  nvjpeg::PendingCheck check;  // this file's part of the lane's CheckBatch
  nvjpeg::Planes planes{};
  Status status = nvjpeg::kSuccess;
  std::string error;  // set: refused before decoding
};

// A batch between its decode and its answers: its check still running on
// the SMs while the lane decodes the next batch, and its lane's answering
// thread waits for the verdicts.
struct Slot {
  nvjpeg::CheckStaging staging;  // in use until the check's records are back
  nvjpeg::CheckBatch checks;
  cudaEvent_t checked = nullptr;  // after the batch's check on the lane's check stream
  std::vector<std::shared_ptr<Job>> batch;
  uint8_t* planes = nullptr;  // the colour files' Y, Cb, Cr as nvJPEG writes them, one allocation, until made RGB
};

// What one decoding thread owns: nvJPEG's states are not
// thread-safe (its handles are), and a stream of its own lets one lane's
// batch run on the JPEG engines while another lane parses the next.
struct Lane {
  cudaStream_t stream = nullptr;
  cudaStream_t check_stream = nullptr;  // the integrity check, beside the decode
  cudaEvent_t done = nullptr;           // blocking-sync: a lane that waits long sleeps
  Slot slots[kSlotsPerLane];
  bool hw_in_flight = false;  // a batched decode on hw_state not yet waited for
  // Slots free for the lane, and decoded ones for its answering thread.
  std::mutex slots_mu;
  std::condition_variable slots_changed;
  std::vector<Slot*> free_slots;
  std::deque<Slot*> decoded;
  bool lane_done = false;  // no more slots will be decoded
  std::thread answering;
  nvjpeg::State hw_state = nullptr, gpu_state = nullptr;
  std::thread thread;
};

class NvjpegDecoder final : public GpuJpegDecoder {
 public:
  NvjpegDecoder(const Api& api, std::string soname, const GpuJpegOptions& options)
      : api_(api), soname_(std::move(soname)), options_(options) {
    options_.lanes = std::max(1u, options_.lanes);
    try {
      open();
    } catch (...) {
      release();  // a constructor that throws gets no destructor
      throw;
    }
    for (auto& lane : lanes_) {
      Lane* l = lane.get();
      for (Slot& slot : l->slots) l->free_slots.push_back(&slot);
      l->thread = std::thread([this, l] { run(*l); });
      l->answering = std::thread([this, l] { answer_all(*l); });
    }
  }

  ~NvjpegDecoder() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    changed_.notify_all();
    for (auto& l : lanes_) {
      if (l->thread.joinable()) l->thread.join();
      if (l->answering.joinable()) l->answering.join();
    }
    release();
  }

 private:
  void open() {
    check_cuda(cudaSetDevice(options_.device), "cudaSetDevice");
    // The hardware backend exists only on GPUs with JPEG engines (A100, H100, H200...).
    hardware_ = api_.create_ex(nvjpeg::kBackendHardware, nullptr, nullptr, 0, &hw_) == nvjpeg::kSuccess;
    check(api_.create_ex(nvjpeg::kBackendDefault, nullptr, nullptr, 0, &gpu_), "nvjpegCreateEx");
    bool hardware_states = hardware_;
    for (uint32_t i = 0; i < options_.lanes; ++i) {
      lanes_.push_back(std::make_unique<Lane>());  // before any call that throws: release() frees it
      Lane& l = *lanes_.back();
      check_cuda(cudaStreamCreateWithFlags(&l.stream, cudaStreamNonBlocking), "cudaStreamCreate");
      check_cuda(cudaStreamCreateWithFlags(&l.check_stream, cudaStreamNonBlocking), "cudaStreamCreate");
      check_cuda(cudaEventCreateWithFlags(&l.done, cudaEventBlockingSync | cudaEventDisableTiming), "cudaEventCreate");
      for (Slot& slot : l.slots)
        check_cuda(cudaEventCreateWithFlags(&slot.checked, cudaEventBlockingSync | cudaEventDisableTiming),
                   "cudaEventCreate");
      check(api_.state_create(gpu_, &l.gpu_state), "nvjpegJpegStateCreate");
      if (hardware_states)
        hardware_states = api_.state_create(hw_, &l.hw_state) == nvjpeg::kSuccess;
    }
    if (hardware_ && !hardware_states) {  // the hybrid backend alone, then
      for (auto& l : lanes_) {
        if (l->hw_state) api_.state_destroy(l->hw_state);
        l->hw_state = nullptr;
      }
      hardware_ = false;
    }
    int major = 0, minor = 0, patch = 0;
    api_.get_property(0, &major);
    api_.get_property(1, &minor);
    api_.get_property(2, &patch);
    version_ = std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
  }

  void release() {
    for (auto& l : lanes_) {
      if (l->hw_state) api_.state_destroy(l->hw_state);
      if (l->gpu_state) api_.state_destroy(l->gpu_state);
      if (l->stream) cudaStreamDestroy(l->stream);
      if (l->check_stream) cudaStreamDestroy(l->check_stream);
      if (l->done) cudaEventDestroy(l->done);
      for (Slot& slot : l->slots)
        if (slot.checked) cudaEventDestroy(slot.checked);
    }
    for (nvjpeg::JpegStream s : free_streams_) api_.stream_destroy(s);
    if (hw_) api_.destroy(hw_);
    if (gpu_) api_.destroy(gpu_);
  }

 public:
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
    // What needs no lane is done here, on the caller's thread: a lane's time
    // is the decoder's throughput.
    {
      TraceRange range("jpeg admit");
      if (!admit(*job)) fail(ErrorCode::kUnimplemented, job->error);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) fail(ErrorCode::kUnavailable, "the GPU JPEG decoder is shutting down");
      queue_.push_back(job);
    }
    changed_.notify_all();
    return result.get();
  }

  std::string description() const override {
    return "nvJPEG " + version_ + " (" + soname_ + "), " + (hardware_ ? "hardware backend" : "GPU hybrid backend") +
           ", " + std::to_string(lanes_.size()) + " lane" + (lanes_.size() == 1 ? "" : "s");
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
  // from the first arrival for announced JPEGs still on their way. Empty
  // only when stopping.
  std::vector<std::shared_ptr<Job>> next_batch() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return {};
      const auto until = std::chrono::steady_clock::now() + options_.batch_window;
      changed_.wait_until(lock, until, [this] {
        return stopping_ || queue_.empty() || queue_.size() >= options_.batch_max || expected_ <= queue_.size();
      });
      if (!queue_.empty()) break;  // else another lane took them while this one waited
    }
    std::vector<std::shared_ptr<Job>> batch;
    while (!queue_.empty() && batch.size() < options_.batch_max) {
      batch.push_back(queue_.front());
      queue_.pop_front();
      batch.back()->ticket->taken = true;
      --expected_;
    }
    return batch;
  }

  void run(Lane& lane) {
    pthread_setname_np(pthread_self(), "nvjpeg-lane");  // for per-thread CPU time in /proc and profilers
    const cudaError_t device = cudaSetDevice(options_.device);
    for (;;) {
      std::vector<std::shared_ptr<Job>> batch = next_batch();
      if (batch.empty()) break;
      Slot* slot = nullptr;
      {
        std::unique_lock<std::mutex> lock(lane.slots_mu);
        lane.slots_changed.wait(lock, [&] { return !lane.free_slots.empty(); });
        slot = lane.free_slots.back();
        lane.free_slots.pop_back();
      }
      slot->batch = std::move(batch);
      bool decoded = false;
      try {
        if (device != cudaSuccess) fail(ErrorCode::kUnavailable, "cudaSetDevice: " + cuda_text(device));
        decode_batch(lane, *slot);
        decoded = true;
      } catch (const Error& e) {
        fail_slot(lane, *slot, e);
        cudaStreamSynchronize(lane.stream);
        cudaStreamSynchronize(lane.check_stream);
        cudaGetLastError();
        lane.hw_in_flight = false;
      }
      {
        std::lock_guard<std::mutex> lock(lane.slots_mu);
        if (decoded) lane.decoded.push_back(slot);
        else lane.free_slots.push_back(slot);
      }
      lane.slots_changed.notify_all();
    }
    {
      std::lock_guard<std::mutex> lock(lane.slots_mu);
      lane.lane_done = true;
    }
    lane.slots_changed.notify_all();
  }

  // The lane's answering thread: each decoded batch answered once its check
  // is over, while the lane decodes the next.
  void answer_all(Lane& lane) {
    pthread_setname_np(pthread_self(), "nvjpeg-answers");
    const cudaError_t device = cudaSetDevice(options_.device);
    for (;;) {
      Slot* slot = nullptr;
      {
        std::unique_lock<std::mutex> lock(lane.slots_mu);
        lane.slots_changed.wait(lock, [&] { return !lane.decoded.empty() || lane.lane_done; });
        if (lane.decoded.empty()) return;
        slot = lane.decoded.front();
        lane.decoded.pop_front();
      }
      try {
        if (device != cudaSuccess) fail(ErrorCode::kUnavailable, "cudaSetDevice: " + cuda_text(device));
        finish_batch(lane, *slot);
        slot->staging.shrink_to(kStagingKeptBytes);  // the check is over: nothing reads it
      } catch (const Error& e) {
        fail_slot(lane, *slot, e);  // finish_batch answers no one before its verdicts are in
        cudaGetLastError();
      }
      slot->batch.clear();
      {
        std::lock_guard<std::mutex> lock(lane.slots_mu);
        lane.free_slots.push_back(slot);
      }
      lane.slots_changed.notify_all();
    }
  }

  // Nothing of the slot's batch was answered yet: every caller decodes on
  // the CPU. Its memory is let go in stream order.
  void fail_slot(Lane& lane, Slot& slot, const Error& e) {
    for (auto& job : slot.batch) {
      if (job->pixels) cudaFreeAsync(job->pixels, lane.stream);
      job->pixels = nullptr;
      job->done.set_exception(std::make_exception_ptr(e));
    }
    slot.batch.clear();
    if (slot.planes) cudaFreeAsync(slot.planes, lane.stream);
    slot.planes = nullptr;
    slot.checks.abandon(lane.check_stream);
  }

  // Size, channels, backend and the check's unstuffed data for one job,
  // on the caller's thread; false (job.error set) when nvJPEG will not take it.
  bool admit(Job& job) {
    // Our header read decides what the GPU takes (nvJPEG then parses only
    // the headers of what the hardware backend gets).
    job.check.scan = parse_jpeg_scan(job.data, job.size);
    const JpegScan& scan = job.check.scan;
    if (!scan.covered) {
      job.error = "the GPU decodes the JPEGs whose pixels and integrity it can vouch for; this one (" + scan.why_not +
                  ") is decoded on the CPU";
      return false;
    }
    if (scan.components == 1 && (scan.h[0] != 1 || scan.v[0] != 1)) {
      // Measured: the hardware backend returns wrong pixels for these.
      job.error = "nvJPEG: a gray JPEG with sampling factors other than 1x1 is decoded on the CPU";
      return false;
    }
    if (scan.components == 3 && scan.h[0] == 4) {
      // Measured (H200, 2026-11-24): a few samples of most generated 4:1:1
      // files differ from libjpeg-turbo's, so their exactness cannot be shown.
      job.error = "nvJPEG: 4:1:1 chroma subsampling is decoded on the CPU";
      return false;
    }
    job.check.data = job.data;
    job.check.size = job.size;
    job.width = static_cast<int>(scan.width);
    job.height = static_cast<int>(scan.height);
    job.channels = static_cast<int>(scan.components);
    if (hardware_) {
      // The headers say whether the hardware takes it; parsing the whole
      // stream here would read every byte once more than the decode does.
      ParsedStream parsed(*this);
      const Status status = api_.stream_parse_header
                                ? api_.stream_parse_header(hw_, job.data, job.size, parsed.stream)
                                : api_.stream_parse(hw_, job.data, job.size, 0, 0, parsed.stream);
      int unsupported = 1;
      if (status == nvjpeg::kSuccess && api_.batched_supported(hw_, parsed.stream, &unsupported) == nvjpeg::kSuccess)
        job.hardware = unsupported == 0;
    }
    if (job.size <= kCallerUnstuffsBytes) {
      job.check.unstuffed.resize(job.size);
      job.check.segments = unstuff_jpeg_scan(scan, job.data, job.size, job.check.unstuffed.data());
    }
    return true;
  }

  // One of the decoder's parsed-stream objects, for one caller at a time
  // (nvJPEG's are not thread-safe): made when none is free, kept for the
  // next caller.
  struct ParsedStream {
    explicit ParsedStream(NvjpegDecoder& d) : d(d) {
      {
        std::lock_guard<std::mutex> lock(d.streams_mu_);
        if (!d.free_streams_.empty()) {
          stream = d.free_streams_.back();
          d.free_streams_.pop_back();
          return;
        }
      }
      check(d.api_.stream_create(d.hw_, &stream), "nvjpegJpegStreamCreate");
    }
    ~ParsedStream() {
      std::lock_guard<std::mutex> lock(d.streams_mu_);
      d.free_streams_.push_back(stream);
    }
    NvjpegDecoder& d;
    nvjpeg::JpegStream stream = nullptr;
  };

  // Lays a colour job's planes out from `at` (Y, then Cb and Cr at their
  // stored resolution; null: sizing only) and returns the bytes they take,
  // rounded to 256 so that the next job's start on that boundary.
  static size_t place_planes(Job& job, uint8_t* at) {
    const JpegScan& scan = job.check.scan;
    const size_t w = static_cast<size_t>(job.width), h = static_cast<size_t>(job.height);
    const size_t cw = (w + scan.h[0] - 1) / scan.h[0], ch = (h + scan.v[0] - 1) / scan.v[0];
    if (at) {
      job.planes.channel[0] = at;
      job.planes.pitch[0] = w;
      job.planes.channel[1] = at + w * h;
      job.planes.channel[2] = at + w * h + cw * ch;
      job.planes.pitch[1] = job.planes.pitch[2] = cw;
    }
    return (w * h + 2 * cw * ch + 255) / 256 * 256;
  }

  // Device memory for the batch's pixels, each job's its own (its caller
  // lets go of it), and the colour files' planes in one piece, on the lane's
  // stream.
  void allocate(Lane& lane, Slot& slot) {
    size_t planes = 0;
    for (const auto& job : slot.batch)
      if (job->channels == 3) planes += place_planes(*job, nullptr);
    if (planes)
      check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&slot.planes), planes, lane.stream),
                 "cudaMallocAsync for decoded planes");
    uint8_t* next = slot.planes;
    for (const auto& job : slot.batch) {
      const size_t w = static_cast<size_t>(job->width), h = static_cast<size_t>(job->height);
      check_cuda(cudaMallocAsync(reinterpret_cast<void**>(&job->pixels), w * h * job->channels, lane.stream),
                 "cudaMallocAsync for decoded pixels");
      if (job->channels == 1) {
        job->planes.channel[0] = job->pixels;
        job->planes.pitch[0] = w;
        continue;
      }
      next += place_planes(*job, next);
    }
  }

  // A lane's state serves each of its calls in turn and its buffers are
  // reused by the next call: each call's work must be over before the next.
  void decode_one(Lane& lane, Job& job) {
    job.hardware = false;
    job.status = api_.decode(gpu_, lane.gpu_state, job.data, job.size,
                             job.channels == 1 ? nvjpeg::kOutputY : nvjpeg::kOutputYuv, &job.planes, lane.stream);
    wait(lane, lane.stream, "nvJPEG decode");
  }

  // Waits for the work queued on stream: spins a while, then sleeps.
  static void wait(Lane& lane, cudaStream_t stream, const char* what) {
    check_cuda(cudaEventRecord(lane.done, stream), what);
    wait_for(lane.done, what);
  }
  static void wait_for(cudaEvent_t event, const char* what) {
    const auto until = std::chrono::steady_clock::now() + kSpinBeforeSleep;
    for (;;) {
      const cudaError_t e = cudaEventQuery(event);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) check_cuda(e, what);
      if (std::chrono::steady_clock::now() >= until) break;
    }
    check_cuda(cudaEventSynchronize(event), what);
  }

  Status decode_hardware(Lane& lane, const std::vector<Job*>& jobs, nvjpeg::OutputFormat format) {
    std::vector<const unsigned char*> data;
    std::vector<size_t> sizes;
    std::vector<nvjpeg::Planes> planes;
    for (Job* j : jobs) {
      data.push_back(j->data);
      sizes.push_back(j->size);
      planes.push_back(j->planes);
    }
    if (lane.hw_in_flight) {  // the state's buffers serve one batch at a time
      wait(lane, lane.stream, "nvJPEG batched decode");
      lane.hw_in_flight = false;
    }
    Status s;
    {
      TraceRange range("nvjpeg batched initialize");
      s = api_.batched_initialize(hw_, lane.hw_state, static_cast<int>(jobs.size()), 1, format);
    }
    if (s == nvjpeg::kSuccess) {
      TraceRange range("nvjpeg decode batched");
      s = api_.decode_batched(hw_, lane.hw_state, data.data(), sizes.data(), planes.data(), lane.stream);
    }
    // A failed batch is retried file by file on the same state: its work
    // must be over first. A decoded one is waited for with its colour.
    if (s != nvjpeg::kSuccess) {
      TraceRange range("nvjpeg wait for the decode");
      wait(lane, lane.stream, "nvJPEG batched decode");
    }
    lane.hw_in_flight = s == nvjpeg::kSuccess;
    return s;
  }

  // Decodes the slot's batch into its callers' device memory and queues its
  // check; finish_batch answers it.
  void decode_batch(Lane& lane, Slot& slot) {
    TraceRange range("nvjpeg batch");
    {
      TraceRange range("nvjpeg allocate");
      allocate(lane, slot);
    }
    // The checks first: they run on the SMs while the JPEG engines decode.
    {
      TraceRange range("jpeg check launch");
      slot.checks.clear();
      for (auto& j : slot.batch) slot.checks.add(&j->check);
      slot.checks.launch(slot.staging, lane.check_stream, kCheckRounds);
      check_cuda(cudaEventRecord(slot.checked, lane.check_stream), "JPEG check");
    }
    std::vector<Job*> groups[2];  // hardware: gray, color
    for (auto& job : slot.batch) {
      if (job->hardware)
        groups[job->channels == 1 ? 0 : 1].push_back(job.get());
      else
        decode_one(lane, *job);
    }
    for (int g = 0; g < 2; ++g) {
      std::vector<Job*>& jobs = groups[g];
      if (jobs.empty()) continue;
      const nvjpeg::OutputFormat format = g == 0 ? nvjpeg::kOutputY : nvjpeg::kOutputYuv;
      if (decode_hardware(lane, jobs, format) == nvjpeg::kSuccess) continue;
      // One file spoiled the batch: each on its own, so that the others
      // still get the hardware's pixels, and the hybrid backend for the rest.
      for (Job* j : jobs)
        if (jobs.size() == 1 || decode_hardware(lane, {j}, format) != nvjpeg::kSuccess) decode_one(lane, *j);
    }
    for (auto& j : slot.batch) {
      if (j->channels != 3 || j->status != nvjpeg::kSuccess) continue;
      nvjpeg::launch_ycc_to_rgb(j->planes.channel[0], j->planes.channel[1], j->planes.channel[2],
                                static_cast<uint32_t>(j->width), static_cast<uint32_t>(j->height), j->check.scan.h[0],
                                j->check.scan.v[0], j->pixels, lane.stream);
    }
    if (slot.planes) cudaFreeAsync(slot.planes, lane.stream);
    slot.planes = nullptr;
    {
      TraceRange range("nvjpeg wait for colour");
      wait(lane, lane.stream, "nvJPEG decode");
      lane.hw_in_flight = false;
    }
  }

  // The slot's verdicts once its check is over, and its callers' answers.
  void finish_batch(Lane& lane, Slot& slot) {
    TraceRange range("nvjpeg answer");
    {
      TraceRange range("jpeg check wait");
      wait_for(slot.checked, "JPEG check");
    }
    const std::vector<std::shared_ptr<Job>>& batch = slot.batch;
    std::vector<JpegCheck> verdicts(batch.size());
    std::unique_ptr<bool[]> covered_by_check(new bool[batch.size()]());
    {
      TraceRange range("jpeg check finish");
      slot.checks.finish(lane.check_stream, verdicts.data(), covered_by_check.get());
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      Job* job = batch[i].get();
      JpegCheck verdict = std::move(verdicts[i]);
      const bool covered = covered_by_check[i];
      if (job->error.empty() && !covered)
        job->error = "the GPU's check leaves this JPEG to libjpeg (bytes past its last block, or markers inside its data)";
      if (!job->error.empty()) {
        if (job->pixels) cudaFreeAsync(job->pixels, lane.stream);
        job->pixels = nullptr;
        job->done.set_exception(std::make_exception_ptr(Error(ErrorCode::kUnimplemented, job->error)));
        continue;
      }
      // A corrupt or cut file is answered by its verdict, whatever nvJPEG made of it.
      const bool refused = verdict.corrupt || verdict.truncated;
      if (job->status != nvjpeg::kSuccess && !refused) {
        cudaFreeAsync(job->pixels, lane.stream);
        job->pixels = nullptr;
        job->done.set_exception(std::make_exception_ptr(
            Error(ErrorCode::kUnimplemented, std::string("nvJPEG: ") + nvjpeg::status_name(job->status))));
        continue;
      }
      GpuDecodedImage out;
      out.check = std::move(verdict);
      out.decoder = job->hardware ? "nvjpeg-hardware" : "nvjpeg-cuda";
      out.view.data = job->pixels;
      out.view.layout = Layout{static_cast<uint64_t>(job->width), static_cast<uint64_t>(job->height),
                               static_cast<uint32_t>(job->channels), SampleType::kUint8, 0};
      out.view.device = options_.device;
      cudaStream_t stream = lane.stream;
      // Freed by whichever thread lets go last, perhaps one last on another GPU.
      out.memory = std::shared_ptr<void>(job->pixels, [stream, device = options_.device](void* p) {
        if (cudaSetDevice(device) == cudaSuccess) cudaFreeAsync(p, stream);
        cudaGetLastError();
      });
      const size_t bytes = out.view.layout.pixels() * out.view.layout.pixel_bytes();
      out.to_host = [pixels = job->pixels, bytes, device = options_.device](void* host) {
        check_cuda(cudaSetDevice(device), "cudaSetDevice");
        check_cuda(cudaMemcpyAsync(host, pixels, bytes, cudaMemcpyDeviceToHost, cudaStreamPerThread),
                   "copying a decoded JPEG to the host");
        check_cuda(cudaStreamSynchronize(cudaStreamPerThread), "copying a decoded JPEG to the host");
      };
      job->pixels = nullptr;
      job->done.set_value(std::move(out));
    }
  }

  const Api& api_;
  std::string soname_;
  std::string version_;
  GpuJpegOptions options_;
  nvjpeg::Handle hw_ = nullptr, gpu_ = nullptr;  // shared by the lanes: nvJPEG's handles are thread-safe
  bool hardware_ = false;
  std::vector<std::unique_ptr<Lane>> lanes_;

  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<Job>> queue_;
  uint32_t expected_ = 0;  // announced and not yet taken

  std::mutex streams_mu_;
  std::vector<nvjpeg::JpegStream> free_streams_;  // ParsedStream's
  bool stopping_ = false;
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
