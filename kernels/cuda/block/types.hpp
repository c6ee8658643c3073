// The types the kernels (agent/) and their launchers (dispatch/) share,
// and the host code that reads their results: accumulators, where a pass
// writes its histogram, the device's shape, the parts' maps and slots.
#pragma once

#include <cstdint>

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

}  // namespace imgstat::cuda
