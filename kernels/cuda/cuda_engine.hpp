// The CUDA engine: images go to the device through a pinned staging ring on
// several streams, so that host copies, transfers and kernels overlap, and
// the device accumulates every result; the host only finalizes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "imgstat/engine.hpp"

namespace imgstat::cuda {

struct CudaOptions {
  int device = 0;
  uint64_t memory_limit = 0;  // device bytes the engine may hold; 0: no limit
  int workspaces = 4;         // images on the device at once
  bool workspaces_at_start = false;  // EngineOptions::cuda_workspaces_at_start
  uint32_t host_threads = 0;  // threads for staging copies; 0: all cores
  CudaWait wait = CudaWait::kSpin;   // for every thread of the process: it is the device's setting
};

// Throws imgstat::Error when the device cannot be used.
std::unique_ptr<Engine> make_engine(const CudaOptions& options);

}  // namespace imgstat::cuda
