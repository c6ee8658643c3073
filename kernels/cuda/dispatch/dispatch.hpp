// Host-side launchers of the device kernels, one per pass. Each takes packed
// pixels (channel 0 first, 16-byte aligned) already on the device, adds its
// results to device accumulators and returns after the launch; every launch
// is checked. No kernel here synchronizes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "imgstat/colour.hpp"
#include "imgstat/float_moments.hpp"
#include "imgstat/types.hpp"

namespace imgstat::cuda {

// Exact integer moments of one channel of 16-bit samples, accumulated with
// atomics: samples are offsets from the type's lowest value (0..65535), so
// the host recovers signed sums exactly.
struct IntAccum {
  unsigned int min;
  unsigned int max;
  unsigned long long sum;
  unsigned long long sumsq_lo;
  unsigned long long sumsq_hi;
};

// Where a pass adds its histogram: counts[channel * bins + bin], and for an
// explicit range underflow[channel], overflow[channel].
struct HistogramOut {
  unsigned long long* counts;
  unsigned long long* underflow;
  unsigned long long* overflow;
  uint32_t bins;
  bool explicit_range;
  double lo[4];  // explicit range only, per channel (a colour space's
  double hi[4];  // channels each have their own)
};

// Running float moments are kept per slot: running[slot * kRunningStride + channel].
constexpr uint32_t kRunningStride = 4;

struct DeviceInfo {
  int sm_count;
};

// Zeroes counts (channels * bins), under/overflow, IntAccum (min = all ones)
// and the running float moments, in one launch.
void launch_reset(const HistogramOut& h, uint32_t channels, IntAccum* ints, FloatMoments* running,
                  uint32_t running_count, cudaStream_t stream);

// 8-bit samples (uint8 and int8 alike: counts by raw byte value), added to
// counts[channel * 256 + byte]. copies: histograms per warp (1 or 2), for
// the benchmark to compare; the engine uses kHist8Copies.
constexpr int kHist8Copies = 1;
void launch_hist8(const uint8_t* data, uint64_t pixels, uint32_t channels, unsigned long long* counts,
                  const DeviceInfo& dev, cudaStream_t stream, int copies = kHist8Copies);
// Small images (up to kOneBlockHist8Bytes): one block that overwrites
// counts, so they need no zeroing; data and counts may be mapped host memory.
constexpr uint64_t kOneBlockHist8Bytes = uint64_t{64} << 10;
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

// Parts (masks, labels, tiles) of 8- and 16-bit images whose pixels are
// fewer than 2^32: per part and channel, exact moments and the first min
// and max, as keys that one atomicMax each keeps (see parts.cuh).
struct PartAccum {
  unsigned long long n;
  unsigned long long sum;    // two's complement of the signed sum
  unsigned long long sumsq;
  unsigned long long min_key;  // positions only
  unsigned long long max_key;
  unsigned int min_inverse;    // ~(min - type_lo), so that zeroed means none
  unsigned int max;            // max - type_lo
};
constexpr uint32_t kPartKeyShift = 40;

// Where each pixel's part comes from: a mask (nonzero bytes), 8- or 16-bit
// labels through a table, or 32-bit labels searched among the sorted labels.
enum class PartMapKind { kMask, kTable8, kTable16, kSearchU32, kSearchI32 };
struct PartMapDevice {
  PartMapKind kind = PartMapKind::kMask;
  const uint8_t* data = nullptr;  // rows `stride` bytes apart
  uint64_t stride = 0;
  uint32_t step = 1;              // samples from one pixel's to the next
  const uint32_t* table = nullptr;
  const long long* labels = nullptr;
  uint32_t count = 0;
  bool ignore = false;
  long long ignored = 0;
};

// A part-channel's histogram bins or value counts (slots), then its
// underflow and overflow: stride = slots + 2; slot_of maps a sample's
// offset from the type's lowest value to its slot. stride 0: none counted.
struct PartSlots {
  unsigned int* slots = nullptr;
  const int32_t* slot_of = nullptr;
  uint32_t stride = 0;
};

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
