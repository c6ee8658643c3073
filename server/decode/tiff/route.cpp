#include <tbb/task_arena.h>

#include <algorithm>
#include <cstring>

#include "decode/decode.hpp"
#include "decode/tiff/internal.hpp"
#include "decode/tiff/tiff.hpp"
#include "imgstat/error.hpp"

namespace imgstat {
namespace tiff {
namespace {

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

}  // namespace

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

namespace {

// Units (strips or tile rows) a band holds.
uint32_t units_per_band(const Shape& s, uint32_t threads) {
  const uint64_t unit_bytes = uint64_t{s.unit_rows()} * s.row_bytes();
  const uint64_t across = s.units_across();
  const uint64_t want = std::max((kBandBytes + unit_bytes - 1) / unit_bytes,
                                 (uint64_t{kUnitsPerThread} * threads + across - 1) / across);
  const uint64_t cap = std::max<uint64_t>(1, kMaxBandBytes / unit_bytes);
  return static_cast<uint32_t>(std::min(want, cap));
}

}  // namespace

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

}  // namespace tiff

namespace {

// A pyramid of more levels than this is no pyramid (each halves the last).
constexpr uint32_t kMaxLevels = 64;

// Each full-resolution page's reduced copies, in order: its SubIFDs, and
// the reduced pages that follow it in the main chain.
struct PageLevels {
  std::vector<uint64_t> sub, chain;
};

// Every directory's offset, the reduced-resolution ones counted apart, and
// each page's levels.
void walk_pages(tiff::Handle& h, uint64_t max_pages, const std::function<bool()>& cancelled, TiffPlan& out,
                std::vector<PageLevels>* levels) {
  TIFF* tif = h.tif;
  const uint64_t first = TIFFCurrentDirOffset(tif);
  uint64_t directories = 0;
  do {
    if (++directories > max_pages)
      fail(ErrorCode::kResourceExhausted, "this TIFF has more than " + std::to_string(max_pages) +
                                              " pages, over the limit of planes a file may have (--max-planes)");
    if (cancelled && (directories & 1023) == 0 && cancelled()) fail(ErrorCode::kCancelled, "cancelled while decoding");
    uint32_t subfile = 0;
    TIFFGetField(tif, TIFFTAG_SUBFILETYPE, &subfile);
    if (subfile & FILETYPE_REDUCEDIMAGE) {
      ++out.reduced_pages;
      if (!levels->empty() && levels->back().chain.size() < kMaxLevels)
        levels->back().chain.push_back(TIFFCurrentDirOffset(tif));
    } else {
      out.pages.push_back(TIFFCurrentDirOffset(tif));
      levels->emplace_back();
      uint16_t n = 0;
      uint64_t* offsets = nullptr;
      if (TIFFGetField(tif, TIFFTAG_SUBIFD, &n, &offsets) && offsets)
        levels->back().sub.assign(offsets, offsets + std::min<uint32_t>(n, kMaxLevels));
    }
    h.error.clear();
  } while (TIFFReadDirectory(tif));
  h.page = TIFFCurrentDirOffset(tif);
  // libtiff stops at a directory it cannot read, or one read before (a
  // loop), and says nothing of the latter.
  if (!h.error.empty() || !TIFFLastDirectory(tif))
    out.warning = "TIFF: the directories end at page " + std::to_string(directories) + ", which cannot be read (" +
                  (h.error.empty() ? std::string("it is one met before: the chain loops") : h.error) +
                  "): the pages before it are answered";
  if (out.pages.empty()) {  // reduced copies only: the first is the image
    out.pages.push_back(first);
    --out.reduced_pages;
    levels->assign(1, PageLevels{});
  }
}

// The pyramid's levels: every page's SubIFDs where every page has them,
// else the reduced pages after each; as deep as the shallowest page's.
// Level `level` (> 0) replaces the pages; past the last is refused.
void choose_level(const std::vector<PageLevels>& levels, uint32_t level, TiffPlan& out) {
  const bool sub = std::all_of(levels.begin(), levels.end(), [](const PageLevels& l) { return !l.sub.empty(); });
  size_t depth = kMaxLevels;
  for (const PageLevels& l : levels) depth = std::min(depth, (sub ? l.sub : l.chain).size());
  out.levels = static_cast<uint32_t>(depth + 1);
  if (level == 0) return;
  if (level >= out.levels)
    fail(ErrorCode::kInvalidArgument,
         "level " + std::to_string(level) + " was asked for, but this TIFF has " +
             (out.levels == 1 ? std::string("no pyramid (level 0 only)")
                              : std::to_string(out.levels) + " levels (0 to " + std::to_string(out.levels - 1) + ")"));
  for (size_t i = 0; i < levels.size(); ++i) out.pages[i] = (sub ? levels[i].sub : levels[i].chain)[level - 1];
}

// What makes pages one series: their size and the samples they give.
struct PageKind {
  uint64_t width = 0, height = 0;
  uint32_t channels = 0;
  SampleType type = SampleType::kUint8;
  uint64_t memory = 0;  // the most one of its pages needs to be read
  uint32_t band_rows = 0;  // its first page's
  bool same(const PageKind& o) const {
    return width == o.width && height == o.height && channels == o.channels && type == o.type;
  }
  std::string words() const {
    return std::to_string(width) + "x" + std::to_string(height) + " " + std::to_string(channels) + "-channel " +
           to_string(type);
  }
};

// A file of more series than this is refused (each is an answer of its own).
constexpr size_t kMaxSeries = 4096;

// The series: an OME-TIFF's images where its OME-XML gives each one's pages
// and they are of one kind; else each kind's pages, in the order the kinds
// are first met. Series `series` becomes the plan's pages.
void choose_series(TiffPlan& out, const std::vector<PageKind>& kinds, const std::vector<uint32_t>& kind_of_page,
                   uint32_t series) {
  std::vector<std::vector<uint64_t>> members;  // page indices, each series'
  const std::vector<OmeImage> images = out.pages.size() > 1 ? ome_images(out.description) : std::vector<OmeImage>{};
  bool ome = images.size() > 1;
  for (const OmeImage& image : images) {
    if (!ome) break;
    if (image.first_page > out.pages.size() || image.planes > out.pages.size() - image.first_page) {
      ome = false;
      break;
    }
    std::vector<uint64_t>& m = members.emplace_back();
    for (uint64_t i = image.first_page; i < image.first_page + image.planes; ++i) m.push_back(i);
  }
  if (!ome) {
    members.assign(kinds.size(), {});
    for (size_t i = 0; i < kind_of_page.size(); ++i) members[kind_of_page[i]].push_back(i);
  }
  out.series_count = static_cast<uint32_t>(members.size());
  if (series >= members.size())
    fail(ErrorCode::kInvalidArgument,
         "series " + std::to_string(series) + " was asked for, but this TIFF " +
             (members.size() == 1 ? std::string("is one series (series 0)")
                                  : "has " + std::to_string(members.size()) + " (0 to " + std::to_string(members.size() - 1) + ")"));
  const std::vector<uint64_t>& chosen = members[series];
  const PageKind& kind = kinds[kind_of_page[chosen[0]]];
  uint64_t memory = 0;
  std::vector<uint64_t> pages;
  pages.reserve(chosen.size());
  for (uint64_t i : chosen) {
    const PageKind& k = kinds[kind_of_page[i]];
    if (!k.same(kind)) {
      out.route = TiffRoute::kRefused;
      out.refusal = "page " + std::to_string(i) + " of OME image " + std::to_string(series) + " is " + k.words() +
                    " where its first is " + kind.words();
      return;
    }
    memory = std::max(memory, k.memory);
    pages.push_back(out.pages[i]);
  }
  out.pages = std::move(pages);
  out.series = series;
  out.width = kind.width;
  out.height = kind.height;
  out.channels = kind.channels;
  out.type = kind.type;
  out.memory_bytes = memory;
  out.band_rows = kind.band_rows;
}


}  // namespace

TiffPlan plan_tiff(const uint8_t* data, size_t size, uint64_t max_pages, const std::function<bool()>& cancelled,
                   uint32_t level, uint32_t series) {
  using namespace tiff;
  TiffPlan out;
  const std::unique_ptr<Handle> h = open_handle(data, size);
  if (!h) {  // OpenCV gives libtiff's verdict
    if (level > 0) fail(ErrorCode::kInvalidArgument, "level " + std::to_string(level) + " was asked for, but libtiff cannot read this TIFF's directories");
    return out;
  }
  const uint64_t first_directory = h->page;
  std::vector<PageLevels> levels;
  walk_pages(*h, max_pages, cancelled, out, &levels);
  choose_level(levels, level, out);
  const bool stack = out.pages.size() > 1;
  if (!select_page(*h, out.pages[0])) {
    out.route = TiffRoute::kRefused;
    out.refusal = "its first full-resolution page cannot be read (" + h->error + ")";
    return out;
  }
  const Tags t = tags_of(h->tif);
  const char* description = nullptr;
  if (TIFFGetField(h->tif, TIFFTAG_IMAGEDESCRIPTION, &description) && description)
    out.description.assign(description, strnlen(description, size_t{16} << 20));
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
    // OpenCV reads the first directory alone.
    else if (stack)
      out.refusal = "files of several pages are read only when their pages are top-left, 2- to 8-, 16-, 32- or "
                    "64-bit, in strips or tiles under 1 GiB (this one has " + std::to_string(out.pages.size()) +
                    " pages of " + std::to_string(t.bits) + "-bit " + photometric_name(t.photometric) + ")";
    else if (out.pages[0] != first_directory)
      out.refusal = "its full-resolution page follows a reduced-resolution one and is not one the direct reader "
                    "takes (" + std::to_string(t.bits) + "-bit " + photometric_name(t.photometric) + ")";
    if (!out.refusal.empty()) {
      out.route = TiffRoute::kRefused;
      return out;
    }
    out.memory_bytes = opencv_memory_bytes(h->tif, t);
    return out;
  }
  out.route = TiffRoute::kDirect;
  const uint32_t threads = arena_threads();
  // Every page is read as the direct path reads the first, and is of a
  // kind (size and samples); each kind's pages are a series, as tifffile's
  // generic series, unless an OME-XML says which pages each image has.
  std::vector<PageKind> kinds{PageKind{s.width, s.height, s.channels, s.type, 0, 0}};
  std::vector<uint32_t> kind_of_page(out.pages.size(), 0);
  plan_reading(s, threads, &kinds[0].band_rows, &kinds[0].memory);
  for (size_t i = 1; i < out.pages.size(); ++i) {
    if (cancelled && (i & 1023) == 0 && cancelled()) fail(ErrorCode::kCancelled, "cancelled while decoding");
    Shape p;
    std::string why;
    if (!select_page(*h, out.pages[i])) {
      why = "cannot be read (" + h->error + ")";
    } else {
      const Tags pt = tags_of(h->tif);
      why = refusal_of(pt);
      if (why.empty() && !shape_of(h->tif, pt, &p)) why = "is not one the direct reader takes";
    }
    if (!why.empty()) {
      out.route = TiffRoute::kRefused;
      out.refusal = "page " + std::to_string(i) + " of " + std::to_string(out.pages.size()) + " " + why;
      return out;
    }
    uint32_t rows;
    uint64_t memory;
    plan_reading(p, threads, &rows, &memory);
    const PageKind k{p.width, p.height, p.channels, p.type, 0, rows};
    size_t at = 0;
    while (at < kinds.size() && !kinds[at].same(k)) ++at;
    if (at == kinds.size()) {
      if (kinds.size() == kMaxSeries)
        fail(ErrorCode::kResourceExhausted, "this TIFF has pages of more than " + std::to_string(kMaxSeries) +
                                                " sizes and sample kinds (series), more than a file may have");
      kinds.push_back(k);
    }
    kinds[at].memory = std::max(kinds[at].memory, memory);
    kind_of_page[i] = static_cast<uint32_t>(at);
  }
  choose_series(out, kinds, kind_of_page, series);
  return out;
}

}  // namespace imgstat
