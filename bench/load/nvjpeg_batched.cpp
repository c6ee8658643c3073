// nvJPEG's batched decode on the hardware backend alone: the ceiling a
// server's JPEG rate is measured against (issue 52; scripts/gpu-jpeg-ceiling
// runs imgstat-load over the same files in the same lease). The files'
// bytes are in memory; each of --threads threads owns a state and a stream
// and decodes every thread-th batch to planes in GPU memory (the server's
// own output: Y, Cb, Cr; or interleaved RGB with --rgb), nothing counted,
// nothing copied back. Files the hardware backend does not take in a batch
// are left out and counted; the hybrid backend and torchvision are shown
// beside it by scripts/gpu-jpeg-ceiling.
// --sync waits for each batch before the next, as a server's lane does
// (without it a thread queues its next batch while the last decodes);
// --handle-per-thread gives each thread its own handle (the server's lanes
// share one unless told otherwise); --states N gives each thread N states
// taken in turn, a batch waited for only before its state's next batch
// (instead of --sync); --fresh-output decodes each batch into device memory
// allocated for it (cudaMallocAsync, as a server's callers' pixels are),
// --pool-output into buffers kept from batch to batch but taken from the
// stream-ordered pool instead of cudaMalloc; --copy-input reads each
// batch's files from fresh copies (as a server gets them from its calls;
// implies --sync). --side-threads N runs N more threads beside the
// decoding ones, each doing what a server's call does on the device with
// its decoded image (a reset, a read-back of results to pinned memory and a
// wait, on a stream of its own), then sleeping --side-gap-us: whether other
// threads' CUDA calls make nvJPEG's own host work dearer; with --side-parse
// they parse files' headers on the shared handle instead (as a server's
// callers do). --vary-batch K makes each batch 0 to K files short of its
// size (a state initialized for each, as a server's batches vary). nvJPEG's
// call and the wait for a batch are NVTX ranges named as the server's.
// Median and range of --rounds passes:
//   imgstat-nvjpeg-bench [--batch N]... [--threads T]... [--rounds R] [--rgb] [--sync] [--handle-per-thread]
//                        [--states N] [--fresh-output] [--pool-output] [--copy-input]
//                        [--vary-batch K] [--side-threads N] [--side-gap-us U] [--side-parse]
//                        [--backend hardware|default|hybrid] DIR
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "decode/jpeg/nvjpeg/api.hpp"
#include "decode/jpeg/verify.hpp"
#include "imgstat/trace.hpp"

namespace {

namespace nv = imgstat::nvjpeg;

void check(nv::Status s, const char* what) {
  if (s == nv::kSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, nv::status_name(s));
  std::exit(1);
}

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

struct Jpeg {
  std::vector<unsigned char> bytes;
  size_t width = 0, height = 0;
  size_t chroma_width = 0;  // a chroma plane's row, as the server lays it out
};

// One decoding thread: its own state, stream and output planes, sized for
// the largest file (planes reused batch after batch, as a server's are not:
// this is the decoder alone).
struct Worker {
  nv::Handle handle = nullptr;  // the shared one, or the thread's own
  std::vector<nv::State> states;
  std::vector<cudaEvent_t> state_free;  // after each state's last batch
  cudaStream_t stream = nullptr;
  std::vector<unsigned char*> out;
  std::vector<const unsigned char*> data;
  std::vector<size_t> lengths;
  std::vector<nv::Planes> planes;
};

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each row as it is measured, through pipes too
  std::vector<int> batches, thread_counts;
  int rounds = 5;
  bool rgb = false, sync = false, handle_per_thread = false;
  int states = 1;
  bool fresh_output = false, copy_input = false, pool_output = false;
  int side_threads = 0, side_gap_us = 0;
  bool side_parse = false;
  int vary_batch = 0;
  std::string backend_name = "hardware";
  std::string dir;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--batch") && i + 1 < argc) batches.push_back(std::max(1, std::atoi(argv[++i])));
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) thread_counts.push_back(std::max(1, std::atoi(argv[++i])));
    else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--rgb")) rgb = true;
    else if (!std::strcmp(argv[i], "--sync")) sync = true;
    else if (!std::strcmp(argv[i], "--handle-per-thread")) handle_per_thread = true;
    else if (!std::strcmp(argv[i], "--fresh-output")) fresh_output = true;
    else if (!std::strcmp(argv[i], "--pool-output")) pool_output = true;
    else if (!std::strcmp(argv[i], "--copy-input")) copy_input = true;
    else if (!std::strcmp(argv[i], "--states") && i + 1 < argc) states = std::clamp(std::atoi(argv[++i]), 1, 8);
    else if (!std::strcmp(argv[i], "--side-threads") && i + 1 < argc) side_threads = std::clamp(std::atoi(argv[++i]), 0, 1024);
    else if (!std::strcmp(argv[i], "--side-gap-us") && i + 1 < argc) side_gap_us = std::max(0, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--side-parse")) side_parse = true;
    else if (!std::strcmp(argv[i], "--vary-batch") && i + 1 < argc) vary_batch = std::clamp(std::atoi(argv[++i]), 0, 64);
    else if (!std::strcmp(argv[i], "--backend") && i + 1 < argc) backend_name = argv[++i];
    else dir = argv[i];
  }
  if (dir.empty()) {
    std::fprintf(stderr,
                 "usage: %s [--batch N]... [--threads T]... [--rounds R] [--rgb] [--sync] [--handle-per-thread]\n"
                 "       [--states N] [--fresh-output] [--pool-output] [--copy-input] [--vary-batch K]\n"
                 "       [--side-threads N] [--side-gap-us U] [--side-parse] [--backend hardware|default|hybrid] DIR\n",
                 argv[0]);
    return 2;
  }
  if (copy_input) sync = true, states = 1;  // a batch's copies live until it is waited for
  if (batches.empty()) batches = {64, 256};
  if (thread_counts.empty()) thread_counts = {1};
  std::string why;
  const nv::Api* api = nv::load(&why);
  if (!api) {
    std::fprintf(stderr, "no nvJPEG here: %s\n", why.c_str());
    return 2;
  }
  // A current context before nvJPEG's first call, as the server has.
  check(cudaSetDevice(0), "cudaSetDevice");
  check(cudaFree(nullptr), "cudaFree");
  nv::Handle handle = nullptr;
  const nv::Backend backend = backend_name == "default" ? nv::kBackendDefault
                              : backend_name == "hybrid" ? nv::kBackendGpuHybrid
                                                         : nv::kBackendHardware;
  check(api->create_ex(backend, nullptr, nullptr, 0, &handle), "nvjpegCreateEx");
  nv::JpegStream parsed = nullptr;
  check(api->stream_create(handle, &parsed), "nvjpegJpegStreamCreate");

  std::vector<std::filesystem::path> paths;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".jpg" || e.path().extension() == ".jpeg") paths.push_back(e.path());
  std::sort(paths.begin(), paths.end());
  std::vector<Jpeg> jpegs;
  size_t left_out = 0, largest = 0;
  for (const auto& p : paths) {
    std::ifstream in(p, std::ios::binary);
    Jpeg j;
    j.bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    const imgstat::JpegScan scan = imgstat::parse_jpeg_scan(j.bytes.data(), j.bytes.size());
    const bool parsed_ok =
        api->stream_parse_header ? api->stream_parse_header(handle, j.bytes.data(), j.bytes.size(), parsed) == nv::kSuccess
                                 : api->stream_parse(handle, j.bytes.data(), j.bytes.size(), 0, 0, parsed) == nv::kSuccess;
    int unsupported = 1;
    if (!scan.covered || scan.components != 3 || !parsed_ok ||
        api->batched_supported(handle, parsed, &unsupported) != nv::kSuccess || unsupported) {
      ++left_out;
      continue;
    }
    j.width = scan.width;
    j.height = scan.height;
    j.chroma_width = (scan.width + scan.h[0] - 1) / scan.h[0];
    largest = std::max(largest, j.width * j.height);
    jpegs.push_back(std::move(j));
  }
  api->stream_destroy(parsed);
  if (jpegs.empty()) {
    std::fprintf(stderr, "no colour JPEG in %s that the hardware backend decodes in a batch\n", dir.c_str());
    return 1;
  }
  std::printf("nvJPEG %s backend, batched decode to %s alone, %zu files in memory (%zu left out), median of %d "
              "passes%s%s\n",
              backend_name.c_str(), rgb ? "interleaved RGB" : "Y, Cb, Cr planes", jpegs.size(), left_out, rounds,
              sync ? ", each batch waited for" : "", handle_per_thread ? ", a handle per thread" : "");
  if (states > 1) std::printf("%d states a thread, a batch waited for before its state's next\n", states);
  if (fresh_output || pool_output || copy_input)
    std::printf("%s%s%s\n", fresh_output ? "each batch into fresh device memory; " : "",
                pool_output ? "output kept, from the stream-ordered pool; " : "",
                copy_input ? "each batch from fresh copies" : "");
  if (side_threads)
    std::printf("%d side threads, each %s, then %d us asleep\n", side_threads,
                side_parse ? "parsing a file's headers on the shared handle and asking whether it is batched"
                           : "a reset, a read-back and a wait on its own stream",
                side_gap_us);
  if (vary_batch)
    std::printf("each batch of the size given less 0 to %d files (as a server's batches vary), state initialized each "
                "time\n",
                vary_batch);
  // The side threads run through every measurement; their rate is printed with each.
  std::atomic<bool> side_stop{false};
  std::atomic<uint64_t> side_ops{0};
  std::vector<std::thread> side;
  for (int t = 0; t < side_threads; ++t)
    side.emplace_back([&] {
      constexpr size_t kResultBytes = 16 << 10;  // about a call's results: counts of 3 channels and their sums
      check(cudaSetDevice(0), "cudaSetDevice");
      cudaStream_t s = nullptr;
      void* dev = nullptr;
      void* host = nullptr;
      nv::JpegStream own = nullptr;
      if (side_parse) {
        check(api->stream_create(handle, &own), "nvjpegJpegStreamCreate");
      } else {
        check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
        check(cudaMalloc(&dev, kResultBytes), "cudaMalloc");
        check(cudaMallocHost(&host, kResultBytes), "cudaMallocHost");
      }
      for (size_t k = 0; !side_stop.load(std::memory_order_relaxed); ++k) {
        if (side_parse) {  // what a server's callers do before queueing: the headers on the shared handle
          const Jpeg& j = jpegs[k % jpegs.size()];
          int unsupported = 1;
          if (api->stream_parse_header) api->stream_parse_header(handle, j.bytes.data(), j.bytes.size(), own);
          else api->stream_parse(handle, j.bytes.data(), j.bytes.size(), 0, 0, own);
          api->batched_supported(handle, own, &unsupported);
        } else {
          check(cudaMemsetAsync(dev, 0, kResultBytes, s), "cudaMemsetAsync");
          check(cudaMemcpyAsync(host, dev, kResultBytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
          check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
        }
        side_ops.fetch_add(1, std::memory_order_relaxed);
        if (side_gap_us) std::this_thread::sleep_for(std::chrono::microseconds(side_gap_us));
      }
      if (own) api->stream_destroy(own);
      if (host) cudaFreeHost(host);
      if (dev) cudaFree(dev);
      if (s) cudaStreamDestroy(s);
    });
  std::printf("%8s %8s %10s %12s %22s%s\n", "batch", "threads", "images", "images/s", "range",
              side_threads ? "   side ops/s" : "");
  const nv::OutputFormat format = rgb ? nv::kOutputRgbi : nv::kOutputYuv;
  for (const int threads : thread_counts) {
    std::vector<Worker> workers(threads);
    for (Worker& w : workers) {
      w.handle = handle;
      if (handle_per_thread && &w != &workers[0]) check(api->create_ex(backend, nullptr, nullptr, 0, &w.handle), "nvjpegCreateEx");
      w.states.resize(states);
      w.state_free.resize(states);
      for (int k = 0; k < states; ++k) {
        check(api->state_create(w.handle, &w.states[k]), "nvjpegJpegStateCreate");
        check(cudaEventCreateWithFlags(&w.state_free[k], cudaEventDisableTiming), "cudaEventCreate");
      }
      check(cudaStreamCreateWithFlags(&w.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    }
    for (const int batch : batches) {
      // Whole batches only: a state's batch size is fixed when it is initialized.
      const size_t count = jpegs.size() / batch;
      if (count == 0) continue;
      for (Worker& w : workers) {
        w.out.resize(static_cast<size_t>(batch) * states);  // each state's batch its own planes
        for (unsigned char*& o : w.out)
          check(pool_output ? cudaMallocAsync(reinterpret_cast<void**>(&o), largest * 3, w.stream)
                            : cudaMalloc(&o, largest * 3),
                "cudaMalloc");
        check(cudaStreamSynchronize(w.stream), "cudaStreamSynchronize");
        w.data.resize(batch);
        w.lengths.resize(batch);
        w.planes.resize(batch);
      }
      std::vector<double> rates;
      std::atomic<int> failed{nv::kSuccess};
      uint64_t side_before = 0;
      std::atomic<uint64_t> decoded{0};
      auto measured_from = std::chrono::steady_clock::now();
      for (int r = 0; r <= rounds && failed == nv::kSuccess; ++r) {  // the first pass warms up
        const auto t0 = std::chrono::steady_clock::now();
        decoded = 0;
        if (r == 1) {
          side_before = side_ops.load();
          measured_from = t0;
        }
        std::vector<std::thread> running;
        for (int t = 0; t < threads; ++t)
          running.emplace_back([&, t] {
            Worker& w = workers[t];
            // The hardware backend allocates through the driver on the calling
            // thread: without a current context there (a new thread has none
            // until its first runtime call) every batch ends in
            // NVJPEG_STATUS_ALLOCATOR_FAILURE. The server's lanes set it first.
            check(cudaSetDevice(0), "cudaSetDevice");
            int s = 0;
            for (size_t b = t; b < count; b += threads, s = (s + 1) % states) {
              // A fixed pseudo-random size for batch b, the same in every pass.
              const int n = vary_batch ? batch - static_cast<int>((b * 2654435761u >> 7) % std::min(vary_batch + 1, batch))
                                       : batch;
              decoded += n;
              if (states > 1) check(cudaEventSynchronize(w.state_free[s]), "cudaEventSynchronize");
              unsigned char* const* out = w.out.data() + static_cast<size_t>(s) * batch;
              std::vector<unsigned char*> fresh;
              std::vector<std::vector<unsigned char>> copies;
              if (fresh_output) {
                fresh.resize(batch);
                for (int k = 0; k < batch; ++k)
                  check(cudaMallocAsync(reinterpret_cast<void**>(&fresh[k]), largest * 3, w.stream), "cudaMallocAsync");
                out = fresh.data();
              }
              for (int k = 0; k < n; ++k) {
                const Jpeg& j = jpegs[b * batch + k];
                if (copy_input) copies.push_back(j.bytes);  // moved on growth: each copy keeps its bytes
                w.data[k] = copy_input ? copies.back().data() : j.bytes.data();
                w.lengths[k] = j.bytes.size();
                w.planes[k] = nv::Planes{};
                if (rgb) {
                  w.planes[k].channel[0] = out[k];
                  w.planes[k].pitch[0] = j.width * 3;
                } else {  // chroma planes at most the image's size, their rows as the server's
                  for (int c = 0; c < 3; ++c) {
                    w.planes[k].channel[c] = out[k] + c * largest;
                    w.planes[k].pitch[c] = c == 0 ? j.width : j.chroma_width;
                  }
                }
              }
              // Before each batch, as the server does.
              nv::Status st = api->batched_initialize(w.handle, w.states[s], n, 1, format);
              if (st == nv::kSuccess) {  // the server's range of the same name, for NVTX sums side by side
                imgstat::TraceRange range("nvjpeg decode batched");
                st = api->decode_batched(w.handle, w.states[s], w.data.data(), w.lengths.data(), w.planes.data(), w.stream);
              }
              if (st == nv::kSuccess && states > 1) check(cudaEventRecord(w.state_free[s], w.stream), "cudaEventRecord");
              for (unsigned char* o : fresh) check(cudaFreeAsync(o, w.stream), "cudaFreeAsync");
              if (st != nv::kSuccess) {
                failed = st;
                break;
              }
              if (sync && states == 1) {
                imgstat::TraceRange range("nvjpeg wait for the batch");
                check(cudaStreamSynchronize(w.stream), "cudaStreamSynchronize");
              }
            }
            check(cudaStreamSynchronize(w.stream), "cudaStreamSynchronize");
          });
        for (std::thread& t : running) t.join();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r > 0) rates.push_back(static_cast<double>(decoded.load()) / s);
      }
      for (Worker& w : workers)
        for (unsigned char* o : w.out) check(cudaFree(o), "cudaFree");
      if (failed != nv::kSuccess) {
        std::printf("%8d %8d nvjpegDecodeBatched: %s\n", batch, threads,
                    nv::status_name(static_cast<nv::Status>(failed.load())));
        continue;
      }
      const double side_rate =
          static_cast<double>(side_ops.load() - side_before) /
          std::chrono::duration<double>(std::chrono::steady_clock::now() - measured_from).count();
      std::sort(rates.begin(), rates.end());
      std::printf("%8d %8d %10zu %12.0f %10.0f-%-11.0f", batch, threads, count * batch, rates[rates.size() / 2],
                  rates.front(), rates.back());
      if (side_threads) std::printf(" %12.0f", side_rate);
      std::printf("\n");
    }
    for (Worker& w : workers) {
      for (int k = 0; k < states; ++k) {
        api->state_destroy(w.states[k]);
        cudaEventDestroy(w.state_free[k]);
      }
      cudaStreamDestroy(w.stream);
      if (w.handle != handle) api->destroy(w.handle);
    }
  }
  side_stop = true;
  for (std::thread& t : side) t.join();
  api->destroy(handle);
  return 0;
}
