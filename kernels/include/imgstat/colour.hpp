// Colour spaces an image's statistics can be taken in, and joint
// histograms of two or three channels: the words of the engine interface
// for "in what" (engine.hpp's Parts say "where").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "imgstat/types.hpp"

namespace imgstat {

// The conversions of OpenCV's cvtColor from RGB: kHsv COLOR_RGB2HSV (8-bit
// H 0..179), kHsvFull COLOR_RGB2HSV_FULL (8-bit H 0..255), kHls
// COLOR_RGB2HLS, kLab COLOR_RGB2Lab (8-bit L scaled by 255/100, a and b
// offset by 128), kYCrCb COLOR_RGB2YCrCb, kGray COLOR_RGB2GRAY. Uint8
// samples convert byte for byte as OpenCV 4.6 does; float32 by its float
// formulas. Alpha is not converted: it stays the last channel.
enum class ColourSpace : uint8_t { kNone, kHsv, kHsvFull, kHls, kLab, kYCrCb, kGray };

const char* to_string(ColourSpace space);  // "hsv", "hsv-full", ... ("" for kNone)
bool parse_colour_space(const std::string& name, ColourSpace* out);
// Channels a space gives, alpha not counted: 3, or 1 for gray.
uint32_t colour_channels(ColourSpace space);
// The converted image's channel names, with "A" last when alpha is kept.
std::vector<std::string> colour_channel_names(ColourSpace space, bool alpha);
// The range [lo, hi) a converted channel's values lie in, for its samples
// of `type` (uint8 or float32): what its histograms default to. Alpha
// (channel colour_channels(space)) has its type's range.
void colour_channel_range(ColourSpace space, uint32_t channel, SampleType type, double* lo, double* hi);

// A histogram of 2 or 3 channels together. Channel indices are the
// engine's (of the converted image with a colour space). Each axis spans
// [lo, hi) in `bins` equal bins, bin = floor((v - lo) * bins / (hi - lo));
// a pixel with any channel outside its axis (or NaN) is counted in
// `outside` only. Counts are row-major, the first axis slowest (numpy's
// histogramdd).
constexpr uint32_t kMaxJointAxes = 3;
constexpr uint64_t kMaxJointBins = uint64_t{1} << 24;
// Up to this many bins an answer lists every count; above it the nonzero ones.
constexpr uint64_t kDenseJointBins = 65536;

struct JointSpec {
  uint32_t axes = 0;  // 0: no joint histogram
  uint32_t channels[kMaxJointAxes] = {0, 0, 0};
  uint32_t bins[kMaxJointAxes] = {0, 0, 0};
  bool explicit_range = false;  // false: each channel's own range
  double lo[kMaxJointAxes] = {0, 0, 0};
  double hi[kMaxJointAxes] = {0, 0, 0};
  uint64_t total_bins() const {
    uint64_t n = axes ? 1 : 0;
    for (uint32_t a = 0; a < axes; ++a) n *= bins[a];
    return n;
  }
};

struct JointHistogram {
  JointSpec spec;                // ranges filled in
  std::vector<uint64_t> counts;  // spec.total_bins() of them
  uint64_t outside = 0;
};

}  // namespace imgstat
