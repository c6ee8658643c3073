// What a file says about itself beside its pixels: bit depth, colour type,
// palette, JPEG quality and chroma subsampling, ICC profile, EXIF
// orientation (reported, never applied). Read from the headers and metadata
// segments of PNG, JPEG and WebP files; untrusted input, every length
// checked against what is there, nothing allocated from a declared size.
#pragma once

#include <functional>

#include <cstddef>
#include <cstdint>
#include <string>

namespace imgstat {

struct Facts {
  uint32_t bit_depth = 0;    // per sample as stored (1, 2, 4, 8, 12, 16); 0: unknown
  std::string color_type;    // "gray", "gray+alpha", "rgb", "rgba", "palette", "ycbcr", "cmyk", "ycck"; empty: unknown
  uint32_t palette_size = 0; // palette entries (PNG PLTE)
  uint32_t jpeg_quality = 0; // 1 to 100, estimated from the quantization tables; 0: not a JPEG or no estimate
  std::string chroma_subsampling;  // JPEG: "4:4:4", "4:2:2", "4:2:0", "4:4:0", "4:1:1"; empty otherwise
  bool progressive = false;  // JPEG progressive, PNG interlaced
  bool icc_profile = false;
  uint32_t exif_orientation = 0;  // 1 to 8 as the EXIF tag says; 0: none
  // An animation's frames (APNG's acTL, WebP's ANMF chunks, GIF's image
  // descriptors); 0: not an animation, or not counted.
  uint32_t frames = 0;
  uint64_t duration_ms = 0;  // an animation's frame delays, summed
};

// Facts of an encoded file, as far as its format tells them; never throws:
// what cannot be read is left unknown. release, if given, hears which bytes
// a long walk (a PNG's chunks) is done with (DecodeOptions::release).
Facts read_facts(const uint8_t* data, size_t size, const std::function<void(uint64_t, uint64_t)>& release = {});

// EXIF orientation from a TIFF-structured EXIF block (starting at its
// "II*\0" or "MM\0*" header); 0 when absent or unreadable.
uint32_t exif_orientation(const uint8_t* data, size_t size);

// IJG quality (1 to 100) whose scaled standard luminance table is nearest
// the given one (64 values in zigzag order); 0 when none is near.
uint32_t estimate_jpeg_quality(const uint16_t* luma_table);

}  // namespace imgstat
