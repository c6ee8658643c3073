// A libjpeg pass over a JPEG before OpenCV decodes it: libjpeg's own
// warnings ("Corrupt JPEG data: ...") are collected instead of printed, and a
// file that ends before its end-of-image marker is caught rather than
// analyzed with libjpeg's gray fill.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace imgstat {

struct JpegCheck {
  bool ok = false;          // libjpeg decoded it (possibly with warnings)
  std::string error;        // libjpeg's message when !ok
  bool truncated = false;   // the data ended before the end-of-image marker
  uint64_t width = 0;
  uint64_t height = 0;
  std::vector<std::string> warnings;
};

// Reads the header only when max_pixels is exceeded (width and height are then
// set and ok is false with an empty error).
JpegCheck check_jpeg(const uint8_t* data, size_t size, uint64_t max_pixels);

}  // namespace imgstat
