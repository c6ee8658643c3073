// The kernels' launch shapes, in one place: threads a block, blocks an SM,
// shared-memory budgets, the samples a thread may sum. Measured on Hopper
// (H100, H200: sm_90, the one architecture the build targets; another would
// get its own set here). bench/NOTES.md has the measurements behind them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace imgstat::cuda {

// Passes over pixels (int16, float moments and bins, extremes, colours,
// luminance): kPassThreads a block, kBlocksPerSm blocks an SM (a full SM of
// threads).
constexpr int kPassThreads = 256;
constexpr int kBlocksPerSm = 8;
// The 8-bit histogram: blocks of kHist8Threads, a histogram per warp
// (kHist8Copies of them, the benchmark compares 1 and 2) in shared memory
// while kWarpCopiesBytes fit, else one a block up to kBlockCopyBytes.
constexpr int kHist8Threads = 256;
constexpr int kHist8Copies = 1;
constexpr size_t kWarpCopiesBytes = 48 << 10;
constexpr size_t kBlockCopyBytes = 96 << 10;
// Images up to this go to one block that overwrites its counts (no zeroing).
constexpr uint64_t kOneBlockHist8Bytes = uint64_t{64} << 10;
// A thread of the int16 pass keeps a 32-bit sum: no launch may give it more
// than this many samples.
constexpr uint64_t kInt16ThreadSamples = 65536;
// Colour conversions and global-memory joint passes.
constexpr int kColourThreads = 256;
constexpr int kColourBlocksPerSm = 8;
// Joint histograms in shared memory up to kJointSharedBytes (32^3 bins of
// 32-bit counters are 128 KiB: within an H100 or H200 block), a block of
// kJointThreads (one block an SM keeps enough loads in flight).
constexpr size_t kJointSharedBytes = 200 << 10;
constexpr int kJointThreads = 1024;
// Parts: blocks of kPartThreads, kPartSegment pixels of a row a thread at
// once in the map kernel, slots in shared memory up to kSharedSlotBytes a
// block (global atomics beyond).
constexpr int kPartThreads = 256;
constexpr uint32_t kPartSegment = 32;
constexpr size_t kSharedSlotBytes = 48 << 10;
// The quality pass: a block walks a strip of kQualityStripWidth columns
// down a band of rows, keeping the grey rows above and below in registers
// (one grey value computed a pixel, not five), bands of at least
// kQualityMinBandRows rows (fewer blocks to merge: a 500x375 image was 733
// blocks each adding its histograms, 45 us of the whole GPU) and at most
// kQualityMaxBandRows (a thread's 32-bit sums), about kQualityBlocksPerSm
// blocks an SM for large images.
constexpr int kQualityStripWidth = 256;
constexpr uint32_t kQualityMinBandRows = 16;
constexpr uint32_t kQualityMaxBandRows = 1024;
constexpr int kQualityBlocksPerSm = 4;

}  // namespace imgstat::cuda
