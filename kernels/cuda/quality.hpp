// The quality measures and hashes of a device image on the device: the
// counting and the thumbnails' heavy pass in kernels, the few counts and
// small images they leave finished on the host by the CPU engine's code
// (common/quality.hpp, common/hashes.hpp), so both engines give the same
// bits. Only the pixel hash reads a host copy (xxHash runs on the CPU).
#pragma once

#include "cuda/block/types.hpp"
#include "cuda/workspace.hpp"
#include "imgstat/engine.hpp"

namespace imgstat::cuda {

// Whether device_measures() takes this request for this image: quality
// measures or hashes (no background meshes) of 8-bit pixels of one or three
// channels, large enough that the thumbnails shrink both ways (smaller ones
// are cheap to copy to the host).
bool measures_on_device(const Layout& layout, const StatsRequest& request);

// Sets result's quality and hashes as asked, of a packed device image on the
// current device, on this thread's stream; device memory charged to budget.
void device_measures(const DeviceImageView& image, const StatsRequest& request, const DeviceInfo& dev,
                     DeviceBudget& budget, Result& result);

}  // namespace imgstat::cuda
