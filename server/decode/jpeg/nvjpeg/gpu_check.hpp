// The GPU side of the JPEG integrity check (jpeg/verify.hpp) and of exact
// pixels: device work for a lane's batch, queued on streams, answered after
// the lane synchronizes. CUDA errors become imgstat::Error (kUnavailable).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "decode/jpeg/verify.hpp"

namespace imgstat::nvjpeg {

// One file's part of a batch's check.
struct PendingCheck {
  JpegScan scan;
  JpegSegments segments;
  const uint8_t* data = nullptr;  // the file, as the caller holds it
  size_t size = 0;
  // Its data unstuffed already (segments set), by the calling thread: the
  // lane then only copies it.
  std::vector<uint8_t> unstuffed;
  uint64_t subsequences = 0;
  uint64_t first_record = 0;  // its records' place among the batch's
};

// A lane's pinned staging, reused from batch to batch.
class CheckStaging {
 public:
  ~CheckStaging();
  // Room for a batch's files; only between batches (nothing in flight).
  void reserve(size_t bytes);
  // Lets the memory go when it holds more than `bytes` (between batches):
  // a batch of large files does not keep its pinned memory for good.
  void shrink_to(size_t bytes);
  uint8_t* take(size_t bytes);  // 256-byte aligned pieces of the reserve, in order
  uint8_t* base() const { return base_; }
  size_t used() const { return used_; }

 private:
  uint8_t* base_ = nullptr;
  size_t capacity_ = 0, used_ = 0;
};

// The checks of a lane's batch, all files at once: their data goes up in one
// copy, each round is one launch over every file's subsequences (a block
// holds one file's, with that file's tables in shared memory, and repeats
// its own rounds until its chain is unbroken), and the records come back in
// one copy. Small files are thus one launch among many, not fifteen each.
class CheckBatch {
 public:
  ~CheckBatch();
  void add(PendingCheck* file) { files_.push_back(file); }
  void clear() { files_.clear(); }  // after finish() or abandon()
  // Removes the stuffing of every file into staging on the host, then
  // queues on stream the copy up, the first decode, `rounds` rounds across
  // blocks and the copy back.
  void launch(CheckStaging& staging, cudaStream_t stream, int rounds);
  // After the stream synchronized: each file's verdict (*covered false:
  // libjpeg must decide), with more rounds for the rare batch that needs
  // them. Frees the device memory.
  void finish(cudaStream_t stream, JpegCheck* verdicts, bool* covered);
  // Frees the device memory after a failure (queued on stream).
  void abandon(cudaStream_t stream);

 private:
  void launch_rounds(cudaStream_t stream, int rounds);
  std::vector<PendingCheck*> files_;
  uint8_t* device_ = nullptr;        // the staging's image, then the records
  size_t upload_bytes_ = 0;          // staging copied up whole, from its base
  size_t files_offset_ = 0, blocks_offset_ = 0;  // descriptors, each block's file
  uint64_t records_ = 0;
  uint32_t blocks_ = 0;
  jpeg::Record* host_records_ = nullptr;  // pinned, in the staging
};

// libjpeg-turbo's chroma upsampling (fancy h2v1, h1v2, h2v2; boxes
// otherwise, as jdsample.c chooses) and integer YCbCr->RGB (jdcolor.c), from
// nvJPEG's planes into packed R,G,B: the CPU decoder's pixels, bit for bit.
void launch_ycc_to_rgb(const uint8_t* y, const uint8_t* cb, const uint8_t* cr, uint32_t width, uint32_t height,
                       uint32_t h_factor, uint32_t v_factor, uint8_t* rgb, cudaStream_t stream);

}  // namespace imgstat::nvjpeg
