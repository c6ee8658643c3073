// Animated PNG (APNG): every frame composited on the canvas as the APNG
// specification says a viewer shows it, a plane each. docs/planes.md gives
// the rules; in short:
// - the canvas is the IHDR's size, first transparent black (black where the
//   planes have no alpha);
// - the frames are the fcTL chunks with their data; an IDAT image before
//   the first fcTL is the default image for viewers without APNG, not a frame;
// - blend "source" replaces the frame's rectangle, "over" composites it
//   with its alpha (the specification's integer formula, as its reference
//   tools apngdis and apngasm compute it); without alpha both replace;
// - dispose "background" clears the rectangle to transparent black after
//   the frame is shown, "previous" restores what it held before (the first
//   frame's "previous" is "background").
// Each frame's data is decoded as a PNG of the frame's size (the file's
// header, palette and transparency), by the streamed decoder, or libpng
// through OpenCV where that declines: the planes are what a still PNG of
// the file's header would give (palette to RGB, tRNS to alpha, gray+alpha
// to RGBA, 16-bit kept).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "decode/rows.hpp"

namespace imgstat {

struct ApngPlan {
  uint32_t width = 0, height = 0;     // the canvas
  uint32_t channels = 0;              // the planes' (4 where they have alpha)
  SampleType type = SampleType::kUint8;
  std::vector<uint32_t> delays_ms;    // a frame each
  uint64_t frames() const { return delays_ms.size(); }
  bool default_image_hidden = false;  // the IDAT image is not a frame
  uint64_t memory_bytes = 0;          // the canvas, a saved rectangle, a frame, a frame's data
  std::string warning;
};

// The frames from the file's chunks (none decoded). No acTL: frames() 0, a
// still PNG. Throws kResourceExhausted past max_frames, kInvalidArgument
// for frames outside the canvas, without data, or chunks out of order.
ApngPlan plan_apng(const uint8_t* data, size_t size, uint64_t max_frames);

// Whether a PNG's chunks before its image data include acTL: read as far as
// arrived says the bytes have come (it waits for them).
bool png_declares_animation(const uint8_t* data, size_t size, const std::function<uint64_t(uint64_t)>& arrived);

// Composites frames 0..last on the planned canvas (shape: its size, and
// the planes' channels and type, as the plan's band layout gives them) and hands frames [first, last] to sink, one
// plane each. Throws kInvalidArgument for damaged data, kCancelled.
void decode_apng_frames(const uint8_t* data, size_t size, const Layout& shape, uint64_t first, uint64_t last,
                        const std::function<bool()>& cancelled, const RowSink& sink);

}  // namespace imgstat
