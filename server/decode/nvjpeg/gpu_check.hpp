// The GPU side of the JPEG integrity check (jpeg_verify.hpp) and of exact
// pixels: device work for a lane's batch, queued on streams, answered after
// the lane synchronizes. CUDA errors become imgstat::Error (kUnavailable).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "decode/jpeg_verify.hpp"

namespace imgstat::nvjpeg {

// One file's check in flight.
struct PendingCheck {
  JpegScan scan;
  JpegSegments segments;
  uint64_t subsequences = 0;
  jpeg::Record* records = nullptr;  // pinned: where the device's records land
  void* device = nullptr;           // this file's device memory, freed in finish()
  const uint8_t* device_data = nullptr;
  const uint64_t* device_seg_start = nullptr;
  const uint64_t* device_sub_first = nullptr;
  const jpeg::EntropyTables* device_tables = nullptr;
  jpeg::Record* device_records = nullptr;
};

// A lane's pinned staging, reused from batch to batch.
class CheckStaging {
 public:
  ~CheckStaging();
  // Room for a batch's files; only between batches (nothing in flight).
  void reserve(size_t bytes);
  uint8_t* take(size_t bytes);  // 256-byte aligned pieces of the reserve
  void reset() { used_ = 0; }

 private:
  uint8_t* base_ = nullptr;
  size_t capacity_ = 0, used_ = 0;
};

// Pinned bytes a file's check takes at most.
size_t check_staging_bytes(const JpegScan& scan, size_t size);

// Removes the stuffing on the host into staging, then queues the copies, the
// first decode and `rounds` synchronizing rounds and the copy back on stream.
void launch_check(PendingCheck& p, const uint8_t* data, size_t size, CheckStaging& staging, cudaStream_t stream,
                  int rounds);

// After the stream synchronized: the verdict, with more rounds (and
// synchronizations) in the rare file that needs them. *covered false:
// libjpeg must decide. Frees the file's device memory.
JpegCheck finish_check(PendingCheck& p, cudaStream_t stream, bool* covered);

// libjpeg-turbo's chroma upsampling (fancy h2v1, h1v2, h2v2; boxes
// otherwise, as jdsample.c chooses) and integer YCbCr->RGB (jdcolor.c), from
// nvJPEG's planes into packed R,G,B: the CPU decoder's pixels, bit for bit.
void launch_ycc_to_rgb(const uint8_t* y, const uint8_t* cb, const uint8_t* cr, uint32_t width, uint32_t height,
                       uint32_t h_factor, uint32_t v_factor, uint8_t* rgb, cudaStream_t stream);

}  // namespace imgstat::nvjpeg
