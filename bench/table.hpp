// What the benchmarks that compare tools share: the median of repeated
// runs, and rows printed as they are measured then again as a Markdown
// table at the end (the summary a device run's output ends with).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace imgstat::bench {

inline double median_ms(int repeat, const std::function<void()>& fn) {
  fn();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < repeat; ++i) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// --width W --height H --repeat R --threads N (0: every core).
struct Args {
  uint32_t width = 8000, height = 6000, threads = 0;
  int repeat = 5;
};

inline Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--width") a.width = static_cast<uint32_t>(std::stoul(v));
    if (k == "--height") a.height = static_cast<uint32_t>(std::stoul(v));
    if (k == "--repeat") a.repeat = std::stoi(v);
    if (k == "--threads") a.threads = static_cast<uint32_t>(std::stoul(v));
  }
  return a;
}

class Table {
 public:
  explicit Table(int what_width = 58, int tool_width = 34) : what_width_(what_width), tool_width_(tool_width) {}

  void row(const std::string& what, const std::string& tool, double ms, const std::string& ratio = "") {
    std::printf("%-*s %-*s %10.2f ms %s\n", what_width_, what.c_str(), tool_width_, tool.c_str(), ms, ratio.c_str());
    std::fflush(stdout);
    rows_.push_back({what, tool, ms, ratio});
  }

  void print() const {
    std::printf("\n| question | tool | ms | ratio |\n|---|---|---|---|\n");
    for (const Row& r : rows_) std::printf("| %s | %s | %.2f | %s |\n", r.what.c_str(), r.tool.c_str(), r.ms, r.ratio.c_str());
  }

 private:
  struct Row {
    std::string what, tool;
    double ms;
    std::string ratio;
  };
  int what_width_, tool_width_;
  std::vector<Row> rows_;
};

}  // namespace imgstat::bench
