// Host-side launchers of the quality measures' kernels (agent/quality.cuh)
// for packed 8-bit device images of one or three channels; rgb: the
// channels holding R, G and B. Each returns after its checked launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/block/quality_counts.hpp"
#include "cuda/block/types.hpp"

namespace imgstat::cuda {

// The first launch, what reads only the image: the counting pass adds to
// counts.out and counts.buckets (QualityCountsPass; null out: none; the
// channels' histograms only where `histograms`, else left 0), the
// thumbnails' horizontal passes (xsize 0: none; blur of the image's
// channels as bands, phash of PIL's L), the pixel hash's pieces (len 0:
// none).
void launch_measures_first(const uint8_t* pixels, uint32_t width, uint32_t height, uint32_t channels,
                           const uint32_t* rgb, QualityCountsPass counts, bool histograms, ThumbnailPass blur,
                           ThumbnailPass phash, PixelHashPass hash, const DeviceInfo& dev, cudaStream_t stream);
// The second: the buckets holding the ranks into *wanted (buckets null:
// none; three channels), leaving the buckets zeroed; both thumbnails'
// vertical passes (blur of blur_bands bands).
void launch_measures_second(unsigned long long* buckets, const BrightnessRanks& ranks, WantedBuckets* wanted,
                            uint32_t blur_bands, ThumbnailPass blur, ThumbnailPass phash, const DeviceInfo& dev,
                            cudaStream_t stream);
// The third, three channels' quality: the colours of the wanted buckets'
// pixels into colours (room for every pixel; *next, zeroed by the caller,
// counts them).
void launch_measures_colours(const uint8_t* pixels, uint64_t n, const uint32_t* rgb, const WantedBuckets* wanted,
                             uint32_t* colours, unsigned int* next, const DeviceInfo& dev, cudaStream_t stream);

}  // namespace imgstat::cuda
