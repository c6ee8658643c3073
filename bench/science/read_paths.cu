// How a file's stored bytes can reach the GPU from the page cache, each way
// timed against every core reading the file (the ceiling issue 50 names),
// in one run: a big-endian float32 FITS cube's values must be byte-swapped
// somewhere. Ways: the host swaps into pinned slots (what the CUDA engine
// did), each core owning its slots and stream; the mapped file registered
// with the driver in pieces and sent as it lies, swapped on the device;
// and, where the device reads pageable memory (HMM), a kernel reading the
// mapping. Usage: imgstat-read-paths-bench FILE [ROUNDS]
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#define CHECK(x)                                                                            \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

__global__ void swap32(uint32_t* p, uint64_t n) {
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < n; i += uint64_t{gridDim.x} * blockDim.x)
    p[i] = __byte_perm(p[i], 0, 0x0123);
}

__global__ void sum_mapped(const uint32_t* p, uint64_t n, unsigned long long* out) {
  unsigned long long s = 0;
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < n; i += uint64_t{gridDim.x} * blockDim.x)
    s += __byte_perm(p[i], 0, 0x0123);
  atomicAdd(out, s);
}

unsigned long long host_sum(const uint32_t* p, uint64_t n) {
  unsigned long long s = 0;
  for (uint64_t i = 0; i < n; ++i) s += __builtin_bswap32(p[i]);
  return s;
}

template <class F>
void on_threads(int n, F f) {
  std::vector<std::thread> ts;
  for (int k = 0; k < n; ++k) ts.emplace_back(f, k);
  for (auto& t : ts) t.join();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE [ROUNDS]\n", argv[0]);
    return 2;
  }
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const int fd = open(argv[1], O_RDONLY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) return 1;
  const uint64_t size = static_cast<uint64_t>(st.st_size) / 4096 * 4096, words = size / 4;
  auto* map = static_cast<uint8_t*>(mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0));
  if (map == MAP_FAILED) return 1;
  uint8_t* dev = nullptr;
  CHECK(cudaSetDevice(0));
  CHECK(cudaMalloc(&dev, size));
  unsigned long long* dsum = nullptr;
  CHECK(cudaMalloc(&dsum, 8));
  int pageable = 0, host_tables = 0;
  CHECK(cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, 0));
  CHECK(cudaDeviceGetAttribute(&host_tables, cudaDevAttrPageableMemoryAccessUsesHostPageTables, 0));
  std::printf("%d cores, %.2f GiB, pageable memory access %d (host page tables %d)\n", cores,
              size / double(1ull << 30), pageable, host_tables);

  // The reference: every word of the file, swapped, summed on the host.
  std::vector<unsigned long long> part(cores);
  on_threads(cores, [&](int k) {
    const uint64_t a = words * k / cores, b = words * (k + 1) / cores;
    part[k] = host_sum(reinterpret_cast<const uint32_t*>(map) + a, b - a);
  });
  unsigned long long want = 0;
  for (auto v : part) want += v;
  auto check_device = [&](const char* what) {
    CHECK(cudaMemset(dsum, 0, 8));
    sum_mapped<<<1024, 256>>>(reinterpret_cast<const uint32_t*>(dev), words, dsum);
    CHECK(cudaGetLastError());
    unsigned long long got = 0;
    CHECK(cudaMemcpy(&got, dsum, 8, cudaMemcpyDeviceToHost));
    if (got != want) std::printf("  %s: WRONG sum %llu, want %llu\n", what, got, want);
    CHECK(cudaMemset(dev, 0xA5, size));
  };

  struct Row {
    std::string what;
    std::vector<double> s;
  };
  std::vector<Row> rows;
  auto add = [&](const std::string& what, double s) {
    for (auto& r : rows)
      if (r.what == what) return r.s.push_back(s);
    rows.push_back({what, {s}});
  };

  std::vector<uint8_t*> bufs(cores);
  for (auto& b : bufs) b = static_cast<uint8_t*>(std::aligned_alloc(4096, 8 << 20));
  constexpr uint64_t kPiece = 4 << 20;
  for (int round = 0; round < rounds; ++round) {
    // Ceiling: every core preads its share into its own buffer.
    auto t = Clock::now();
    on_threads(cores, [&](int k) {
      uint64_t at = size * k / cores;
      const uint64_t end = size * (k + 1) / cores;
      while (at < end) {
        const ssize_t n = pread(fd, bufs[k], std::min<uint64_t>(8 << 20, end - at), static_cast<off_t>(at));
        if (n <= 0) break;
        at += static_cast<uint64_t>(n);
      }
    });
    add("ceiling: pread on every core", since(t));

    // Each core swaps its pieces into its own two pinned slots, its own
    // stream: from the long-lived mapping (its pages mapped in an earlier
    // round), from a mapping made for this pass and unmapped after it (as a
    // server maps a caller's file for one call), and read by pread into the
    // slot and swapped there (no mapping at all).
    for (int way = 0; way < 3; ++way) {
      const uint8_t* from = map;
      if (way == 1) from = static_cast<const uint8_t*>(mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0));
      if (from == MAP_FAILED) return 1;
      static std::vector<uint8_t*> pinned;
      static std::vector<cudaStream_t> streams;
      static std::vector<cudaEvent_t> events;
      if (pinned.empty()) {
        pinned.resize(2 * cores);
        for (auto& p : pinned) CHECK(cudaMallocHost(&p, kPiece));
        streams.resize(cores);
        events.resize(2 * cores);
        for (auto& s : streams) CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        for (auto& e : events) CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
      }
      std::atomic<uint64_t> next{0};
      t = Clock::now();
      on_threads(cores, [&](int k) {
        CHECK(cudaSetDevice(0));
        int slot = 0;
        for (;;) {
          const uint64_t at = next.fetch_add(kPiece);
          if (at >= size) break;
          const uint64_t n = std::min(kPiece, size - at);
          CHECK(cudaEventSynchronize(events[2 * k + slot]));
          auto* out = reinterpret_cast<uint32_t*>(pinned[2 * k + slot]);
          const uint32_t* in = reinterpret_cast<const uint32_t*>(from + at);
          if (way == 2) {
            for (uint64_t got = 0; got < n;) {
              const ssize_t r = pread(fd, pinned[2 * k + slot] + got, n - got, static_cast<off_t>(at + got));
              if (r <= 0) std::abort();
              got += static_cast<uint64_t>(r);
            }
            in = out;
          }
          for (uint64_t i = 0; i < n / 4; ++i) out[i] = __builtin_bswap32(in[i]);
          CHECK(cudaMemcpyAsync(dev + at, out, n, cudaMemcpyHostToDevice, streams[k]));
          CHECK(cudaEventRecord(events[2 * k + slot], streams[k]));
          slot ^= 1;
        }
        CHECK(cudaStreamSynchronize(streams[k]));
      });
      if (way == 1) munmap(const_cast<uint8_t*>(from), size);
      add(way == 0   ? "host swaps into pinned, each core its stream"
          : way == 1 ? "  the same, mapped for the pass, unmapped"
                     : "  the same, pread into the slot, swapped there",
          since(t));
      // The device holds the values swapped: swapped back, then checked as the file.
      swap32<<<1024, 256>>>(reinterpret_cast<uint32_t*>(dev), words);
      check_device("host swaps");
    }

    // The mapping registered with the driver in pieces, ahead of the copies
    // on one thread; each piece unregistered once its copy is done.
    for (uint64_t piece : {uint64_t{64} << 20, uint64_t{256} << 20, size}) {
      cudaStream_t s;
      CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      const uint64_t pieces = (size + piece - 1) / piece;
      std::vector<cudaEvent_t> done(pieces);
      double reg = 0, unreg = 0;
      t = Clock::now();
      for (uint64_t i = 0; i < pieces; ++i) {
        const uint64_t at = i * piece, n = std::min(piece, size - at);
        auto r0 = Clock::now();
        CHECK(cudaHostRegister(map + at, n, cudaHostRegisterReadOnly | cudaHostRegisterPortable));
        reg += since(r0);
        CHECK(cudaMemcpyAsync(dev + at, map + at, n, cudaMemcpyHostToDevice, s));
        CHECK(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming));
        CHECK(cudaEventRecord(done[i], s));
        if (i >= 2) {
          CHECK(cudaEventSynchronize(done[i - 2]));
          auto u0 = Clock::now();
          CHECK(cudaHostUnregister(map + (i - 2) * piece));
          unreg += since(u0);
        }
      }
      swap32<<<1024, 256, 0, s>>>(reinterpret_cast<uint32_t*>(dev), words);
      CHECK(cudaGetLastError());
      CHECK(cudaStreamSynchronize(s));
      for (uint64_t i = pieces >= 2 ? pieces - 2 : 0; i < pieces; ++i) {
        auto u0 = Clock::now();
        CHECK(cudaHostUnregister(map + i * piece));
        unreg += since(u0);
      }
      const double total = since(t);
      const std::string name = "registered in " + std::to_string(piece >> 20) + " MiB pieces, swapped on device";
      add(name, total);
      add("  of it registering (" + std::to_string(piece >> 20) + " MiB)", reg);
      add("  of it unregistering (" + std::to_string(piece >> 20) + " MiB)", unreg);
      for (auto e : done) CHECK(cudaEventDestroy(e));
      CHECK(cudaStreamDestroy(s));
      // swap back then check: the device holds the swapped values
      swap32<<<1024, 256>>>(reinterpret_cast<uint32_t*>(dev), words);
      check_device(name.c_str());
    }

    // Registering on several threads at once, 64 MiB pieces, each thread its stream.
    {
      const uint64_t piece = uint64_t{64} << 20;
      std::atomic<uint64_t> next{0};
      t = Clock::now();
      on_threads(4, [&](int) {
        CHECK(cudaSetDevice(0));
        cudaStream_t s;
        CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        std::vector<uint64_t> mine;
        for (;;) {
          const uint64_t at = next.fetch_add(piece);
          if (at >= size) break;
          const uint64_t n = std::min(piece, size - at);
          CHECK(cudaHostRegister(map + at, n, cudaHostRegisterReadOnly | cudaHostRegisterPortable));
          CHECK(cudaMemcpyAsync(dev + at, map + at, n, cudaMemcpyHostToDevice, s));
          mine.push_back(at);
        }
        CHECK(cudaStreamSynchronize(s));
        for (uint64_t at : mine) CHECK(cudaHostUnregister(map + at));
        CHECK(cudaStreamDestroy(s));
      });
      swap32<<<1024, 256>>>(reinterpret_cast<uint32_t*>(dev), words);
      CHECK(cudaDeviceSynchronize());
      add("registered on 4 threads, 64 MiB pieces", since(t));
      swap32<<<1024, 256>>>(reinterpret_cast<uint32_t*>(dev), words);
      check_device("4 threads");
    }

    if (pageable) {
      t = Clock::now();
      CHECK(cudaMemset(dsum, 0, 8));
      sum_mapped<<<132 * 8, 256>>>(reinterpret_cast<const uint32_t*>(map), words, dsum);
      CHECK(cudaGetLastError());
      unsigned long long got = 0;
      CHECK(cudaMemcpy(&got, dsum, 8, cudaMemcpyDeviceToHost));
      add("kernel reads the mapping (HMM)", since(t));
      if (got != want) std::printf("  HMM: WRONG sum\n");
    }
  }
  std::printf("\n%-52s %10s %8s %s\n", "way (best of rounds)", "seconds", "GB/s", "of ceiling");
  const double ceiling = *std::min_element(rows[0].s.begin(), rows[0].s.end());
  for (auto& r : rows) {
    const double best = *std::min_element(r.s.begin(), r.s.end());
    // The registration's parts are seconds of a row above, not ways.
    if (r.what.find("of it") != std::string::npos)
      std::printf("%-52s %10.3f\n", r.what.c_str(), best);
    else
      std::printf("%-52s %10.3f %8.1f %6.2f\n", r.what.c_str(), best, size / best / 1e9, ceiling / best);
  }
  return 0;
}
