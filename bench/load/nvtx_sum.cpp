// Where a server's time goes on a host without a profiler (the GPU machine's
// CUDA ships ncu, not nsys): an NVTX injection library that sums the
// server's named ranges (TraceRange: the nvJPEG lanes' stages, the engines'
// passes) by thread name and range, and prints the table when the process
// exits. Loaded by NVTX itself, nothing relinked:
//   NVTX_INJECTION64_PATH=.../libimgstat-nvtx-sum.so imgstat-server ...
// The table goes to stderr, or appended to $IMGSTAT_NVTX_SUM when set.
// Times are inclusive (a range's nested ranges count in it too) and wall
// time on the calling thread (waiting included); "cpu us" is the calling
// thread's CPU time in the range (what a spinning or working thread burns,
// not its sleep); "busy" is a range's total over (threads of that name x
// the span from the first range to the last).
#include <nvtx3/nvToolsExt.h>

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Sum {
  uint64_t count = 0;
  double seconds = 0;
  double cpu_seconds = 0;
  double longest = 0;
};

struct Totals {
  std::mutex mu;
  std::map<std::pair<std::string, std::string>, Sum> sums;  // (thread name, range) -> sum
  std::map<std::string, std::set<pthread_t>> threads;       // thread name -> threads seen
  Clock::time_point first = Clock::time_point::max(), last = Clock::time_point::min();

  void print() {
    std::lock_guard<std::mutex> lock(mu);
    if (sums.empty()) return;
    const char* path = std::getenv("IMGSTAT_NVTX_SUM");
    FILE* out = path ? std::fopen(path, "a") : stderr;
    if (!out) out = stderr;
    const double span = std::chrono::duration<double>(last - first).count();
    std::fprintf(out, "== NVTX ranges summed over %.3f s (inclusive wall time on the calling thread)\n", span);
    std::fprintf(out, "%-16s %3s %-36s %10s %11s %10s %10s %10s %7s\n", "thread", "n", "range", "count", "total s",
                 "mean us", "cpu us", "max us", "busy");
    std::vector<std::pair<std::pair<std::string, std::string>, Sum>> rows(sums.begin(), sums.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
      return a.first.first != b.first.first ? a.first.first < b.first.first : a.second.seconds > b.second.seconds;
    });
    for (const auto& [key, s] : rows) {
      const size_t n = threads[key.first].size();
      std::fprintf(out, "%-16s %3zu %-36s %10llu %11.3f %10.1f %10.1f %10.1f %6.1f%%\n", key.first.c_str(), n,
                   key.second.c_str(), static_cast<unsigned long long>(s.count), s.seconds,
                   s.seconds * 1e6 / static_cast<double>(s.count), s.cpu_seconds * 1e6 / static_cast<double>(s.count),
                   s.longest * 1e6,
                   span > 0 ? 100 * s.seconds / (span * static_cast<double>(n)) : 0.0);
    }
    if (out != stderr) std::fclose(out);
  }
};

Totals& totals() {
  static Totals* t = new Totals;  // never destroyed: a lane's last range may end during exit
  return *t;
}

double thread_cpu() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Open {
  const char* name;
  Clock::time_point start;
  double cpu_start;
};
thread_local std::vector<Open> t_open;

int push(const char* message) {
  t_open.push_back({message, Clock::now(), thread_cpu()});
  return static_cast<int>(t_open.size()) - 1;
}

int pop() {
  if (t_open.empty()) return -1;
  const Clock::time_point end = Clock::now();
  const double cpu = thread_cpu();
  const Open o = t_open.back();
  t_open.pop_back();
  char thread[16] = "?";
  pthread_getname_np(pthread_self(), thread, sizeof thread);
  const double s = std::chrono::duration<double>(end - o.start).count();
  Totals& t = totals();
  std::lock_guard<std::mutex> lock(t.mu);
  Sum& sum = t.sums[{thread, o.name ? o.name : "?"}];
  ++sum.count;
  sum.seconds += s;
  sum.cpu_seconds += cpu - o.cpu_start;
  sum.longest = std::max(sum.longest, s);
  t.threads[thread].insert(pthread_self());
  t.first = std::min(t.first, o.start);
  t.last = std::max(t.last, end);
  return static_cast<int>(t_open.size());
}

struct PrintAtExit {
  ~PrintAtExit() { totals().print(); }
} print_at_exit;

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  if (!callbacks || callbacks->struct_size < sizeof(NvtxExportTableCallbacks)) return 0;
  NvtxFunctionTable table = nullptr;
  unsigned size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) || !table) return 0;
  if (size <= NVTX_CBID_CORE_RangePop) return 0;
  *table[NVTX_CBID_CORE_RangePushA] = reinterpret_cast<NvtxFunctionPointer>(&push);
  *table[NVTX_CBID_CORE_RangePop] = reinterpret_cast<NvtxFunctionPointer>(&pop);
  return 1;
}
