// Animated WebP through libwebp's animation decoder, which composites each
// frame on the canvas as the WebP container specification says (blending,
// disposal to transparent black), as Pillow and browsers show it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "decode/rows.hpp"

namespace imgstat {

struct WebpAnimation {
  uint32_t width = 0, height = 0;  // the canvas
  bool alpha = false;              // the file says it has alpha: RGBA planes, else RGB
  std::vector<uint32_t> delays_ms;  // a frame each
  uint64_t frames() const { return delays_ms.size(); }
  uint64_t memory_bytes = 0;  // the decoder's canvases and frame, and a plane of ours
};

// From the container's chunks (nothing decoded). Not an animation, or one
// frame: frames() 0 or 1. Throws kResourceExhausted past max_frames,
// kInvalidArgument where libwebp's demuxer refuses an animation.
WebpAnimation plan_webp_animation(const uint8_t* data, size_t size, uint64_t max_frames);

// Composites frames 0..last on the planned canvas (shape: its size, and
// the planes' channels and type, as the plan's band layout gives them) and hands frames [first, last] to sink, one
// plane each (R,G,B(,A) uint8). Throws kInvalidArgument for damaged data,
// kCancelled.
void decode_webp_animation(const uint8_t* data, size_t size, const Layout& shape, uint64_t first, uint64_t last,
                           const std::function<bool()>& cancelled, const RowSink& sink);

}  // namespace imgstat
