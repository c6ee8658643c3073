// imgstat-quality-gpu-bench: what the quality measures and hashes cost the
// CUDA engine per image, the images already in GPU memory (as a JPEG that
// nvJPEG decoded), against the default statistics alone on the same images
// (the baseline of issue 53's dataset pass). Many 500x375 photo-like RGB
// images, called from 1, 16, 32 and 64 threads at once as a server's
// threads call it; images per second, each pass's ratio to the baseline
// with as many threads, and one thread's latency. No gRPC, no decoding: what
// is left is the engine's own work and waits.
//
//   imgstat-quality-gpu-bench [--width W --height H] [--repeat R]
//                             [--wait spin|yield|block]
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "common/hashes.hpp"
#include "common/pil_resample.hpp"
#include "common/quality.hpp"
#include "common/xxh3_long.hpp"
#include "cuda/dispatch/quality.hpp"
#include "gpu_timing.hpp"
#include "imgstat/engine.hpp"
#include "photo.hpp"
#include "table.hpp"

namespace {

using namespace imgstat;

struct Pass {
  const char* name;
  bool quality, hashes;
};

// Images per second of `threads` threads each making `calls` calls, cycling
// over the images; the best of `repeat` rounds.
double rate(Engine& engine, const std::vector<DeviceImageView>& images, const StatsRequest& r, int threads,
            int calls, int repeat) {
  double best = 0;
  for (int round = 0; round < repeat; ++round) {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        ++ready;
        while (!go.load()) std::this_thread::yield();
        for (int i = 0; i < calls; ++i) {
          const Result res = engine.analyze_device(images[(t * calls + i) % images.size()], r);
          if (res.channels.empty() || res.has_quality != r.quality || res.has_hashes != r.hashes) std::abort();
        }
      });
    while (ready.load() < threads) std::this_thread::yield();
    const auto a = std::chrono::steady_clock::now();
    go = true;
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
    best = std::max(best, threads * calls / s);
  }
  return best;
}

// Each piece of the device measures alone on one image (device time), the
// host's finishing pieces (host time), and what one CUDA call and wait cost
// a thread when 1 and 16 threads make them at once.
void pieces(const DeviceImageView& image, const std::vector<uint8_t>& host_px, int repeat) {
  const Layout& l = image.layout;
  const auto* px = static_cast<const uint8_t*>(image.data);
  const int w = static_cast<int>(l.width), h = static_cast<int>(l.height);
  cudaDeviceProp p;
  IMGSTAT_BENCH_CHECK(cudaGetDeviceProperties(&p, 0));
  const cuda::DeviceInfo dev{p.multiProcessorCount};
  const uint32_t rgb[3] = {0, 1, 2};
  unsigned long long* counts = nullptr;
  IMGSTAT_BENCH_CHECK(cudaMalloc(&counts, cuda::kQualityCountsSize * 8 + 4096));
  uint8_t* scratch = nullptr;
  IMGSTAT_BENCH_CHECK(cudaMalloc(&scratch, l.pixels() * 4 + (1 << 20)));
  cuda::BrightnessRanks ranks{};
  const auto r = brightness_ranks(l.pixels());
  for (int i = 0; i < kBrightnessRanks; ++i) ranks.rank[i] = r[i];
  auto* wanted = reinterpret_cast<cuda::WantedBuckets*>(scratch);
  auto* next = reinterpret_cast<unsigned int*>(scratch + 4096);
  auto* colours = reinterpret_cast<uint32_t*>(scratch + 8192);
  int xs = 0, ys = 0;
  blurriness_size(l.width, l.height, &xs, &ys);
  // Both thumbnails' coefficients up, as the engine lays them out.
  auto place = [&](const PilPlan& plan, uint8_t* rows, uint8_t* out, int* coeff) {
    cuda::ThumbnailPass t;
    int* hb = coeff;
    int32_t* hk = hb + plan.horizontal.bounds.size();
    int* vb = hk + plan.horizontal.k.size();
    int32_t* vk = vb + plan.vertical.bounds.size();
    IMGSTAT_BENCH_CHECK(cudaMemcpy(hb, plan.horizontal.bounds.data(), plan.horizontal.bounds.size() * 4, cudaMemcpyHostToDevice));
    IMGSTAT_BENCH_CHECK(cudaMemcpy(hk, plan.horizontal.k.data(), plan.horizontal.k.size() * 4, cudaMemcpyHostToDevice));
    IMGSTAT_BENCH_CHECK(cudaMemcpy(vb, plan.vertical.bounds.data(), plan.vertical.bounds.size() * 4, cudaMemcpyHostToDevice));
    IMGSTAT_BENCH_CHECK(cudaMemcpy(vk, plan.vertical.k.data(), plan.vertical.k.size() * 4, cudaMemcpyHostToDevice));
    t.h_bounds = hb, t.h_k = hk, t.v_bounds = vb, t.v_k = vk;
    t.h_ksize = plan.horizontal.ksize, t.v_ksize = plan.vertical.ksize;
    t.first_row = plan.first_row, t.rows = plan.rows, t.xsize = plan.xsize, t.ysize = plan.ysize;
    t.rows_out = rows, t.out = out;
    return t;
  };
  uint8_t* rows = scratch + l.pixels() * 4;
  int* coeff = reinterpret_cast<int*>(rows + 512 * 1024);
  const cuda::ThumbnailPass blur =
      place(pil_plan(w, h, xs, ys, PilFilter::kBicubic), rows, rows + 256 * 1024, coeff);
  const cuda::ThumbnailPass phash = place(pil_plan(w, h, kPhashSide, kPhashSide, PilFilter::kLanczos),
                                          rows + 128 * 1024, rows + 300 * 1024, coeff + 32 * 1024);
  const cuda::ThumbnailPass none;
  cuda::QualityCountsPass counting;
  counting.out = counts, counting.buckets = counts + cuda::kQualityBucketsAt;
  // The pixel hash's pieces: the secret and the header on the device.
  const std::vector<uint8_t> header = pixel_hash_header(l);
  uint8_t* hash_in = nullptr;
  IMGSTAT_BENCH_CHECK(cudaMalloc(&hash_in, kXxh3SecretSize + header.size()));
  IMGSTAT_BENCH_CHECK(cudaMemcpy(hash_in, xxh3_default_secret(), kXxh3SecretSize, cudaMemcpyHostToDevice));
  IMGSTAT_BENCH_CHECK(cudaMemcpy(hash_in + kXxh3SecretSize, header.data(), header.size(), cudaMemcpyHostToDevice));
  cuda::PixelHashPass hash;
  hash.input.header = hash_in + kXxh3SecretSize, hash.input.header_bytes = static_cast<uint32_t>(header.size());
  hash.input.px = px, hash.input.sample_bytes = l.pixels() * 3, hash.input.channels = 3;
  hash.len = header.size() + l.pixels() * 3, hash.secret = hash_in;
  unsigned long long* hash_adds = nullptr;
  IMGSTAT_BENCH_CHECK(cudaMalloc(&hash_adds, xxh3_pieces(hash.len) * kXxh3Lanes * 8));
  hash.adds = hash_adds;
  const cuda::PixelHashPass no_hash;
  const cuda::QualityCountsPass no_counts;
  auto first = [&](const cuda::QualityCountsPass& c, bool hist, const cuda::ThumbnailPass& b,
                   const cuda::ThumbnailPass& p, const cuda::PixelHashPass& x) {
    return bench::device_median_ms(repeat, [&] {
      if (c.out) IMGSTAT_BENCH_CHECK(cudaMemsetAsync(counts, 0, cuda::kQualityCountsSize * 8, 0));
      cuda::launch_measures_first(px, l.width, l.height, 3, rgb, c, hist, b, p, x, dev, 0);
    });
  };
  const double count_ms = first(counting, true, none, none, no_hash);
  const double count_nohist_ms = first(counting, false, none, none, no_hash);
  const double horizontal_ms = first(no_counts, false, blur, phash, no_hash);
  const double hash_ms = first(no_counts, false, none, none, hash);
  const double first_ms = first(counting, false, blur, phash, hash);
  const double memset_ms = bench::device_median_ms(
      repeat, [&] { IMGSTAT_BENCH_CHECK(cudaMemsetAsync(counts, 0, cuda::kQualityCountsSize * 8, 0)); });
  const double find_ms = bench::device_median_ms(repeat, [&] {
    cuda::launch_measures_second(counts + cuda::kQualityBucketsAt, ranks, wanted, 3, none, none, dev, 0);
  });
  const double vertical_ms = bench::device_median_ms(
      repeat, [&] { cuda::launch_measures_second(nullptr, ranks, wanted, 3, blur, phash, dev, 0); });
  const double second_ms = bench::device_median_ms(repeat, [&] {
    cuda::launch_measures_second(counts + cuda::kQualityBucketsAt, ranks, wanted, 3, blur, phash, dev, 0);
  });
  const double gather_ms = bench::device_median_ms(repeat, [&] {
    IMGSTAT_BENCH_CHECK(cudaMemsetAsync(next, 0, 4, 0));
    cuda::launch_measures_colours(px, l.pixels(), rgb, wanted, colours, next, dev, 0);
  });
  uint8_t* pinned = nullptr;
  IMGSTAT_BENCH_CHECK(cudaMallocHost(&pinned, host_px.size()));
  const double copy_ms = bench::device_median_ms(repeat, [&] {
    IMGSTAT_BENCH_CHECK(cudaMemcpyAsync(pinned, px, host_px.size(), cudaMemcpyDeviceToHost, 0));
  });
  std::printf("\none image, device time of each piece (median of %d):\n", repeat);
  std::printf("  memset of the counts                          %8.1f us\n", memset_ms * 1e3);
  std::printf("  first launch: memset + counting pass, histograms / none %8.1f / %.1f us\n", count_ms * 1e3,
              count_nohist_ms * 1e3);
  std::printf("                thumbnails' horizontal passes / pixel hash's pieces %8.1f / %.1f us\n",
              horizontal_ms * 1e3, hash_ms * 1e3);
  std::printf("                all of them (no histograms) %8.1f us\n", first_ms * 1e3);
  std::printf("  second launch: find_wanted / vertical passes / both %8.1f / %.1f / %.1f us\n", find_ms * 1e3,
              vertical_ms * 1e3, second_ms * 1e3);
  std::printf("  third launch: the wanted colours                %8.1f us\n", gather_ms * 1e3);
  std::printf("  the pixels back (D2H, pinned)   %8.1f us\n", copy_ms * 1e3);
  // The host's pieces.
  const ImageView view{host_px.data(), l};
  uint8_t digest[16];
  const double xxh = bench::median_ms(repeat, [&] { pixel_hash(view, rgb, digest); });
  PilImage small;
  small.w = small.h = kPhashSide, small.bands = 1, small.px.assign(kPhashSide * kPhashSide, 7);
  for (size_t i = 0; i < small.px.size(); ++i) small.px[i] = static_cast<uint8_t>(i * 37);
  volatile uint64_t sink = 0;
  const double dct = bench::median_ms(repeat, [&] { sink = sink + perceptual_hash_of(small); });
  const double cpu_quality = bench::median_ms(repeat, [&] { (void)measure_quality(view, rgb); });
  std::printf("host time: pixel hash (XXH3-128) %.1f us, perceptual hash of the thumbnail (DCT) %.1f us, "
              "the CPU engine's whole quality measures %.1f us\n",
              xxh * 1e3, dct * 1e3, cpu_quality * 1e3);
  // CUDA calls and their wait, from 1 and 16 threads at once: rounds of
  // `memsets` small memsets and a synchronize, seconds for `calls` rounds.
  auto rounds = [](int threads, int memsets, int calls) {
    std::vector<std::thread> pool;
    const auto a = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&] {
        void* d = nullptr;
        IMGSTAT_BENCH_CHECK(cudaMalloc(&d, 64));
        for (int i = 0; i < calls; ++i) {
          for (int k = 0; k < memsets; ++k) IMGSTAT_BENCH_CHECK(cudaMemsetAsync(d, 0, 64, cudaStreamPerThread));
          IMGSTAT_BENCH_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
        }
        cudaFree(d);
      });
    for (auto& th : pool) th.join();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
  };
  const int calls = 2000;
  for (int threads : {1, 16})
    for (int memsets : {1, 10}) {
      const double s = rounds(threads, memsets, calls);
      std::printf("%2d memsets and their wait, %2d threads: %.1f us a round, %.0f calls a second in all\n", memsets,
                  threads, s / calls * 1e6, threads * calls * (memsets + 1) / s);
    }
  cudaFreeHost(pinned);
  cudaFree(scratch);
  cudaFree(counts);
  cudaFree(hash_in);
  cudaFree(hash_adds);
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t width = 500, height = 375;
  int repeat = 3;
  std::string wait = "spin";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--width") width = static_cast<uint32_t>(std::stoul(v));
    if (k == "--height") height = static_cast<uint32_t>(std::stoul(v));
    if (k == "--repeat") repeat = std::stoi(v);
    if (k == "--wait") wait = v;
  }
  EngineOptions options;
  options.cuda_wait = wait == "yield" ? CudaWait::kYield : wait == "block" ? CudaWait::kBlock : CudaWait::kSpin;
  std::string why;
  std::unique_ptr<Engine> engine = make_cuda_engine(options, &why);
  if (!engine) {
    std::printf("no CUDA engine: %s\n", why.c_str());
    return 0;
  }
  // 64 different pictures, so that no cache holds one image's answer.
  constexpr int kImages = 64;
  const Layout layout{width, height, 3, SampleType::kUint8, 0};
  std::vector<DeviceImageView> images;
  std::vector<void*> memory;
  for (int i = 0; i < kImages; ++i) {
    bench::Gradient g;
    if (i > 0) g.phase = 0.1 * i, g.x_period = 150 + 7 * i, g.y_period = 120 + 5 * i;
    const std::vector<uint8_t> px = bench::photo_rgb(width, height, g);
    void* d = nullptr;
    IMGSTAT_BENCH_CHECK(cudaMalloc(&d, px.size()));
    IMGSTAT_BENCH_CHECK(cudaMemcpy(d, px.data(), px.size(), cudaMemcpyHostToDevice));
    memory.push_back(d);
    images.push_back(DeviceImageView{d, layout, -1});
  }
  {
    bench::Gradient g;
    pieces(images[0], bench::photo_rgb(width, height, g), 20);
  }
  const Pass passes[] = {{"default statistics (baseline)", false, false},
                         {"+ quality", true, false},
                         {"+ hashes", false, true},
                         {"+ quality, hashes", true, true}};
  const int thread_counts[] = {1, 16, 32, 64};
  std::printf("CUDA engine, %ux%u RGB uint8 in GPU memory, %d images, --wait %s, best of %d\n", width, height,
              kImages, wait.c_str(), repeat);
  double table[4][4] = {};
  for (int p = 0; p < 4; ++p) {
    StatsRequest r;
    r.quality = passes[p].quality, r.hashes = passes[p].hashes;
    for (int t = 0; t < 4; ++t) {
      const int threads = thread_counts[t];
      const int calls = std::max(50, 3200 / threads);
      rate(*engine, images, r, threads, 10, 1);  // warm: workspaces, pinned staging
      table[p][t] = rate(*engine, images, r, threads, calls, repeat);
      std::printf("%-32s %2d threads: %9.0f images/s\n", passes[p].name, threads, table[p][t]);
      std::fflush(stdout);
    }
  }
  std::printf("\n| pass | 1 thread: images/s (latency) | 16 threads | 32 threads | 64 threads |\n|---|---|---|---|---|\n");
  for (int p = 0; p < 4; ++p) {
    std::printf("| %s | %.0f (%.0f us)", passes[p].name, table[p][0], 1e6 / table[p][0]);
    for (int t = 1; t < 4; ++t) std::printf(" | %.0f (%.2fx)", table[p][t], table[p][t] / table[0][t]);
    std::printf(" |\n");
  }
  for (void* d : memory) cudaFree(d);
  return 0;
}
