// The CUDA engine's tuning, in one place: the staging ring's shape and how
// long a call waits for a workspace. Measured figures behind them are in
// bench/NOTES.md.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "cuda/dispatch/dispatch.hpp"

namespace imgstat::cuda {

constexpr int kSlots = 3;
// Host copies land in 8 MiB pinned slots; pinned sources go straight to the
// device in 32 MiB pieces, few enough that their per-copy cost disappears.
constexpr uint64_t kSlotBytes = uint64_t{8} << 20;
constexpr uint64_t kDeviceSlotBytes = uint64_t{32} << 20;
constexpr uint32_t kMaxChannels = kRunningStride;
// How long an image waits for a free workspace before the CPU takes it. A
// stream's session waits as long: it holds a workspace only while it has
// bytes to compute, never while its client is slow to send them (pause()).
constexpr std::chrono::milliseconds kAnalyzeWait{500};
constexpr std::chrono::milliseconds kStreamWait = kAnalyzeWait;
// An image already decoded into device memory holds no client and takes
// milliseconds; the CPU's alternative is decoding it again: wait longer.
constexpr std::chrono::milliseconds kDeviceImageWait{10000};
// Host copies into the staging ring are split across threads above this.
constexpr uint64_t kParallelCopyBytes = uint64_t{1} << 20;
// A read into a slot is split across every thread, in pieces no smaller than this.
constexpr uint64_t kReadPieceMinBytes = uint64_t{256} << 10;
// A read (or pageable source) at least this large goes in lanes, one a core, each filling its own
// two pieces of the pinned slots and sending them itself: one fork and join
// a slot held every core to half the host's copy rate (a 4 GiB FITS cube on
// the H200 host: 20 GB/s, where every core reading its own pieces reached
// 45 GB/s, the page cache's 49).
constexpr uint64_t kLaneReadMinBytes = uint64_t{32} << 20;
// A lane's piece in the engine's LanePieces (two a lane: 64 MiB pinned for
// 16 cores); a read that finds them taken shares out its workspace's pinned
// slots, pieces at most this large.
constexpr uint64_t kLanePieceBytes = uint64_t{2} << 20;
constexpr uint64_t kLanePieceMaxBytes = kLanePieceBytes;
// The quality measures' memory each server thread keeps on each GPU and
// pinned on the host for its next image (cuda/quality.cpp): larger images
// allocate their own for the call.
constexpr uint64_t kKeptDeviceBytes = uint64_t{16} << 20;
constexpr size_t kKeptPinnedBytes = size_t{16} << 20;

}  // namespace imgstat::cuda
