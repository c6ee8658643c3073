// imgstat-parts-bench: statistics of parts of one 8000x6000 RGB uint8
// photo-like image (a mask of half its pixels, 65,536 labels, 16x16 tiles;
// and a float32 grey version's labels with their percentiles) against its
// whole-image figures and OpenCV's (calcHist and meanStdDev with
// a mask, calcHist tile by tile), on the CPU engine and, where a GPU is, the
// CUDA engine: its calls from host memory, and its part kernels alone on
// data already on the device against the whole-image 8-bit pass there.
// Medians of --repeat runs; the table comes last.
//
//   imgstat-parts-bench [--width W --height H] [--repeat R] [--threads N]
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "imgstat/engine.hpp"
#include "photo.hpp"
#include "table.hpp"

#ifdef IMGSTAT_WITH_CUDA
#include <cuda_runtime.h>

#include "common/parts.hpp"
#include "cuda/dispatch/dispatch.hpp"
#include "gpu_timing.hpp"
#endif

namespace {

using namespace imgstat;

using bench::median_ms;
bench::Table g_table;

void row(const std::string& what, const std::string& tool, double ms, const std::string& ratio = "") {
  g_table.row(what, tool, ms, ratio);
}

std::string times(double a, double b) {
  char s[64];
  std::snprintf(s, sizeof s, "%.2fx", a / b);
  return s;
}

volatile double g_sink;

#ifdef IMGSTAT_WITH_CUDA
// The part kernels alone, the image and maps already on the device, against
// the whole-image 8-bit pass (histograms; moments follow from them) and a
// read of every byte (the roofline) on the same buffer.
void kernels_alone(const std::vector<uint8_t>& img, uint32_t w, uint32_t h, const std::vector<uint8_t>& mask,
                   const std::vector<uint16_t>& labels, int repeat) {
  using namespace imgstat::cuda;
  cudaDeviceProp p;
  IMGSTAT_BENCH_CHECK(cudaGetDeviceProperties(&p, 0));
  const DeviceInfo dev{p.multiProcessorCount};
  const uint64_t n = uint64_t{w} * h;
  uint8_t *px, *m;
  uint16_t* lab;
  IMGSTAT_BENCH_CHECK(cudaMalloc(&px, img.size()));
  IMGSTAT_BENCH_CHECK(cudaMalloc(&m, mask.size()));
  IMGSTAT_BENCH_CHECK(cudaMalloc(&lab, labels.size() * 2));
  IMGSTAT_BENCH_CHECK(cudaMemcpy(px, img.data(), img.size(), cudaMemcpyHostToDevice));
  IMGSTAT_BENCH_CHECK(cudaMemcpy(m, mask.data(), mask.size(), cudaMemcpyHostToDevice));
  IMGSTAT_BENCH_CHECK(cudaMemcpy(lab, labels.data(), labels.size() * 2, cudaMemcpyHostToDevice));
  unsigned long long* counts;
  IMGSTAT_BENCH_CHECK(cudaMalloc(&counts, 3 * 256 * 8));
  const double whole = bench::device_median_ms(repeat, [&] {
    IMGSTAT_BENCH_CHECK(cudaMemsetAsync(counts, 0, 3 * 256 * 8));
    launch_hist8(px, n, 3, counts, dev, nullptr);
  });
  row("whole image, 3x256 histograms (8-bit pass)", "GPU kernels, data on device", whole);

  const uint32_t stride = 258;
  PartAccum* acc;
  unsigned int* slots;
  int32_t* slot_of;
  uint32_t* table;
  const uint32_t max_parts = 65536;
  IMGSTAT_BENCH_CHECK(cudaMalloc(&acc, uint64_t{max_parts} * 3 * sizeof(PartAccum)));
  IMGSTAT_BENCH_CHECK(cudaMalloc(&slots, 256 * 3 * stride * 4));
  IMGSTAT_BENCH_CHECK(cudaMalloc(&slot_of, 256 * 4));
  IMGSTAT_BENCH_CHECK(cudaMalloc(&table, 65536 * 4));
  std::vector<int32_t> identity(256);
  for (int i = 0; i < 256; ++i) identity[i] = i;
  std::vector<uint32_t> tab(65536);
  for (uint32_t i = 0; i < 65536; ++i) tab[i] = i;
  IMGSTAT_BENCH_CHECK(cudaMemcpy(slot_of, identity.data(), 256 * 4, cudaMemcpyHostToDevice));
  IMGSTAT_BENCH_CHECK(cudaMemcpy(table, tab.data(), 65536 * 4, cudaMemcpyHostToDevice));

  PartMapDevice mask_map;
  mask_map.kind = PartMapKind::kMask;
  mask_map.data = m;
  mask_map.stride = w;
  const double masked = bench::device_median_ms(repeat, [&] {
    IMGSTAT_BENCH_CHECK(cudaMemsetAsync(acc, 0, 3 * sizeof(PartAccum)));
    IMGSTAT_BENCH_CHECK(cudaMemsetAsync(slots, 0, 3 * stride * 4));
    launch_part_map(px, w, h, 3, SampleType::kUint8, mask_map, 1, acc, PartSlots{slots, slot_of, stride}, false, false, dev,
                    nullptr);
  });
  row("mask of half the pixels, 3x256 value counts (all of it)", "GPU part kernel, data on device", masked,
      times(masked, whole) + " of whole");

  PartMapDevice label_map;
  label_map.kind = PartMapKind::kTable16;
  label_map.data = reinterpret_cast<const uint8_t*>(lab);
  label_map.stride = uint64_t{w} * 2;
  label_map.table = table;
  const double labelled = bench::device_median_ms(repeat, [&] {
    IMGSTAT_BENCH_CHECK(cudaMemsetAsync(acc, 0, uint64_t{max_parts} * 3 * sizeof(PartAccum)));
    launch_part_map(px, w, h, 3, SampleType::kUint8, label_map, max_parts, acc, PartSlots{}, true, false, dev, nullptr);
  });
  row("65,536 labels, count/min/max/sum/sumsq per label", "GPU part kernel, data on device", labelled,
      times(labelled, whole) + " of whole");

  std::vector<uint32_t> xs, ys;
  for (uint32_t c = 0; c <= 16; ++c) xs.push_back(static_cast<uint32_t>(uint64_t{c} * w / 16));
  for (uint32_t r = 0; r <= 16; ++r) ys.push_back(static_cast<uint32_t>(uint64_t{r} * h / 16));
  uint32_t *dx, *dy;
  IMGSTAT_BENCH_CHECK(cudaMalloc(&dx, 17 * 4));
  IMGSTAT_BENCH_CHECK(cudaMalloc(&dy, 17 * 4));
  IMGSTAT_BENCH_CHECK(cudaMemcpy(dx, xs.data(), 17 * 4, cudaMemcpyHostToDevice));
  IMGSTAT_BENCH_CHECK(cudaMemcpy(dy, ys.data(), 17 * 4, cudaMemcpyHostToDevice));
  const double tiled = bench::device_median_ms(repeat, [&] {
    IMGSTAT_BENCH_CHECK(cudaMemsetAsync(acc, 0, 256 * 3 * sizeof(PartAccum)));
    IMGSTAT_BENCH_CHECK(cudaMemsetAsync(slots, 0, 256 * 3 * stride * 4));
    launch_part_tiles(px, w, 3, SampleType::kUint8, dx, dy, 16, 16, n, acc, PartSlots{slots, slot_of, stride}, false,
                      false, dev, nullptr);
  });
  row("16x16 tiles, 3x256 value counts per tile (all of it)", "GPU part kernel, data on device", tiled,
      times(tiled, whole) + " of whole");
  for (void* q : {static_cast<void*>(px), static_cast<void*>(m), static_cast<void*>(lab), static_cast<void*>(counts),
                  static_cast<void*>(acc), static_cast<void*>(slots), static_cast<void*>(slot_of),
                  static_cast<void*>(table), static_cast<void*>(dx), static_cast<void*>(dy)})
    IMGSTAT_BENCH_CHECK(cudaFree(q));
}
#endif

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv);
  const uint32_t w = args.width, h = args.height, threads = args.threads;
  const int repeat = args.repeat;
  const uint64_t n = uint64_t{w} * h;
  std::vector<uint8_t> img = bench::photo_rgb(w, h, bench::Gradient{});
  // Mask: a disc of half the image's area.
  std::vector<uint8_t> mask(n);
  const double r2 = 0.5 * n / M_PI;
  for (uint64_t y = 0; y < h; ++y)
    for (uint64_t x = 0; x < w; ++x) {
      const double dx = x - w / 2.0, dy = y - h / 2.0;
      mask[y * w + x] = dx * dx + dy * dy <= r2 ? 255 : 0;
    }
  // Labels: a 256x256 grid of blocks, 65,536 labels.
  std::vector<uint16_t> labels(n);
  for (uint64_t y = 0; y < h; ++y)
    for (uint64_t x = 0; x < w; ++x) labels[y * w + x] = static_cast<uint16_t>((y * 256 / h) * 256 + x * 256 / w);
  const unsigned cores = threads ? threads : std::thread::hardware_concurrency();
  std::printf("%ux%u RGB uint8 (%.0f MiB), %u threads, medians of %d\n", w, h, n * 3 / 1048576.0, cores, repeat);

  const ImageView view{img.data(), Layout{w, h, 3, SampleType::kUint8, 0}};
  StatsRequest whole_request;  // min/max, sum/mean, stddev, 256-bin histogram
  StatsRequest moments = whole_request;
  moments.histogram = false;
  // Float samples: the red channel scaled to [0, 1) with a fraction below
  // 1/255 (so values are many), one channel; each label's median and
  // percentiles come from its own fine bins.
  std::vector<float> grey_px(n);
  for (uint64_t i = 0; i < n; ++i) grey_px[i] = (img[3 * i] + static_cast<float>(i % 997) / 997) / 256;
  const ImageView grey{grey_px.data(), Layout{w, h, 1, SampleType::kFloat32, 0}};
  StatsRequest percentiles = moments;
  percentiles.distribution = true;
  percentiles.percentiles = {1, 5, 25, 75, 95, 99};
  Parts mask_parts;
  mask_parts.kind = PartsKind::kMask;
  mask_parts.map = PartMapView{mask.data(), w, h, 1, 0, MapType::kUint8, 0};
  Parts label_parts;
  label_parts.kind = PartsKind::kLabels;
  label_parts.map = PartMapView{labels.data(), w, h, 1, 0, MapType::kUint16, 0};
  Parts tile_parts;
  tile_parts.kind = PartsKind::kTiles;
  tile_parts.columns = tile_parts.rows = 16;

  // OpenCV, as a user calls it (its own threads, cv::setNumThreads).
  cv::setNumThreads(static_cast<int>(cores));
  const cv::Mat mat(static_cast<int>(h), static_cast<int>(w), CV_8UC3, img.data());
  const cv::Mat cvmask(static_cast<int>(h), static_cast<int>(w), CV_8UC1, mask.data());
  auto calc3 = [&](const cv::Mat& m, const cv::Mat& mk) {
    const int hist_size[] = {256};
    const float range[] = {0, 256};
    const float* ranges[] = {range};
    double s = 0;
    for (int c = 0; c < 3; ++c) {
      cv::Mat hist;
      cv::calcHist(&m, 1, &c, mk, hist, 1, hist_size, ranges);
      s += hist.at<float>(0);
    }
    g_sink = s;
  };
  const double cv_whole = median_ms(repeat, [&] { calc3(mat, cv::Mat()); });
  row("whole image, 3x256 histograms", "OpenCV calcHist", cv_whole);
  const double cv_masked = median_ms(repeat, [&] { calc3(mat, cvmask); });
  row("mask of half the pixels, 3x256 histograms", "OpenCV calcHist with mask", cv_masked);
  const double cv_masked_moments = median_ms(repeat, [&] {
    cv::Scalar mean, sd;
    cv::meanStdDev(mat, mean, sd, cvmask);
    g_sink = mean[0] + sd[0];
  });
  row("mask of half the pixels, mean and stddev", "OpenCV meanStdDev with mask", cv_masked_moments);
  const double cv_tiles = median_ms(repeat, [&] {
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 16; ++c) {
        const int x0 = static_cast<int>(uint64_t(c) * w / 16), x1 = static_cast<int>(uint64_t(c + 1) * w / 16);
        const int y0 = static_cast<int>(uint64_t(r) * h / 16), y1 = static_cast<int>(uint64_t(r + 1) * h / 16);
        calc3(mat(cv::Rect(x0, y0, x1 - x0, y1 - y0)), cv::Mat());
      }
  });
  row("16x16 tiles, 3x256 histograms per tile", "OpenCV calcHist tile by tile", cv_tiles);

  auto engine_rows = [&](Engine& e, const std::string& name) {
    const double whole = median_ms(repeat, [&] { g_sink = e.analyze(view, whole_request).channels[0].mean; });
    row("whole image, default statistics", name, whole);
    const double masked = median_ms(repeat, [&] { g_sink = e.analyze_parts(view, mask_parts, whole_request).channels[0].mean; });
    row("mask of half the pixels, default statistics", name, masked,
        times(masked, whole) + " of whole, " + times(cv_masked + cv_masked_moments, masked) + " faster than OpenCV");
    const double labelled = median_ms(repeat, [&] { g_sink = e.analyze_parts(view, label_parts, moments).parts.size(); });
    row("65,536 labels, count/min/max/sum/mean/stddev", name, labelled, times(labelled, whole) + " of whole");
    const double tiled = median_ms(repeat, [&] { g_sink = e.analyze_parts(view, tile_parts, whole_request).parts.size(); });
    row("16x16 tiles, default statistics (256-bin histograms)", name, tiled,
        times(tiled, whole) + " of whole, " + times(cv_tiles, tiled) + " faster than OpenCV");
    const double float_whole = median_ms(repeat, [&] { g_sink = e.analyze(grey, percentiles).channels[0].median; });
    row("float32 grey, whole image, median and percentiles", name, float_whole);
    try {  // float parts are the CPU engine's (a server sends them there)
      const double float_labelled =
          median_ms(repeat, [&] { g_sink = e.analyze_parts(grey, label_parts, percentiles).parts.size(); });
      row("float32 grey, 65,536 labels, median and percentiles of each", name, float_labelled,
          times(float_labelled, float_whole) + " of whole");
    } catch (const Error& err) {
      std::printf("%s, float32 labels: %s\n", name.c_str(), err.what());
    }
  };
  {
    auto cpu = make_cpu_engine(threads);
    engine_rows(*cpu, "imgstat CPU engine");
  }
#ifdef IMGSTAT_WITH_CUDA
  if (cuda_device_count() > 0) {
    std::string why;
    if (auto gpu = make_cuda_engine(EngineOptions{}, &why)) {
      engine_rows(*gpu, "imgstat CUDA engine, from host memory");
      kernels_alone(img, w, h, mask, labels, repeat);
    } else {
      std::printf("no CUDA engine: %s\n", why.c_str());
    }
  }
#endif
  g_table.print();
  return 0;
}
