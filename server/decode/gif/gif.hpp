// GIF through giflib. A file of one frame is that frame (its own
// rectangle, as ImageMagick reads FILE[0]); an animation is a stack of
// planes, each frame composited on the logical screen as Pillow composites
// it (docs/planes.md gives the rules), read frame after frame into a RowSink.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "decode/rows.hpp"

namespace imgstat {

struct GifPlan {
  uint32_t width = 0, height = 0;  // the canvas: the logical screen, grown to hold the first frame
  std::vector<uint32_t> delays_ms;  // a frame each: how long it shows
  uint64_t frames() const { return delays_ms.size(); }
  bool alpha = false;  // the first frame has a transparent colour: RGBA planes, else RGB
  uint64_t memory_bytes = 0;  // the canvas, a copy for "restore to previous", one frame line
  std::string warning;        // the file is damaged after some frames: those before are answered
};

// The frames from their descriptors and control blocks, their image data
// skipped, not decoded. Throws kResourceExhausted past max_frames,
// kInvalidArgument where the structure is damaged before the first frame.
GifPlan plan_gif(const uint8_t* data, size_t size, uint64_t max_frames, const std::function<bool()>& cancelled);

// Composites frames 0..last on the planned canvas (shape: its size, and
// the planes' channels and type, as the plan's band layout gives them) and hands frames [first, last] to sink, one
// plane each (R,G,B(,A) uint8, the screen's size). Throws kInvalidArgument
// for damaged data, kCancelled.
void decode_gif_frames(const uint8_t* data, size_t size, const Layout& shape, uint64_t first, uint64_t last,
                       const std::function<bool()>& cancelled, const RowSink& sink);

}  // namespace imgstat
