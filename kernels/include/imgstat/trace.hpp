// Named ranges on a profiler's timeline (NVTX: nsys shows them beside the
// CUDA calls). Where a JPEG's time goes on the GPU path is only visible so;
// without CUDA, or without a profiler attached, a range costs next to nothing.
#pragma once

#if defined(IMGSTAT_WITH_NVTX)
#include <nvtx3/nvToolsExt.h>
#endif

namespace imgstat {

class TraceRange {
 public:
#if defined(IMGSTAT_WITH_NVTX)
  explicit TraceRange(const char* name) { nvtxRangePushA(name); }
  ~TraceRange() { nvtxRangePop(); }
#else
  explicit TraceRange(const char*) {}
#endif
  TraceRange(const TraceRange&) = delete;
  TraceRange& operator=(const TraceRange&) = delete;
};

}  // namespace imgstat
