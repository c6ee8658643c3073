// A baseline JPEG whose scan has restart markers can be cut there: the DC
// predictions start afresh at each marker, so a run of MCU rows that starts
// at one decodes by itself, and the runs decode on several cores at once.
// Each run becomes a small JPEG of its own (the file's header with the run's
// height, the run's intervals, markers renumbered from RST0), decoded by
// libjpeg-turbo exactly as the whole file would be: pixels identical.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace imgstat {

// Tuning: a decode cut into runs hands the engine bands of this much per
// core (kBandBytes at least), so that every core gets a run long enough that
// the extra MCU row decoded on each side of a 4:2:0 run costs little, and a
// band still sits in cache while the engine computes it (16 MiB bands on two
// cores made decode + compute 1.6x slower than 4 MiB ones).
constexpr uint64_t kIntervalBandBytesPerCore = uint64_t{1} << 20;
// Fewest MCU rows a run keeps: with its two context rows, at most 1.5x work.
constexpr uint32_t kMinRunMcuRows = 4;

// What libjpeg's header pass tells of the scan's MCUs.
struct JpegScanFacts {
  uint32_t height = 0;            // image rows
  uint32_t mcus_per_row = 0;
  uint32_t mcu_rows = 0;
  uint32_t mcu_height = 0;        // image rows an MCU row covers
  uint32_t restart_interval = 0;  // MCUs
  bool context_rows = false;      // vertical upsampling: output rows near a cut need the MCU row across it
  size_t scan_start = 0;          // first byte of entropy-coded data
};

struct RestartMap {
  uint32_t cut_every = 0;             // MCU rows between the places a run may start
  size_t sof_height_at = 0;           // the frame header's 16-bit height
  std::vector<size_t> interval_begin; // each interval's entropy-coded bytes
  std::vector<size_t> interval_end;
};

// MCU rows between the places a run may start (restart markers meet a row's
// start there); 0 where the scan cannot be cut at least once in two.
uint32_t cut_every(const JpegScanFacts& facts);

// The map of a file's intervals, or nothing where the file is not one scan
// of whole, ordered intervals ending at the end-of-image marker (anything
// else decodes in one piece, as libjpeg reads it).
std::optional<RestartMap> map_restarts(const uint8_t* data, size_t size, const JpegScanFacts& facts);

// The JPEG of MCU rows [first, last): first a multiple of cut_every, last
// one too or the last MCU row's end.
std::vector<uint8_t> jpeg_of_mcu_rows(const uint8_t* data, const RestartMap& map, const JpegScanFacts& facts,
                                      uint32_t first, uint32_t last);

}  // namespace imgstat
