#include "cuda/kept_pixels.hpp"

#include "cuda/cuda_check.hpp"

namespace imgstat::cuda {

KeptPixels::~KeptPixels() {
  if (pieces_.empty()) return;
  // Every session that wrote or read the pieces has synchronized.
  IMGSTAT_CUDA_REPORT(cudaSetDevice(device_));
  for (const Piece& p : pieces_) {
    IMGSTAT_CUDA_REPORT(cudaFreeAsync(p.data, cudaStreamPerThread));
    budget_.give(p.capacity * pixel_bytes_);
  }
  IMGSTAT_CUDA_REPORT(cudaStreamSynchronize(cudaStreamPerThread));
}

uint8_t* KeptPixels::append(uint64_t pixels, cudaStream_t s) {
  if (pieces_.empty() || pieces_.back().capacity - pieces_.back().pixels < pixels) allocate(pixels, s);
  Piece& p = pieces_.back();
  uint8_t* at = p.data + p.pixels * pixel_bytes_;
  p.pixels += pixels;
  total_ += pixels;
  return at;
}

void KeptPixels::allocate(uint64_t pixels, cudaStream_t s) {
  const uint64_t bytes = pixels * pixel_bytes_;
  budget_.take(bytes, "this image");
  void* p = nullptr;
  if (cudaMallocAsync(&p, bytes, s) != cudaSuccess) {
    cudaGetLastError();
    budget_.give(bytes);
    fail(ErrorCode::kResourceExhausted, "GPU out of memory for " + std::to_string(bytes >> 20) +
                                            " MiB of a float image's pixels");
  }
  pieces_.push_back(Piece{static_cast<uint8_t*>(p), total_, 0, pixels});
}

}  // namespace imgstat::cuda
