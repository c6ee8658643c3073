// What the GPU benchmarks share: every CUDA call checked (a benchmark that
// failed says where and stops), and the median of device-timed runs.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#define IMGSTAT_BENCH_CHECK(call) ::imgstat::bench::check_cuda((call), #call, __FILE__, __LINE__)

namespace imgstat::bench {

inline void check_cuda(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s:%d %s: %s\n", file, line, call, cudaGetErrorString(e));
  std::exit(1);
}

// Median of `repeat` runs timed by device events, after one warm-up.
inline double device_median_ms(int repeat, const std::function<void()>& fn) {
  cudaEvent_t a, b;
  IMGSTAT_BENCH_CHECK(cudaEventCreate(&a));
  IMGSTAT_BENCH_CHECK(cudaEventCreate(&b));
  fn();
  IMGSTAT_BENCH_CHECK(cudaDeviceSynchronize());
  std::vector<float> t;
  for (int i = 0; i < repeat; ++i) {
    IMGSTAT_BENCH_CHECK(cudaEventRecord(a));
    fn();
    IMGSTAT_BENCH_CHECK(cudaEventRecord(b));
    IMGSTAT_BENCH_CHECK(cudaEventSynchronize(b));
    float ms;
    IMGSTAT_BENCH_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  IMGSTAT_BENCH_CHECK(cudaGetLastError());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace imgstat::bench
