// What a TIFF's pixels are, by libtiff itself, and the rule a TIFF answer is
// held to (tiff_test, fuzz_tiff): OpenCV 4.6's pixels where OpenCV reads the
// file right; libtiff's own reading where imgstat goes beyond OpenCV; a
// refusal that names what is not supported where OpenCV's answer would not
// be the file's pixels. Never an OK with other pixels.
#pragma once

#include <tiffio.h>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <cstdarg>
#include <cstring>
#include <string>
#include <vector>

#include "decode/tiff/tiff.hpp"
#include "decoder_answers.hpp"

namespace imgstat::testing {

// A TIFF handle on bytes in memory, mapped as TIFFOpen maps a file, its
// errors and warnings unsaid.
class MemoryTiff {
 public:
  explicit MemoryTiff(const std::string& f) : f_(f) {
    TIFFOpenOptions* o = TIFFOpenOptionsAlloc();
    TIFFOpenOptionsSetErrorHandlerExtR(o, quiet, nullptr);
    TIFFOpenOptionsSetWarningHandlerExtR(o, quiet, nullptr);
    tif_ = TIFFClientOpenExt("reference", "r", this, read, write, seek, close, size, map, unmap, o);
    TIFFOpenOptionsFree(o);
  }
  ~MemoryTiff() {
    if (tif_) TIFFClose(tif_);
  }
  MemoryTiff(const MemoryTiff&) = delete;
  MemoryTiff& operator=(const MemoryTiff&) = delete;
  TIFF* get() const { return tif_; }

 private:
  static int quiet(TIFF*, void*, const char*, const char*, va_list) { return 1; }
  static MemoryTiff* self(thandle_t h) { return static_cast<MemoryTiff*>(h); }
  static tmsize_t read(thandle_t h, void* buf, tmsize_t n) {
    MemoryTiff* m = self(h);
    const uint64_t k = std::min<uint64_t>(static_cast<uint64_t>(std::max<tmsize_t>(n, 0)), m->f_.size() - std::min<uint64_t>(m->pos_, m->f_.size()));
    if (k) std::memcpy(buf, m->f_.data() + m->pos_, k);
    m->pos_ += k;
    return static_cast<tmsize_t>(k);
  }
  static tmsize_t write(thandle_t, void*, tmsize_t) { return 0; }
  static toff_t seek(thandle_t h, toff_t off, int whence) {
    MemoryTiff* m = self(h);
    uint64_t p = whence == SEEK_SET ? off : whence == SEEK_CUR ? m->pos_ + off : m->f_.size() + off;
    m->pos_ = std::min<uint64_t>(p, m->f_.size());
    return m->pos_;
  }
  static int close(thandle_t) { return 0; }
  static toff_t size(thandle_t h) { return self(h)->f_.size(); }
  static int map(thandle_t h, void** base, toff_t* n) {
    *base = const_cast<char*>(self(h)->f_.data());
    *n = self(h)->f_.size();
    return 1;
  }
  static void unmap(thandle_t, void*, toff_t) {}

  const std::string& f_;
  uint64_t pos_ = 0;
  TIFF* tif_ = nullptr;
};

// libtiff's RGBA image of the file, reduced to the channels as OpenCV
// reduces them (OpenCV's gray weights): what the 8-bit path gives.
inline DecoderAnswer libtiff_rgba(const std::string& f, uint32_t channels) {
  DecoderAnswer a;
  MemoryTiff t(f);
  if (!t.get()) return a;
  uint32_t w = 0, h = 0;
  TIFFGetField(t.get(), TIFFTAG_IMAGEWIDTH, &w);
  TIFFGetField(t.get(), TIFFTAG_IMAGELENGTH, &h);
  if (uint64_t{w} * h > (uint64_t{1} << 26)) return a;
  cv::Mat rgba(static_cast<int>(h), static_cast<int>(w), CV_8UC4);
  if (!TIFFReadRGBAImageOriented(t.get(), w, h, reinterpret_cast<uint32_t*>(rgba.data), ORIENTATION_TOPLEFT, 0))
    return a;
  a.ok = true;
  std::vector<cv::Mat> planes;
  cv::split(rgba, planes);
  if (channels == 1) {
    cv::Mat gray;
    cv::cvtColor(rgba, gray, cv::COLOR_RGBA2GRAY);
    a.planes = {gray};
  } else {
    a.planes.assign(planes.begin(), planes.begin() + channels);
  }
  return a;
}

// The file's samples as libtiff decodes them scanline by scanline (each
// plane of a planar file apart), one plane a sample: what the raw path
// gives 16-bit, float and LogL images (LogL as float luminance). Top-left
// images of 8 bits a sample or more.
inline DecoderAnswer libtiff_samples(const std::string& f) {
  DecoderAnswer a;
  MemoryTiff t(f);
  TIFF* tif = t.get();
  if (!tif) return a;
  uint16_t photometric = 0, bits = 8, samples = 1, format = SAMPLEFORMAT_UINT, planar = PLANARCONFIG_CONTIG;
  TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &photometric);
  if (photometric == PHOTOMETRIC_LOGL) TIFFSetField(tif, TIFFTAG_SGILOGDATAFMT, SGILOGDATAFMT_FLOAT);
  uint32_t w = 0, h = 0;
  TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &w);
  TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &h);
  TIFFGetField(tif, TIFFTAG_BITSPERSAMPLE, &bits);
  TIFFGetField(tif, TIFFTAG_SAMPLESPERPIXEL, &samples);
  TIFFGetField(tif, TIFFTAG_SAMPLEFORMAT, &format);
  TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &planar);
  if (bits < 8 || bits % 8 || uint64_t{w} * h * samples > (uint64_t{1} << 26)) return a;
  const int depth = format == SAMPLEFORMAT_IEEEFP ? (bits == 32 ? CV_32F : CV_64F)
                    : bits == 8  ? (format == SAMPLEFORMAT_INT ? CV_8S : CV_8U)
                    : bits == 16 ? (format == SAMPLEFORMAT_INT ? CV_16S : CV_16U)
                                 : -1;
  if (depth < 0) return a;
  const size_t sb = bits / 8;
  std::vector<cv::Mat> planes(samples);
  for (auto& p : planes) p.create(static_cast<int>(h), static_cast<int>(w), depth);
  const bool separate = planar == PLANARCONFIG_SEPARATE && samples > 1;
  const uint32_t per = separate ? 1 : samples;  // samples a pixel in one plane's unit
  // One row of a unit: x0..x0+n of row y, plane s.
  auto put = [&](const uint8_t* row, uint32_t y, uint32_t x0, uint32_t n, uint16_t s) {
    for (uint32_t x = 0; x < n; ++x)
      for (uint32_t c = 0; c < per; ++c)
        std::memcpy(planes[separate ? s : c].ptr(static_cast<int>(y)) + size_t{x0 + x} * sb, &row[(size_t{x} * per + c) * sb], sb);
  };
  if (TIFFIsTiled(tif)) {
    uint32_t tw = 0, th = 0;
    TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tw);
    TIFFGetField(tif, TIFFTAG_TILELENGTH, &th);
    const tmsize_t size = TIFFTileSize(tif);
    if (tw == 0 || th == 0 || size <= 0 || size > (64 << 20)) return a;
    std::vector<uint8_t> tile(static_cast<size_t>(size));
    for (uint16_t s = 0; s < (separate ? samples : 1); ++s)
      for (uint32_t y0 = 0; y0 < h; y0 += th)
        for (uint32_t x0 = 0; x0 < w; x0 += tw) {
          if (TIFFReadTile(tif, tile.data(), x0, y0, 0, s) < 0) return a;
          for (uint32_t y = y0; y < std::min(h, y0 + th); ++y)
            put(&tile[size_t{y - y0} * tw * per * sb], y, x0, std::min(tw, w - x0), s);
        }
  } else {
    std::vector<uint8_t> line(static_cast<size_t>(std::max<tmsize_t>(TIFFScanlineSize(tif), 0)) + 16);
    for (uint16_t s = 0; s < (separate ? samples : 1); ++s)
      for (uint32_t y = 0; y < h; ++y) {
        if (TIFFReadScanline(tif, line.data(), y, s) < 0) return a;
        put(line.data(), y, 0, w, s);
      }
  }
  a.ok = true;
  a.planes = planes;
  return a;
}

// True where libtiff says a damaged strip or tile decoded yet leaves some of
// its bytes unwritten (a short stream it does not notice): those samples are
// whatever the caller's buffer held, in OpenCV (its previous strip) as here,
// and only the verdict can be compared.
inline bool libtiff_leaves_bytes_unwritten(const std::string& f) {
  MemoryTiff t(f);
  TIFF* tif = t.get();
  if (!tif) return false;
  bool unwritten = false;
  const bool tiled = TIFFIsTiled(tif);
  const uint32_t units = tiled ? TIFFNumberOfTiles(tif) : TIFFNumberOfStrips(tif);
  const tmsize_t size = tiled ? TIFFTileSize(tif) : TIFFStripSize(tif);
  if (size <= 0 || size >= (64 << 20)) return false;
  std::vector<uint8_t> a(static_cast<size_t>(size)), b(a.size());
  for (uint32_t u = 0; u < units && u < 4096 && !unwritten; ++u) {
    std::fill(a.begin(), a.end(), 0xaa);
    std::fill(b.begin(), b.end(), 0x55);
    const tmsize_t ra = tiled ? TIFFReadEncodedTile(tif, u, a.data(), size) : TIFFReadEncodedStrip(tif, u, a.data(), size);
    const tmsize_t rb = tiled ? TIFFReadEncodedTile(tif, u, b.data(), size) : TIFFReadEncodedStrip(tif, u, b.data(), size);
    unwritten = ra > 0 && ra == rb && std::memcmp(a.data(), b.data(), static_cast<size_t>(ra)) != 0;
  }
  return unwritten;
}

// Empty when `ours` is an answer imgstat may give for file f, given
// OpenCV's: the same verdict and pixels as OpenCV where it reads the file;
// beyond it, libtiff's own pixels; a refusal naming what is not supported
// where OpenCV would answer with other pixels. Else what is wrong.
// Where OpenCV 4.6 reads what is not the file's pixels: a planar file of
// more than 8 bits a sample (its first plane read as every sample), LogL
// (libtiff's 8-bit tone map).
inline bool opencv_reads_it_wrong(const std::string& f) {
  MemoryTiff t(f);
  if (!t.get()) return false;
  uint16_t planar = PLANARCONFIG_CONTIG, bits = 8, photometric = 0, samples = 1;
  TIFFGetFieldDefaulted(t.get(), TIFFTAG_PLANARCONFIG, &planar);
  TIFFGetField(t.get(), TIFFTAG_BITSPERSAMPLE, &bits);
  TIFFGetField(t.get(), TIFFTAG_PHOTOMETRIC, &photometric);
  TIFFGetField(t.get(), TIFFTAG_SAMPLESPERPIXEL, &samples);
  return (planar == PLANARCONFIG_SEPARATE && samples > 1 && bits > 8) || photometric == PHOTOMETRIC_LOGL;
}

// True where libtiff refuses a strip or tile of the file, read as samples
// or as its RGBA image (a read error, where OpenCV's RGBA reading would
// carry on with whatever its buffer held).
inline bool libtiff_refuses_a_unit(const std::string& f) {
  {
    MemoryTiff t(f);
    TIFF* tif = t.get();
    if (!tif) return true;
    const bool tiled = TIFFIsTiled(tif);
    const uint32_t units = tiled ? TIFFNumberOfTiles(tif) : TIFFNumberOfStrips(tif);
    const tmsize_t size = tiled ? TIFFTileSize(tif) : TIFFStripSize(tif);
    if (size <= 0 || size >= (64 << 20)) return true;
    std::vector<uint8_t> buf(static_cast<size_t>(size));
    uint32_t h = 0, rows_per_strip = 0;
    TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &h);
    TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &rows_per_strip);
    const uint32_t strips_per_plane = std::max<uint32_t>(1, rows_per_strip ? (h + rows_per_strip - 1) / rows_per_strip : 1);
    for (uint32_t u = 0; u < units && u < 65536; ++u) {
      const tmsize_t got = tiled ? TIFFReadEncodedTile(tif, u, buf.data(), size) : TIFFReadEncodedStrip(tif, u, buf.data(), size);
      // A unit shorter than its pixels need: what is missing is whatever the buffer held.
      const uint32_t row0 = rows_per_strip ? (u % strips_per_plane) * rows_per_strip : 0;
      const tmsize_t need = tiled ? size : TIFFVStripSize(tif, std::min(rows_per_strip, h > row0 ? h - row0 : 0));
      if (got < 0 || got < need) return true;
    }
  }
  MemoryTiff t(f);  // afresh: a codec's state after a read error is not its state at the start
  TIFF* tif = t.get();
  char why[1024];
  if (!tif || !TIFFRGBAImageOK(tif, why)) return false;
  uint32_t w = 0, h = 0, uw = 0, uh = 0;
  TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &w);
  TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &h);
  const bool tiled = TIFFIsTiled(tif);
  if (tiled) {
    TIFFGetField(tif, TIFFTAG_TILEWIDTH, &uw);
    TIFFGetField(tif, TIFFTAG_TILELENGTH, &uh);
  } else {
    uw = w;
    TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &uh);
    uh = std::min(uh, h);
  }
  if (uw == 0 || uh == 0 || uint64_t{uw} * uh > (uint64_t{1} << 24)) return false;
  std::vector<uint32_t> raster(size_t{uw} * uh);
  for (uint32_t y = 0; y < h; y += uh)
    for (uint32_t x = 0; x < (tiled ? w : 1); x += uw)
      if (!(tiled ? TIFFReadRGBATileExt(tif, x, y, raster.data(), 1) : TIFFReadRGBAStripExt(tif, y, raster.data(), 1)))
        return true;
  return false;
}

// The most OpenCV 4.6's TIFF reader allocates for the file's first
// directory: its image (twice, should the orientation transpose it) and one
// strip or tile buffer, sized from RowsPerStrip or the tile as declared, not
// as the image bounds them (so a 10-pixel-wide strip of 3,014,666 rows is a
// 723 MB buffer). 0 where libtiff cannot open it. A harness whose allocation
// limit is below this does not ask OpenCV.
inline uint64_t opencv_reader_bytes(const std::string& f) {
  MemoryTiff t(f);
  TIFF* tif = t.get();
  if (!tif) return 0;
  uint32_t w = 0, h = 0, uw = 0, uh = 0;
  uint16_t bits = 8, samples = 1;
  TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &w);
  TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &h);
  TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &bits);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &samples);
  if (TIFFIsTiled(tif)) {
    TIFFGetField(tif, TIFFTAG_TILEWIDTH, &uw);
    TIFFGetField(tif, TIFFTAG_TILELENGTH, &uh);
  } else {
    TIFFGetField(tif, TIFFTAG_ROWSPERSTRIP, &uh);
  }
  if (uw == 0) uw = w;
  if (uh == 0 || uh == UINT32_MAX) uh = h;
  const uint64_t sample = std::max<uint64_t>(4, (uint64_t{bits} + 7) / 8);  // 8-bit images go through RGBA
  const uint64_t channels = std::max<uint64_t>(4, samples);
  return 2 * uint64_t{w} * h * channels * sample + 2 * uint64_t{uw} * uh * channels * sample;
}

// The offset of a TIFF's first directory, from its header (0: none).
inline uint64_t first_directory(const std::string& f) {
  if (f.size() < 8) return 0;
  const bool le = f[0] == 'I';
  auto get = [&](size_t at, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i)
      v |= uint64_t{static_cast<uint8_t>(f[at + (le ? i : n - 1 - i)])} << (8 * i);
    return v;
  };
  if (get(2, 2) == 43) return f.size() < 16 ? 0 : get(8, 8);
  return get(4, 4);
}

inline std::string tiff_answer_fault(const std::string& f, const DecoderAnswer& ours, const DecoderAnswer& opencv) {
  const TiffPlan plan = plan_tiff(reinterpret_cast<const uint8_t*>(f.data()), f.size());
  const bool opencv_wrong = opencv_reads_it_wrong(f);
  if (!ours.ok) {
    if (ours.code != ErrorCode::kInvalidArgument && ours.code != ErrorCode::kResourceExhausted)
      return "error code is neither INVALID_ARGUMENT nor RESOURCE_EXHAUSTED: " + ours.error;
    if (plan.route == TiffRoute::kRefused) {
      if (ours.error.find(plan.refusal) == std::string::npos) return "refused, but not by name: " + ours.error;
      return "";
    }
    if (opencv.ok && !opencv_wrong && !libtiff_refuses_a_unit(f)) return "refused what OpenCV reads (" + ours.error + ")";
    return "";
  }
  if (plan.route == TiffRoute::kRefused) return "answered a file it says it refuses (" + plan.refusal + ")";
  if (libtiff_leaves_bytes_unwritten(f)) return "";  // samples nobody wrote: the verdict is all
  // Its first full-resolution page follows a reduced one: not the page
  // OpenCV (or the references here) read.
  if (!plan.pages.empty() && plan.pages[0] != first_directory(f)) return "";
  // The truth where imgstat reads the file itself: libtiff's samples (16-bit,
  // float, LogL) or its RGBA image (8 bits and fewer).
  DecoderAnswer truth;
  if (ours.decoder == "libtiff") {
    const bool raw = !ours.planes.empty() && ours.planes[0].depth() != CV_8U && ours.planes[0].depth() != CV_8S;
    truth = raw ? libtiff_samples(f) : libtiff_rgba(f, static_cast<uint32_t>(ours.planes.size()));
    if (!raw && !ours.planes.empty() && ours.planes[0].depth() == CV_8S && truth.ok)  // signed gray and RGB: bytes as read
      for (cv::Mat& p : truth.planes) p = cv::Mat(p.size(), CV_8S, p.data, p.step).clone();
  }
  if (opencv.ok) {
    std::string d = plane_difference(ours, opencv);
    // Where OpenCV reads other pixels, imgstat's must be libtiff's.
    if (opencv_wrong) {
      if (ours.decoder != "libtiff") return "answered with OpenCV's reading of a file OpenCV reads wrong";
      if (!truth.ok) return "OpenCV reads it wrong, and libtiff does not read it";
      const std::string t = plane_difference(ours, truth);
      return t.empty() ? "" : "pixels differ from libtiff's: " + t;
    }
    if (!d.empty()) return "pixels differ from OpenCV's: " + d;
    return "";
  }
  // OpenCV refuses what imgstat reads: libtiff's own reading is the reference.
  if (ours.decoder != "libtiff") return "decoded by " + ours.decoder + " what OpenCV refuses";
  if (!truth.ok) return "decoded what neither OpenCV nor libtiff reads";
  const std::string d = plane_difference(ours, truth);
  return d.empty() ? "" : "pixels differ from libtiff's: " + d;
}

}  // namespace imgstat::testing
