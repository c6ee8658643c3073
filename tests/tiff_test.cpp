// The TIFF decoder (decode_tiff) against OpenCV's imdecode, which drives the
// same libtiff: every file it takes gives OpenCV's pixels, every file it
// leaves (or gives up on) gets OpenCV's answer, error or pixels, because
// OpenCV decodes it. Files are written here with libtiff: every sample type,
// photometric, layout, compression and predictor, then damaged.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <tbb/task_arena.h>
#include <tiffio.h>
#include <unistd.h>

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "corpus.hpp"
#include "decode/decode.hpp"
#include "decode/library_messages.hpp"
#include "decode/tiff/tiff.hpp"
#include "decoder_answers.hpp"
#include "tiff_reference.hpp"

namespace imgstat {
namespace {

const uint8_t* bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

using Answer = testing::DecoderAnswer;
using testing::libtiff_leaves_bytes_unwritten;
using testing::libtiff_rgba;
Answer ours(const std::string& f) { return testing::imgstat_answer(f); }
Answer opencv(const std::string& f) { return testing::opencv_answer(f); }

// Empty when both answers agree: the same verdict, the same pixels.
std::string difference(const Answer& a, const Answer& b) {
  if (a.ok != b.ok) return std::string("decoded: ") + (a.ok ? "ours" : "OpenCV's") + " only (" + a.error + ")";
  if (!a.ok) return a.code == ErrorCode::kInvalidArgument ? "" : "error code is not INVALID_ARGUMENT: " + a.error;
  return testing::plane_difference(a, b);
}

void setup_messages() { testing::quiet_library_messages(); }

struct Spec {
  std::string name;
  uint32_t width = 37, height = 53;
  uint16_t bits = 8, samples = 1, photometric = PHOTOMETRIC_MINISBLACK, format = SAMPLEFORMAT_UINT;
  uint16_t planar = PLANARCONFIG_CONTIG, compression = COMPRESSION_NONE, predictor = 1;
  uint32_t rows_per_strip = 7;
  uint32_t tile_width = 0, tile_height = 0;  // tiled when set
  int extra = -1;                            // the extra sample's kind, if any
  uint16_t orientation = ORIENTATION_TOPLEFT;
  bool taken = true;  // by decode_tiff
  const char* mode = "w";   // libtiff's: "wb" big-endian
  uint16_t fill_order = 0;  // FillOrder, when set
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The image's samples, interleaved, from rng alone (the same seed gives the
// same samples whatever the layout): random bytes, or floats with NaN and
// infinities among them.
std::vector<uint8_t> random_samples(const Spec& s, std::mt19937& rng) {
  const size_t n = size_t{s.width} * s.height * s.samples;
  std::vector<uint8_t> v((n * s.bits + 7) / 8 + 8);
  if (s.format == SAMPLEFORMAT_IEEEFP && s.bits == 32) {
    auto* p = reinterpret_cast<float*>(v.data());
    for (size_t i = 0; i < n; ++i) {
      const uint32_t r = rng() % 100;
      p[i] = r == 0 ? NAN : r == 1 ? INFINITY : r == 2 ? -INFINITY
                                   : std::ldexp(float(int(rng() % 20001) - 10000), int(rng() % 20) - 10);
    }
  } else if (s.format == SAMPLEFORMAT_IEEEFP && s.bits == 64) {
    auto* p = reinterpret_cast<double*>(v.data());
    for (size_t i = 0; i < n; ++i) p[i] = rng() % 50 == 0 ? NAN : (double(rng()) - 2e9) / 7.0;
  } else {
    for (auto& b : v) b = static_cast<uint8_t>(rng());
  }
  return v;
}

// The samples written as spec says (units cut from them, padding zero).
std::string write_tiff(const Spec& s, std::mt19937& rng) {
  const std::vector<uint8_t> image = random_samples(s, rng);
  char path[] = "/tmp/imgstat-tiff-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return {};
  close(fd);
  TIFF* t = TIFFOpen(path, s.mode);
  if (!t) return {};
  if (s.fill_order) TIFFSetField(t, TIFFTAG_FILLORDER, s.fill_order);
  TIFFSetField(t, TIFFTAG_IMAGEWIDTH, s.width);
  TIFFSetField(t, TIFFTAG_IMAGELENGTH, s.height);
  TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, s.bits);
  TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, s.samples);
  TIFFSetField(t, TIFFTAG_PHOTOMETRIC, s.photometric);
  TIFFSetField(t, TIFFTAG_SAMPLEFORMAT, s.format);
  TIFFSetField(t, TIFFTAG_PLANARCONFIG, s.planar);
  TIFFSetField(t, TIFFTAG_COMPRESSION, s.compression);
  TIFFSetField(t, TIFFTAG_ORIENTATION, s.orientation);
  if (s.predictor != 1) TIFFSetField(t, TIFFTAG_PREDICTOR, s.predictor);
  if (s.extra >= 0) {
    const uint16_t kind = static_cast<uint16_t>(s.extra);
    TIFFSetField(t, TIFFTAG_EXTRASAMPLES, 1, &kind);
  }
  if (s.photometric == PHOTOMETRIC_PALETTE) {
    std::vector<uint16_t> map(3u << s.bits);
    for (auto& v : map) v = static_cast<uint16_t>(rng());
    const size_t n = size_t{1} << s.bits;
    TIFFSetField(t, TIFFTAG_COLORMAP, map.data(), map.data() + n, map.data() + 2 * n);
  }
  const bool tiled = s.tile_width > 0;
  if (tiled) {
    TIFFSetField(t, TIFFTAG_TILEWIDTH, s.tile_width);
    TIFFSetField(t, TIFFTAG_TILELENGTH, s.tile_height);
  } else {
    TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, s.rows_per_strip);
  }
  const bool planar = s.planar == PLANARCONFIG_SEPARATE;
  const uint32_t planes = planar ? s.samples : 1, per_pixel = planar ? 1 : s.samples;
  const uint32_t uw = tiled ? s.tile_width : s.width, uh = tiled ? s.tile_height : s.rows_per_strip;
  const size_t unit_row = (size_t{uw} * per_pixel * s.bits + 7) / 8;
  std::vector<uint8_t> unit(unit_row * uh);
  // Unit (x0, y0) of plane p, cut from the samples (whole bytes: 8 bits and up;
  // under 8 bits, rows of random bits).
  auto cut = [&](uint32_t x0, uint32_t y0, uint32_t p) {
    std::fill(unit.begin(), unit.end(), 0);
    if (s.bits < 8) {
      for (auto& b : unit) b = static_cast<uint8_t>(rng());
      return;
    }
    const size_t sb = s.bits / 8;
    for (uint32_t y = y0; y < std::min(y0 + uh, s.height); ++y)
      for (uint32_t x = x0; x < std::min(x0 + uw, s.width); ++x)
        for (uint32_t c = 0; c < per_pixel; ++c) {
          const uint32_t sample = planar ? p : c;
          std::memcpy(&unit[size_t{y - y0} * unit_row + (size_t{x - x0} * per_pixel + c) * sb],
                      &image[((size_t{y} * s.width + x) * s.samples + sample) * sb], sb);
        }
  };
  bool ok = true;
  if (tiled) {
    for (uint32_t p = 0; p < planes; ++p)
      for (uint32_t y = 0; y < s.height; y += uh)
        for (uint32_t x = 0; x < s.width; x += uw) {
          cut(x, y, p);
          ok &= TIFFWriteEncodedTile(t, TIFFComputeTile(t, x, y, 0, static_cast<uint16_t>(p)), unit.data(),
                                     static_cast<tmsize_t>(unit.size())) >= 0;
        }
  } else {
    const uint32_t strips = (s.height + uh - 1) / uh;
    for (uint32_t p = 0; p < planes; ++p)
      for (uint32_t k = 0; k < strips; ++k) {
        cut(0, k * uh, p);
        const uint32_t rows = std::min(uh, s.height - k * uh);
        ok &= TIFFWriteEncodedStrip(t, p * strips + k, unit.data(), static_cast<tmsize_t>(unit_row * rows)) >= 0;
      }
  }
  TIFFClose(t);
  std::string f = ok ? slurp(path) : std::string();
  std::remove(path);
  return f;
}

std::vector<Spec> specs() {
  std::vector<Spec> v;
  auto add = [&](std::string name, auto tweak) {
    Spec s;
    s.name = std::move(name);
    tweak(s);
    v.push_back(s);
  };
  const uint16_t kLzw = COMPRESSION_LZW, kDeflate = COMPRESSION_ADOBE_DEFLATE, kZstd = COMPRESSION_ZSTD,
                 kPackBits = COMPRESSION_PACKBITS;
  add("gray8 strips of 7", [](Spec&) {});
  add("gray8 LZW predictor 2", [&](Spec& s) { s.compression = kLzw, s.predictor = 2; });
  add("gray8 deflate tiles 16x16", [&](Spec& s) { s.compression = kDeflate, s.tile_width = s.tile_height = 16; });
  add("gray8 ZSTD one strip", [&](Spec& s) { s.compression = kZstd, s.rows_per_strip = 53; });
  add("gray8 PackBits strips of 1", [&](Spec& s) { s.compression = kPackBits, s.rows_per_strip = 1; });
  add("gray8 1x1", [&](Spec& s) { s.width = s.height = 1, s.rows_per_strip = 1; });
  add("gray8 strips taller than the image", [&](Spec& s) { s.rows_per_strip = 64; });
  add("int8 gray", [&](Spec& s) { s.format = SAMPLEFORMAT_INT; });
  add("MinIsWhite 8", [&](Spec& s) { s.photometric = PHOTOMETRIC_MINISWHITE; });
  add("gray+alpha 8", [&](Spec& s) { s.samples = 2, s.extra = EXTRASAMPLE_UNASSALPHA; });
  add("palette 8", [&](Spec& s) { s.photometric = PHOTOMETRIC_PALETTE, s.compression = kLzw; });
  add("RGB8 LZW predictor 2", [&](Spec& s) { s.samples = 3, s.photometric = PHOTOMETRIC_RGB, s.compression = kLzw, s.predictor = 2; });
  add("RGB8 planar deflate", [&](Spec& s) { s.samples = 3, s.photometric = PHOTOMETRIC_RGB, s.planar = PLANARCONFIG_SEPARATE, s.compression = kDeflate; });
  add("RGB8 tiles 32x48", [&](Spec& s) { s.width = 101, s.height = 67, s.samples = 3, s.photometric = PHOTOMETRIC_RGB, s.tile_width = 32, s.tile_height = 48; });
  add("RGBA8 associated alpha", [&](Spec& s) { s.samples = 4, s.photometric = PHOTOMETRIC_RGB, s.extra = EXTRASAMPLE_ASSOCALPHA; });
  add("RGBA8 unassociated alpha", [&](Spec& s) { s.samples = 4, s.photometric = PHOTOMETRIC_RGB, s.extra = EXTRASAMPLE_UNASSALPHA, s.compression = kZstd; });
  add("RGBA8 unspecified extra sample, tiles", [&](Spec& s) { s.samples = 4, s.photometric = PHOTOMETRIC_RGB, s.extra = EXTRASAMPLE_UNSPECIFIED, s.tile_width = 16, s.tile_height = 32; });
  add("CMYK8", [&](Spec& s) { s.samples = 4, s.photometric = PHOTOMETRIC_SEPARATED; });
  add("gray16 LZW predictor 2", [&](Spec& s) { s.bits = 16, s.compression = kLzw, s.predictor = 2, s.rows_per_strip = 5; });
  add("gray16 deflate tiles", [&](Spec& s) { s.bits = 16, s.compression = kDeflate, s.tile_width = 16, s.tile_height = 16; });
  add("int16 gray PackBits", [&](Spec& s) { s.bits = 16, s.format = SAMPLEFORMAT_INT, s.compression = kPackBits; });
  add("MinIsWhite 16", [&](Spec& s) { s.bits = 16, s.photometric = PHOTOMETRIC_MINISWHITE; });
  add("RGB16 ZSTD predictor 2", [&](Spec& s) { s.bits = 16, s.samples = 3, s.photometric = PHOTOMETRIC_RGB, s.compression = kZstd, s.predictor = 2; });
  add("RGBA16", [&](Spec& s) { s.bits = 16, s.samples = 4, s.photometric = PHOTOMETRIC_RGB, s.extra = EXTRASAMPLE_UNASSALPHA; });
  add("float32 gray deflate predictor 3", [&](Spec& s) { s.bits = 32, s.format = SAMPLEFORMAT_IEEEFP, s.compression = kDeflate, s.predictor = 3; });
  add("float32 RGB LZW tiles", [&](Spec& s) { s.bits = 32, s.format = SAMPLEFORMAT_IEEEFP, s.samples = 3, s.photometric = PHOTOMETRIC_RGB, s.compression = kLzw, s.tile_width = 16, s.tile_height = 16; });
  add("float64 gray", [&](Spec& s) { s.bits = 64, s.format = SAMPLEFORMAT_IEEEFP, s.compression = kZstd; });
  add("RGB16 planar LZW", [&](Spec& s) { s.bits = 16, s.samples = 3, s.photometric = PHOTOMETRIC_RGB, s.planar = PLANARCONFIG_SEPARATE, s.compression = kLzw; });
  add("float32 RGBA planar tiles", [&](Spec& s) { s.bits = 32, s.format = SAMPLEFORMAT_IEEEFP, s.samples = 4, s.photometric = PHOTOMETRIC_RGB, s.extra = EXTRASAMPLE_UNASSALPHA, s.planar = PLANARCONFIG_SEPARATE, s.tile_width = 16, s.tile_height = 32; });
  add("RGB8 planar tiles", [&](Spec& s) { s.samples = 3, s.photometric = PHOTOMETRIC_RGB, s.planar = PLANARCONFIG_SEPARATE, s.tile_width = 32, s.tile_height = 16; });
  // Left to OpenCV, which decides what they give.
  add("gray 4-bit (beyond OpenCV: libtiff's RGBA image)", [&](Spec& s) { s.bits = 4; });
  add("gray8 bottom-left", [&](Spec& s) { s.orientation = ORIENTATION_BOTLEFT, s.taken = false; });
  add("gray 12-bit", [&](Spec& s) { s.bits = 12, s.taken = false; });
  add("int32 gray (refused by name)", [&](Spec& s) { s.bits = 32, s.format = SAMPLEFORMAT_INT, s.taken = false; });
  return v;
}

// OpenCV's answer, or libtiff's where imgstat goes beyond OpenCV, or a
// refusal by name (tiff_reference.hpp); planar 16-bit and float images are
// also checked against the same samples written chunky, below.
std::string reference_difference(const Spec&, const std::string& f, const Answer& a, const Answer& b) {
  return testing::tiff_answer_fault(f, a, b);
}

TEST(Tiff, EveryTypeLayoutAndCompressionGivesOpenCvsPixels) {
  setup_messages();
  uint32_t seed = 11;
  for (const Spec& s : specs()) {
    SCOPED_TRACE(s.name);
    std::mt19937 rng(++seed);
    const std::string f = write_tiff(s, rng);
    ASSERT_FALSE(f.empty());
    const Answer a = ours(f), b = opencv(f);
    EXPECT_EQ(reference_difference(s, f, a, b), "");
    if (s.taken) {
      EXPECT_TRUE(a.ok) << a.error;
      EXPECT_EQ(a.decoder, "libtiff");
    } else {
      EXPECT_NE(a.decoder, "libtiff");
    }
    if (s.planar == PLANARCONFIG_SEPARATE) {
      Spec chunky = s;
      chunky.planar = PLANARCONFIG_CONTIG;
      std::mt19937 same(seed);
      const std::string g = write_tiff(chunky, same);
      EXPECT_EQ(difference(a, ours(g)), "") << "against the same samples written chunky";
    }
  }
}

TEST(Tiff, CorpusFilesTakenOrNotAnswerAsOpenCv) {
  if (!testing::have_corpus()) GTEST_SKIP() << "no corpus";
  setup_messages();
  int taken = 0, left = 0;
  for (const auto& dir : {"tiff", "bad"}) {
    for (const auto& e : std::filesystem::directory_iterator(testing::corpus_dir() / dir)) {
      const std::string f = testing::slurp_file(e.path().string());
      if (f.size() < 4 || !(f.compare(0, 4, "II*\0", 4) == 0 || f.compare(0, 4, "MM\0*", 4) == 0)) continue;
      SCOPED_TRACE(e.path().string());
      const Answer a = ours(f), b = opencv(f);
      // Float64 RGB, which OpenCV 4.6 cannot turn into BGR: checked in corpus_test against ImageMagick.
      const bool float64_rgb = a.ok && !b.ok && a.planes.size() == 3 && a.planes[0].depth() == CV_64F;
      if (!float64_rgb) EXPECT_EQ(difference(a, b), "");
      (a.decoder == "libtiff" ? taken : left) += 1;
    }
  }
  std::printf("corpus TIFFs: %d by decode_tiff, %d left to OpenCV\n", taken, left);
  EXPECT_GE(taken, 20);
}

// Rows handed to the sink in bands, each once and in order, equal the whole
// image; on one core as on several.
TEST(Tiff, BandsAndCoresGiveTheSameRows) {
  std::mt19937 rng(12);
  for (const auto& named : std::vector<std::pair<const char*, Spec>>{
           {"RGB8 LZW strips of 3", [] { Spec s; s.width = 1001, s.height = 1999, s.samples = 3, s.photometric = PHOTOMETRIC_RGB, s.compression = COMPRESSION_LZW, s.rows_per_strip = 3; return s; }()},
           {"gray16 deflate tiles 64x32", [] { Spec s; s.width = 1500, s.height = 1601, s.bits = 16, s.compression = COMPRESSION_ADOBE_DEFLATE, s.tile_width = 64, s.tile_height = 32; return s; }()},
           {"palette tiles", [] { Spec s; s.width = 2000, s.height = 1500, s.photometric = PHOTOMETRIC_PALETTE, s.tile_width = 128, s.tile_height = 128; return s; }()},
           {"gray8 one strip (line by line)", [] { Spec s; s.width = 9000, s.height = 8000, s.compression = COMPRESSION_ADOBE_DEFLATE, s.rows_per_strip = 8000; return s; }()}}) {
    const char* name = named.first;  // no structured binding: lambdas capture spec (clang 14)
    const Spec& spec = named.second;
    SCOPED_TRACE(name);
    const std::string f = write_tiff(spec, rng);
    const DecodedImage whole = decode_image(bytes(f), f.size(), DecodeOptions{});
    ASSERT_EQ(whole.decoder, "libtiff");
    const size_t row_bytes = whole.pixels.cols * whole.pixels.elemSize();
    for (int threads : {1, 8}) {
      SCOPED_TRACE(threads);
      std::vector<uint8_t> band, joined;
      uint32_t rows = 0, next_row = 0, calls = 0;
      RowSink sink;
      sink.begin = [&](uint32_t w, uint32_t h, uint32_t, SampleType) {
        EXPECT_EQ(w, spec.width);
        EXPECT_EQ(h, spec.height);
        rows = plan_tiff(bytes(f), f.size()).band_rows;
        band.resize(size_t{rows} * row_bytes);
        return RowBand{band.data(), rows};
      };
      sink.band = [&](const uint8_t* r, uint32_t first, uint32_t count) {
        EXPECT_EQ(first, next_row);
        next_row += count;
        ++calls;
        joined.insert(joined.end(), r, r + size_t{count} * row_bytes);
        return RowBand{band.data(), rows};
      };
      tbb::task_arena arena(threads);
      const TiffDecode d = arena.execute([&] { return decode_tiff(bytes(f), f.size(), {}, sink); });
      ASSERT_TRUE(d.taken) << d.libtiff_error;
      EXPECT_EQ(next_row, spec.height);
      EXPECT_GT(calls, 1u);
      ASSERT_EQ(joined.size(), whole.pixels.total() * whole.pixels.elemSize());
      EXPECT_EQ(std::memcmp(joined.data(), whole.pixels.data, joined.size()), 0);
    }
  }
}

// A sink that takes rows in place (the analyzer's) is handed an
// uncompressed page's rows where they lie in the file, the whole page at
// once, when they are the pixels; otherwise (another byte or bit order, a
// compressed file) decoded rows in its bands. The rows are the same.
TEST(Tiff, RowsThatAreThePixelsAreHandedWhereTheyLie) {
  std::mt19937 rng(14);
  for (const auto& [name, spec, in_place] : std::vector<std::tuple<const char*, Spec, bool>>{
           {"gray16 strips of 5", [] { Spec s; s.width = 301, s.height = 203, s.bits = 16, s.rows_per_strip = 5; return s; }(), true},
           {"RGB8 one strip", [] { Spec s; s.width = 97, s.height = 61, s.samples = 3, s.photometric = PHOTOMETRIC_RGB, s.rows_per_strip = 61; return s; }(), true},
           {"float32 strips of 7", [] { Spec s; s.width = 128, s.height = 99, s.bits = 32, s.format = SAMPLEFORMAT_IEEEFP; return s; }(), true},
           {"gray16 big-endian", [] { Spec s; s.width = 301, s.height = 203, s.bits = 16, s.rows_per_strip = 5, s.mode = "wb"; return s; }(), false},
           {"gray8 bits reversed", [] { Spec s; s.width = 64, s.height = 40, s.fill_order = FILLORDER_LSB2MSB; return s; }(), false},
           {"gray16 deflate", [] { Spec s; s.width = 301, s.height = 203, s.bits = 16, s.compression = COMPRESSION_ADOBE_DEFLATE; return s; }(), false}}) {
    SCOPED_TRACE(name);
    const std::string f = write_tiff(spec, rng);
    const DecodedImage whole = decode_image(bytes(f), f.size(), DecodeOptions{});
    const size_t row_bytes = whole.pixels.cols * whole.pixels.elemSize();
    std::vector<uint8_t> band, joined;
    uint32_t rows = 0, next_row = 0, calls = 0, elsewhere = 0;
    RowSink sink;
    sink.takes_rows_in_place = true;
    sink.begin = [&](uint32_t, uint32_t, uint32_t, SampleType) {
      rows = 16;
      band.resize(size_t{rows} * row_bytes);
      return RowBand{band.data(), rows};
    };
    sink.band = [&](const uint8_t* r, uint32_t first, uint32_t count) {
      EXPECT_EQ(first, next_row);
      next_row += count;
      ++calls;
      if (r < band.data() || r >= band.data() + band.size()) {
        ++elsewhere;
        EXPECT_TRUE(r >= bytes(f) && r + size_t{count} * row_bytes <= bytes(f) + f.size());
      }
      joined.insert(joined.end(), r, r + size_t{count} * row_bytes);
      return RowBand{band.data(), rows};
    };
    const TiffDecode d = decode_tiff(bytes(f), f.size(), {}, sink);
    ASSERT_TRUE(d.taken) << d.libtiff_error;
    EXPECT_EQ(next_row, spec.height);
    EXPECT_EQ(calls == 1 && elsewhere == 1, in_place);
    EXPECT_EQ(elsewhere > 0, in_place);
    ASSERT_EQ(joined.size(), whole.pixels.total() * whole.pixels.elemSize());
    EXPECT_EQ(std::memcmp(joined.data(), whole.pixels.data, joined.size()), 0);
  }
}

// The bands' memory: a 12000x12000 deflate TIFF of 144 MB pixels plans and
// decodes within a few bands, not the image.
TEST(Tiff, LargeImagesDecodeInBoundedMemory) {
  std::mt19937 rng(13);
  Spec s;
  s.width = s.height = 12000;
  s.compression = COMPRESSION_ADOBE_DEFLATE;
  s.rows_per_strip = 16;
  // write_tiff's random samples would take minutes to compress: a gradient.
  char path[] = "/tmp/imgstat-tiff-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  TIFF* t = TIFFOpen(path, "w");
  TIFFSetField(t, TIFFTAG_IMAGEWIDTH, s.width);
  TIFFSetField(t, TIFFTAG_IMAGELENGTH, s.height);
  TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 8);
  TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, 1);
  TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
  TIFFSetField(t, TIFFTAG_COMPRESSION, s.compression);
  TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, s.rows_per_strip);
  std::vector<uint8_t> strip(size_t{s.width} * s.rows_per_strip);
  for (uint32_t k = 0; k < s.height / s.rows_per_strip; ++k) {
    for (size_t i = 0; i < strip.size(); ++i) strip[i] = static_cast<uint8_t>((i % s.width + k) >> 3);
    ASSERT_GE(TIFFWriteEncodedStrip(t, k, strip.data(), static_cast<tmsize_t>(strip.size())), 0);
  }
  TIFFClose(t);
  const std::string f = slurp(path);
  std::remove(path);
  DecodeOptions options;
  const DecodePlan plan = plan_decode(bytes(f), f.size(), options);
  EXPECT_EQ(plan.memory_bytes >= uint64_t{144'000'000}, true);
  EXPECT_LT(plan.band_memory_bytes, uint64_t{160} << 20);
  struct rusage before {};
  getrusage(RUSAGE_SELF, &before);
  std::vector<uint8_t> band;
  uint64_t sum = 0;
  RowSink sink;
  sink.begin = [&](uint32_t w, uint32_t, uint32_t, SampleType) {
    band.resize(size_t{plan.band_rows} * w);
    return RowBand{band.data(), plan.band_rows};
  };
  sink.band = [&](const uint8_t* r, uint32_t, uint32_t count) {
    for (size_t i = 0; i < size_t{count} * s.width; i += 4096) sum += r[i];
    return RowBand{band.data(), plan.band_rows};
  };
  const BandedDecode d = decode_in_bands(bytes(f), f.size(), plan, options, sink);
  ASSERT_TRUE(d.taken);
  EXPECT_GT(sum, 0u);
  struct rusage after {};
  getrusage(RUSAGE_SELF, &after);
  // Peak resident growth (KiB): the bands and handles, nowhere near 144 MB.
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 120 * 1024);
}

// Where an IFD entry of a classic little-endian TIFF holds its one value.
size_t entry_value(const std::string& f, uint16_t tag) {
  size_t ifd = bytes(f)[4] | bytes(f)[5] << 8 | bytes(f)[6] << 16 | size_t{bytes(f)[7]} << 24;
  const size_t n = bytes(f)[ifd] | bytes(f)[ifd + 1] << 8;
  for (size_t i = 0; i < n; ++i) {
    const size_t e = ifd + 2 + 12 * i;
    if ((bytes(f)[e] | bytes(f)[e + 1] << 8) == tag) return e + 8;
  }
  return 0;
}

void put32(std::string& f, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) f[at + i] = static_cast<char>(v >> (8 * i));
}

TEST(Tiff, HostileOffsetsAndCountsGetClearErrors) {
  setup_messages();
  std::mt19937 rng(14);
  Spec s;
  s.width = 64, s.height = 64, s.rows_per_strip = 64;  // one strip: its offset and count inline
  for (uint16_t compression : {COMPRESSION_NONE, COMPRESSION_LZW}) {
    s.compression = compression;
    const std::string f = write_tiff(s, rng);
    const size_t offset = entry_value(f, TIFFTAG_STRIPOFFSETS), count = entry_value(f, TIFFTAG_STRIPBYTECOUNTS);
    ASSERT_NE(offset, 0u);
    ASSERT_NE(count, 0u);
    std::vector<std::pair<std::string, std::string>> files;
    std::string g = f;
    put32(g, offset, static_cast<uint32_t>(f.size() + 1000));
    files.emplace_back("strip offset past the end", g);
    g = f;
    put32(g, count, 0xffffffffu);
    files.emplace_back("strip byte count 2^32 - 1", g);
    g = f;
    put32(g, offset, static_cast<uint32_t>(f.size() - 10));
    files.emplace_back("strip running past the end", g);
    g = f;
    put32(g, offset, 0);
    files.emplace_back("strip overlapping the header", g);
    for (const auto& [name, file] : files) {
      SCOPED_TRACE(name + (compression == COMPRESSION_LZW ? " (LZW)" : ""));
      struct rusage before {};
      getrusage(RUSAGE_SELF, &before);
      const Answer a = ours(file), b = opencv(file);
      EXPECT_EQ(testing::tiff_answer_fault(file, a, b), "");
      if (!a.ok) EXPECT_NE(a.error.find("TIFF"), std::string::npos) << a.error;
      struct rusage after {};
      getrusage(RUSAGE_SELF, &after);
      EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 64 * 1024);
    }
  }
}

// Damaged files: cut anywhere, bytes changed anywhere (header, directory,
// strips): every verdict and every decoded pixel is OpenCV's, or libtiff's
// beyond it, or a refusal naming what is not supported (tiff_reference.hpp).
TEST(Tiff, DamagedFilesGetOpenCvsVerdictOrARefusalByName) {
  setup_messages();
  std::mt19937 rng(15);
  std::vector<std::string> bases;
  for (const Spec& s : specs()) bases.push_back(write_tiff(s, rng));
  const char* env = std::getenv("IMGSTAT_DAMAGED_FILES");
  const int files = env ? std::atoi(env) : 10000;
  int refused = 0, taken = 0, unwritten = 0;
  for (int i = 0; i < files; ++i) {
    std::string f = bases[rng() % bases.size()];
    const int how = static_cast<int>(rng() % 3);
    if (how == 0) {
      f.resize(8 + rng() % (f.size() - 8));
    } else {
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < flips; ++k) f[how == 1 ? rng() % f.size() : 8 + rng() % (f.size() / 2)] ^= static_cast<char>(1 + rng() % 255);
    }
    const Answer a = ours(f), b = opencv(f);
    const std::string d = testing::tiff_answer_fault(f, a, b);
    unwritten += a.ok && libtiff_leaves_bytes_unwritten(f);
    EXPECT_EQ(d, "") << "damaged file " << i << " (kind " << how << ")";
    if (!d.empty()) {
      std::ofstream("/tmp/imgstat-damaged-" + std::to_string(i) + ".tif", std::ios::binary) << f;
      if (::testing::Test::HasFailure() && i > 50) break;
    }
    refused += !a.ok;
    taken += a.decoder == "libtiff";
  }
  std::printf("%d damaged TIFFs: %d refused, %d decoded by decode_tiff, %d with bytes libtiff left unwritten\n", files,
              refused, taken, unwritten);
}

}  // namespace
}  // namespace imgstat

namespace imgstat {
namespace {

// DecodeOptions::release: the ranges a streamed decoder says it is done
// with lie inside the file and, together, cover nearly all of it (so that a
// caller mapping a file holds what is in flight, not the file), and the
// pixels are those of a decode without it.
TEST(Release, StreamedDecodersGiveBackWhatTheyHaveRead) {
  std::mt19937 rng(18);
  Spec tiff;
  tiff.width = 3000, tiff.height = 2000, tiff.samples = 3, tiff.photometric = PHOTOMETRIC_RGB;
  tiff.compression = COMPRESSION_LZW, tiff.rows_per_strip = 8;
  std::vector<std::pair<std::string, std::string>> files = {{"TIFF strips", write_tiff(tiff, rng)}};
  tiff.tile_width = tiff.tile_height = 128;
  files.emplace_back("TIFF tiles", write_tiff(tiff, rng));
  {
    // A PNG whose image data passes the parallel inflater's threshold, and a small one (zlib alone).
    for (const auto& [w, h] : {std::pair<int, int>{3000, 2000}, std::pair<int, int>{700, 500}}) {
      cv::Mat m(h, w, CV_8UC3);
      cv::randu(m, 0, 255);
      std::vector<uchar> buf;
      cv::imencode(".png", m, buf);
      files.emplace_back("PNG " + std::to_string(w) + "x" + std::to_string(h), std::string(buf.begin(), buf.end()));
    }
  }
  for (const auto& named : files) {
    const std::string& f = named.second;  // no structured binding: lambdas capture f (clang 14)
    SCOPED_TRACE(named.first);
    DecodeOptions plain;
    const DecodedImage want = decode_image(bytes(f), f.size(), plain);
    DecodeOptions options;
    std::vector<uint8_t> given_back(f.size(), 0);
    bool inside = true;
    options.release = [&](uint64_t begin, uint64_t end) {
      inside = inside && begin <= end && end <= f.size();
      for (uint64_t i = begin; i < std::min<uint64_t>(end, f.size()); ++i) given_back[i] = 1;
    };
    // The plan (whose checks give everything back at their end) without it:
    // what is given back here is the decoder's own doing.
    const DecodePlan plan = plan_decode(bytes(f), f.size(), plain);
    std::vector<uint8_t> band, joined;
    uint32_t rows = 0;
    size_t row_bytes = 0;
    RowSink sink;
    sink.begin = [&](uint32_t w, uint32_t h, uint32_t c, SampleType t) {
      row_bytes = size_t{w} * c * sample_size(t);
      rows = plan.band_rows ? std::min(plan.band_rows, h) : band_rows(row_bytes, h);
      band.resize(rows * row_bytes);
      return RowBand{band.data(), rows};
    };
    sink.band = [&](const uint8_t* r, uint32_t, uint32_t count) {
      joined.insert(joined.end(), r, r + count * row_bytes);
      return RowBand{band.data(), rows};
    };
    const BandedDecode got = decode_in_bands(bytes(f), f.size(), plan, options, sink);
    EXPECT_TRUE(inside);
    ASSERT_TRUE(got.taken);
    ASSERT_EQ(got.decoder, want.decoder);
    ASSERT_EQ(joined.size(), want.pixels.total() * want.pixels.elemSize());
    EXPECT_EQ(std::memcmp(joined.data(), want.pixels.data, joined.size()), 0);
    const double covered = static_cast<double>(std::count(given_back.begin(), given_back.end(), 1)) / f.size();
    EXPECT_GT(covered, 0.9) << "of the file given back";
  }
}

}  // namespace
}  // namespace imgstat

namespace imgstat {
namespace {

// Any directory libtiff will write: each strip or tile filled with random
// bytes of the size libtiff computes for it (packed bits, subsampled YCbCr,
// planes), or encoded from random input where the codec needs its input
// (JPEG, SGILog).
struct AnySpec {
  uint32_t width = 13, height = 7;
  uint16_t photometric = PHOTOMETRIC_MINISBLACK, bits = 8, samples = 1, format = SAMPLEFORMAT_UINT;
  uint16_t planar = PLANARCONFIG_CONTIG, compression = COMPRESSION_NONE, orientation = ORIENTATION_TOPLEFT;
  uint32_t rows_per_strip = 3, tile = 0;  // tiled (tile x tile) when set
  int extra = -1;                         // kind of the last sample when set
  uint16_t sub_h = 0, sub_v = 0;          // YCbCr subsampling when set
};

std::string describe_spec(const AnySpec& s) {
  char b[256];
  std::snprintf(b, sizeof b, "%ux%u photometric %u bits %u samples %u format %u planar %u compression %u orientation %u %s extra %d sub %ux%u",
                s.width, s.height, s.photometric, s.bits, s.samples, s.format, s.planar, s.compression, s.orientation,
                s.tile ? ("tiles " + std::to_string(s.tile)).c_str() : ("strips " + std::to_string(s.rows_per_strip)).c_str(),
                s.extra, s.sub_h, s.sub_v);
  return b;
}

// Empty when libtiff would not write it.
std::string write_any(const AnySpec& s, std::mt19937& rng) {
  std::string out;
  char path[] = "/tmp/imgstat-tiff-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return out;
  close(fd);
  TIFFSetErrorHandler(nullptr);
  TIFFSetWarningHandler(nullptr);
  TIFF* t = TIFFOpen(path, "w");
  bool ok = t != nullptr;
  if (ok) {
    TIFFSetField(t, TIFFTAG_IMAGEWIDTH, s.width);
    TIFFSetField(t, TIFFTAG_IMAGELENGTH, s.height);
    TIFFSetField(t, TIFFTAG_PHOTOMETRIC, s.photometric);
    TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, s.samples);
    TIFFSetField(t, TIFFTAG_PLANARCONFIG, s.planar);
    TIFFSetField(t, TIFFTAG_ORIENTATION, s.orientation);
    ok = TIFFSetField(t, TIFFTAG_COMPRESSION, s.compression) != 0;
    const bool sgilog = s.compression == COMPRESSION_SGILOG || s.compression == COMPRESSION_SGILOG24;
    if (sgilog) {
      TIFFSetField(t, TIFFTAG_SGILOGDATAFMT, SGILOGDATAFMT_FLOAT);
    } else {
      TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, s.bits);
      TIFFSetField(t, TIFFTAG_SAMPLEFORMAT, s.format);
    }
    if (s.compression == COMPRESSION_JPEG && s.photometric == PHOTOMETRIC_YCBCR)
      TIFFSetField(t, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB);
    if (s.sub_h) TIFFSetField(t, TIFFTAG_YCBCRSUBSAMPLING, s.sub_h, s.sub_v);
    if (s.extra >= 0) {
      const uint16_t kind = static_cast<uint16_t>(s.extra);
      TIFFSetField(t, TIFFTAG_EXTRASAMPLES, 1, &kind);
    }
    if (s.photometric == PHOTOMETRIC_PALETTE && s.bits <= 16) {
      std::vector<uint16_t> map(size_t{3} << s.bits);
      for (auto& v : map) v = static_cast<uint16_t>(rng());
      const size_t n = size_t{1} << s.bits;
      TIFFSetField(t, TIFFTAG_COLORMAP, map.data(), map.data() + n, map.data() + 2 * n);
    }
    if (s.photometric == PHOTOMETRIC_SEPARATED) TIFFSetField(t, TIFFTAG_INKSET, INKSET_CMYK);
    if (s.tile) {
      TIFFSetField(t, TIFFTAG_TILEWIDTH, s.tile);
      TIFFSetField(t, TIFFTAG_TILELENGTH, s.tile);
    } else {
      TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, s.rows_per_strip);
    }
    // The bytes each unit takes from the caller, decoded size.
    auto fill = [&](std::vector<uint8_t>& buf) {
      if (sgilog) {  // positive luminances and XYZ
        for (size_t i = 0; i + 4 <= buf.size(); i += 4) {
          const float v = std::ldexp(1.0f + float(rng() % 1000) / 1000.0f, int(rng() % 24) - 12);
          std::memcpy(&buf[i], &v, 4);
        }
      } else {
        for (auto& b : buf) b = static_cast<uint8_t>(rng());
      }
    };
    if (ok && s.tile) {
      const tmsize_t size = TIFFTileSize(t);
      ok = size > 0;
      std::vector<uint8_t> buf(ok ? static_cast<size_t>(size) : 0);
      for (uint32_t u = 0; ok && u < TIFFNumberOfTiles(t); ++u) {
        fill(buf);
        ok = TIFFWriteEncodedTile(t, u, buf.data(), size) >= 0;
      }
    } else if (ok) {
      const uint32_t per_plane = (s.height + s.rows_per_strip - 1) / s.rows_per_strip;
      for (uint32_t u = 0; ok && u < TIFFNumberOfStrips(t); ++u) {
        const uint32_t rows = std::min(s.rows_per_strip, s.height - (u % per_plane) * s.rows_per_strip);
        const tmsize_t size = TIFFVStripSize(t, rows);
        ok = size > 0;
        std::vector<uint8_t> buf(ok ? static_cast<size_t>(size) : 0);
        fill(buf);
        ok = ok && TIFFWriteEncodedStrip(t, u, buf.data(), size) >= 0;
      }
    }
    TIFFClose(t);
  }
  if (ok) out = slurp(path);
  std::remove(path);
  return out;
}

struct Tally {
  int files = 0, opencv_pixels = 0, beyond_opencv = 0, refused_by_name = 0, both_refuse = 0;
  void add(const Answer& a, const Answer& b) {
    ++files;
    if (a.ok && b.ok) ++opencv_pixels;
    if (a.ok && !b.ok) ++beyond_opencv;
    if (!a.ok && b.ok) ++refused_by_name;
    if (!a.ok && b.ok && std::getenv("IMGSTAT_TIFF_ROUTES")) std::printf("refused: %s\n", a.error.c_str());
    if (!a.ok && !b.ok) ++both_refuse;
  }
  void print(const char* what) const {
    std::printf("%s: %d files: %d OpenCV's pixels, %d beyond OpenCV (libtiff's pixels), %d refused by name where "
                "OpenCV answers other pixels, %d refused by both\n",
                what, files, opencv_pixels, beyond_opencv, refused_by_name, both_refuse);
  }
};

// What fuzz_tiff found, held to the same rule.
TEST(TiffRoutes, FuzzFindingsAnswerByTheRule) {
  setup_messages();
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(IMGSTAT_FUZZ_CRASHES)) {
    if (e.path().filename().string().rfind("tiff-", 0) != 0) continue;
    const std::string f = slurp(e.path().string());
    SCOPED_TRACE(e.path().filename().string());
    EXPECT_EQ(testing::tiff_answer_fault(f, ours(f), opencv(f)), "");
    ++files;
  }
  EXPECT_GT(files, 1);
}

// Every photometric interpretation, bit depth, sample format and sample
// count libtiff writes, in strips: OpenCV's pixels, libtiff's where imgstat
// reads beyond OpenCV, or an error naming what is not supported. Never an
// OK with other pixels.
TEST(TiffRoutes, EveryPhotometricBitsFormatAndSampleCount) {
  setup_messages();
  std::mt19937 rng(61);
  Tally tally;
  for (uint16_t photometric : {PHOTOMETRIC_MINISWHITE, PHOTOMETRIC_MINISBLACK, PHOTOMETRIC_RGB, PHOTOMETRIC_PALETTE,
                               PHOTOMETRIC_MASK, PHOTOMETRIC_SEPARATED, PHOTOMETRIC_YCBCR, PHOTOMETRIC_CIELAB,
                               PHOTOMETRIC_ICCLAB, PHOTOMETRIC_ITULAB, PHOTOMETRIC_CFA, PHOTOMETRIC_LOGL,
                               PHOTOMETRIC_LOGLUV})
    for (uint16_t bits : {1, 2, 4, 8, 10, 12, 14, 16, 24, 32, 64})
      for (uint16_t format : {SAMPLEFORMAT_UINT, SAMPLEFORMAT_INT, SAMPLEFORMAT_IEEEFP, SAMPLEFORMAT_VOID,
                              SAMPLEFORMAT_COMPLEXINT, SAMPLEFORMAT_COMPLEXIEEEFP})
        for (uint16_t samples : {1, 2, 3, 4, 5}) {
          AnySpec s;
          s.photometric = photometric, s.bits = bits, s.format = format, s.samples = samples;
          if (photometric == PHOTOMETRIC_YCBCR) s.sub_h = s.sub_v = 1;
          const std::string f = write_any(s, rng);
          if (f.empty()) continue;
          SCOPED_TRACE(describe_spec(s));
          const Answer a = ours(f), b = opencv(f);
          EXPECT_EQ(testing::tiff_answer_fault(f, a, b), "");
          tally.add(a, b);
        }
  // SGILog-coded LogL and LogLuv, as libtiff writes them.
  for (uint16_t photometric : {PHOTOMETRIC_LOGL, PHOTOMETRIC_LOGLUV})
    for (uint16_t compression : {COMPRESSION_SGILOG, COMPRESSION_SGILOG24}) {
      AnySpec s;
      s.photometric = photometric, s.compression = compression, s.samples = photometric == PHOTOMETRIC_LOGL ? 1 : 3;
      s.width = 41, s.height = 23;
      const std::string f = write_any(s, rng);
      if (f.empty()) continue;
      SCOPED_TRACE(describe_spec(s));
      const Answer a = ours(f), b = opencv(f);
      EXPECT_EQ(testing::tiff_answer_fault(f, a, b), "");
      EXPECT_TRUE(a.ok) << a.error;  // LogL: libtiff's float luminance; LogLuv: OpenCV's float RGB
      if (a.ok) EXPECT_EQ(a.planes[0].depth(), CV_32F);
      tally.add(a, b);
    }
  tally.print("photometric x bits x format x samples");
  EXPECT_GT(tally.opencv_pixels, 40);
  EXPECT_GT(tally.beyond_opencv, 10);
  EXPECT_GT(tally.refused_by_name, 5);
}

// The layouts of the kinds read: strips and tiles of odd sizes, planes,
// orientations, extra samples, subsampled YCbCr, every codec.
TEST(TiffRoutes, EveryLayoutOfTheKindsRead) {
  setup_messages();
  std::mt19937 rng(62);
  Tally tally;
  struct Kind {
    uint16_t photometric, bits, samples, format;
  };
  const std::vector<Kind> kinds = {
      {PHOTOMETRIC_MINISBLACK, 1, 1, SAMPLEFORMAT_UINT}, {PHOTOMETRIC_MINISWHITE, 4, 1, SAMPLEFORMAT_UINT},
      {PHOTOMETRIC_PALETTE, 2, 1, SAMPLEFORMAT_UINT},    {PHOTOMETRIC_PALETTE, 8, 1, SAMPLEFORMAT_UINT},
      {PHOTOMETRIC_MINISBLACK, 8, 1, SAMPLEFORMAT_INT},  {PHOTOMETRIC_MINISBLACK, 8, 2, SAMPLEFORMAT_UINT},
      {PHOTOMETRIC_RGB, 8, 3, SAMPLEFORMAT_UINT},        {PHOTOMETRIC_RGB, 8, 4, SAMPLEFORMAT_UINT},
      {PHOTOMETRIC_SEPARATED, 8, 4, SAMPLEFORMAT_UINT},  {PHOTOMETRIC_YCBCR, 8, 3, SAMPLEFORMAT_UINT},
      {PHOTOMETRIC_CIELAB, 8, 3, SAMPLEFORMAT_UINT},     {PHOTOMETRIC_MINISBLACK, 12, 1, SAMPLEFORMAT_UINT},
      {PHOTOMETRIC_MINISBLACK, 16, 1, SAMPLEFORMAT_INT}, {PHOTOMETRIC_RGB, 16, 3, SAMPLEFORMAT_UINT},
      {PHOTOMETRIC_RGB, 16, 4, SAMPLEFORMAT_UINT},       {PHOTOMETRIC_MINISBLACK, 32, 1, SAMPLEFORMAT_IEEEFP},
      {PHOTOMETRIC_RGB, 32, 3, SAMPLEFORMAT_IEEEFP},     {PHOTOMETRIC_RGB, 64, 3, SAMPLEFORMAT_IEEEFP},
      {PHOTOMETRIC_RGB, 64, 4, SAMPLEFORMAT_IEEEFP},     {PHOTOMETRIC_MINISBLACK, 32, 2, SAMPLEFORMAT_IEEEFP}};
  const std::vector<std::pair<uint32_t, uint32_t>> sizes = {{1, 1}, {37, 53}, {257, 3}};
  int n = 0;
  for (const Kind& k : kinds)
    for (const auto& [w, h] : sizes)
      for (uint16_t planar : {PLANARCONFIG_CONTIG, PLANARCONFIG_SEPARATE})
        for (uint32_t tile : {0u, 16u, 48u})
          for (uint16_t compression : {COMPRESSION_NONE, COMPRESSION_LZW, COMPRESSION_ADOBE_DEFLATE, COMPRESSION_PACKBITS,
                                       COMPRESSION_JPEG}) {
            if (planar == PLANARCONFIG_SEPARATE && k.samples == 1) continue;
            if (compression == COMPRESSION_JPEG && (k.bits != 8 || k.format != SAMPLEFORMAT_UINT ||
                                                    k.photometric == PHOTOMETRIC_PALETTE || k.samples == 2))
              continue;
            AnySpec s;
            s.photometric = k.photometric, s.bits = k.bits, s.samples = k.samples, s.format = k.format;
            s.width = w, s.height = h, s.planar = planar, s.tile = tile, s.compression = compression;
            s.rows_per_strip = 1 + rng() % 9;
            // Each file a different orientation, extra sample kind and subsampling, in turn.
            s.orientation = static_cast<uint16_t>(1 + (n++ % 8));
            if ((k.samples == 2 || k.samples == 4) && k.photometric != PHOTOMETRIC_SEPARATED) s.extra = n % 3;
            if (k.photometric == PHOTOMETRIC_YCBCR) {
              static const uint16_t kSub[][2] = {{1, 1}, {2, 1}, {2, 2}, {4, 2}, {4, 4}, {1, 2}};
              s.sub_h = kSub[n % 6][0], s.sub_v = kSub[n % 6][1];
            }
            const std::string f = write_any(s, rng);
            if (f.empty()) continue;
            SCOPED_TRACE(describe_spec(s));
            const Answer a = ours(f), b = opencv(f);
            EXPECT_EQ(testing::tiff_answer_fault(f, a, b), "");
            tally.add(a, b);
          }
  tally.print("layouts");
  EXPECT_GT(tally.files, 500);
}

}  // namespace
}  // namespace imgstat
