// Which engine a process computes on: the CPU engine, or a CUDA engine on
// each GPU asked for, placed and backed by the CPU engine. Above the
// engines (common/, cpu/, cuda/), which know nothing of each other.
#include <string>
#include <vector>

#include "common/fallback_engine.hpp"
#include "imgstat/engine.hpp"
#include "imgstat/placement.hpp"

namespace imgstat {

#ifndef IMGSTAT_WITH_CUDA
std::unique_ptr<Engine> make_cuda_engine(const EngineOptions&, std::string* why_not, bool* absent) {
  if (why_not) *why_not = "this build has no CUDA engine";
  if (absent) *absent = true;
  return nullptr;
}

int cuda_device_count() { return 0; }
#endif

namespace {

// A CUDA engine on each GPU the options list, as one placed engine; null
// with *why_not when none opens. GPUs that do not open are named in *skipped.
std::unique_ptr<Engine> make_cuda_engines(const EngineOptions& options, std::string* why_not, bool* absent,
                                          std::string* skipped) {
  std::vector<int> devices = options.cuda_devices;
  if (options.every_cuda_device) {
    devices.clear();
    for (int d = 0, n = cuda_device_count(); d < n; ++d) devices.push_back(d);
  }
  if (devices.empty()) devices.push_back(options.cuda_device);
  std::vector<std::unique_ptr<Engine>> engines;
  std::vector<GpuStatus> slots;
  for (int d : devices) {
    EngineOptions one = options;
    one.cuda_device = d;
    std::string why;
    bool none = false;
    std::unique_ptr<Engine> e = make_cuda_engine(one, &why, &none);
    if (!e) {
      if (engines.empty() && why_not) *why_not = why;
      if (absent) *absent = none;
      if (skipped) *skipped += (skipped->empty() ? "" : "; ") + std::string("GPU ") + std::to_string(d) + ": " + why;
      continue;
    }
    const EngineInfo info = e->info();
    slots.push_back(GpuStatus{d, info.device_name, info.device_memory_bytes, info.compute_capability});
    engines.push_back(std::move(e));
  }
  if (engines.empty()) return nullptr;
  if (absent) *absent = false;
  return make_placed_engine(std::move(engines), std::make_shared<Placement>(std::move(slots), options.on_fallback));
}

}  // namespace

std::unique_ptr<Engine> make_engine(const EngineOptions& options, std::string* note, bool* gpu_absent) {
  if (options.kind == EngineKind::kCpu) return make_cpu_engine(options.cpu_threads);
  std::string why_not, skipped;
  bool absent = false;
  if (auto cuda = make_cuda_engines(options, &why_not, &absent, &skipped)) {
    if (note && !skipped.empty()) *note = "left out, as they could not be opened: " + skipped;
    return std::make_unique<FallbackEngine>(std::move(cuda), make_cpu_engine(options.cpu_threads),
                                            options.on_fallback);
  }
  if (options.kind == EngineKind::kCuda) fail(ErrorCode::kUnavailable, "CUDA engine unavailable: " + why_not);
  if (note) *note = (absent ? "no GPU here (" : "no usable CUDA device (") + why_not + "): using the CPU engine";
  if (gpu_absent) *gpu_absent = absent;
  return make_cpu_engine(options.cpu_threads);
}

}  // namespace imgstat
