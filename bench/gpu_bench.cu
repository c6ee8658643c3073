// imgstat-bench: the CUDA kernels against a read-only roofline kernel and
// CUB on the same device buffers in the same process, then the whole engine
// from host memory against plain copies. Prints ratios, so that the figures
// carry from one GPU to another; the summary table comes last.
//
//   imgstat-bench [--quick] [--photo RGB.raw GRAY.raw] [--out FILE]
#include <cub/device/device_histogram.cuh>
#include <cub/device/device_reduce.cuh>
#include <thrust/iterator/transform_iterator.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda/dispatch/dispatch.hpp"
#include "gpu_timing.hpp"
#include "imgstat/engine.hpp"
#include "table.hpp"

namespace imgstat::cuda {
namespace {

std::string g_log;
void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void say(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::fputs(buf, stdout);
  std::fflush(stdout);
  g_log += buf;
}

// Reads every byte once with 16-byte loads; the XOR keeps the loads alive.
__global__ void roofline_kernel(const uint4* __restrict__ p, uint64_t n, uint4* sink) {
  uint4 acc = make_uint4(0, 0, 0, 0);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = __ldg(p + i), b = __ldg(p + i + stride), c = __ldg(p + i + 2 * stride), d = __ldg(p + i + 3 * stride);
    acc.x ^= a.x ^ b.x ^ c.x ^ d.x;
    acc.y ^= a.y ^ b.y ^ c.y ^ d.y;
    acc.z ^= a.z ^ b.z ^ c.z ^ d.z;
    acc.w ^= a.w ^ b.w ^ c.w ^ d.w;
  }
  for (; i < n; i += stride) {
    const uint4 a = __ldg(p + i);
    acc.x ^= a.x;
    acc.y ^= a.y;
    acc.z ^= a.z;
    acc.w ^= a.w;
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x9e3779b9u) *sink = acc;
}

__device__ uint32_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return static_cast<uint32_t>(x);
}

enum class Kind { kUniform, kConstant, kNarrow, kPhoto };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kUniform: return "uniform";
    case Kind::kConstant: return "constant";
    case Kind::kNarrow: return "8 values";
    case Kind::kPhoto: return "photo";
  }
  return "";
}

// Fills words: uniform random bytes, a constant, 8 distinct byte values, or
// a photo tiled (its bytes from tile, tile_bytes long).
__global__ void fill_bytes(uint32_t* w, uint64_t words, int kind, const uint8_t* tile, uint64_t tile_bytes) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += stride) {
    uint32_t v;
    if (kind == 0)
      v = mix(i);
    else if (kind == 1)
      v = 0x4d4d4d4du;
    else if (kind == 2)
      v = (mix(i) & 0x07070707u) * 29u;
    else {
      const uint64_t b = (i * 4) % tile_bytes;
      v = tile[b] | tile[(b + 1) % tile_bytes] << 8 | tile[(b + 2) % tile_bytes] << 16 | tile[(b + 3) % tile_bytes] << 24;
    }
    w[i] = v;
  }
}

__global__ void fill_float(float* f, uint64_t n, int kind) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    f[i] = kind == 1 ? 0.5f : (mix(i) >> 8) * (1.0f / 16777216.0f) * 1000.0f - 100.0f;
}

struct Bench {
  DeviceInfo dev{};
  cudaDeviceProp prop{};
  uint8_t* buf = nullptr;
  uint64_t capacity = 0;
  unsigned long long* counts = nullptr;
  IntAccum* ints = nullptr;
  FloatMoments* partials = nullptr;
  FloatMoments* running = nullptr;
  uint4* sink = nullptr;
  void* temp = nullptr;
  size_t temp_bytes = 0;
  std::vector<uint8_t> photo_rgb, photo_gray;

  void init(uint64_t max_bytes) {
    IMGSTAT_BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
    dev.sm_count = prop.multiProcessorCount;
    capacity = max_bytes;
    IMGSTAT_BENCH_CHECK(cudaMalloc(&buf, capacity));
    IMGSTAT_BENCH_CHECK(cudaMalloc(&counts, 4 * 65536 * sizeof(unsigned long long)));
    IMGSTAT_BENCH_CHECK(cudaMalloc(&ints, 4 * sizeof(IntAccum)));
    IMGSTAT_BENCH_CHECK(cudaMalloc(&partials, float_partials_needed(4, dev) * sizeof(FloatMoments)));
    IMGSTAT_BENCH_CHECK(cudaMalloc(&running, 4 * sizeof(FloatMoments)));
    IMGSTAT_BENCH_CHECK(cudaMalloc(&sink, sizeof(uint4)));
    temp_bytes = 64 << 20;
    IMGSTAT_BENCH_CHECK(cudaMalloc(&temp, temp_bytes));
  }

  void fill(Kind k, uint64_t bytes, int channels) {
    const std::vector<uint8_t>& photo = channels == 1 ? photo_gray : photo_rgb;
    uint8_t* tile = nullptr;
    if (k == Kind::kPhoto) {
      IMGSTAT_BENCH_CHECK(cudaMalloc(&tile, photo.size()));
      IMGSTAT_BENCH_CHECK(cudaMemcpy(tile, photo.data(), photo.size(), cudaMemcpyHostToDevice));
    }
    fill_bytes<<<dev.sm_count * 8, 256>>>(reinterpret_cast<uint32_t*>(buf), (bytes + 3) / 4, static_cast<int>(k), tile,
                                          photo.size());
    IMGSTAT_BENCH_CHECK(cudaDeviceSynchronize());
    if (tile) cudaFree(tile);
  }

  double roofline_ms(uint64_t bytes, int reps) {
    return bench::device_median_ms(reps, [&] {
      roofline_kernel<<<dev.sm_count * 8, 256>>>(reinterpret_cast<const uint4*>(buf), bytes / 16, sink);
    });
  }

  double hist8_ms(uint64_t bytes, int channels, int copies, int reps) {
    return bench::device_median_ms(reps, [&] { launch_hist8(buf, bytes / channels, channels, counts, dev, nullptr, copies); });
  }

  double cub_hist8_ms(uint64_t bytes, int channels, int reps) {
    int* hist = reinterpret_cast<int*>(counts);
    if (channels == 1) {
      const int64_t n = static_cast<int64_t>(bytes);
      size_t need = 0;
      IMGSTAT_BENCH_CHECK(cub::DeviceHistogram::HistogramEven(nullptr, need, buf, hist, 257, 0, 256, n));
      if (need > temp_bytes) return -1;
      return bench::device_median_ms(reps, [&] { cub::DeviceHistogram::HistogramEven(temp, need, buf, hist, 257, 0, 256, n); });
    }
    int* h[4] = {hist, hist + 256, hist + 512, hist + 768};
    int levels[4] = {257, 257, 257, 257};
    int lower[4] = {0, 0, 0, 0}, upper[4] = {256, 256, 256, 256};
    const int64_t px = static_cast<int64_t>(bytes / channels);
    size_t need = 0;
    if (channels == 3) {
      IMGSTAT_BENCH_CHECK((cub::DeviceHistogram::MultiHistogramEven<3, 3>(nullptr, need, buf, h, levels, lower, upper, px)));
      return bench::device_median_ms(reps, [&] { cub::DeviceHistogram::MultiHistogramEven<3, 3>(temp, need, buf, h, levels, lower, upper, px); });
    }
    IMGSTAT_BENCH_CHECK((cub::DeviceHistogram::MultiHistogramEven<4, 4>(nullptr, need, buf, h, levels, lower, upper, px)));
    return bench::device_median_ms(reps, [&] { cub::DeviceHistogram::MultiHistogramEven<4, 4>(temp, need, buf, h, levels, lower, upper, px); });
  }

  double int16_ms(uint64_t bytes, int channels, int reps) {
    HistogramOut h{counts, counts + 4 * 65536 - 8, counts + 4 * 65536 - 4, 256, false, 0, 0};
    return bench::device_median_ms(reps, [&] { launch_int16(buf, bytes / 2 / channels, channels, false, ints, h, dev, nullptr); });
  }

  double float_pass1_ms(uint64_t bytes, int reps) {
    return bench::device_median_ms(reps, [&] {
      launch_float_moments(buf, bytes / 4, 1, SampleType::kFloat32, partials, running, dev, nullptr);
    });
  }

  double float_pass2_ms(uint64_t bytes, int reps) {
    HistogramOut h{counts, counts + 4 * 65536 - 8, counts + 4 * 65536 - 4, 256, false, 0, 0};
    return bench::device_median_ms(reps, [&] {
      launch_float_bins(buf, bytes / 4, 1, SampleType::kFloat32, h, running, 1, dev, nullptr);
    });
  }

  double cub_four_ms(uint64_t bytes, int reps) {
    const float* f = reinterpret_cast<const float*>(buf);
    const int64_t n = static_cast<int64_t>(bytes / 4);
    float* out_f = reinterpret_cast<float*>(counts);
    double* out_d = reinterpret_cast<double*>(counts + 8);
    auto squares = thrust::make_transform_iterator(f, [] __device__(float x) { return static_cast<double>(x) * x; });
    auto as_double = thrust::make_transform_iterator(f, [] __device__(float x) { return static_cast<double>(x); });
    size_t need = 0, n1 = 0;
    IMGSTAT_BENCH_CHECK(cub::DeviceReduce::Min(nullptr, n1, f, out_f, n));
    need = std::max(need, n1);
    IMGSTAT_BENCH_CHECK(cub::DeviceReduce::Sum(nullptr, n1, squares, out_d, n));
    need = std::max(need, n1);
    if (need > temp_bytes) return -1;
    return bench::device_median_ms(reps, [&] {
      size_t t = temp_bytes;
      cub::DeviceReduce::Min(temp, t, f, out_f, n);
      t = temp_bytes;
      cub::DeviceReduce::Max(temp, t, f, out_f + 1, n);
      t = temp_bytes;
      cub::DeviceReduce::Sum(temp, t, as_double, out_d, n);
      t = temp_bytes;
      cub::DeviceReduce::Sum(temp, t, squares, out_d + 1, n);
    });
  }
};

std::vector<uint8_t> read_all(const char* path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The rows of the summary, printed as they come and again at the end.
struct Report {
  std::vector<std::string> table;
  void line(const std::string& text) {
    table.push_back(text);
    say("%s", text.c_str());
  }
  // A kernel's rate on `bytes`, against the roofline's time and a baseline's.
  void row(const char* what, const char* data, int c, uint64_t bytes, double ms, double roof_ms, double base_ms,
           const char* base) {
    char text[256];
    const double gbs = bytes / ms / 1e6;
    std::snprintf(text, sizeof text, "| %-26s | %-8s | %d | %7.3g MiB | %7.1f | %5.0f%% | %s |\n", what, data, c,
                  bytes / 1048576.0, gbs, 100.0 * roof_ms / ms,
                  base_ms > 0 ? (std::to_string(base_ms / ms).substr(0, 4) + "x " + base).c_str() : "");
    line(text);
  }
};

// Each kernel once on 256 MiB, for a profiler to look at.
void profile_once(Bench& b) {
  const uint64_t bytes = uint64_t{256} << 20;
  b.fill(Kind::kUniform, bytes, 1);
  launch_hist8(b.buf, bytes, 1, b.counts, b.dev, nullptr, 2);
  launch_hist8(b.buf, bytes, 1, b.counts, b.dev, nullptr, 1);
  launch_hist8(b.buf, bytes / 4, 4, b.counts, b.dev, nullptr, 2);
  b.int16_ms(bytes, 1, 1);
  fill_float<<<b.dev.sm_count * 8, 256>>>(reinterpret_cast<float*>(b.buf), bytes / 4, 0);
  b.float_pass1_ms(bytes, 1);
  b.float_pass2_ms(bytes, 1);
  IMGSTAT_BENCH_CHECK(cudaDeviceSynchronize());
}

// The kernels on device buffers, against the roofline and CUB.
void kernel_rows(Bench& b, uint64_t max_bytes, int reps, Report& report) {
  const uint64_t GiB = uint64_t{1} << 30;
  say("| kernel | data | C | size | GB/s | of roofline | vs baseline |\n|---|---|---|---|---|---|---|\n");
  auto row = [&](const char* what, const char* data, int c, uint64_t bytes, double ms, double roof_ms, double base_ms,
                 const char* base) { report.row(what, data, c, bytes, ms, roof_ms, base_ms, base); };

  // 8-bit histograms, 1 GiB: one or two histograms a warp, against CUB.
  for (Kind k : {Kind::kUniform, Kind::kConstant, Kind::kNarrow, Kind::kPhoto})
    for (int c : {1, 3, 4}) {
      if (k != Kind::kUniform && k != Kind::kPhoto && c != 1) continue;
      const uint64_t bytes = GiB / (16 * c) * (16 * c);
      b.fill(k, bytes, c);
      const double roof = b.roofline_ms(bytes, reps);
      const double cub = b.cub_hist8_ms(bytes, c, reps);
      row("roofline (read once)", kind_name(k), c, bytes, roof, roof, 0, "");
      row("CUB HistogramEven", kind_name(k), c, bytes, cub, roof, 0, "");
      row("hist8, 2 histograms a warp", kind_name(k), c, bytes, b.hist8_ms(bytes, c, 2, reps), roof, cub, "CUB");
      row("hist8, 1 histogram a warp", kind_name(k), c, bytes, b.hist8_ms(bytes, c, 1, reps), roof, cub, "CUB");
    }

  // Sizes: 8-bit, one channel, uniform.
  for (uint64_t bytes : {uint64_t{4} << 10, uint64_t{1} << 20, uint64_t{16} << 20, uint64_t{256} << 20, GiB, 4 * GiB}) {
    if (bytes > max_bytes) continue;
    b.fill(Kind::kUniform, bytes, 1);
    const double roof = b.roofline_ms(bytes, reps);
    const double cub = bytes <= GiB ? b.cub_hist8_ms(bytes, 1, reps) : -1;
    row("hist8", "uniform", 1, bytes, b.hist8_ms(bytes, 1, kHist8Copies, reps), roof, cub, "CUB");
  }

  // 16-bit: one fused pass.
  for (int c : {1, 3, 4}) {
    const uint64_t bytes = GiB / (32 * c) * (32 * c);
    b.fill(Kind::kUniform, bytes, 1);
    const double roof = b.roofline_ms(bytes, reps);
    row("uint16 fused pass", "uniform", c, bytes, b.int16_ms(bytes, c, reps), roof, 0, "");
  }

  // float32: pass 1, pass 2, both, against CUB's Min + Max + Sum + Sum(x^2).
  for (Kind k : {Kind::kUniform, Kind::kConstant}) {
    const uint64_t bytes = GiB;
    fill_float<<<b.dev.sm_count * 8, 256>>>(reinterpret_cast<float*>(b.buf), bytes / 4, k == Kind::kConstant);
    IMGSTAT_BENCH_CHECK(cudaDeviceSynchronize());
    const double roof = b.roofline_ms(bytes, reps);
    const double cub = b.cub_four_ms(bytes, reps);
    const double p1 = b.float_pass1_ms(bytes, reps);
    const double p2 = b.float_pass2_ms(bytes, reps);
    row("CUB Min+Max+Sum+Sum(x^2)", kind_name(k), 1, bytes, cub, roof, 0, "");
    row("float32 pass 1 (moments)", kind_name(k), 1, bytes, p1, roof, cub, "CUB 4 calls");
    row("float32 pass 2 (bins)", kind_name(k), 1, bytes, p2, roof, 0, "");
    row("float32 pass 1 + pass 2", kind_name(k), 1, bytes, p1 + p2, roof, cub, "CUB 4 calls");
  }
}

// The engine from host memory: staged pipeline against plain copies; then
// small images, one caller and eight.
void engine_rows(Report& report) {
  const uint64_t GiB = uint64_t{1} << 30;
  auto engine = make_cuda_engine(EngineOptions{}, nullptr);
  const uint64_t bytes = GiB;
  void* pinned = nullptr;
  IMGSTAT_BENCH_CHECK(cudaMallocHost(&pinned, bytes));
  std::vector<uint8_t> pageable(bytes);
  std::mt19937_64 rng(1);
  for (uint64_t i = 0; i + 8 <= bytes; i += 8) {
    const uint64_t w = rng();
    std::memcpy(static_cast<uint8_t*>(pinned) + i, &w, 8);
    std::memcpy(pageable.data() + i, &w, 8);
  }
  uint8_t* dev_buf = nullptr;
  IMGSTAT_BENCH_CHECK(cudaMalloc(&dev_buf, bytes));
  const double copy_pinned = bench::median_ms(5, [&] { IMGSTAT_BENCH_CHECK(cudaMemcpy(dev_buf, pinned, bytes, cudaMemcpyHostToDevice)); });
  const double copy_pageable = bench::median_ms(5, [&] { IMGSTAT_BENCH_CHECK(cudaMemcpy(dev_buf, pageable.data(), bytes, cudaMemcpyHostToDevice)); });
  IMGSTAT_BENCH_CHECK(cudaFree(dev_buf));
  const Layout u8{bytes, 1, 1, SampleType::kUint8, 0};
  const Layout f32{bytes / 4, 1, 1, SampleType::kFloat32, 0};
  const StatsRequest all;
  auto h2r = [&](const char* what, const char* from, const void* p, const Layout& l, double copy_ms) {
    const double ms = bench::median_ms(5, [&] { engine->analyze(ImageView{p, l}, all); });
    char line[256];
    std::snprintf(line, sizeof line, "| %-34s | %-8s | %7.1f GB/s | %5.3fx copy time | plain copy %5.1f GB/s |\n", what,
                  from, bytes / ms / 1e6, ms / copy_ms, bytes / copy_ms / 1e6);
    report.line(line);
  };
  say("| host-to-result, 1 GiB | from | engine | vs plain cudaMemcpy | |\n|---|---|---|---|---|\n");
  h2r("uint8 histogram + stats", "pinned", pinned, u8, copy_pinned);
  h2r("uint8 histogram + stats", "pageable", pageable.data(), u8, copy_pageable);
  for (uint64_t i = 0; i < bytes / 4; ++i) {
    const float v = static_cast<float>(rng() >> 40) * 1e-3f;
    std::memcpy(static_cast<uint8_t*>(pinned) + 4 * i, &v, 4);
    std::memcpy(pageable.data() + 4 * i, &v, 4);
  }
  h2r("float32 two passes", "pinned", pinned, f32, copy_pinned);
  h2r("float32 two passes", "pageable", pageable.data(), f32, copy_pageable);
  IMGSTAT_BENCH_CHECK(cudaFreeHost(pinned));

  // Small images: time per image, one caller and eight at once.
  for (uint64_t side : {64, 256}) {
    std::vector<uint8_t> thumb(side * side * 3);
    for (auto& x : thumb) x = static_cast<uint8_t>(rng());
    const Layout l{side, side, 3, SampleType::kUint8, 0};
    const int n = 2000;
    const double one = bench::median_ms(3, [&] {
      for (int i = 0; i < n; ++i) engine->analyze(ImageView{thumb.data(), l}, all);
    });
    const double eight = bench::median_ms(3, [&] {
      std::vector<std::thread> t;
      for (int k = 0; k < 8; ++k)
        t.emplace_back([&] {
          for (int i = 0; i < n / 8; ++i) engine->analyze(ImageView{thumb.data(), l}, all);
        });
      for (auto& x : t) x.join();
    });
    char line[256];
    std::snprintf(line, sizeof line, "| %llux%llux3 uint8 image, per image | %6.1f us one caller | %6.1f us with 8 callers |\n",
                  static_cast<unsigned long long>(side), static_cast<unsigned long long>(side), one * 1e3 / n,
                  eight * 1e3 / n);
    report.line(line);
  }
}

}  // namespace

int bench_main(int argc, char** argv) {
  bool quick = false, profile = false;
  std::string out_path;
  const char* photo_rgb = nullptr;
  const char* photo_gray = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    if (!std::strcmp(argv[i], "--profile")) profile = true;
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out_path = argv[++i];
    if (!std::strcmp(argv[i], "--photo") && i + 2 < argc) {
      photo_rgb = argv[++i];
      photo_gray = argv[++i];
    }
  }
  Bench b;
  const uint64_t max_bytes = quick ? uint64_t{1} << 30 : uint64_t{4} << 30;
  b.init(max_bytes);
  b.photo_rgb = photo_rgb ? read_all(photo_rgb) : std::vector<uint8_t>(3 << 16, 128);
  b.photo_gray = photo_gray ? read_all(photo_gray) : std::vector<uint8_t>(1 << 16, 128);
  say("imgstat-bench on %s (%d SMs, %.0f MiB L2, %.1f GiB), CUDA %d\n", b.prop.name, b.dev.sm_count,
      b.prop.l2CacheSize / 1048576.0, b.prop.totalGlobalMem / 1073741824.0, CUDART_VERSION);
  if (profile) {
    profile_once(b);
    return 0;
  }
  Report report;
  kernel_rows(b, max_bytes, quick ? 5 : 10, report);
  IMGSTAT_BENCH_CHECK(cudaFree(b.buf));
  engine_rows(report);
  say("\nSUMMARY (%s)\n", b.prop.name);
  for (const auto& line : report.table) say("%s", line.c_str());
  if (!out_path.empty()) std::ofstream(out_path) << g_log;
  return 0;
}

}  // namespace imgstat::cuda

int main(int argc, char** argv) { return imgstat::cuda::bench_main(argc, argv); }
