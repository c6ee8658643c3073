// The bins of one channel's float32 samples, counted into lanes: the
// histogram's second pass over a frame or a cube (BinCounter), where every
// sample is binned and most fall in a few bins. Four samples at a time
// where the CPU has AVX2.
#pragma once

#include <cstdint>

#include "imgstat/binning.hpp"

namespace imgstat::cpu {

// Copies of the counts, consecutive samples in turn: bin k of lane j at
// lanes[k * kFloatBinLanes + j].
inline constexpr uint32_t kFloatBinLanes = 4;

// n packed float32 samples at p (any alignment) binned by b (not wide())
// into lanes; samples not finite left out; with explicit_range those
// below b.lo or at or past b.hi counted in *under and *over instead.
void float_bins(const uint8_t* p, uint64_t n, const RangeBinner& b, bool explicit_range, uint64_t* lanes,
                uint64_t* under, uint64_t* over);

// The same, one sample at a time (the baseline build), and four at a time
// (float_bins_avx2.cpp, built with -mavx2: call only where the CPU has it).
void float_bins_scalar(const uint8_t* p, uint64_t n, const RangeBinner& b, bool explicit_range, uint64_t* lanes,
                       uint64_t* under, uint64_t* over);
void float_bins_avx2(const uint8_t* p, uint64_t n, const RangeBinner& b, bool explicit_range, uint64_t* lanes,
                     uint64_t* under, uint64_t* over);

}  // namespace imgstat::cpu
