// Quality measures of a whole image (StatsRequest::quality, QualityStats),
// computed from the host's pixels for every engine, in integer arithmetic
// wherever the measure is built from integer sums, so that engines agree to
// the bit.
//
// - grey: OpenCV's cvtColor(..., COLOR_RGB2GRAY) for 8 and 16 bits,
//   (9798 R + 19235 G + 3735 B + 16384) >> 15; an image of one or two channels
//   (gray, gray+alpha): its first channel.
// - laplacian_variance: the population variance of OpenCV's Laplacian of the
//   grey image with ksize 1 (the kernel 0 1 0 / 1 -4 1 / 0 1 0, borders
//   reflected as BORDER_REFLECT_101), as cv2.Laplacian(grey, cv2.CV_64F).var()
//   gives it: the sharpness fastdup and most users compute. Exact from
//   integer sums.
// - rms_contrast: the grey image's population standard deviation over the
//   type's largest value (255, 65535).
// - colourfulness (3 and 4 channels): Hasler and Suesstrunk (2003),
//   sqrt(var(rg) + var(yb)) + 0.3 sqrt(mean(rg)^2 + mean(yb)^2) with
//   rg = R - G and yb = (R + G) / 2 - B signed, in sample units.
// - share_at_min, share_at_max: per channel, the share of samples at the
//   type's lowest and highest value (under- and over-exposure).
// - cleanvision (8-bit images): its image properties as cleanvision 0.3
//   computes them from a PIL image, scores and issues at its default
//   thresholds: brightness (of the channel means) and its percentiles 1, 5,
//   10, 15, 90, 95 and 99 of sqrt(0.241 R^2 + 0.691 G^2 + 0.068 B^2) / 255
//   per pixel (numpy's linear method); dark (score: the 99th, an issue below
//   0.32) and light (1 - the 5th, below 0.05); blurriness (the standard
//   deviation of PIL's FIND_EDGES of the grey image shrunk by PIL's bicubic
//   resize to at most 64 pixels a side) and the blurry score (below 0.29);
//   entropy (PIL's Image.entropy over every channel's histogram) and the low
//   information score (0.1 x entropy, at most 1; below 0.3); the aspect
//   ratio (below 0.35); the size sqrt(w) sqrt(h) for a dataset's odd sizes;
//   grayscale where the image has one or two channels or R = G = B at every
//   pixel (cleanvision itself flags only PIL's mode L).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "imgstat/engine.hpp"

namespace imgstat {

// Of uint8 and uint16 images (kUnimplemented for other types); rgb: the
// channels holding R, G and B; histograms: an 8-bit image's 256-bin
// histogram of each channel where already counted (else null).
QualityStats measure_quality(const ImageView& image, const uint32_t* rgb,
                             const std::vector<std::array<uint64_t, 256>>* histograms = nullptr);

// Sets result.quality when the request asks for it.
void add_quality(const ImageView& image, const StatsRequest& request, Result& result);

// Host memory measure_quality allocates beside the image, at most: the
// grey plane, a packed copy of unaligned pixels, PIL's copy for the
// thumbnail, each thread's brightness buckets.
uint64_t quality_working_bytes(const Layout& layout, uint32_t threads);

// Whether a sample type has quality measures.
inline bool quality_measured(SampleType t) { return t == SampleType::kUint8 || t == SampleType::kUint16; }

}  // namespace imgstat
