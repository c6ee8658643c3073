// Sample types shared by every layer (host and device code).
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define IMGSTAT_HD __host__ __device__ __forceinline__
#else
#define IMGSTAT_HD inline
#endif

namespace imgstat {

enum class SampleType : uint8_t { kUint8, kUint16, kInt8, kInt16, kFloat32, kFloat64 };

IMGSTAT_HD constexpr size_t sample_size(SampleType t) {
  switch (t) {
    case SampleType::kUint8:
    case SampleType::kInt8: return 1;
    case SampleType::kUint16:
    case SampleType::kInt16: return 2;
    case SampleType::kFloat32: return 4;
    case SampleType::kFloat64: return 8;
  }
  return 0;
}

IMGSTAT_HD constexpr bool is_float(SampleType t) {
  return t == SampleType::kFloat32 || t == SampleType::kFloat64;
}

// Integer types: the automatic histogram range is the whole type,
// [type_lo, type_lo + 2^bits).
IMGSTAT_HD constexpr int64_t type_lo(SampleType t) {
  return t == SampleType::kInt8 ? -128 : t == SampleType::kInt16 ? -32768 : 0;
}
IMGSTAT_HD constexpr uint32_t type_bits(SampleType t) {
  return static_cast<uint32_t>(sample_size(t) * 8);
}

// The type of the luminance channel of an image of type t.
IMGSTAT_HD constexpr SampleType luminance_type(SampleType t) { return is_float(t) ? SampleType::kFloat64 : t; }

const char* to_string(SampleType t);  // "uint8", "uint16", ...
bool parse_sample_type(const char* name, SampleType* out);

}  // namespace imgstat
