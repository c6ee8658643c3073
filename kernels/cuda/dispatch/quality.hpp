// Host-side launchers of the quality measures' kernels (agent/quality.cuh)
// for packed 8-bit device images of one or three channels; rgb: the
// channels holding R, G and B. Each returns after its checked launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/block/quality_counts.hpp"
#include "cuda/block/types.hpp"

namespace imgstat::cuda {

// Adds the pass's counts to counts (kQualityBucketsAt, zeroed by the
// caller) and, three channels, the brightness buckets' to buckets
// (kBrightnessBuckets, zeroed); the channels' histograms only where
// `histograms` (else left 0).
void launch_quality_counts(const uint8_t* pixels, uint32_t width, uint32_t height, uint32_t channels,
                           const uint32_t* rgb, bool histograms, unsigned long long* counts,
                           unsigned long long* buckets, const DeviceInfo& dev, cudaStream_t stream);
// Three channels, after launch_quality_counts: the buckets holding the
// ranks into *wanted (one block, on the device); the buckets left zeroed.
void launch_find_wanted(unsigned long long* buckets, const BrightnessRanks& ranks, WantedBuckets* wanted,
                        cudaStream_t stream);
// In one launch, after launch_find_wanted: the colours of the wanted
// buckets' pixels into colours (three channels; null: none; room for every
// pixel; *next, zeroed by the caller, counts them), and the horizontal
// passes of the thumbnails (xsize 0: none; blur of the image's channels as
// bands, phash of PIL's L), and the pixel hash's pieces (len 0: none).
void launch_measures_horizontal(const uint8_t* pixels, uint32_t width, uint32_t height, uint32_t channels,
                                const uint32_t* rgb, const WantedBuckets* wanted, uint32_t* colours,
                                unsigned int* next, ThumbnailPass blur, ThumbnailPass phash, PixelHashPass hash,
                                const DeviceInfo& dev, cudaStream_t stream);
// Then both thumbnails' vertical passes (blur of blur_bands bands) and the
// pixel hash's chain and finish.
void launch_measures_vertical(uint32_t blur_bands, ThumbnailPass blur, ThumbnailPass phash, PixelHashPass hash,
                              const DeviceInfo& dev, cudaStream_t stream);

}  // namespace imgstat::cuda
