// The CPU engine against OpenCV 4.6 on the same data in the same process.
// Baseline: calcHist + minMaxLoc + meanStdDev + sum, single-threaded (what a
// user of OpenCV runs for the same numbers). Prints a table, then the ratios.
//
//   imgstat-cpu-bench [--mib N] [--repeat R]
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "imgstat/engine.hpp"

namespace {

double median_seconds(int repeat, const std::function<void()>& fn) {
  fn();  // warm-up: page faults, thread start
  std::vector<double> t;
  for (int i = 0; i < repeat; ++i) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

volatile double g_sink;

void opencv_stats(const cv::Mat& m) {
  const int channels[] = {0};
  const int hist_size[] = {256};
  const float range[] = {0, 256};
  const float* ranges[] = {range};
  cv::Mat hist;
  cv::calcHist(&m, 1, channels, cv::Mat(), hist, 1, hist_size, ranges);
  double mn, mx;
  cv::minMaxLoc(m, &mn, &mx);
  cv::Scalar mean, sd;
  cv::meanStdDev(m, mean, sd);
  g_sink = cv::sum(m)[0] + mn + mx + mean[0] + sd[0] + hist.at<float>(0);
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t mib = 1024;
  int repeat = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--mib")) mib = std::stoull(argv[i + 1]);
    if (!std::strcmp(argv[i], "--repeat")) repeat = std::stoi(argv[i + 1]);
  }
  const uint64_t bytes = mib << 20;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());

  std::vector<uint8_t> data(bytes);
  std::mt19937_64 rng(1);
  for (uint64_t i = 0; i + 8 <= bytes; i += 8) {
    const uint64_t w = rng();
    std::memcpy(&data[i], &w, 8);
  }
  std::vector<uint8_t> constant(bytes, 77);

  // OpenCV's Mat holds at most INT_MAX rows/cols: view 1 GiB as 16384 rows.
  const int cols = 65536;
  const cv::Mat m(static_cast<int>(bytes / cols), cols, CV_8UC1, data.data());
  cv::setNumThreads(1);
  const double t_cv = median_seconds(repeat, [&] { opencv_stats(m); });

  auto one = imgstat::make_cpu_engine(1);
  auto all = imgstat::make_cpu_engine(cores);
  const imgstat::Layout layout{bytes, 1, 1, imgstat::SampleType::kUint8, 0};
  const imgstat::ImageView uniform{data.data(), layout}, flat{constant.data(), layout};
  const imgstat::StatsRequest request;
  const double t_one = median_seconds(repeat, [&] { one->analyze(uniform, request); });
  const double t_all = median_seconds(repeat, [&] { all->analyze(uniform, request); });
  const double t_one_c = median_seconds(repeat, [&] { one->analyze(flat, request); });
  const double t_all_c = median_seconds(repeat, [&] { all->analyze(flat, request); });

  auto row = [&](const char* what, const char* data_kind, unsigned threads, double s) {
    std::printf("| %-44s | %-8s | %7u | %8.3f | %6.2f |\n", what, data_kind, threads, s, bytes / s / 1e9);
  };
  std::printf("uint8, 1 channel, %llu MiB, median of %d\n\n", static_cast<unsigned long long>(mib), repeat);
  std::printf("| %-44s | %-8s | %7s | %8s | %6s |\n", "what", "data", "threads", "seconds", "GB/s");
  std::printf("|%s|%s|%s|%s|%s|\n", std::string(46, '-').c_str(), std::string(10, '-').c_str(),
              std::string(9, '-').c_str(), std::string(10, '-').c_str(), std::string(8, '-').c_str());
  row("OpenCV calcHist+minMaxLoc+meanStdDev+sum", "uniform", 1, t_cv);
  row("imgstat CPU engine", "uniform", 1, t_one);
  row("imgstat CPU engine", "uniform", cores, t_all);
  row("imgstat CPU engine", "constant", 1, t_one_c);
  row("imgstat CPU engine", "constant", cores, t_all_c);
  std::printf("\nratio per core, uniform: %.2fx OpenCV (one thread each)\n", t_cv / t_one);
  std::printf("ratio per core, uniform, all %u cores: %.2fx OpenCV per core\n", cores, t_cv / (t_all * cores));
  std::printf("ratio, whole machine: %.2fx OpenCV single-threaded\n", t_cv / t_all);
  return 0;
}
