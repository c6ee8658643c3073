// A stream on the CUDA engine: an image's bytes in order, computed in
// sessions that hold a workspace only while there are bytes to compute.
#pragma once

#include <memory>

#include "cuda/analysis.hpp"
#include "imgstat/engine.hpp"

namespace imgstat::cuda {

std::unique_ptr<StreamAnalysis> open_cuda_stream(const GpuContext& gpu, const Layout& layout,
                                                 const StatsRequest& request);

}  // namespace imgstat::cuda
