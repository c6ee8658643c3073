// Hashes of a whole image for finding duplicates (StatsRequest::hashes,
// ImageHashes), from the host's pixels, or from what another engine made:
// the pixel hash's pieces (common/xxh3_long.hpp), the perceptual hash's
// grey thumbnail.
//
// - pixels: XXH3-128 (xxHash 0.8) of the decoded image: its width and
//   height (uint64, little-endian), channels (uint32), the sample type's
//   name with its NUL ("uint8", ...), then every sample row by row, packed,
//   in the reported channel order (R, G, B, then alpha; gray), little-endian.
//   Equal pixels give equal hashes whatever the file's format or the
//   decoder's channel order.
// - phash (8-bit images): imagehash's phash at its defaults (hash_size 8,
//   highfreq_factor 4): PIL's convert("L") (RGB and RGBA: ITU-R 601-2 in
//   16-bit fixed point; gray+alpha: the gray), PIL's LANCZOS resize to 32x32,
//   scipy.fftpack's DCT-II (unnormalized) along the columns and then the
//   rows, the top-left 8x8 coefficients against their median (numpy's: the
//   mean of the middle two): bit 63 - i set where coefficient i (row-major)
//   is above it, as imagehash's hex string reads. The DCT here is taken in
//   long double directly, scipy's by FFT in double: a coefficient within
//   about 1e-9 of the median could round to the other side (a flat image's
//   coefficients are all 0 here, scipy's noise).
#pragma once

#include <cstdint>
#include <vector>

#include "common/pil_resample.hpp"
#include "imgstat/engine.hpp"

namespace imgstat {

// Of any sample type; the perceptual hash of 8-bit images only.
ImageHashes hash_image(const ImageView& image, const uint32_t* rgb);

// Its parts, for an engine that shrinks the grey image elsewhere (the GPU):
// the pixels' hash, and the perceptual hash of the grey image shrunk to
// kPhashSide x kPhashSide (PIL's L, then its LANCZOS resize).
constexpr int kPhashSide = 32;
void pixel_hash(const ImageView& image, const uint32_t* rgb, uint8_t out[16]);
// For an engine that hashes the pixels elsewhere (common/xxh3_long.hpp):
// the bytes hashed before the samples (size, channels, type name), XXH3's
// default secret (kXxh3SecretSize bytes), and the hash's 16 bytes from its
// low and high halves.
std::vector<uint8_t> pixel_hash_header(const Layout& layout);
const uint8_t* xxh3_default_secret();
void pixel_hash_bytes(uint64_t low, uint64_t high, uint8_t out[16]);
uint64_t perceptual_hash_of(const PilImage& small);

// Host memory hash_image allocates: a reordered row, the grey plane.
inline uint64_t hashes_working_bytes(const Layout& layout) { return layout.row_bytes() + layout.pixels(); }

// Sets result.hashes when the request asks for them.
void add_hashes(const ImageView& image, const StatsRequest& request, Result& result);

}  // namespace imgstat
