// Host-side launchers of the quality measures' kernels (agent/quality.cuh)
// for packed 8-bit device images of one or three channels; rgb: the
// channels holding R, G and B. Each returns after its checked launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/block/quality_counts.hpp"
#include "cuda/block/types.hpp"

namespace imgstat::cuda {

// Adds the pass's counts to counts (kQualityCountsSize, zeroed by the
// caller); the channels' histograms only where `histograms` (else left 0).
void launch_quality_counts(const uint8_t* pixels, uint32_t width, uint32_t height, uint32_t channels,
                           const uint32_t* rgb, bool histograms, unsigned long long* counts, const DeviceInfo& dev,
                           cudaStream_t stream);
// Three channels, after launch_quality_counts: the buckets holding the
// ranks into *wanted (on the device), and the colours of their pixels into
// out (room for every pixel; *next, zeroed by the caller, counts them).
void launch_wanted_colours(const uint8_t* pixels, uint64_t count, const uint32_t* rgb,
                           const unsigned long long* buckets, const BrightnessRanks& ranks, WantedBuckets* wanted,
                           uint32_t* out, unsigned int* next, const DeviceInfo& dev, cudaStream_t stream);
// PIL's horizontal pass of a plan (bounds and k: its device copies) into
// rows x xsize pixels of `bands` (3: R, G, B; 1: the channel or PIL's L).
void launch_pil_horizontal(const uint8_t* pixels, uint32_t width, uint32_t channels, uint32_t bands,
                           const uint32_t* rgb, int first_row, int rows, int xsize, const int* bounds,
                           const int32_t* k, int ksize, uint8_t* out, const DeviceInfo& dev, cudaStream_t stream);

// Then its vertical pass over those rows (the plan's from first_row on)
// into ysize x xsize pixels of `bands`.
void launch_pil_vertical(const uint8_t* rows, uint32_t bands, int first_row, int xsize, int ysize, const int* bounds,
                         const int32_t* k, int ksize, uint8_t* out, const DeviceInfo& dev, cudaStream_t stream);

}  // namespace imgstat::cuda
