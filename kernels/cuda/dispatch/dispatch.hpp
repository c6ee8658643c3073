// Host-side launchers of the device kernels, one per pass. Each takes packed
// pixels (channel 0 first, 16-byte aligned) already on the device, adds its
// results to device accumulators and returns after the launch; every launch
// is checked. No kernel here synchronizes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/tuning/launch.hpp"
#include "imgstat/colour.hpp"
#include "cuda/tuning/launch.hpp"
#include "imgstat/float_moments.hpp"
#include "imgstat/types.hpp"
#include "cuda/block/types.hpp"

namespace imgstat::cuda {

// Zeroes counts (channels * bins), under/overflow, IntAccum (min = all ones)
// and the running float moments, in one launch.
void launch_reset(const HistogramOut& h, uint32_t channels, IntAccum* ints, FloatMoments* running,
                  uint32_t running_count, cudaStream_t stream);

// 8-bit samples (uint8 and int8 alike: counts by raw byte value), added to
// counts[channel * 256 + byte]. copies: histograms per warp (1 or 2), for
// the benchmark to compare; the engine uses kHist8Copies.
void launch_hist8(const uint8_t* data, uint64_t pixels, uint32_t channels, unsigned long long* counts,
                  const DeviceInfo& dev, cudaStream_t stream, int copies = kHist8Copies);
// Small images (up to kOneBlockHist8Bytes): one block that overwrites
// counts, so they need no zeroing; data and counts may be mapped host memory.
void launch_hist8_one_block(const uint8_t* data, uint64_t pixels, uint32_t channels, unsigned long long* counts,
                            cudaStream_t stream);

// 16-bit samples in one fused pass: IntAccum per channel and, when h.counts is
// set, the histogram (automatic range: the type's; else h's explicit range).
void launch_int16(const uint8_t* data, uint64_t pixels, uint32_t channels, bool is_signed, IntAccum* accum,
                  const HistogramOut& h, const DeviceInfo& dev, cudaStream_t stream);

// Float pass 1: per-block moments into partials (at least
// float_partials_needed(...) of them), then folded into running[channel] in
// a fixed order (deterministic).
size_t float_partials_needed(uint32_t channels, const DeviceInfo& dev);
void launch_float_moments(const uint8_t* data, uint64_t pixels, uint32_t channels, SampleType type,
                          FloatMoments* partials, FloatMoments* running, const DeviceInfo& dev,
                          cudaStream_t stream);

// Float pass 2: the histogram. With an automatic range the bins span the
// min and max of running[k * kRunningStride + c] over k < running_sets, read on
// the device, so no round trip to the host sits between the passes.
void launch_float_bins(const uint8_t* data, uint64_t pixels, uint32_t channels, SampleType type,
                       const HistogramOut& h, const FloatMoments* running, uint32_t running_sets,
                       const DeviceInfo& dev, cudaStream_t stream);

// Where each channel's min and max first occur among `pixels` pixels that
// are the image's pixels from `first` on: per block into partials (at least
// float_partials_needed(...) of them), folded into running[channel].
void launch_extremes(const uint8_t* data, uint64_t pixels, uint64_t first, uint32_t channels, SampleType type,
                     Extremes* partials, Extremes* running, const DeviceInfo& dev, cudaStream_t stream);

// Sets the bit of each 8-bit pixel's colour (color_key()) in bits.
void launch_colors(const uint8_t* data, uint64_t pixels, uint32_t channels, unsigned long long* bits,
                   const DeviceInfo& dev, cudaStream_t stream);

// The luminance plane of 3 or 4 channel pixels into out (luminance_type()).
void launch_luminance(const uint8_t* data, uint64_t pixels, uint32_t channels, SampleType type, const uint32_t* rgb,
                      void* out, const DeviceInfo& dev, cudaStream_t stream);

// moments: count the moments (else the slots are every value and hold
// them); positions: the first min and max too.
void launch_part_map(const uint8_t* pixels, uint32_t width, uint32_t height, uint32_t channels, SampleType type,
                     const PartMapDevice& map, uint32_t parts, PartAccum* acc, const PartSlots& slots, bool moments,
                     bool positions, const DeviceInfo& dev, cudaStream_t stream);
// x_edges: columns + 1 tile edges, y_edges: rows + 1.
void launch_part_tiles(const uint8_t* pixels, uint32_t width, uint32_t channels, SampleType type,
                       const uint32_t* x_edges, const uint32_t* y_edges, uint32_t columns, uint32_t rows,
                       uint64_t pixels_count, PartAccum* acc, const PartSlots& slots, bool moments, bool positions,
                       const DeviceInfo& dev, cudaStream_t stream);

// Colour spaces of uint8 or float32 pixels: `pixels` whole pixels of
// `channels` (3 or 4) samples, R, G, B at rgb[], into the space's channels
// (alpha appended) at out, of the same sample type. The tables go to the
// current device the first time.
void launch_convert(const uint8_t* data, uint64_t pixels, uint32_t channels, SampleType type, ColourSpace space,
                    const uint32_t* rgb, uint8_t* out, const DeviceInfo& dev, cudaStream_t stream);

// The same conversion fused into the 8-bit pass: the value counts of the
// converted channels added to counts[channel * 256 + value], nothing
// written but them. data 16-byte aligned.
void launch_hist8_colour(const uint8_t* data, uint64_t pixels, uint32_t channels, ColourSpace space,
                         const uint32_t* rgb, unsigned long long* counts, const DeviceInfo& dev, cudaStream_t stream);

// A joint histogram (JointSpec with its ranges) of pixels of any sample
// type, added to counts (spec.total_bins() of them) and outside.
void launch_joint(const uint8_t* data, uint64_t pixels, uint32_t channels, SampleType type, const JointSpec& spec,
                  unsigned long long* counts, unsigned long long* outside, const DeviceInfo& dev, cudaStream_t stream);

// Each part's joint histogram (width x height pixels, packed):
// parts from the map, or with map null from the tile edges; added to
// counts[part * spec.total_bins() + bin] and outside[part].
void launch_part_joint(const uint8_t* pixels, uint32_t width, uint32_t height, uint32_t channels, SampleType type,
                       const JointSpec& spec, const PartMapDevice* map, const uint32_t* x_edges,
                       const uint32_t* y_edges, uint32_t columns, uint32_t rows, unsigned long long* counts,
                       unsigned long long* outside, const DeviceInfo& dev, cudaStream_t stream);

}  // namespace imgstat::cuda
