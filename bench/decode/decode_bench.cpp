// What decoding costs, per file: OpenCV's imdecode (the baseline: what every
// format but GPU JPEG went through), the streamed decoder alone (JPEG's one
// pass, PNG's bands: decode_in_bands into a reused band, nothing computed),
// and the analyzer's whole path on the CPU engine (decode + statistics, in
// bands where the format streams). Median
// of --runs after one warm-up; the process's peak RSS last. Usage:
//   imgstat-decode-bench [--runs N] [--threads T] [--decode-threads D] FILE...
#include <sys/resource.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <opencv2/imgcodecs.hpp>

#include "core/analyzer.hpp"
#include "decode/decode.hpp"
#include "decode/jpeg/check.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double median_ms(int runs, const std::function<void()>& fn) {
  fn();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::string slurp(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace imgstat;
  int runs = 5;
  uint32_t threads = 0, decode_threads = 0;
  std::vector<const char*> files;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--runs") && i + 1 < argc) runs = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = static_cast<uint32_t>(std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--decode-threads") && i + 1 < argc)
      decode_threads = static_cast<uint32_t>(std::atoi(argv[++i]));
    else files.push_back(argv[i]);
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: %s [--runs N] [--threads T] [--decode-threads D] FILE...\n", argv[0]);
    return 2;
  }
  Analyzer analyzer(make_cpu_engine(threads), Limits{});
  std::printf("%-36s %-6s %11s %9s | %12s %14s %14s %8s\n", "file", "format", "size", "MP", "OpenCV ms",
              "one-pass ms", "analyzer ms", "vs OpenCV");
  for (const char* path : files) {
    const std::string f = slurp(path);
    const auto* d = reinterpret_cast<const uint8_t*>(f.data());
    DecodePlan plan;
    try {
      plan = plan_decode(d, f.size(), DecodeOptions{});
    } catch (const Error& e) {
      std::printf("%-36s %s\n", path, e.what());
      continue;
    }
    const double cv_ms = median_ms(runs, [&] {
      cv::imdecode(cv::Mat(1, static_cast<int>(f.size()), CV_8U, const_cast<char*>(f.data())), cv::IMREAD_UNCHANGED);
    });
    double one_pass = -1;
    if (plan.format == "JPEG" || plan.band_memory_bytes > 0) {
      // The streamed decoder alone (JPEG's one pass, PNG's bands), into one reused band.
      std::vector<uint8_t> band;
      RowSink sink;
      uint32_t rows = 0;
      sink.begin = [&](uint32_t w, uint32_t h, uint32_t c, SampleType t) {
        const uint64_t row = uint64_t{w} * c * sample_size(t);
        rows = plan.band_rows ? std::min(plan.band_rows, h) : band_rows(row, h);  // as the analyzer sizes them
        band.resize(size_t{rows} * row);
        return RowBand{band.data(), rows};
      };
      sink.band = [&](const uint8_t*, uint32_t, uint32_t) { return RowBand{band.data(), rows}; };
      // In an arena of --decode-threads (0: every core): PNG's image data
      // is inflated on all of its threads.
      tbb::task_arena arena(decode_threads ? static_cast<int>(decode_threads) : tbb::task_arena::automatic);
      one_pass = median_ms(runs, [&] { arena.execute([&] { decode_in_bands(d, f.size(), plan, DecodeOptions{}, sink); }); });
    }
    v1::AnalyzeRequest req;
    req.mutable_input()->set_data(f);
    req.mutable_options()->set_allow_truncated(true);
    double whole = -1;
    try {
      whole = median_ms(runs, [&] { analyzer.analyze(req); });
    } catch (const Error& e) {
      std::printf("%-36s %s\n", path, e.what());
      continue;
    }
    const std::string name = std::string(path).substr(std::string(path).find_last_of('/') + 1);
    std::printf("%-36s %-6s %11zu %9.2f | %12.1f %14s %14.1f %7.2fx\n", name.substr(0, 36).c_str(), plan.format.c_str(),
                f.size(), plan.width * plan.height / 1e6, cv_ms,
                one_pass < 0 ? "-" : std::to_string(one_pass).substr(0, std::to_string(one_pass).find('.') + 2).c_str(),
                whole, cv_ms / whole);
  }
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  std::printf("peak RSS of this process: %ld MiB\n", u.ru_maxrss / 1024);
  return 0;
}
