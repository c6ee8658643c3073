// Colour spaces and joint histograms of an 8000x6000 RGB photo-like image on
// each engine, OpenCV's time for the same question in the same run:
//   32x32x32 RGB joint histogram        OpenCV calcHist
//   HSV, default statistics, 30x32 H-S  OpenCV cvtColor + calcHist (2-D)
//   Lab, default statistics             OpenCV cvtColor + meanStdDev
// The CUDA engine from host memory (with the transfer) and from GPU memory
// (what its kernels take), against default statistics of the RGB pixels.
// Then the same pixels as float32 (v / 255) in HSV, and as uint16 (v * 257)
// in a 32x32x32 joint histogram, each engine against its own RGB pass of
// that sample type.
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
#endif

namespace {

using namespace imgstat;

using bench::median_ms;
bench::Table g_table(44, 40);

void row(const std::string& what, const std::string& tool, double ms, const std::string& ratio = "") {
  g_table.row(what, tool, ms, ratio);
}

std::string times(double a, double b, const char* of) {
  char s[96];
  std::snprintf(s, sizeof s, "%.2fx %s", a / b, of);
  return s;
}

volatile double g_sink;

}  // namespace

int main(int argc, char** argv) {
  const bench::Args args = bench::parse_args(argc, argv);
  const uint32_t w = args.width, h = args.height, threads = args.threads;
  const int repeat = args.repeat;
  const uint64_t n = uint64_t{w} * h;
  // Photo-like: smooth colour gradients with noise.
  std::vector<uint8_t> img = bench::photo_rgb(w, h, bench::Gradient{110, 900, 400, 1, 150});
  const unsigned cores = threads ? threads : std::thread::hardware_concurrency();
  std::printf("%ux%u RGB uint8 (%.0f MiB), %u threads, medians of %d\n", w, h, n * 3 / 1048576.0, cores, repeat);

  cv::setNumThreads(static_cast<int>(cores));
  const cv::Mat mat(static_cast<int>(h), static_cast<int>(w), CV_8UC3, img.data());
  const double cv_joint = median_ms(repeat, [&] {
    const int channels[] = {0, 1, 2}, size[] = {32, 32, 32};
    const float r[] = {0, 256};
    const float* ranges[] = {r, r, r};
    cv::Mat hist;
    cv::calcHist(&mat, 1, channels, cv::Mat(), hist, 3, size, ranges);
    g_sink = hist.at<float>(0, 0, 0);
  });
  row("32x32x32 RGB joint histogram", "OpenCV calcHist", cv_joint);
  const double cv_hsv = median_ms(repeat, [&] {
    cv::Mat hsv, hist;
    cv::cvtColor(mat, hsv, cv::COLOR_RGB2HSV);
    const int channels[] = {0, 1}, size[] = {30, 32};
    const float hr[] = {0, 180}, sr[] = {0, 256};
    const float* ranges[] = {hr, sr};
    cv::calcHist(&hsv, 1, channels, cv::Mat(), hist, 2, size, ranges);
    g_sink = hist.at<float>(0, 0);
  });
  row("HSV + 30x32 H-S histogram", "OpenCV cvtColor + calcHist", cv_hsv);
  const double cv_lab = median_ms(repeat, [&] {
    cv::Mat lab;
    cv::cvtColor(mat, lab, cv::COLOR_RGB2Lab);
    cv::Scalar mean, sd;
    cv::meanStdDev(lab, mean, sd);
    g_sink = mean[0] + sd[0];
  });
  row("Lab, mean and stddev", "OpenCV cvtColor + meanStdDev", cv_lab);

  StatsRequest defaults;  // min/max, sum/mean, stddev, 256-bin histograms
  StatsRequest joint_only;
  joint_only.min_max = joint_only.sum = joint_only.stddev = joint_only.histogram = false;
  joint_only.joint.axes = 3;
  for (uint32_t a = 0; a < 3; ++a) {
    joint_only.joint.channels[a] = a;
    joint_only.joint.bins[a] = 32;
  }
  StatsRequest hsv = defaults;
  hsv.colour_space = ColourSpace::kHsv;
  hsv.joint.axes = 2;
  hsv.joint.channels[0] = 0;
  hsv.joint.channels[1] = 1;
  hsv.joint.bins[0] = 30;
  hsv.joint.bins[1] = 32;
  StatsRequest lab = defaults;
  lab.colour_space = ColourSpace::kLab;

  // The wider sample types: the same picture, float32 and uint16.
  std::vector<float> img_f(n * 3);
  std::vector<uint16_t> img_16(n * 3);
  for (uint64_t i = 0; i < n * 3; ++i) {
    img_f[i] = static_cast<float>(img[i]) / 255.0f;
    img_16[i] = static_cast<uint16_t>(img[i] * 257);
  }
  StatsRequest hsv_f = defaults;
  hsv_f.colour_space = ColourSpace::kHsv;
  StatsRequest joint_16 = joint_only;
  using Analyze = std::function<Result(const StatsRequest&)>;
  auto wide_rows = [&](const std::string& name, const Analyze& analyze_f, const Analyze& analyze_16) {
    const double base = median_ms(repeat, [&] { g_sink = analyze_f(defaults).channels[0].mean; });
    row("float32 RGB, default statistics", name, base);
    const double hs = median_ms(repeat, [&] { g_sink = analyze_f(hsv_f).channels[0].mean; });
    row("float32 HSV, default statistics", name, hs, times(hs, base, "of float32 RGB"));
    const double base16 = median_ms(repeat, [&] { g_sink = analyze_16(defaults).channels[0].mean; });
    row("uint16 RGB, default statistics", name, base16);
    const double j = median_ms(repeat, [&] { g_sink = static_cast<double>(analyze_16(joint_16).joint.counts[0]); });
    row("uint16 32x32x32 joint histogram", name, j, times(j, base16, "of uint16 RGB"));
  };
  const ImageView view_f{img_f.data(), Layout{w, h, 3, SampleType::kFloat32, 0}};
  const ImageView view_16{img_16.data(), Layout{w, h, 3, SampleType::kUint16, 0}};

  auto engine_rows = [&](const std::string& name, const std::function<Result(const StatsRequest&)>& analyze) {
    const double base = median_ms(repeat, [&] { g_sink = analyze(defaults).channels[0].mean; });
    row("RGB, default statistics", name, base);
    const double j = median_ms(repeat, [&] { g_sink = static_cast<double>(analyze(joint_only).joint.counts[0]); });
    row("32x32x32 RGB joint histogram", name, j, times(cv_joint, j, "faster than OpenCV"));
    const double hs = median_ms(repeat, [&] { g_sink = analyze(hsv).channels[0].mean; });
    row("HSV, default statistics + 30x32 H-S", name, hs,
        times(cv_hsv, hs, "faster than OpenCV, ") + times(hs, base, "of RGB defaults"));
    const double lb = median_ms(repeat, [&] { g_sink = analyze(lab).channels[0].mean; });
    row("Lab, default statistics", name, lb, times(cv_lab, lb, "faster than OpenCV, ") + times(lb, base, "of RGB defaults"));
  };
  const ImageView view{img.data(), Layout{w, h, 3, SampleType::kUint8, 0}};
  {
    auto cpu = make_cpu_engine(threads);
    engine_rows("imgstat CPU engine", [&](const StatsRequest& r) { return cpu->analyze(view, r); });
    wide_rows("imgstat CPU engine", [&](const StatsRequest& r) { return cpu->analyze(view_f, r); },
              [&](const StatsRequest& r) { return cpu->analyze(view_16, r); });
  }
#ifdef IMGSTAT_WITH_CUDA
  if (cuda_device_count() > 0) {
    std::string why;
    if (auto gpu = make_cuda_engine(EngineOptions{}, &why)) {
      engine_rows("imgstat CUDA engine, from host memory", [&](const StatsRequest& r) { return gpu->analyze(view, r); });
      uint8_t* device = nullptr;
      if (cudaMalloc(&device, n * 3) == cudaSuccess &&
          cudaMemcpy(device, img.data(), n * 3, cudaMemcpyHostToDevice) == cudaSuccess) {
        const DeviceImageView dv{device, Layout{w, h, 3, SampleType::kUint8, 0}};
        engine_rows("imgstat CUDA engine, from GPU memory", [&](const StatsRequest& r) { return gpu->analyze_device(dv, r); });
        cudaFree(device);
      }
      void *dev_f = nullptr, *dev_16 = nullptr;
      if (cudaMalloc(&dev_f, n * 12) == cudaSuccess && cudaMalloc(&dev_16, n * 6) == cudaSuccess &&
          cudaMemcpy(dev_f, img_f.data(), n * 12, cudaMemcpyHostToDevice) == cudaSuccess &&
          cudaMemcpy(dev_16, img_16.data(), n * 6, cudaMemcpyHostToDevice) == cudaSuccess) {
        const DeviceImageView df{dev_f, view_f.layout}, d16{dev_16, view_16.layout};
        wide_rows("imgstat CUDA engine, from GPU memory", [&](const StatsRequest& r) { return gpu->analyze_device(df, r); },
                  [&](const StatsRequest& r) { return gpu->analyze_device(d16, r); });
      }
      cudaFree(dev_f);
      cudaFree(dev_16);
    } else {
      std::printf("no CUDA engine: %s\n", why.c_str());
    }
  }
#endif
  g_table.print();
  return 0;
}
