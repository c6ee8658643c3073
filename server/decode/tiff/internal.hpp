// The pieces of the TIFF decoder, for its files only: libtiff handles on
// the file's bytes (handle.cpp), the first directory's tags, their verdict
// and the shape they are read in (route.cpp).
#pragma once

#include <tiffio.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "decode/rows.hpp"
#include "imgstat/engine.hpp"

namespace imgstat::tiff {

// OpenCV 4.6 refuses a strip or tile whose buffer reaches 1 GiB, and reads
// an 8-bit one whose RGBA buffer reaches 95% of that line by line instead.
constexpr uint64_t kOpenCvUnitBytes = uint64_t{1} << 30;
constexpr uint64_t kOpenCvRgbaUnitBytes = kOpenCvUnitBytes * 95 / 100;

// Tuning. A band holds whole strips or tile rows: at least kBandBytes and
// enough units to give each core this many, but no more than kMaxBandBytes
// (strips so large that two would pass it are read a line at a time, on one
// core, when their samples need no conversion).
constexpr uint32_t kUnitsPerThread = 1;
constexpr uint64_t kMaxBandBytes = uint64_t{64} << 20;
// A libtiff handle: its directory, strip arrays and codec state.
constexpr uint64_t kHandleBytes = uint64_t{256} << 10;

// The file's bytes, read in place: libtiff maps them (no copy of a strip
// before it is decompressed).
struct Source {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  uint64_t pos = 0;
};

// One thread's libtiff handle on the file, with its own error handler (libtiff's
// global one is OpenCV's once its codecs are loaded) and its buffer.
struct Handle {
  Source source;
  TIFF* tif = nullptr;
  std::string error;  // libtiff's first error on this handle
  std::vector<uint8_t> buffer;
  uint64_t page = 0;  // the offset of the directory read now
  Handle() = default;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() {
    if (tif) TIFFClose(tif);
  }
};

// A handle on the file (LogL set to libtiff's float luminance), or null
// where libtiff cannot open it.
std::unique_ptr<Handle> open_handle(const uint8_t* data, size_t size);
// The directory at `offset` (a page's, TIFFCurrentDirOffset) made the
// handle's; false where libtiff cannot read it.
bool select_page(Handle& h, uint64_t offset);

// How the samples become OpenCV's pixels.
enum class Read {
  kRgba,  // TIFFReadRGBAStrip/Tile, then reduced to the channels (as OpenCV)
  kRaw,   // the samples as they are (TIFFReadEncodedStrip/Tile)
};

// libtiff's RGBA reader takes one extra sample as associated alpha, an
// unspecified one included.
bool associated_alpha(TIFF* tif);
std::string photometric_name(uint16_t p);

// The tags of the first directory that decide how it is read.
struct Tags {
  uint32_t width = 0, height = 0;
  bool has_photometric = false;
  uint16_t photometric = 0;
  uint16_t bits = 8, samples = 1, format = SAMPLEFORMAT_UINT, orientation = ORIENTATION_TOPLEFT;
  uint16_t planar = PLANARCONFIG_CONTIG, compression = COMPRESSION_NONE;
  bool gray = false;
  bool associated_alpha = false;  // one extra sample, associated (or unspecified) alpha
  bool samples_tagged = false;    // SamplesPerPixel given (libtiff's default is 1, OpenCV's 3 but for gray)
  // The bits OpenCV 4.6 reads at: above 8 for other photometrics, or other
  // sample counts, it reads through libtiff's 8-bit RGBA image.
  uint16_t opencv_bits = 8;
};

Tags tags_of(TIFF* tif);
// What neither the direct path nor OpenCV 4.6 reads to the file's own
// pixels, in words; empty: not refused.
std::string refusal_of(const Tags& t);

// The first directory, as OpenCV 4.6 reads it, and how it will be read.
struct Shape {
  uint32_t width = 0, height = 0;
  uint32_t samples = 0;  // in the file, a pixel
  bool tiled = false;
  bool planar = false;  // one plane a sample (PlanarConfiguration 2), interleaved here
  uint32_t unit_width = 0, unit_height = 0;  // a tile's, or a strip's (the image's width)
  uint32_t channels = 0;                     // given to the sink
  SampleType type = SampleType::kUint8;
  uint32_t sample_bytes = 1;
  Read read = Read::kRgba;
  bool logl = false;          // LogL: libtiff's float luminance (SGILOGDATAFMT_FLOAT)
  bool line_by_line = false;  // raw strips too large for a band: TIFFReadScanline on one core

  uint64_t row_bytes() const { return uint64_t{width} * channels * sample_bytes; }
  uint32_t unit_rows() const { return tiled ? unit_height : std::min(unit_height, height); }
  uint32_t units_across() const { return tiled ? (width + unit_width - 1) / unit_width : 1; }
  // A unit's buffer when it is not decoded in place.
  uint64_t unit_buffer_bytes() const {
    const uint64_t pixels = uint64_t{unit_width} * (tiled ? unit_height : unit_rows());
    return read == Read::kRgba ? pixels * 4 : pixels * samples * sample_bytes;
  }
};

// False: not taken (OpenCV decodes it whole, or refuses it).
bool shape_of(TIFF* tif, const Tags& t, Shape* s);
// What OpenCV 4.6 holds to decode a file the direct path leaves to it.
uint64_t opencv_memory_bytes(TIFF* tif, const Tags& t);

uint32_t arena_threads();
// The band's rows, whether strips go line by line, and the memory a decode
// holds at once.
void plan_reading(Shape& s, uint32_t threads, uint32_t* band_rows_out, uint64_t* memory);

}  // namespace imgstat::tiff
