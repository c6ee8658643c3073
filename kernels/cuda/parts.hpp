// Parts of 8- and 16-bit images on the GPU: masks, labels and tiles counted
// by the part kernels into exact per-part moments and slots, answered
// through the same PartCounts step as the CPU engine's.
#pragma once

#include "cuda/analysis.hpp"
#include "cuda/dispatch/dispatch.hpp"
#include "cuda/workspace.hpp"
#include "imgstat/engine.hpp"

namespace imgstat::cuda {

// Whether the part kernels take it: masks, labels or tiles of integer
// samples, fewer than 2^32 pixels (so that a part's 64-bit sums of squares
// cannot overflow).
bool part_kernels_take(const Layout& layout, const Parts& parts);

// The image goes up packed through a workspace's pinned ring, the map (or
// tile edges) beside it; device memory is charged to the engine's budget
// for the call.
Result analyze_parts_on_gpu(const GpuContext& gpu, const ImageView& image, const Parts& parts,
                            const StatsRequest& request);
// The same of pixels already in this device's memory (a GPU-decoded JPEG):
// nothing goes up but the map.
Result analyze_device_parts_on_gpu(const GpuContext& gpu, const DeviceImageView& image, const Parts& parts,
                                   const StatsRequest& request);

}  // namespace imgstat::cuda
