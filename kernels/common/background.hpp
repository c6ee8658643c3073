// Background and background RMS meshes of an image's channels, as
// photutils' Background2D (1.6) makes them at its defaults, step by step:
//
// 1. The image is cut into boxes of box_rows x box_columns from its first
//    row and column; the last row and column of boxes are padded past the
//    image with masked pixels (edge_method "pad").
// 2. Masked pixels are those not finite (NaN, infinities) and the padding.
//    A box with more than exclude_percentile % of its pixels masked is left
//    out (100 %: every box with a finite pixel is kept).
// 3. Each kept box's finite pixels are sigma clipped as astropy's (5.2)
//    SigmaClip(sigma=3, maxiters=10) clips along an axis: rounds of bounds
//    (centre the median, spread the population standard deviation) narrow
//    the pixels kept until a round leaves none out or 10 have; then every
//    finite pixel inside the last round's bounds is kept (those an earlier
//    round left out too). The pixels clipped count as masked and the box is
//    left out by the same rule.
// 4. Of the pixels a kept box keeps: the background (the SExtractor
//    estimator 2.5 median - 1.5 mean, the median where |mean - median| /
//    std >= 0.3, the mean where std = 0; or the median or the mean) and the
//    background RMS (their population standard deviation).
// 5. Boxes left out are filled by inverse distance weighting (power 1) of
//    the 10 nearest kept boxes in mesh units, photutils' ShepardIDWInterpolator;
//    where several boxes tie for the tenth place, those first in row-major
//    order are taken (photutils takes those its k-d tree visits first).
// 6. Both meshes pass a filter_rows x filter_columns median filter (the
//    median of the window's boxes inside the mesh), unless the filter is
//    1 x 1.
// 7. background_median and rms_median: numpy's median of each mesh.
//
// Sums are taken in long double, so the numbers are within a few units in
// the last place of photutils' (which sums float64 pairwise).
#pragma once

#include <cstdint>
#include <vector>

#include "imgstat/background_map.hpp"
#include "imgstat/engine.hpp"

namespace imgstat {

// The most boxes a mesh may have (box sizes of 1 on a large image): each
// box keeps three doubles and a flag, per channel, in the answer too.
constexpr uint64_t kMaxBackgroundBoxes = uint64_t{1} << 20;
// The most pixels a box may have (2048 x 2048): each thread sorts one box's
// samples at a time, 16 bytes each.
constexpr uint64_t kMaxBackgroundBoxPixels = uint64_t{1} << 22;

// Throws InvalidArgument (kResourceExhausted past kMaxBackgroundBoxes)
// naming what is wrong with a spec for an image of `layout`.
void validate_background(const Layout& layout, const BackgroundSpec& spec);

// One mesh per channel, in stored order. Parallel over boxes (TBB): call it
// inside the engine's arena.
std::vector<BackgroundMesh> measure_background(const ImageView& image, const BackgroundSpec& spec);

// Host memory measure_background allocates, at most: each thread's sorted
// box (keys, their copy, the doubles) and the meshes.
uint64_t background_working_bytes(const Layout& layout, const BackgroundSpec& spec, uint32_t threads);

// Sets result.background when the request asks for it.
void add_background(const ImageView& image, const StatsRequest& request, Result& result);

}  // namespace imgstat
