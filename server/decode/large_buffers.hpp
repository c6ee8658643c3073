#pragma once
// Pixel buffers of large images, kept for the next image.
//
// A 48-megapixel RGB image decoded whole is a 144 MB buffer. Above glibc's
// mmap threshold each one is mapped afresh and every page faults and is
// zeroed on first touch; on the virtual machines servers run on that costs
// as much as decoding the JPEG (measured: 0.30 s of a 0.86 s request for an
// 8000x6000 photo's tiles, 2 cores). OpenCV's matrices allocated through
// this allocator take such buffers from a small cache of recently freed
// ones, mapped with transparent huge pages, and give them back to it.
#include <cstddef>
#include <cstdint>

namespace cv {
class MatAllocator;
}

namespace imgstat {

// Buffers at least this large are cached (not under AddressSanitizer:
// large_buffers_cached()); smaller ones are OpenCV's own
// (malloc keeps and reuses those).
inline constexpr uint64_t kLargeBufferBytes = uint64_t{32} << 20;
// How long a buffer stays unused before it goes back to the system (what
// is kept at most: Limits::idle_decode_buffers).
inline constexpr double kIdleLargeBufferSeconds = 10.0;

// The allocator every cv::Mat of the process allocates with from now on
// (cv::Mat::setDefaultAllocator), keeping at most idle_bytes of freed large
// buffers (0: none kept; they are still mapped with huge pages).
void use_large_buffer_cache(uint64_t idle_bytes);

// The cache's allocator (for a matrix or two that should use it where the
// default is not set).
cv::MatAllocator* large_buffer_allocator();

struct LargeBufferUsage {
  uint64_t idle_bytes = 0;   // freed and kept
  uint64_t reused = 0;       // allocations served from the cache
  uint64_t mapped = 0;       // allocations that mapped new memory
};
LargeBufferUsage large_buffer_usage();
// False in a sanitized build, whose buffers are all malloc's.
bool large_buffers_cached();
// Unmaps every idle buffer.
void release_idle_large_buffers();

}  // namespace imgstat
