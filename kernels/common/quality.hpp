// Quality measures of a whole image (StatsRequest::quality, QualityStats),
// in integer arithmetic wherever the measure is built from integer sums,
// and finished by the same code on every engine (from the host's pixels, or
// from the counts another engine made: QualityCounts below), so that
// engines agree to the bit.
//
// - grey: OpenCV's cvtColor(..., COLOR_RGB2GRAY) for 8 and 16 bits,
//   (9798 R + 19235 G + 3735 B + 16384) >> 15; an image of one or two channels
//   (gray, gray+alpha): its first channel.
// - laplacian_variance: the population variance of OpenCV's Laplacian of the
//   grey image with ksize 1 (the kernel 0 1 0 / 1 -4 1 / 0 1 0, borders
//   reflected as BORDER_REFLECT_101), as cv2.Laplacian(grey, cv2.CV_64F).var()
//   gives it: the sharpness fastdup and most users compute. Exact from
//   integer sums.
// - rms_contrast: the grey image's population standard deviation over the
//   type's largest value (255, 65535).
// - colourfulness (3 and 4 channels): Hasler and Suesstrunk (2003),
//   sqrt(var(rg) + var(yb)) + 0.3 sqrt(mean(rg)^2 + mean(yb)^2) with
//   rg = R - G and yb = (R + G) / 2 - B signed, in sample units.
// - share_at_min, share_at_max: per channel, the share of samples at the
//   type's lowest and highest value (under- and over-exposure).
// - cleanvision (8-bit images): its image properties as cleanvision 0.3
//   computes them from a PIL image, scores and issues at its default
//   thresholds: brightness (of the channel means) and its percentiles 1, 5,
//   10, 15, 90, 95 and 99 of sqrt(0.241 R^2 + 0.691 G^2 + 0.068 B^2) / 255
//   per pixel (numpy's linear method); dark (score: the 99th, an issue below
//   0.32) and light (1 - the 5th, below 0.05); blurriness (the standard
//   deviation of PIL's FIND_EDGES of the grey image shrunk by PIL's bicubic
//   resize to at most 64 pixels a side) and the blurry score (below 0.29);
//   entropy (PIL's Image.entropy over every channel's histogram) and the low
//   information score (0.1 x entropy, at most 1; below 0.3); the aspect
//   ratio (below 0.35); the size sqrt(w) sqrt(h) for a dataset's odd sizes;
//   grayscale where the image has one or two channels or R = G = B at every
//   pixel (cleanvision itself flags only PIL's mode L).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "common/pil_resample.hpp"
#include "imgstat/engine.hpp"

namespace imgstat {

// Of uint8 and uint16 images (kUnimplemented for other types); rgb: the
// channels holding R, G and B; histograms: an 8-bit image's 256-bin
// histogram of each channel where already counted (else null).
QualityStats measure_quality(const ImageView& image, const uint32_t* rgb,
                             const std::vector<std::array<uint64_t, 256>>* histograms = nullptr);

// Sets result.quality when the request asks for it.
void add_quality(const ImageView& image, const StatsRequest& request, Result& result);

// Host memory measure_quality allocates beside the image, at most: the
// grey plane, a packed copy of unaligned pixels, PIL's copy for the
// thumbnail, each thread's brightness buckets.
uint64_t quality_working_bytes(const Layout& layout, uint32_t threads);

// ---- The 8-bit measures from counts made elsewhere (the GPU's pass) ----

// OpenCV 4's RGB2Gray for 8 and 16 bits: its 15-bit fixed point.
IMGSTAT_HD uint32_t quality_grey(uint32_t r, uint32_t g, uint32_t b) {
  return (9798 * r + 19235 * g + 3735 * b + (1u << 14)) >> 15;
}

// cleanvision's brightness percentiles, exactly: the order of the
// brightness values is the order of the integer keys 241 R^2 + 691 G^2 +
// 68 B^2 (keys one apart differ far more than the floats' rounding), so
// the ranks are found from counts of key buckets, and the values from the
// colours of the pixels in the few buckets holding those ranks.
constexpr int kBrightnessShift = 12;
constexpr uint32_t kBrightnessBuckets = (1000u * 255 * 255 >> kBrightnessShift) + 1;
IMGSTAT_HD uint32_t brightness_key(uint32_t r, uint32_t g, uint32_t b) { return 241 * r * r + 691 * g * g + 68 * b * b; }
// The buckets (ascending, at most 14) holding the percentiles' ranks among
// n pixels, from every bucket's count: each with the rank of its first
// pixel and its pixels.
struct BrightnessBucket {
  uint32_t bucket = 0;
  uint64_t first = 0, count = 0;
};
std::vector<BrightnessBucket> brightness_wanted(const uint64_t* buckets, uint64_t n);
// The ranks themselves (numpy's linear method: the two each percentile
// lies between, ascending), which the buckets' running counts place.
constexpr int kBrightnessRanks = 14;
std::array<uint64_t, kBrightnessRanks> brightness_ranks(uint64_t n);

// The size cleanvision shrinks an image to for its blurriness (at most 64
// pixels a side, PIL's bicubic resize): false where it is not shrunk.
bool blurriness_size(uint64_t width, uint64_t height, int* xs, int* ys);

// What a pass over an 8-bit image of one or three channels counts, in the
// CPU engine's words (see the file's comment): sums over every pixel of the
// grey sample, the Laplacian, R - G, R + G - 2 B and their squares; each
// channel's histogram; colour images: brightness_wanted()'s buckets and the
// colours (r | g << 8 | b << 16) of every pixel in them, any order; the
// blurriness image (PIL's bands R, G, B or L, shrunk to blurriness_size()).
struct QualityCounts {
  int64_t grey = 0, grey_sq = 0, lap = 0, lap_sq = 0, rg = 0, rg_sq = 0, yb2 = 0, yb2_sq = 0;
  bool equal_rgb = true;
  std::vector<std::array<uint64_t, 256>> hist;
  std::vector<BrightnessBucket> wanted;
  std::vector<uint32_t> colours;
  PilImage thumbnail;
};
// The statistics pass's 256-bin histograms (or value counts) of an 8-bit
// image's own channels, where the result has them (the counts the quality
// pass would make): into *out, true.
bool engine_histograms(const Result& result, const Layout& layout, const StatsRequest& request,
                       std::vector<std::array<uint64_t, 256>>* out);
// The measures from them: the bits measure_quality gives the same image.
QualityStats quality_of_counts(const Layout& layout, const uint32_t* rgb, const QualityCounts& counts);

// Whether a sample type has quality measures.
inline bool quality_measured(SampleType t) { return t == SampleType::kUint8 || t == SampleType::kUint16; }

}  // namespace imgstat
