// The decode library on its own: what plans read from headers, the bounds
// they promise, and the JPEG checks.
#include <gtest/gtest.h>
#include <opencv2/imgcodecs.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <cstring>
#include <limits>
#include <thread>

#include <jpeglib.h>  // after <cstdio>: it needs FILE
#include <tbb/task_arena.h>

#include "corpus.hpp"
#include "decode/decode.hpp"
#include "decode/facts.hpp"
#include "decode/large_buffers.hpp"
#include "decode/jpeg/check.hpp"
#include "decode/library_messages.hpp"
#include "decode/sniff.hpp"
#include "hostile/inputs.hpp"
#include "jpeg_samples.hpp"

namespace imgstat {
namespace {

using testing::corpus_dir;
using testing::have_corpus;
using testing::slurp_file;

const uint8_t* bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

ErrorCode plan_code(const std::string& data, uint64_t max_pixels = uint64_t{1} << 30) {
  DecodeOptions o;
  o.max_pixels = max_pixels;
  try {
    plan_decode(bytes(data), data.size(), o);
  } catch (const Error& e) {
    return e.code();
  }
  return static_cast<ErrorCode>(0);
}

TEST(Plan, EveryFormatsDeclaredSizeIsCheckedFromItsHeader) {
  for (const auto& [format, data] : testing::huge_headers(100000, 100000)) {
    SCOPED_TRACE(format);
    ASSERT_EQ(probe(bytes(data), data.size()).format, format);
    EXPECT_EQ(plan_code(data), ErrorCode::kResourceExhausted);
  }
  for (const auto& [format, data] : testing::huge_headers(3000, 2000)) {
    if (format == "JPEG") continue;  // libjpeg wants more than a header to give its size
    SCOPED_TRACE(format);
    const Probe p = probe(bytes(data), data.size());
    EXPECT_TRUE(p.has_size);
    EXPECT_EQ(p.width, 3000u);
    EXPECT_EQ(p.height, 2000u);
  }
}

TEST(Plan, GifSizeIsTheFirstFramesNotTheScreens) {
  const std::string gif = testing::giant_frame_gif(300, 200);
  const Probe p = probe(bytes(gif), gif.size());
  EXPECT_EQ(p.width, 300u);
  EXPECT_EQ(p.height, 200u);
}

TEST(Plan, Os2BmpSizesAreUnsigned) {
  const std::string bmp = testing::os2_bmp(40000, 2, false);
  const Probe p = probe(bytes(bmp), bmp.size());
  EXPECT_EQ(p.width, 40000u);
  EXPECT_EQ(plan_code(testing::os2_bmp(40000, 40000, false)), ErrorCode::kResourceExhausted);
}

TEST(Plan, TiffMemoryFollowsDepthAndSamples) {
  const std::string t = testing::tiff_declaring(1000, 1000, 64, 4, 3);
  DecodeOptions o;
  EXPECT_GE(plan_decode(bytes(t), t.size(), o).memory_bytes, 1000u * 1000 * 32);
  const std::string g = testing::tiff_declaring(1000, 1000, 16, 1, 1);
  EXPECT_LT(plan_decode(bytes(g), g.size(), o).memory_bytes, 1000u * 1000 * 8);
}

TEST(Plan, FilesTooSmallForWhatTheyDeclare) {
  std::string png = testing::zero_png(64, 64, 0, 8);
  EXPECT_EQ(plan_code(png), static_cast<ErrorCode>(0));
  png[18] = '\x80', png[19] = '\x00', png[22] = '\x80', png[23] = '\x00';  // 32768 x 32768
  EXPECT_EQ(plan_code(png), ErrorCode::kInvalidArgument);
  EXPECT_EQ(plan_code(testing::giant_frame_gif(20000, 20000)), ErrorCode::kInvalidArgument);
}

// The promise the budget relies on: no decode holds more than its plan said.
TEST(Plan, DecodedPixelsNeverExceedThePlannedMemory) {
  if (!have_corpus()) GTEST_SKIP() << "no corpus";
  int decoded = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(corpus_dir())) {
    if (!entry.is_regular_file() || entry.path().parent_path().filename() == "raw") continue;
    const std::string data = testing::slurp_file(entry.path().string());
    DecodeOptions o;
    o.allow_truncated = true;
    try {
      const DecodePlan plan = plan_decode(bytes(data), data.size(), o);
      const DecodedImage img = decode_image(bytes(data), data.size(), plan, o);
      EXPECT_LE(img.pixels.total() * img.pixels.elemSize(), plan.memory_bytes) << entry.path();
      EXPECT_EQ(static_cast<uint64_t>(img.pixels.cols), plan.width) << entry.path();
      EXPECT_EQ(static_cast<uint64_t>(img.pixels.rows), plan.height) << entry.path();
      ++decoded;
    } catch (const Error&) {
    }
  }
  EXPECT_GT(decoded, 190);
}

// Every input a fuzzer crashed on stays a test: a plan and a decode that end
// in a result or an imgstat::Error.
TEST(Plan, InputsFuzzersCrashedOn) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(IMGSTAT_FUZZ_CRASHES)) {
    const std::string data = testing::slurp_file(entry.path().string());
    DecodeOptions o;
    o.max_pixels = uint64_t{1} << 22;
    try {
      decode_image(bytes(data), data.size(), o);
    } catch (const Error&) {
    }
    ++files;
  }
  EXPECT_GT(files, 0);
}

std::string encode_jpeg(bool progressive, int w = 256, int h = 192) {
  cv::Mat img(h, w, CV_8UC3);
  cv::randu(img, 0, 255);
  std::vector<uchar> out;
  cv::imencode(".jpg", img, out, {cv::IMWRITE_JPEG_PROGRESSIVE, progressive ? 1 : 0});
  return std::string(out.begin(), out.end());
}

// The one-pass JPEG decode (libjpeg-turbo directly, the check included)
// gives OpenCV's pixels, sample for sample: every corpus JPEG, every sampling
// libjpeg-turbo writes at odd sizes and restart intervals, progressive files,
// and files cut short and analyzed anyway (OpenCV then sees FF D9 appended,
// as libjpeg's file reader supplies it).
// An OME-XML's images are a file's series: each one's axes and pages as
// its Pixels and TiffData say; text that lies or is cut is no OME layout
// (the file is then read as its pages' kinds say), never a read past it.
TEST(Plan, OmeImagesAreSeriesAndLyingXmlIsNone) {
  const std::string two =
      R"(<OME xmlns="x"><Image ID="Image:0"><Pixels DimensionOrder="XYCZT" SizeX="30" SizeY="20" SizeC="3" SizeZ="2" )"
      R"(SizeT="1"><Channel ID="c0" SamplesPerPixel="1"/><Channel ID="c1"/><Channel ID="c2"/><TiffData IFD="0" )"
      R"(PlaneCount="6"/></Pixels></Image><Image ID="Image:1"><Pixels DimensionOrder="XYZTC" SizeC="3" SizeZ="1" )"
      R"(SizeT="4"><Channel ID="c" SamplesPerPixel="3"/><TiffData IFD="6"/></Pixels></Image></OME>)";
  const std::vector<OmeImage> images = ome_images(two);
  ASSERT_EQ(images.size(), 2u);
  EXPECT_EQ(images[0].axes.order, "CZT");
  EXPECT_EQ((std::vector<uint64_t>{images[0].first_page, images[0].planes, images[0].axes.c}),
            (std::vector<uint64_t>{0, 6, 3}));
  // An RGB channel: three samples of one page, so one plane a (z, t).
  EXPECT_EQ((std::vector<uint64_t>{images[1].first_page, images[1].planes, images[1].axes.c, images[1].axes.t}),
            (std::vector<uint64_t>{6, 4, 1, 4}));
  EXPECT_EQ(stack_axes_of(two, 4, 1).t, 4u);
  EXPECT_EQ(stack_axes_of(two, 6, 0).z, 2u);
  EXPECT_EQ(stack_axes_of(two, 7, 0).source, "");  // sizes that do not multiply to the pages
  EXPECT_EQ(stack_axes_of(two, 4, 2).source, "");  // no third image
  // Every prefix of it, and of it with each number made huge: no OME layout or a bounded one.
  for (size_t n = 0; n <= two.size(); ++n) {
    for (const std::string& text : {two.substr(0, n), two.substr(0, n) + R"(" SizeZ="99999999999999999999">)"}) {
      for (const OmeImage& i : ome_images(text)) {
        EXPECT_LT(i.planes, uint64_t{1} << 62);
        EXPECT_LT(i.first_page, uint64_t{1} << 32);
      }
    }
  }
  EXPECT_TRUE(ome_images(R"(<OME><Pixels DimensionOrder="XYZCT" SizeZ="2000000000" SizeC="2000000000" SizeT="2000000000">)").empty());
  EXPECT_TRUE(ome_images(R"(<OME><Pixels DimensionOrder="XYQCT" SizeZ="2">)").empty());
  EXPECT_TRUE(ome_images(R"(<OME><Pixels DimensionOrder="XYZCT" SizeZ="0">)").empty());
  EXPECT_TRUE(ome_images(R"(<Pixels DimensionOrder="XYZCT" SizeZ="2">)").empty());  // not OME
}

// A FITS file of `planes` planes of w x h values written big-endian as BITPIX says.
std::string fits_cube(int bitpix, uint64_t w, uint64_t h, uint64_t planes, const std::vector<std::string>& more,
                      std::mt19937_64& rng) {
  std::vector<std::string> cards = {"SIMPLE  =                    T", "BITPIX  = " + std::string(20 - std::to_string(bitpix).size(), ' ') + std::to_string(bitpix),
                                    "NAXIS   =                    3"};
  const uint64_t sizes[3] = {w, h, planes};
  for (int i = 0; i < 3; ++i) {
    const std::string v = std::to_string(sizes[i]);
    cards.push_back("NAXIS" + std::to_string(i + 1) + "  = " + std::string(20 - v.size(), ' ') + v);
  }
  for (const std::string& c : more) cards.push_back(c);
  cards.push_back("END");
  std::string out;
  for (const std::string& c : cards) out += c + std::string(80 - c.size(), ' ');
  out.resize((out.size() + 2879) / 2880 * 2880, ' ');
  const size_t stored = static_cast<size_t>(std::abs(bitpix) / 8);
  for (uint64_t i = 0; i < w * h * planes; ++i) {
    uint64_t bits = rng();
    if (bitpix == -32) {
      float f = std::normal_distribution<float>(1000, 30)(rng);
      if (i % 97 == 5) f = std::numeric_limits<float>::quiet_NaN();
      uint32_t u;
      std::memcpy(&u, &f, 4);
      bits = u;
    } else if (bitpix == -64) {
      double f = std::normal_distribution<double>(-3, 1e6)(rng);
      std::memcpy(&bits, &f, 8);
    } else if (bitpix == 16 && i % 89 == 3) {
      bits = 0x8000;  // BLANK -32768, where the file says so
    }
    for (size_t b = 0; b < stored; ++b) out.push_back(static_cast<char>(bits >> (8 * (stored - 1 - b))));
  }
  out.resize((out.size() + 2879) / 2880 * 2880, '\0');
  return out;
}

// An uncompressed FITS image's planes read where they lie (read_planes, as
// the analyzer's engines read them: any range, on any thread, again) are
// byte for byte its planes decoded in bands, for each kind of scaling.
TEST(Fits, PlanesReadWhereTheyLieEqualTheirBands) {
  std::mt19937_64 rng(50);
  struct Case {
    int bitpix;
    std::vector<std::string> more;
  };
  const std::vector<Case> cases = {
      {-32, {}},
      {-64, {}},
      {8, {}},
      {16, {"BZERO   =                32768"}},                                            // uint16
      {16, {"BSCALE  =                  0.5", "BZERO   =                 -3.0", "BLANK   =               -32768"}},  // float with NaN
      {32, {"BZERO   =                  1.5"}},                                            // float64
  };
  for (const Case& c : cases) {
    const std::string file = fits_cube(c.bitpix, 37, 29, 5, c.more, rng);
    for (const auto& [first, count] : {std::pair<uint64_t, uint64_t>{0, 0}, {1, 3}, {4, 1}}) {
      SCOPED_TRACE("BITPIX " + std::to_string(c.bitpix) + ", planes from " + std::to_string(first));
      DecodeOptions o;
      o.first_plane = first;
      o.plane_count = count;
      const DecodePlan plan = plan_decode(bytes(file), file.size(), o);
      ASSERT_TRUE(plan.readable);
      const DecodedImage banded = decode_planes(bytes(file), file.size(), plan, o);
      const Layout& l = banded.view.layout;
      const uint64_t total = l.height * l.row_bytes();
      RowSink sink;
      sink.begin = [](uint32_t, uint32_t, uint32_t, SampleType) -> RowBand { ADD_FAILURE() << "bands asked for"; return {}; };
      std::vector<uint8_t> read(static_cast<size_t>(total), 0xA5);
      sink.read_planes = [&](const Layout& plane, uint64_t planes, const ByteReader& reader) {
        EXPECT_EQ(plane.height * planes, l.height);
        EXPECT_EQ(plane.row_bytes(), l.row_bytes());
        EXPECT_EQ(plane.type, l.type);
        // Odd ranges cutting values, from 4 threads at once, then all of it again from the end.
        std::vector<std::pair<uint64_t, uint64_t>> ranges;
        for (uint64_t at = 0; at < total;) {
          const uint64_t n = std::min<uint64_t>(total - at, 1 + rng() % 301);
          ranges.emplace_back(at, n);
          at += n;
        }
        std::vector<std::thread> threads;
        for (size_t t = 0; t < 4; ++t)
          threads.emplace_back([&, t] {
            for (size_t i = t; i < ranges.size(); i += 4) reader(ranges[i].first, ranges[i].second, read.data() + ranges[i].first);
          });
        for (std::thread& t : threads) t.join();
        EXPECT_EQ(0, std::memcmp(read.data(), banded.view.data, static_cast<size_t>(total)));
        std::vector<uint8_t> again(static_cast<size_t>(total));
        for (uint64_t end = total; end > 0;) {
          const uint64_t n = std::min<uint64_t>(end, 4096 + 3);
          reader(end - n, n, again.data() + end - n);
          end -= n;
        }
        EXPECT_EQ(again, read);
      };
      BandedDecode d = decode_in_bands(bytes(file), file.size(), plan, o, sink);
      EXPECT_TRUE(d.taken);
    }
  }
}

TEST(Decode, JpegInOnePassEqualsOpenCvsDecode) {
  std::vector<std::pair<std::string, std::string>> files;
  if (have_corpus())
    for (const auto& e : std::filesystem::recursive_directory_iterator(corpus_dir())) {
      if (!e.is_regular_file()) continue;
      std::string f = testing::slurp_file(e.path().string());
      if (f.size() > 3 && static_cast<uint8_t>(f[0]) == 0xff && static_cast<uint8_t>(f[1]) == 0xd8)
        files.emplace_back(e.path().filename().string(), std::move(f));
    }
  uint32_t seed = 5;
  for (const testing::JpegSampling& s : testing::jpeg_samplings())
    for (const auto& [w, h] : {std::pair{1, 1}, {17, 5}, {101, 61}, {333, 201}})
      for (int restart : {0, 3})
        files.emplace_back(std::string(s.name) + " " + std::to_string(w) + "x" + std::to_string(h),
                           testing::write_jpeg(w, h, s, restart, 85, seed++));
  files.emplace_back("progressive", encode_jpeg(true, 301, 199));
  int compared = 0, cut = 0;
  for (const auto& [name, whole] : files) {
    for (const bool truncate : {false, true}) {
      const std::string f = truncate ? whole.substr(0, whole.size() * 2 / 3) : whole;
      DecodeOptions o;
      o.allow_truncated = true;
      DecodedImage got;
      try {
        got = decode_image(bytes(f), f.size(), o);
      } catch (const Error&) {
        continue;  // refused (corrupt, or a header cut off): nothing to compare
      }
      std::string completed = f;
      completed += "\xff\xd9";
      const cv::Mat want = cv::imdecode(cv::Mat(1, static_cast<int>(completed.size()), CV_8U, completed.data()),
                                        cv::IMREAD_UNCHANGED);
      ASSERT_FALSE(want.empty()) << name;
      const Layout& l = got.view.layout;
      ASSERT_EQ(l.width, static_cast<uint64_t>(want.cols)) << name;
      ASSERT_EQ(l.height, static_cast<uint64_t>(want.rows)) << name;
      ASSERT_EQ(l.channels, static_cast<uint32_t>(want.channels())) << name;
      uint64_t differ = 0;
      for (uint64_t y = 0; y < l.height; ++y) {
        const uint8_t* row = static_cast<const uint8_t*>(got.view.data) + y * l.stride();
        for (uint64_t x = 0; x < l.width; ++x)
          for (uint32_t c = 0; c < l.channels; ++c) {
            // Reported channel c: engine channel channel_order[c] here, OpenCV's BGR there.
            const uint32_t cv_channel = l.channels >= 3 && c < 3 ? 2 - c : c;
            differ += row[x * l.channels + got.channel_order[c]] != want.ptr<uint8_t>(static_cast<int>(y))[x * l.channels + cv_channel];
          }
      }
      EXPECT_EQ(differ, 0u) << name << (truncate ? " (cut)" : "");
      ++compared;
      cut += truncate;
    }
  }
  std::printf("%d decodes compared with OpenCV's, %d of them cut short\n", compared, cut);
  EXPECT_GT(compared, 50);
  EXPECT_GT(cut, 20);
}

// What decode_image answers for a file: its pixels in reported order and
// its warnings, or its error.
std::string outcome_of(const std::string& f, std::vector<uint8_t>* pixels) {
  pixels->clear();
  try {
    DecodedImage d = decode_image(bytes(f), f.size(), DecodeOptions{});
    const Layout& l = d.view.layout;
    for (uint64_t y = 0; y < l.height; ++y) {
      const uint8_t* row = static_cast<const uint8_t*>(d.view.data) + y * l.stride();
      for (uint64_t x = 0; x < l.width; ++x)
        for (uint32_t c = 0; c < l.channels; ++c) pixels->push_back(row[x * l.channels + d.channel_order[c]]);
    }
    std::string w = d.decoder + " " + std::to_string(l.width) + "x" + std::to_string(l.height);
    for (const std::string& s : d.warnings) w += " [" + s + "]";
    return w;
  } catch (const Error& e) {
    return "error " + std::to_string(static_cast<int>(e.code())) + ": " + e.what();
  }
}

uint32_t runs_of(const std::string& f) {
  std::vector<uint8_t> rows;
  RowSink sink;
  sink.begin = [&](uint32_t w, uint32_t h, uint32_t c, SampleType) {
    rows.resize(size_t{w} * h * c);
    return RowBand{rows.data(), h};
  };
  sink.band = [](const uint8_t*, uint32_t, uint32_t) { return RowBand{}; };
  bool taken = false;
  const JpegCheck check = decode_jpeg(bytes(f), f.size(), {}, sink, &taken);
  return taken ? check.runs : 0;
}

TEST(Jpeg, RunsCutAtRestartMarkersDecodeAsOnePass) {
  // A file with restart markers decodes in runs on several cores (four
  // here, whatever this machine has); in an arena of one core, in one pass.
  // Pixels, warnings and errors must not depend on which ran: clean files of
  // every subsampling and interval (a part of an MCU row, one, several, none
  // that meets a row's start), odd sizes, each cut or bit-flipped, and stray
  // bytes before its markers.
  tbb::task_arena four(4), one(1);
  int files = 0, in_runs = 0, damaged = 0;
  uint32_t seed = 11;
  for (const testing::JpegSampling& s : testing::jpeg_samplings())
    for (const auto& [w, h] : {std::pair{1001, 777}, {97, 1203}, {2000, 40}, {333, 201}}) {
      const uint32_t mcu_w = 8 * static_cast<uint32_t>(s.h);
      const int per_row = static_cast<int>((static_cast<uint32_t>(w) + mcu_w - 1) / mcu_w);
      for (int restart : {1, per_row, 2 * per_row, 7, per_row + 1}) {
        const std::string f = testing::write_jpeg(w, h, s, restart, 90, seed++);
        std::vector<std::string> cases = {f};
        if (files % 13 == 0)
          for (const std::string& d : testing::damaged_jpegs(f, seed, 16)) cases.push_back(d);
        for (const std::string& d : testing::stray_byte_jpegs(f, 4)) cases.push_back(d);
        for (size_t i = 0; i < cases.size(); ++i) {
          std::vector<uint8_t> a, b;
          const std::string want = one.execute([&] { return outcome_of(cases[i], &a); });
          const std::string got = four.execute([&] { return outcome_of(cases[i], &b); });
          const std::string name = std::string(s.name) + " " + std::to_string(w) + "x" + std::to_string(h) +
                                   " restart " + std::to_string(restart) + (i ? " damaged #" + std::to_string(i) : "");
          ASSERT_EQ(got, want) << name;
          ASSERT_TRUE(a == b) << name;
          damaged += i > 0;
        }
        const uint32_t runs = four.execute([&] { return runs_of(f); });
        EXPECT_EQ(one.execute([&] { return runs_of(f); }), 0u);
        // Every interval that meets row starts often enough is cut.
        if (h > 200 && restart <= 2 * per_row && (restart == 1 || per_row % restart == 0 || restart % per_row == 0))
          EXPECT_GT(runs, 1u) << s.name << " " << w << "x" << h << " restart " << restart;
        in_runs += runs > 1;
        ++files;
      }
    }
  std::printf("%d files (%d decoded in runs), %d damaged versions: the same answers in runs as in one pass\n", files,
              in_runs, damaged);
  EXPECT_GT(in_runs, files / 2);
}

TEST(Jpeg, HeaderGivesSizeBlocksAndMode) {
  const std::string jpg = encode_jpeg(true);
  const JpegHeader h = read_jpeg_header(bytes(jpg), jpg.size(), 1 << 30);
  EXPECT_EQ(h.width, 256u);
  EXPECT_EQ(h.height, 192u);
  EXPECT_TRUE(h.progressive);
  EXPECT_EQ(h.components, 3u);
  EXPECT_EQ(h.blocks, 32u * 24 + 2 * 16u * 12);  // 4:2:0
  EXPECT_EQ(jpeg_coefficient_bytes(h), h.blocks * 128);
}

TEST(Jpeg, WholeFilesPassCutFilesAreTruncated) {
  for (bool progressive : {false, true}) {
    SCOPED_TRACE(progressive ? "progressive" : "baseline");
    const std::string whole = encode_jpeg(progressive);
    JpegCheck c = check_jpeg(bytes(whole), whole.size());
    EXPECT_TRUE(c.ok);
    EXPECT_FALSE(c.truncated);
    for (double cut : {0.3, 0.5, 0.9}) {
      const std::string part = whole.substr(0, static_cast<size_t>(whole.size() * cut));
      c = check_jpeg(bytes(part), part.size());
      EXPECT_TRUE(!c.ok || c.truncated) << "cut at " << cut;
      const std::string marked = part + "\xff\xd9";
      c = check_jpeg(bytes(marked), marked.size());
      EXPECT_TRUE(!c.ok || c.truncated) << "cut at " << cut << " with FF D9";
    }
  }
}

TEST(Jpeg, EveryCorpusJpegCutInHalfWithItsEndMarkerIsRefused) {
  // What the GPU path relies on: libjpeg's check, run before any JPEG
  // decoder, refuses half a file with FF D9 appended, whatever its coding
  // (baseline, progressive, arithmetic, 12-bit, CMYK).
  if (!have_corpus()) GTEST_SKIP() << "no corpus";
  int cut = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(corpus_dir())) {
    if (!entry.is_regular_file()) continue;
    const std::string whole = testing::slurp_file(entry.path().string());
    if (whole.size() < 2000 || static_cast<uint8_t>(whole[0]) != 0xff || static_cast<uint8_t>(whole[1]) != 0xd8) continue;
    try {
      check_jpeg_data(bytes(whole), whole.size(), DecodeOptions{});
      // Arithmetic coding may meet a marker anywhere and decode zeros after
      // it (its encoder drops trailing zero bytes): a cut arithmetic-coded
      // file cannot be told from a whole one. docs/conventions.md says so.
      if (read_jpeg_header(bytes(whole), whole.size(), uint64_t{1} << 40).arithmetic) continue;
    } catch (const Error&) {
      continue;  // refused whole already
    }
    const std::string half = whole.substr(0, whole.size() / 2) + "\xff\xd9";
    SCOPED_TRACE(entry.path().filename().string());
    try {
      check_jpeg_data(bytes(half), half.size(), DecodeOptions{});
      ADD_FAILURE() << "half a file with FF D9 passed the check";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    }
    ++cut;
  }
  EXPECT_GE(cut, 5);
}

TEST(Jpeg, CheckStopsWhenCancelled) {
  const std::string whole = encode_jpeg(false, 1024, 1024);
  std::atomic<int> polls{0};
  const JpegCheck c = check_jpeg(bytes(whole), whole.size(), [&] { return ++polls > 3; });
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.error, "cancelled");
}


// libpng and OpenCV print on their own; once caught, what they say while a
// file decodes is part of its error, and a stray line goes to the handler.
// A JPEG written by libjpeg at a quality, luma sampling h x v, and mode.
std::vector<uint8_t> write_jpeg(int quality, int h, int v, bool progressive, int components = 3) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &out, &size);
  c.image_width = 64;
  c.image_height = 48;
  c.input_components = components;
  c.in_color_space = components == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  c.comp_info[0].h_samp_factor = h;
  c.comp_info[0].v_samp_factor = v;
  if (progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  std::vector<uint8_t> row(64 * static_cast<size_t>(components));
  for (int y = 0; y < 48; ++y) {
    for (size_t i = 0; i < row.size(); ++i) row[i] = static_cast<uint8_t>((i * 7 + static_cast<size_t>(y) * 13) % 256);
    JSAMPROW r = row.data();
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  std::vector<uint8_t> jpeg(out, out + size);
  jpeg_destroy_compress(&c);
  free(out);
  return jpeg;
}

// JPEGs written at known qualities and samplings: the estimate is the
// quality, the sampling and the mode are what was asked for.
TEST(Facts, JpegQualitySubsamplingAndProgressiveAsWritten) {
  const struct { int h, v; const char* name; } samplings[] = {
      {2, 2, "4:2:0"}, {2, 1, "4:2:2"}, {1, 1, "4:4:4"}, {1, 2, "4:4:0"}, {4, 1, "4:1:1"}};
  for (int quality : {5, 30, 50, 75, 90, 95, 100})
    for (const auto& s : samplings)
      for (bool progressive : {false, true}) {
        const std::vector<uint8_t> jpeg = write_jpeg(quality, s.h, s.v, progressive);
        const Facts f = read_facts(jpeg.data(), jpeg.size());
        SCOPED_TRACE("quality " + std::to_string(quality) + " " + s.name);
        EXPECT_EQ(f.jpeg_quality, static_cast<uint32_t>(quality));
        EXPECT_EQ(f.chroma_subsampling, s.name);
        EXPECT_EQ(f.progressive, progressive);
        EXPECT_EQ(f.bit_depth, 8u);
        EXPECT_EQ(f.color_type, "ycbcr");
        EXPECT_FALSE(f.icc_profile);
        EXPECT_EQ(f.exif_orientation, 0u);
      }
  const std::vector<uint8_t> gray = write_jpeg(60, 1, 1, false, 1);
  const Facts f = read_facts(gray.data(), gray.size());
  EXPECT_EQ(f.color_type, "gray");
  EXPECT_EQ(f.chroma_subsampling, "");
  EXPECT_EQ(f.jpeg_quality, 60u);
}

// Every PNG in the corpus: the bit depth and colour type its manifest
// records; the palette files have their palette, and the EXIF and ICC
// files say so.
TEST(Facts, CorpusPngsAsTheirManifestSays) {
  if (!have_corpus()) GTEST_SKIP() << "no corpus";
  std::ifstream manifest(corpus_dir() / "MANIFEST.tsv");
  std::string line;
  std::getline(manifest, line);
  int checked = 0;
  while (std::getline(manifest, line)) {
    std::vector<std::string> col;
    std::stringstream in(line);
    for (std::string c; std::getline(in, c, '\t');) col.push_back(c);
    if (col.size() < 15 || col[2] != "PNG" || col[1] == "bad" || col[6].empty()) continue;
    const std::string data = slurp_file(corpus_dir() / col[0]);
    const Facts f = read_facts(bytes(data), data.size());
    SCOPED_TRACE(col[0]);
    EXPECT_EQ(f.bit_depth, static_cast<uint32_t>(std::stoul(col[6])));
    const bool palette = col[14].find("palette") != std::string::npos && col[5] == "1";
    if (palette) {
      EXPECT_EQ(f.color_type, "palette");
      EXPECT_GE(f.palette_size, 1u);
      EXPECT_LE(f.palette_size, 256u);
    }
    if (col[5] == "3" && !palette) EXPECT_EQ(f.color_type, "rgb");
    if (col[5] == "4") EXPECT_EQ(f.color_type, "rgba");
    ++checked;
  }
  EXPECT_GT(checked, 50);
  const std::string exif = slurp_file(corpus_dir() / "png/pngsuite_exif2c08.png");
  EXPECT_GE(read_facts(bytes(exif), exif.size()).exif_orientation, 1u);
  const std::string portrait = slurp_file(corpus_dir() / "jpeg/imagers_portrait_2.jpg");
  const Facts p = read_facts(bytes(portrait), portrait.size());
  EXPECT_EQ(p.exif_orientation, 2u);  // the manifest's note: orientation tag 2
  EXPECT_EQ(p.chroma_subsampling, "4:2:0");
}

// Cut anywhere, or with lengths that point past the end, a file gives
// partial facts or none, never a read outside it (ASan in the sanitizer run).
TEST(Facts, CutAndLyingFilesStayInBounds) {
  if (!have_corpus()) GTEST_SKIP() << "no corpus";
  for (const char* name : {"jpeg/imagers_portrait_2.jpg", "png/pngsuite_exif2c08.png", "png/pngsuite_basi3p04.png"}) {
    const std::string data = slurp_file(corpus_dir() / name);
    for (size_t n = 0; n <= data.size(); n += 1 + n / 64) {
      std::vector<uint8_t> cut(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(n));
      const Facts f = read_facts(cut.data(), cut.size());
      EXPECT_LE(f.exif_orientation, 8u);
    }
  }
  // An EXIF block whose IFD offset and entry count point far past its end.
  const uint8_t tiff[] = {'I', 'I', '*', 0, 8, 0, 0, 0, 0xff, 0xff, 0x12, 0x01, 3, 0};
  EXPECT_EQ(exif_orientation(tiff, sizeof tiff), 0u);
  const uint8_t far[] = {'M', 'M', 0, '*', 0x7f, 0xff, 0xff, 0xff};
  EXPECT_EQ(exif_orientation(far, sizeof far), 0u);
}

TEST(LibraryMessages, ALibrarysReasonJoinsTheErrorAndNothingLeaksRaw) {
  if (!have_corpus()) GTEST_SKIP() << "no corpus";
  std::vector<std::string> stray;
  std::mutex mu;
  catch_library_messages([&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    stray.push_back(line);
  });
  const std::string bad = slurp_file((corpus_dir() / "bad/pngsuite_xcsn0g01.png").string());
  try {
    decode_image(bytes(bad), bad.size(), DecodeOptions{});
    ADD_FAILURE() << "a PNG with a bad CRC decoded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("(libpng error: IDAT: CRC error)"), std::string::npos) << e.what();
  }
  const std::string bmp = slurp_file((corpus_dir() / "bad/imagers_Bad_clrsUsed.bmp").string());
  try {
    decode_image(bytes(bmp), bmp.size(), DecodeOptions{});
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("OpenCV: can't read header: clrused"), std::string::npos) << what;
    EXPECT_EQ(what.find(".cpp"), std::string::npos) << "no source paths: " << what;
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(stray.empty()) << stray.front();
  }
  // Outside a decode, from another thread, in two pieces: one line, cleaned.
  std::thread([] {
    std::fprintf(stderr, "libfoo warning: \x1b[31mred");
    std::fprintf(stderr, "\n");
  }).join();
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(stray.size(), 1u);
  EXPECT_EQ(stray[0], "libfoo warning:  [31mred");
}

}  // namespace
}  // namespace imgstat

namespace imgstat::testing {
namespace {

// Large pixel buffers outlive their image in a bounded cache: the next
// image of about that size takes one (no pages faulted in again), a small
// image does not pin a huge one, the cap and 0 are honoured, and the
// buffers hold what is written to them through OpenCV's own operations.
TEST(LargeBuffers, ReusedWithinTheirCapAndNeverForSmallImages) {
  if (!large_buffers_cached()) GTEST_SKIP() << "a sanitized build: every buffer is malloc's, watched by the sanitizer";
  use_large_buffer_cache(uint64_t{64} << 20);
  release_idle_large_buffers();
  const LargeBufferUsage start = large_buffer_usage();
  {
    cv::Mat m(6000, 2000, CV_8UC3);  // 36 MB: cached
    m.setTo(cv::Scalar(1, 2, 3));
    cv::Mat copy = m.clone();  // another large buffer, OpenCV's clone through the same allocator
    EXPECT_EQ(copy.at<cv::Vec3b>(5999, 1999), cv::Vec3b(1, 2, 3));
    EXPECT_EQ(large_buffer_usage().mapped, start.mapped + 2);
  }
  EXPECT_GE(large_buffer_usage().idle_bytes, uint64_t{36000000});
  EXPECT_LE(large_buffer_usage().idle_bytes, uint64_t{64} << 20);  // two of 36 MB: the older one given back
  {
    cv::Mat again(6000, 2000, CV_8UC3);
    EXPECT_EQ(large_buffer_usage().reused, start.reused + 1);
    again.setTo(cv::Scalar(9, 9, 9));  // a reused buffer is written as any
    EXPECT_EQ(again.at<cv::Vec3b>(0, 0), cv::Vec3b(9, 9, 9));
    cv::Mat small(100, 100, CV_8UC3);  // malloc's, not the cache's
    EXPECT_EQ(large_buffer_usage().reused, start.reused + 1);
    cv::Mat huge(6000, 8000, CV_8UC3);  // 144 MB: no idle buffer of its size
    EXPECT_EQ(large_buffer_usage().reused, start.reused + 1);
    EXPECT_EQ(large_buffer_usage().mapped, start.mapped + 3);
  }
  // The 144 MB one is over the cap: given back at once.
  EXPECT_LE(large_buffer_usage().idle_bytes, uint64_t{64} << 20);
  {
    cv::Mat quarter(1000, 1000, CV_8UC(40));  // 40 MB: an idle 36 MB buffer is too small, a 144 MB one too large
    (void)quarter;
  }
  use_large_buffer_cache(0);
  EXPECT_EQ(large_buffer_usage().idle_bytes, 0u);
  {
    cv::Mat m(6000, 2000, CV_8UC3);
    (void)m;
  }
  EXPECT_EQ(large_buffer_usage().idle_bytes, 0u);
}

}  // namespace
}  // namespace imgstat::testing
