// A background mesh (StatsRequest::background) made an image again: what
// the CLI's --background-map writes.
#pragma once

#include <cstdint>
#include <vector>

#include "imgstat/engine.hpp"

namespace imgstat {

// The mesh interpolated to the image's size (height x width, row-major), as
// photutils' default BkgZoomInterpolator does: scipy.ndimage.zoom of the
// mesh by the box size, cubic spline (order 3, mode "reflect", grid_mode),
// cropped to the image and clipped to the mesh's lowest and highest value;
// a constant mesh gives its constant. `values`: mesh.background or .rms.
// Computed in float64, given as float32 (what the maps are written as).
std::vector<float> background_image(const BackgroundMesh& mesh, const std::vector<double>& values, uint64_t width,
                                    uint64_t height);

}  // namespace imgstat
