// libjpeg's passes over a JPEG. The header pass reads what the file declares
// and refuses a file far too small to hold it; the check pass entropy-decodes
// every block (at 1/8 scale, cheap) so that libjpeg's warnings ("Corrupt JPEG
// data: ...") are collected instead of printed, and a file whose data stops
// early is caught rather than analyzed with libjpeg's gray fill; the decode
// pass does the same while it makes the pixels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "decode/rows.hpp"

namespace imgstat {

struct JpegHeader {
  uint64_t width = 0;
  uint64_t height = 0;
  uint32_t components = 0;
  bool progressive = false;
  bool arithmetic = false;
  uint64_t blocks = 0;  // 8x8 blocks over all components
  // A baseline file with restart markers that decode_jpeg may cut into runs
  // of MCU rows decoded on several cores (jpeg/intervals.hpp): the rows its
  // bands should hold, and the cores; 0 where it decodes in one piece.
  uint32_t interval_band_rows = 0;
  uint32_t interval_threads = 0;
};

// Throws imgstat::Error: kResourceExhausted beyond max_pixels;
// kInvalidArgument for a header libjpeg refuses, or for Huffman-coded data of fewer bits than one per block of the largest
// component: every block's DC coefficient needs a code of at least one bit,
// so such a file cannot be whole, whatever size it declares.
JpegHeader read_jpeg_header(const uint8_t* data, size_t size, uint64_t max_pixels);

// Bytes libjpeg holds for the whole image's coefficients: progressive files
// are decoded from such a buffer; baseline files are decoded row by row.
uint64_t jpeg_coefficient_bytes(const JpegHeader& h);

// libjpeg's verdict, in classes that both decoders answer alike: corrupt
// data (a bad Huffman code, a wrong restart marker, inconsistent progressive
// scans) is refused; data that ends early (the file, or a segment at a
// marker, before its last block) is refused unless the caller allows it;
// other warnings (extraneous bytes before a marker) ride on an OK answer.
struct JpegCheck {
  bool ok = false;          // libjpeg decoded it (possibly with warnings)
  std::string error;        // libjpeg's message when !ok
  bool truncated = false;   // the data ended (or met a marker) before the last block
  bool corrupt = false;
  std::string corrupt_reason;  // libjpeg's first such warning
  std::vector<std::string> warnings;
  uint32_t runs = 0;  // decode_jpeg: runs between restart markers decoded apart (0: one pass)
};

// libjpeg's slow Huffman path warns of every bad code, its fast path of
// none: the check feeds the data in pieces too small for the fast path, so
// that its verdict never depends on where in the file a bad code lies.
// cancelled, when set, is polled between passes and rows; true stops the
// pass (ok false, error "cancelled").
JpegCheck check_jpeg(const uint8_t* data, size_t size, const std::function<bool()>& cancelled = {});

// The check and the decode in one pass: libjpeg-turbo decodes the file as
// OpenCV configures it (fancy upsampling, the accurate integer IDCT) into
// R,G,B or Gray rows (3 or 1 channels) handed to sink a band at a time; the
// verdict is check_jpeg's, since the data is fed in the same small pieces.
// Not for four-component (CMYK, YCCK) files: *taken false, nothing decoded.
// A file whose restart markers allow it decodes in runs on several cores,
// into bands of JpegHeader::interval_band_rows where the sink gives them;
// should a run warn of anything, *taken is false and the whole-image path,
// with its check, answers.
// On an error (ok false) the rows are incomplete. The sink may throw.
JpegCheck decode_jpeg(const uint8_t* data, size_t size, const std::function<bool()>& cancelled, const RowSink& sink,
                      bool* taken);

}  // namespace imgstat
