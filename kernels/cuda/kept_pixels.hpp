// Float pixels binned over their own range, kept on the device for the
// second pass.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "cuda/workspace.hpp"

namespace imgstat::cuda {

// A whole image's bytes are at hand: one buffer of its size. A stream's come
// as its client sends them: a piece each time a chunk goes up, so what a
// stream holds grows with what it was sent, never with what its header
// declared.
class KeptPixels {
 public:
  struct Piece {
    uint8_t* data;
    uint64_t first;     // the image's pixel index of the piece's first pixel
    uint64_t pixels;    // filled
    uint64_t capacity;  // pixels
  };
  KeptPixels(DeviceBudget& budget, uint64_t pixel_bytes, int device)
      : budget_(budget), pixel_bytes_(pixel_bytes), device_(device) {}
  ~KeptPixels();
  KeptPixels(const KeptPixels&) = delete;
  KeptPixels& operator=(const KeptPixels&) = delete;

  // Room for `pixels` more in one buffer, taken now.
  void reserve(uint64_t pixels, cudaStream_t s) { allocate(pixels, s); }
  // Where the next `pixels` go, ordered on s.
  uint8_t* append(uint64_t pixels, cudaStream_t s);
  const std::vector<Piece>& pieces() const { return pieces_; }

 private:
  void allocate(uint64_t pixels, cudaStream_t s);

  DeviceBudget& budget_;
  uint64_t pixel_bytes_;
  int device_;
  uint64_t total_ = 0;
  std::vector<Piece> pieces_;
};

}  // namespace imgstat::cuda
