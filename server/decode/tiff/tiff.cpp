#include "decode/tiff/tiff.hpp"

#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>
#include <tiffio.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "imgstat/error.hpp"

namespace imgstat {
namespace {

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

tmsize_t read_bytes(thandle_t h, void* buf, tmsize_t n) {
  auto* s = static_cast<Source*>(h);
  if (n <= 0) return 0;
  const uint64_t k = std::min<uint64_t>(static_cast<uint64_t>(n), s->size - std::min(s->pos, s->size));
  if (k) std::memcpy(buf, s->data + s->pos, k);
  s->pos += k;
  return static_cast<tmsize_t>(k);
}
tmsize_t write_bytes(thandle_t, void*, tmsize_t) { return 0; }
toff_t seek_bytes(thandle_t h, toff_t offset, int whence) {
  auto* s = static_cast<Source*>(h);
  uint64_t p = s->pos;
  if (whence == SEEK_SET) p = offset;
  if (whence == SEEK_CUR) p += offset;
  if (whence == SEEK_END) p = s->size + offset;
  s->pos = std::min<uint64_t>(p, s->size);
  return s->pos;
}
int close_bytes(thandle_t) { return 0; }
toff_t size_of_bytes(thandle_t h) { return static_cast<Source*>(h)->size; }
int map_bytes(thandle_t h, void** base, toff_t* size) {
  auto* s = static_cast<Source*>(h);
  *base = const_cast<uint8_t*>(s->data);  // libtiff only reads a file opened "r"
  *size = s->size;
  return 1;
}
void unmap_bytes(thandle_t, void*, toff_t) {}

// One thread's libtiff handle on the file, with its own error handler (libtiff's
// global one is OpenCV's once its codecs are loaded) and its buffer.
struct Handle {
  Source source;
  TIFF* tif = nullptr;
  std::string error;  // libtiff's first error on this handle
  std::vector<uint8_t> buffer;
  Handle() = default;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() {
    if (tif) TIFFClose(tif);
  }
};

int record_error(TIFF*, void* user, const char* module, const char* fmt, va_list ap) {
  auto* h = static_cast<Handle*>(user);
  if (h->error.empty()) {
    char text[400];
    std::vsnprintf(text, sizeof text, fmt, ap);
    h->error = (module && *module ? std::string(module) + ": " : std::string()) + text;
  }
  return 1;  // handled: not passed on to the global handler
}
// OpenCV 4.6 prints libtiff's warnings nowhere; neither do we.
int drop_warning(TIFF*, void*, const char*, const char*, va_list) { return 1; }

std::unique_ptr<Handle> open_handle(const uint8_t* data, size_t size) {
  auto h = std::make_unique<Handle>();
  h->source = Source{data, size, 0};
  TIFFOpenOptions* options = TIFFOpenOptionsAlloc();
  if (!options) return nullptr;
  TIFFOpenOptionsSetErrorHandlerExtR(options, record_error, h.get());
  TIFFOpenOptionsSetWarningHandlerExtR(options, drop_warning, h.get());
  h->tif = TIFFClientOpenExt("TIFF", "r", &h->source, read_bytes, write_bytes, seek_bytes, close_bytes, size_of_bytes,
                             map_bytes, unmap_bytes, options);
  TIFFOpenOptionsFree(options);
  if (!h->tif) return nullptr;
  // LogL's luminance as libtiff's floats (cd/m^2), not its 8-bit tone map.
  uint16_t photometric = 0;
  if (TIFFGetField(h->tif, TIFFTAG_PHOTOMETRIC, &photometric) && photometric == PHOTOMETRIC_LOGL)
    TIFFSetField(h->tif, TIFFTAG_SGILOGDATAFMT, SGILOGDATAFMT_FLOAT);
  return h;
}

// How the samples become OpenCV's pixels.
enum class Read {
  kRgba,  // TIFFReadRGBAStrip/Tile, then reduced to the channels (as OpenCV)
  kRaw,   // the samples as they are (TIFFReadEncodedStrip/Tile)
};

bool associated_alpha(TIFF* tif) {
  uint16_t n = 0;
  uint16_t* info = nullptr;
  if (!TIFFGetField(tif, TIFFTAG_EXTRASAMPLES, &n, &info) || n != 1 || !info) return false;
  // libtiff's RGBA reader takes an unspecified fourth sample as associated alpha.
  return info[0] == EXTRASAMPLE_ASSOCALPHA || info[0] == EXTRASAMPLE_UNSPECIFIED;
}

std::string photometric_name(uint16_t p) {
  switch (p) {
    case PHOTOMETRIC_MINISWHITE: return "MinIsWhite";
    case PHOTOMETRIC_MINISBLACK: return "MinIsBlack";
    case PHOTOMETRIC_RGB: return "RGB";
    case PHOTOMETRIC_PALETTE: return "Palette";
    case PHOTOMETRIC_MASK: return "Mask";
    case PHOTOMETRIC_SEPARATED: return "Separated";
    case PHOTOMETRIC_YCBCR: return "YCbCr";
    case PHOTOMETRIC_CIELAB: return "CIELab";
    case PHOTOMETRIC_ICCLAB: return "ICCLab";
    case PHOTOMETRIC_ITULAB: return "ITULab";
    case PHOTOMETRIC_CFA: return "CFA";
    case PHOTOMETRIC_LOGL: return "LogL";
    case PHOTOMETRIC_LOGLUV: return "LogLuv";
  }
  return "photometric " + std::to_string(p);
}

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

Tags tags_of(TIFF* tif) {
  Tags t;
  TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &t.width);
  TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &t.height);
  t.has_photometric = TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &t.photometric) != 0;
  t.gray = t.photometric == PHOTOMETRIC_MINISWHITE || t.photometric == PHOTOMETRIC_MINISBLACK;
  t.samples = t.gray ? 1 : 3;
  if (!TIFFGetField(tif, TIFFTAG_BITSPERSAMPLE, &t.bits)) t.bits = 1;
  t.samples_tagged = TIFFGetField(tif, TIFFTAG_SAMPLESPERPIXEL, &t.samples) != 0;
  TIFFGetField(tif, TIFFTAG_SAMPLEFORMAT, &t.format);
  TIFFGetField(tif, TIFFTAG_ORIENTATION, &t.orientation);
  TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &t.planar);
  TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &t.compression);
  t.associated_alpha = associated_alpha(tif);
  t.opencv_bits = t.bits;
  if (t.bits > 8 && (t.photometric > PHOTOMETRIC_RGB || (t.samples != 1 && t.samples != 3 && t.samples != 4)))
    t.opencv_bits = 8;
  return t;
}

// What neither the direct path nor OpenCV 4.6 reads to the file's own
// pixels: OpenCV refuses it with words a caller cannot act on, or answers
// with pixels that are not the file's (a conversion's bytes read as signed,
// a planar file's first plane read as all of them). Empty: not refused.
std::string refusal_of(const Tags& t) {
  if (!t.has_photometric) return "the first page has no PhotometricInterpretation tag";
  if (!t.samples_tagged && !t.gray)
    return "a " + photometric_name(t.photometric) + " image without a SamplesPerPixel tag (libtiff reads one sample a "
           "pixel, OpenCV three) is not supported";
  if (t.samples < 1 || t.samples > 4)
    return std::to_string(t.samples) + " samples a pixel are not supported (1 to 4 are)";
  if (t.format == SAMPLEFORMAT_COMPLEXINT || t.format == SAMPLEFORMAT_COMPLEXIEEEFP)
    return "complex samples are not supported";
  if (t.format == SAMPLEFORMAT_VOID) return "samples of undefined format (SampleFormat 4) are not supported";
  if (t.format != SAMPLEFORMAT_UINT && t.format != SAMPLEFORMAT_INT && t.format != SAMPLEFORMAT_IEEEFP)
    return "SampleFormat " + std::to_string(t.format) + " is not supported";
  if (t.photometric == PHOTOMETRIC_LOGLUV) {
    if (t.samples != 3) return "LogLuv images of " + std::to_string(t.samples) + " samples are not supported";
    return "";  // OpenCV's: XYZ as float, to RGB
  }
  if (t.photometric == PHOTOMETRIC_LOGL) {
    if (t.samples != 1) return "LogL images of " + std::to_string(t.samples) + " samples are not supported";
    if (t.orientation != ORIENTATION_TOPLEFT)
      return "LogL images with orientation " + std::to_string(t.orientation) + " are not supported";
    return "";  // the direct path's: luminance as float
  }
  const std::string kind = photometric_name(t.photometric);
  if (t.format == SAMPLEFORMAT_IEEEFP) {
    if (t.bits == 16 || t.bits == 24)
      return std::to_string(t.bits) + "-bit floating-point samples are not supported (32 and 64 are)";
    if (t.bits != 32 && t.bits != 64) return std::to_string(t.bits) + "-bit floating-point samples are not supported";
    if (t.opencv_bits == 8) return "floating-point " + kind + " images of " + std::to_string(t.samples) +
                                   " samples are not supported";
  } else {
    if (t.bits == 32 || t.bits == 64)
      return std::to_string(t.bits) + "-bit integer samples are not supported (8 and 16 are, and 32- and 64-bit floats)";
    const uint16_t b = t.opencv_bits;
    if (!(b == 1 || b == 2 || b == 4 || b == 8 || b == 10 || b == 12 || b == 14 || b == 16))
      return std::to_string(t.bits) + "-bit samples are not supported";
    // Read as libtiff's RGBA image: its bytes are unsigned whatever the file's
    // samples were, unless they pass through unchanged (8-bit gray, with or
    // without alpha, and RGB, with associated alpha or none).
    const bool through = t.bits == 8 && ((t.photometric == PHOTOMETRIC_MINISBLACK && t.samples <= 2) ||
                                         (t.photometric == PHOTOMETRIC_RGB && (t.samples == 3 || (t.samples == 4 && t.associated_alpha))));
    if (t.format == SAMPLEFORMAT_INT && b <= 8 && !through)
      return "signed " + std::to_string(t.bits) + "-bit " + kind + " samples are not supported (signed 8-bit "
             "gray and RGB are)";
  }
  return "";
}

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

// A strip's or tile's size as OpenCV 4.6 takes it (grfmt_tiff.cpp): false
// where it would refuse it.
bool unit_of(TIFF* tif, const Tags& t, uint32_t* uw, uint32_t* uh) {
  *uw = t.width;
  *uh = 0;
  if (TIFFIsTiled(tif)) {
    if (!TIFFGetField(tif, TIFFTAG_TILEWIDTH, uw) || !TIFFGetField(tif, TIFFTAG_TILELENGTH, uh)) return false;
  } else {
    TIFFGetField(tif, TIFFTAG_ROWSPERSTRIP, uh);
  }
  if (*uw == 0) *uw = t.width;
  if (*uh == 0 || (!TIFFIsTiled(tif) && *uh == UINT32_MAX)) *uh = t.height;
  return *uw <= (1u << 24) && *uh <= (1u << 24);
}

// False: not taken (OpenCV decodes it whole, or refuses it).
bool shape_of(TIFF* tif, const Tags& t, Shape* s) {
  if (t.width == 0 || t.height == 0 || !t.has_photometric || !refusal_of(t).empty()) return false;
  if (t.orientation != ORIENTATION_TOPLEFT) return false;
  const uint16_t photometric = t.photometric, samples = t.samples, format = t.format;
  const bool gray = t.gray;
  s->width = t.width;
  s->height = t.height;
  s->samples = samples;
  s->tiled = TIFFIsTiled(tif) != 0;
  uint32_t uw, uh;
  if (!unit_of(tif, t, &uw, &uh)) return false;
  if (!s->tiled) uw = t.width;
  s->unit_width = uw;
  s->unit_height = uh;
  s->planar = t.planar == PLANARCONFIG_SEPARATE && samples > 1;
  const uint64_t unit_pixels = uint64_t{uw} * uh;
  if (photometric == PHOTOMETRIC_LOGLUV) return false;  // OpenCV's
  if (photometric == PHOTOMETRIC_LOGL) {
    if ((t.compression != COMPRESSION_SGILOG && t.compression != COMPRESSION_SGILOG24) || s->planar) return false;
    s->logl = true;
    s->type = SampleType::kFloat32;
    s->sample_bytes = 4;
    s->channels = 1;
    s->read = Read::kRaw;
    return unit_pixels * 4 < kOpenCvRgbaUnitBytes;
  }
  const uint16_t bits = t.opencv_bits;
  if (bits == 2 || bits == 4) {
    // OpenCV 4.6 refuses these; libtiff's RGBA image of them is what it
    // gives 1-bit images (0 to 255), and these are taken only where it
    // reads them: gray and palette.
    if (!gray && photometric != PHOTOMETRIC_PALETTE) return false;
  } else if (bits != 8 && bits != 16 && bits != 32 && bits != 64) {
    return false;
  }
  if (bits <= 8) {
    s->type = format == SAMPLEFORMAT_INT ? SampleType::kInt8 : SampleType::kUint8;
    s->sample_bytes = 1;
    s->channels = gray ? 1 : photometric == PHOTOMETRIC_PALETTE ? 3 : samples;
    if (s->channels == 2) return false;
    if (unit_pixels * 4 >= kOpenCvRgbaUnitBytes) return false;
    char why[1024];
    if (!TIFFRGBAImageOK(tif, why)) return false;
    const bool same_samples = t.bits == 8 && ((photometric == PHOTOMETRIC_MINISBLACK && samples == 1) ||
                                              (photometric == PHOTOMETRIC_RGB && samples == 3) ||
                                              (photometric == PHOTOMETRIC_RGB && samples == 4 && associated_alpha(tif)));
    const bool coded_colour = t.compression == COMPRESSION_JPEG || t.compression == COMPRESSION_OJPEG;
    s->read = same_samples && !coded_colour ? Read::kRaw : Read::kRgba;
  } else {
    // Planar: OpenCV 4.6 reads the first plane's strips as if they held every
    // sample (and memory it never wrote); here each plane is read.
    s->sample_bytes = bits / 8;
    if (bits == 16) {
      if (format != SAMPLEFORMAT_UINT && format != SAMPLEFORMAT_INT) return false;
      s->type = format == SAMPLEFORMAT_INT ? SampleType::kInt16 : SampleType::kUint16;
      if (gray ? samples != 1 : (photometric != PHOTOMETRIC_RGB || samples < 3)) return false;
    } else {
      if (format != SAMPLEFORMAT_IEEEFP) return false;
      s->type = bits == 32 ? SampleType::kFloat32 : SampleType::kFloat64;
    }
    s->channels = samples;
    if (unit_pixels * samples * s->sample_bytes >= kOpenCvRgbaUnitBytes) return false;
    s->read = Read::kRaw;
  }
  return true;
}

// What OpenCV 4.6 holds to decode a file the direct path leaves to it: the
// image (twice when its orientation transposes it) and one strip or tile
// buffer, with its unpacked copy for 10-, 12- and 14-bit samples.
uint64_t opencv_memory_bytes(TIFF* tif, const Tags& t) {
  uint32_t uw, uh;
  if (!unit_of(tif, t, &uw, &uh)) return 0;  // refused before it allocates
  const uint64_t ncn = t.samples, bpp = t.opencv_bits;
  uint64_t depth = bpp <= 8 ? 1 : bpp <= 16 ? 2 : bpp <= 32 ? 4 : 8;
  uint64_t channels = ncn;
  if (bpp <= 16 && t.gray) channels = 1;
  if (bpp <= 8 && t.photometric == PHOTOMETRIC_PALETTE) channels = 3;
  if (t.photometric == PHOTOMETRIC_LOGLUV && ncn == 3) depth = 4;
  const uint64_t image = uint64_t{t.width} * t.height * channels * depth;
  uint64_t unit;
  if (depth == 1) {
    unit = uint64_t{uw} * uh * 4;  // libtiff's RGBA raster
  } else {
    const uint64_t file_bits = t.photometric == PHOTOMETRIC_LOGLUV ? 32 : bpp;
    unit = uint64_t{uh} * ((ncn * uw * file_bits + 7) / 8);
    if (file_bits < depth * 8) unit += uint64_t{uh} * ((ncn * uw * depth * 8 + 7) / 8);
  }
  return image * (t.orientation >= ORIENTATION_LEFTTOP ? 2 : 1) + unit;
}

uint32_t arena_threads() { return static_cast<uint32_t>(std::max(1, tbb::this_task_arena::max_concurrency())); }

// Units (strips or tile rows) a band holds.
uint32_t units_per_band(const Shape& s, uint32_t threads) {
  const uint64_t unit_bytes = uint64_t{s.unit_rows()} * s.row_bytes();
  const uint64_t across = s.units_across();
  const uint64_t want = std::max((kBandBytes + unit_bytes - 1) / unit_bytes,
                                 (uint64_t{kUnitsPerThread} * threads + across - 1) / across);
  const uint64_t cap = std::max<uint64_t>(1, kMaxBandBytes / unit_bytes);
  return static_cast<uint32_t>(std::min(want, cap));
}

void plan_reading(Shape& s, uint32_t threads, uint32_t* band_rows_out, uint64_t* memory) {
  const uint64_t unit_bytes = uint64_t{s.unit_rows()} * s.row_bytes();
  s.line_by_line = s.read == Read::kRaw && !s.tiled && !s.planar && unit_bytes * 2 > kMaxBandBytes;
  uint32_t rows;
  uint64_t in_flight = 0;
  if (s.line_by_line) {
    rows = band_rows(s.row_bytes(), s.height);
  } else {
    const uint32_t k = units_per_band(s, threads);
    rows = static_cast<uint32_t>(std::min<uint64_t>(s.height, uint64_t{s.unit_rows()} * k));
    // Raw strips decode in place; tiles, planes and RGBA units through a buffer each.
    const bool buffered = s.tiled || s.planar || s.read == Read::kRgba;
    in_flight = buffered ? std::min<uint64_t>(threads, uint64_t{k} * s.units_across()) : 0;
  }
  *band_rows_out = rows;
  *memory = 2 * uint64_t{rows} * s.row_bytes() + in_flight * s.unit_buffer_bytes() +
            uint64_t{s.line_by_line ? 1 : threads} * kHandleBytes;
}

// RGBA pixels (libtiff's raster: R,G,B,A bytes) to the channels, as OpenCV's
// icvCvt_BGRA2* functions reduce them (then reported R,G,B(,A)).
void from_rgba(const uint8_t* rgba, uint8_t* out, uint32_t pixels, uint32_t channels) {
  if (channels == 4) {
    std::memcpy(out, rgba, size_t{pixels} * 4);
  } else if (channels == 3) {
    for (uint32_t i = 0; i < pixels; ++i, rgba += 4, out += 3) {
      out[0] = rgba[0];
      out[1] = rgba[1];
      out[2] = rgba[2];
    }
  } else {
    // OpenCV's gray weights (14 bits), red first as its swap puts it.
    constexpr int kR = 4899, kG = 9617, kB = (1 << 14) - kR - kG;
    for (uint32_t i = 0; i < pixels; ++i, rgba += 4)
      out[i] = static_cast<uint8_t>((rgba[0] * kR + rgba[1] * kG + rgba[2] * kB + (1 << 13)) >> 14);
  }
}

// One strip or tile of a band: decoded (into place where it can be), its rows
// inside [y0, y0 + n) written to band. False: libtiff refused it.
bool decode_unit(Handle& h, const Shape& s, uint32_t unit_row, uint32_t column, uint8_t* band, uint32_t y0,
                 uint32_t n) {
  TIFF* tif = h.tif;
  const uint64_t row_bytes = s.row_bytes();
  const uint32_t r0 = unit_row * s.unit_height;
  const uint32_t rows = std::min(s.unit_height, s.height - r0);  // of the unit, in the image
  const uint32_t x0 = column * s.unit_width;
  const uint32_t cols = std::min(s.unit_width, s.width - x0);
  const uint32_t first = std::max(r0, y0), last = std::min(r0 + rows, y0 + n);  // rows to write
  const size_t pixel_bytes = size_t{s.channels} * s.sample_bytes;
  h.error.clear();  // what libtiff said before (opening the file) is not this unit's
  if (s.read == Read::kRaw && !s.tiled && !s.planar && first == r0 && last == r0 + rows) {
    const tmsize_t want = static_cast<tmsize_t>(uint64_t{rows} * row_bytes);
    return TIFFReadEncodedStrip(tif, unit_row, band + uint64_t{r0 - y0} * row_bytes, want) == want;
  }
  h.buffer.resize(s.unit_buffer_bytes());
  uint8_t* buf = h.buffer.data();
  if (s.read == Read::kRaw && s.planar) {
    // Each plane's unit into its part of the buffer, then interleaved.
    const uint32_t unit_rows = s.tiled ? s.unit_height : rows;
    const size_t plane_row = size_t{s.unit_width} * s.sample_bytes, plane = plane_row * unit_rows;
    const uint32_t strips_per_plane = (s.height + s.unit_height - 1) / s.unit_height;
    for (uint32_t p = 0; p < s.samples; ++p) {
      const tmsize_t want = static_cast<tmsize_t>(plane);
      const tmsize_t got =
          s.tiled ? TIFFReadEncodedTile(tif, TIFFComputeTile(tif, x0, r0, 0, static_cast<uint16_t>(p)), buf + p * plane, want)
                  : TIFFReadEncodedStrip(tif, p * strips_per_plane + unit_row, buf + p * plane, want);
      if (got != want) return false;
    }
    const uint32_t sb = s.sample_bytes;
    for (uint32_t y = first; y < last; ++y) {
      uint8_t* out = band + uint64_t{y - y0} * row_bytes + size_t{x0} * pixel_bytes;
      const uint8_t* in = buf + size_t{y - r0} * plane_row;
      for (uint32_t x = 0; x < cols; ++x)
        for (uint32_t p = 0; p < s.samples; ++p, out += sb) std::memcpy(out, in + p * plane + size_t{x} * sb, sb);
    }
    return true;
  }
  if (s.read == Read::kRaw) {
    const tmsize_t want = static_cast<tmsize_t>(s.tiled ? h.buffer.size() : uint64_t{rows} * row_bytes);
    const tmsize_t got = s.tiled ? TIFFReadEncodedTile(tif, TIFFComputeTile(tif, x0, r0, 0, 0), buf, want)
                                 : TIFFReadEncodedStrip(tif, unit_row, buf, want);
    if (got != want) return false;
    const size_t unit_row_bytes = size_t{s.unit_width} * pixel_bytes;
    for (uint32_t y = first; y < last; ++y)
      std::memcpy(band + uint64_t{y - y0} * row_bytes + size_t{x0} * pixel_bytes, buf + size_t{y - r0} * unit_row_bytes,
                  size_t{cols} * pixel_bytes);
    return true;
  }
  // libtiff's raster runs bottom-up: its row i is the unit's row rows-1-i
  // (a tile's rows start after its unused ones).
  // OpenCV's TIFFReadRGBAStrip/Tile carry on past a unit libtiff cannot
  // read, and answer with whatever the buffer held: here that unit fails
  // (what libtiff says while it reads a unit it then reads is no failure).
  uint32_t* raster = reinterpret_cast<uint32_t*>(buf);
  if (!(s.tiled ? TIFFReadRGBATileExt(tif, x0, r0, raster, 1) : TIFFReadRGBAStripExt(tif, r0, raster, 1))) return false;
  const uint8_t* start = buf + (s.tiled ? size_t{s.unit_height - rows} * s.unit_width * 4 : 0);
  for (uint32_t y = first; y < last; ++y) {
    const uint8_t* src = start + size_t{r0 + rows - 1 - y} * s.unit_width * 4;
    from_rgba(src, band + uint64_t{y - y0} * row_bytes + size_t{x0} * pixel_bytes, cols, s.channels);
  }
  return true;
}

}  // namespace

TiffPlan plan_tiff(const uint8_t* data, size_t size) {
  TiffPlan out;
  const std::unique_ptr<Handle> h = open_handle(data, size);
  if (!h) return out;  // OpenCV gives libtiff's verdict
  const Tags t = tags_of(h->tif);
  out.refusal = refusal_of(t);
  if (!out.refusal.empty()) {
    out.route = TiffRoute::kRefused;
    return out;
  }
  Shape s;
  if (!shape_of(h->tif, t, &s)) {
    // What OpenCV would read wrong, that the direct path does not take.
    if (t.planar == PLANARCONFIG_SEPARATE && t.samples > 1 && t.opencv_bits > 8)
      out.refusal = "planar (separate) " + std::to_string(t.bits) + "-bit " + photometric_name(t.photometric) +
                    " images are read only top-left, as gray, RGB or RGBA, in strips or tiles under 1 GiB";
    else if (t.photometric == PHOTOMETRIC_LOGL)
      out.refusal = "LogL images are read only SGILog-coded, top-left, in strips or tiles under 1 GiB";
    if (!out.refusal.empty()) {
      out.route = TiffRoute::kRefused;
      return out;
    }
    out.memory_bytes = opencv_memory_bytes(h->tif, t);
    return out;
  }
  out.route = TiffRoute::kDirect;
  out.channels = s.channels;
  out.type = s.type;
  plan_reading(s, arena_threads(), &out.band_rows, &out.memory_bytes);
  return out;
}

TiffDecode decode_tiff(const uint8_t* data, size_t size, const std::function<bool()>& cancelled, const RowSink& sink,
                       const std::function<void(uint64_t, uint64_t)>& release) {
  TiffDecode out;
  const std::unique_ptr<Handle> first = open_handle(data, size);
  Shape s;
  if (!first || !shape_of(first->tif, tags_of(first->tif), &s)) return out;
  const uint32_t threads = arena_threads();
  uint32_t ignored_rows;
  uint64_t ignored_memory;
  plan_reading(s, threads, &ignored_rows, &ignored_memory);

  tbb::enumerable_thread_specific<std::unique_ptr<Handle>> handles;
  std::mutex error_mutex;
  std::atomic<bool> failed{false};
  auto refused = [&](const std::string& error, const std::string& otherwise) {
    std::lock_guard<std::mutex> lock(error_mutex);
    if (!failed.exchange(true)) out.libtiff_error = error.empty() ? otherwise : error;
  };

  // Where the units of each unit row and all later ones begin in the file:
  // after a band, the bytes before that are read for the last time.
  std::vector<uint64_t> first_offset;
  if (release && !s.line_by_line) {
    TIFF* tif = first->tif;
    const uint32_t unit_rows = (s.height + s.unit_height - 1) / s.unit_height, across = s.units_across();
    const uint32_t planes = s.planar ? s.samples : 1;
    first_offset.assign(size_t{unit_rows} + 1, UINT64_MAX);
    for (uint32_t r = unit_rows; r-- > 0;) {
      uint64_t lowest = first_offset[r + 1];
      for (uint32_t p = 0; p < planes; ++p)
        for (uint32_t c = 0; c < across; ++c) {
          const uint32_t unit = s.tiled ? TIFFComputeTile(tif, c * s.unit_width, r * s.unit_height, 0, static_cast<uint16_t>(p))
                                        : p * unit_rows + r;
          lowest = std::min<uint64_t>(lowest, TIFFGetStrileOffset(tif, unit));
        }
      first_offset[r] = lowest;
    }
  }

  uint64_t released = 0;
  RowBand band = sink.begin(s.width, s.height, s.channels, s.type);
  const uint64_t row_bytes = s.row_bytes();
  for (uint32_t y0 = 0; y0 < s.height;) {
    if (cancelled && cancelled()) fail(ErrorCode::kCancelled, "cancelled while decoding");
    if (band.count == 0 || !band.rows) fail(ErrorCode::kInternal, "TIFF: the sink gave no room for rows");
    const uint32_t n = std::min(band.count, s.height - y0);
    if (s.line_by_line) {
      for (uint32_t y = y0; y < y0 + n && !failed; ++y)
        if (TIFFReadScanline(first->tif, band.rows + uint64_t{y - y0} * row_bytes, y, 0) < 0)
          refused(first->error, "TIFFReadScanline failed on row " + std::to_string(y));
    } else {
      const uint32_t unit_rows = s.unit_height;
      const uint32_t u0 = y0 / unit_rows, u1 = (y0 + n - 1) / unit_rows;
      const uint32_t across = s.units_across();
      const size_t items = size_t{u1 - u0 + 1} * across;
      auto decode = [&](size_t i) {
        if (failed) return;
        std::unique_ptr<Handle>& h = handles.local();
        if (!h && !(h = open_handle(data, size))) return refused("", "libtiff could not open the file again");
        const uint32_t unit_row = u0 + static_cast<uint32_t>(i / across);
        const uint32_t column = static_cast<uint32_t>(i % across);
        if (!decode_unit(*h, s, unit_row, column, band.rows, y0, n))
          refused(h->error, std::string(s.tiled ? "tile" : "strip") + " at row " +
                                std::to_string(uint64_t{unit_row} * unit_rows) +
                                " holds fewer bytes than its pixels need (the file is cut short, or its byte "
                                "counts are wrong)");
      };
      if (items > 1 && threads > 1)
        tbb::this_task_arena::isolate([&] { tbb::parallel_for(size_t{0}, items, decode); });
      else
        for (size_t i = 0; i < items; ++i) decode(i);
    }
    if (failed) return out;
    band = sink.band(band.rows, y0, n);
    y0 += n;
    if (!first_offset.empty() && y0 < s.height && y0 % s.unit_height == 0) {
      const uint64_t next = std::min<uint64_t>(first_offset[y0 / s.unit_height], size);
      if (next > released) release(released, next), released = next;
    }
  }
  if (release && released < size) release(released, size);
  out.taken = true;
  return out;
}

}  // namespace imgstat
