// The PNG decoder (decode_png) against libpng as OpenCV drives it: every
// file it takes gives OpenCV's pixels and libpng's warnings, and everything
// it leaves (interlaced, sub-8-bit gray, bad CRCs, odd zlib streams, chunks
// after the image data, indices past the palette) gets OpenCV's answer, error
// or pixels, because OpenCV decodes it.
#include <gtest/gtest.h>
#include <tbb/task_arena.h>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "corpus.hpp"
#include "decode/decode.hpp"
#include "decode/library_messages.hpp"
#include "decode/png/png.hpp"
#include "decoder_answers.hpp"
#include "png_samples.hpp"

namespace imgstat {
namespace {

using testing::PngSpec;
using testing::random_png;
using testing::write_png;

const uint8_t* bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

using Answer = testing::DecoderAnswer;
Answer ours(const std::string& f) { return testing::imgstat_answer(f); }
Answer libpng(const std::string& f) { return testing::opencv_answer(f); }  // libpng through OpenCV
// The file arriving (DecodeOptions::arrived, as a spooled upload): bytes
// come as the decoder waits for them and `pace` more at every wait or look
// (a sender ahead of it; SIZE_MAX: all there from the start). Bytes that
// have not come are 0xa5, so a decoder reading ahead of them answers
// otherwise.
struct Arrival {
  const std::string& f;
  size_t pace;
  std::string buffer = std::string(f.size(), '\xa5');
  size_t have = 0;
  DecodeOptions options() {
    DecodeOptions o;
    o.arrived = [this](uint64_t end) {
      const uint64_t to = pace >= f.size() ? f.size() : std::min<uint64_t>(f.size(), std::max<uint64_t>(end, have + pace));
      if (to > have) std::memcpy(&buffer[have], f.data() + have, to - have), have = to;
      return uint64_t{have};
    };
    return o;
  }
};
Answer arriving(const std::string& f, size_t pace = 0) {
  Arrival a{f, pace};
  return testing::imgstat_answer(a.buffer, a.options());
}

// Empty when both answers agree.
std::string difference(const Answer& a, const Answer& b) {
  if (a.ok != b.ok) return std::string("decoded: ") + (a.ok ? "ours" : "libpng's") + " only";
  if (!a.ok) {  // the error names what libpng said
    for (const auto& w : b.warnings)
      if (a.error.find(w) == std::string::npos) return "the error \"" + a.error + "\" leaves out \"" + w + "\"";
    return {};
  }
  if (a.warnings != b.warnings) {
    std::string s = "warnings differ:";
    for (const auto& w : a.warnings) s += " [ours] " + w;
    for (const auto& w : b.warnings) s += " [libpng] " + w;
    return s;
  }
  return testing::plane_difference(a, b);
}

void setup_messages() { testing::quiet_library_messages(); }

struct Kind {
  const char* name;
  int depth, colour;
  std::string trns;  // tRNS body
};

std::vector<Kind> kinds() {
  return {
      {"gray8", 8, 0, ""},          {"gray16", 16, 0, ""},       {"gray8 tRNS (ignored)", 8, 0, std::string("\0\x5a", 2)},
      {"gray+alpha8", 8, 4, ""},    {"gray+alpha16", 16, 4, ""}, {"RGB8", 8, 2, ""},
      {"RGB16", 16, 2, ""},         {"RGBA8", 8, 6, ""},         {"RGBA16", 16, 6, ""},
      {"RGB8 tRNS", 8, 2, std::string("\0\x5a\0\x5a\0\x5a", 6)},
      {"RGB8 tRNS out of range", 8, 2, std::string("\x01\x5a\0\x5a\0\x5a", 6)},
      {"RGB16 tRNS", 16, 2, std::string("\x5a\x5a\x5a\x5a\x5a\x5a", 6)},
      {"palette1", 1, 3, ""},       {"palette2", 2, 3, ""},      {"palette4", 4, 3, ""},
      {"palette8", 8, 3, ""},       {"palette4 tRNS", 4, 3, std::string("\x00\x80\xff\x10", 4)},
      {"palette8 tRNS", 8, 3, std::string("\x10\x20\x30", 3)},
  };
}

TEST(Png, EveryColourTypeAndDepthGivesLibpngsPixels) {
  setup_messages();
  std::mt19937 rng(7);
  const std::pair<uint32_t, uint32_t> sizes[] = {{1, 1}, {2, 3}, {7, 5}, {31, 17}, {257, 3}, {1001, 2}, {3, 400}};
  int files = 0;
  for (const Kind& k : kinds()) {
    for (const auto& [w, h] : sizes) {
      SCOPED_TRACE(std::string(k.name) + " " + std::to_string(w) + "x" + std::to_string(h));
      PngSpec p = random_png(w, h, k.depth, k.colour, rng);
      p.trns = k.trns;
      p.idat_piece = 1 + rng() % 300;  // many IDAT chunks, split anywhere
      p.window_bits = 9 + static_cast<int>(rng() % 7);  // zlib's window as the header says
      const std::string f = write_png(p, rng);
      const Answer a = ours(f);
      EXPECT_EQ(a.decoder, "imgstat-png");
      EXPECT_EQ(difference(a, libpng(f)), "");
      ++files;
    }
  }
  EXPECT_EQ(files, 126);
}

TEST(Png, ChunksLibpngChecksBeforeTheImageDataKeepItsWarnings) {
  setup_messages();
  std::mt19937 rng(8);
  const std::vector<std::pair<std::string, std::string>> chunks = {
      {"gAMA", std::string("\0\0\xb1\x8f", 4)},          // 1/2.2: fine
      {"gAMA", std::string("\0\0\0\0", 4)},              // zero: libpng warns
      {"sRGB", std::string("\x09", 1)},                  // unknown intent: warns
      {"tEXt", std::string("Comment\0hello", 13)},
      {"pHYs", std::string("\0\0\x0b\x13\0\0\x0b\x13\x01", 9)},
      {"bKGD", std::string("\0\x01\0\x02", 4)},          // wrong length for RGB: warns
      {"vpAg", "unknown ancillary"},
  };
  for (const auto& [type, body] : chunks) {
    SCOPED_TRACE(type);
    PngSpec p = random_png(40, 30, 8, 2, rng);
    p.before = {{type, body}};
    const std::string f = write_png(p, rng);
    const Answer a = ours(f), b = libpng(f);
    EXPECT_EQ(a.decoder, "imgstat-png");
    EXPECT_EQ(difference(a, b), "");
  }
}

// Flips a byte of the image data and gives the chunk a correct CRC again,
// so that the zlib stream, not the CRC, is what is damaged.
std::string damage_image_data(std::string f, std::mt19937& rng) {
  size_t at = 8;
  std::vector<std::pair<size_t, uint32_t>> idats;
  while (at + 12 <= f.size()) {
    const auto* p = bytes(f) + at;
    const uint32_t n = uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
    if (std::memcmp(p + 4, "IDAT", 4) == 0 && n > 0) idats.emplace_back(at, n);
    at += size_t{n} + 12;
  }
  const auto [chunk, n] = idats[rng() % idats.size()];
  f[chunk + 8 + rng() % n] ^= static_cast<char>(1 + rng() % 255);
  const std::string fixed =
      testing::png_chunk("IDAT", f.substr(chunk + 8, n));  // same length, new CRC
  return f.replace(chunk, fixed.size(), fixed);
}

// A byte of any chunk's body changed, its CRC made right: libpng meets the
// change itself (a header, palette, transparency or image data it may accept).
std::string damage_any_chunk(std::string f, std::mt19937& rng) {
  std::vector<std::pair<size_t, uint32_t>> chunks;
  for (size_t at = 8; at + 12 <= f.size();) {
    const auto* p = bytes(f) + at;
    const uint32_t n = uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
    if (n > 0 && at + 12 + n <= f.size()) chunks.emplace_back(at, n);
    at += size_t{n} + 12;
  }
  if (chunks.empty()) return f;
  const auto [chunk, n] = chunks[rng() % chunks.size()];
  f[chunk + 8 + rng() % n] ^= static_cast<char>(1 << (rng() % 8));
  return f.replace(chunk, size_t{n} + 12, testing::png_chunk(f.substr(chunk + 4, 4), f.substr(chunk + 8, n)));
}

// The same file with IHDR's height changed (and its CRC made right).
std::string with_height(std::string f, uint32_t height) {
  for (int i = 0; i < 4; ++i) f[20 + i] = static_cast<char>(height >> (24 - 8 * i));
  return f.replace(8, 25, testing::png_chunk("IHDR", f.substr(16, 13)));
}

TEST(Png, WhatItCannotVouchForGetsLibpngsAnswer) {
  setup_messages();
  std::mt19937 rng(9);
  auto base = [&] { return random_png(64, 48, 8, 2, rng); };
  std::vector<std::pair<std::string, std::string>> files;
  {
    PngSpec p = base();
    p.after = {{"tEXt", std::string("Comment\0after", 13)}};
    files.emplace_back("a chunk after the image data", write_png(p, rng));
  }
  {
    PngSpec p = random_png(64, 48, 8, 3, rng);
    p.palette.resize(3 * 100);
    files.emplace_back("indices past a 100-entry palette", write_png(p, rng));
  }
  {
    PngSpec p = random_png(64, 48, 4, 0, rng);
    files.emplace_back("4-bit gray", write_png(p, rng));
  }
  {
    std::string f = write_png(base(), rng);
    f[f.size() - 13] ^= 1;  // the last IDAT's CRC
    files.emplace_back("an IDAT CRC error", f);
  }
  {
    std::string f = write_png(base(), rng);
    files.emplace_back("no IEND", f.substr(0, f.size() - 12));
  }
  files.emplace_back("too much image data", with_height(write_png(base(), rng), 40));
  files.emplace_back("too little image data", with_height(write_png(base(), rng), 50));
  {
    cv::Mat m(37, 29, CV_8UC3);
    cv::randu(m, 0, 255);
    std::vector<uchar> buf;
    cv::imencode(".png", m, buf, {cv::IMWRITE_PNG_COMPRESSION, 3});
    // IHDR's interlace byte, then IHDR's CRC: a valid header asking for Adam7
    // over data that is not interlaced (libpng decides what follows).
    std::string f(buf.begin(), buf.end());
    f[28] = 1;
    f.replace(8, 25, testing::png_chunk("IHDR", f.substr(16, 13)));
    files.emplace_back("interlaced", f);
  }
  for (int i = 0; i < 40; ++i) files.emplace_back("damaged zlib data " + std::to_string(i), damage_image_data(write_png(base(), rng), rng));
  int taken = 0;
  for (const auto& [name, f] : files) {
    SCOPED_TRACE(name);
    const Answer a = ours(f), b = libpng(f);
    EXPECT_EQ(difference(a, b), "") << a.error << " / " << b.error << (b.warnings.empty() ? "" : b.warnings[0]);
    if (a.decoder == "imgstat-png") ++taken;
  }
  EXPECT_EQ(taken, 0);
}

// Damaged files: cut anywhere, bytes changed anywhere (signature, header,
// chunk lengths and CRCs), or changed inside the image data or any chunk
// with the CRC made right so that zlib or libpng meets the damage: every verdict, pixel and
// warning is libpng's. Among the bases, image data large enough for the
// parallel inflater.
TEST(Png, DamagedFilesGetLibpngsVerdict) {
  setup_messages();
  std::mt19937 rng(16);
  std::vector<std::string> bases;
  for (const Kind& k : kinds()) {
    PngSpec p = random_png(23 + rng() % 40, 5 + rng() % 30, k.depth, k.colour, rng);
    p.trns = k.trns;
    p.idat_piece = 1 + rng() % 200;
    bases.push_back(write_png(p, rng));
  }
  {
    // 3000x1500 RGB of smooth noise: 4.5 MB of image data past kParallelPngInflateBytes.
    PngSpec p = random_png(3000, 1500, 8, 2, rng);
    for (size_t i = 0; i < p.rows.size(); ++i) p.rows[i] = static_cast<uint8_t>((i / 7 + rng() % 3) & 0xff);
    bases.push_back(write_png(p, rng));
  }
  const char* env = std::getenv("IMGSTAT_DAMAGED_FILES");
  const int files = env ? std::atoi(env) : 10000;
  int refused = 0, taken = 0;
  for (int i = 0; i < files; ++i) {
    // The large base one time in 200: it takes 50 times as long as the rest.
    const std::string& base = i % 200 == 199 ? bases.back() : bases[rng() % (bases.size() - 1)];
    std::string f = base;
    const int how = static_cast<int>(rng() % 4);
    if (how == 0) {
      f.resize(8 + rng() % (f.size() - 8));
    } else if (how == 1) {
      const int flips = 1 + static_cast<int>(rng() % 3);
      for (int k = 0; k < flips; ++k) f[rng() % f.size()] ^= static_cast<char>(1 + rng() % 255);
    } else if (how == 2) {
      f = damage_image_data(f, rng);
    } else {
      f = damage_any_chunk(f, rng);
    }
    const Answer a = ours(f), b = libpng(f), c = arriving(f);
    // Both refusing is the verdict; a header cut short is refused before
    // libpng runs, in words of our own.
    const std::string d = !a.ok && !b.ok ? "" : difference(a, b);
    EXPECT_EQ(d, "") << "damaged file " << i << " (kind " << how << ")";
    // Arriving, the chunks are walked as the decode goes, not all first: the same answer.
    const std::string e = !c.ok && !b.ok ? (c.error == a.error ? "" : c.error + " / " + a.error) : difference(c, b);
    EXPECT_EQ(e, "") << "damaged file " << i << " (kind " << how << "), arriving";
    if ((!d.empty() || !e.empty()) && i > 50) break;
    refused += !a.ok;
    taken += a.decoder == "imgstat-png";
  }
  std::printf("%d damaged PNGs: %d refused, %d decoded by decode_png\n", files, refused, taken);
}

// A chunk whose length runs past the end of the file: libpng 1.6.39 zeroes
// a buffer of the declared length before it finds the data missing (2 GiB
// for a 716-byte file the fuzzer made). Above 1 MiB such files are refused
// before libpng sees them, naming the chunk; below, and for IDAT (read in
// pieces), libpng's own answer stands. Either way the verdict is libpng's.
TEST(Png, ChunksDeclaringMoreThanTheFileAreRefusedBeforeLibpng) {
  setup_messages();
  std::mt19937 rng(17);
  auto lying_chunk = [](const char* type, uint32_t length) {
    std::string c;
    for (int i = 3; i >= 0; --i) c += static_cast<char>(length >> (8 * i));
    return c + type + std::string("Comment\0", 8);
  };
  // Insert a chunk that declares `length` bytes before the first IDAT (or
  // before IEND): the rest of the file is then its "data".
  auto with_lie = [&](std::string f, const char* type, uint32_t length, bool late) {
    const size_t at = late ? f.size() - 12 : f.find("IDAT") - 4;
    return f.insert(at, lying_chunk(type, length));
  };
  const std::string rgb = write_png(random_png(64, 48, 8, 2, rng), rng);
  const std::string gray4 = write_png(random_png(32, 32, 4, 0, rng), rng);  // left to libpng
  struct Case {
    std::string name, file, chunk;
  };
  const Case refused[] = {
      {"tEXt of 2^31-1 bytes before the image data", with_lie(rgb, "tEXt", 0x7fffffffu, false), "tEXt chunk"},
      {"iTXt of 2 GB after the image data", with_lie(rgb, "iTXt", 2046820587u, true), "iTXt chunk"},
      {"iTXt of 2 GB in a 4-bit gray file", with_lie(gray4, "iTXt", 2046820587u, false), "iTXt chunk"},
      {"a length past 2^31", with_lie(rgb, "zTXt", 0x90000000u, false), "zTXt chunk"},
      {"an unknown chunk of 3 MiB", with_lie(rgb, "quUx", 3u << 20, false), "quUx chunk"},
  };
  for (const Case& c : refused) {
    SCOPED_TRACE(c.name);
    try {
      decode_image(bytes(c.file), c.file.size(), DecodeOptions{});
      ADD_FAILURE() << "decoded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(c.chunk), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("the file ends"), std::string::npos) << e.what();
    }
  }
  // What libpng says of the same lie where its buffer stays small: refused
  // too (3 MiB zeroed here, for the comparison).
  EXPECT_FALSE(libpng(refused[4].file).ok);
  // Small overruns and IDAT: libpng's answer, its messages in ours.
  const Case left[] = {
      {"tEXt of 1 MiB", with_lie(rgb, "tEXt", 1u << 20, false), ""},
      {"an IDAT of 2 GB", with_lie(rgb, "IDAT", 2000000000u, true), ""},
      {"cut in the image data", rgb.substr(0, rgb.size() / 2), ""},
  };
  for (const Case& c : left) {
    SCOPED_TRACE(c.name);
    const Answer a = ours(c.file), b = libpng(c.file);
    EXPECT_FALSE(a.ok);
    EXPECT_EQ(difference(a, b), "") << a.error;
  }
}

// Image data of kParallelPngInflateBytes or more is inflated on every core
// of the arena (parallel_inflate.hpp): the same pixels and warnings as
// libpng whatever the arena's size, and damage anywhere gets libpng's answer.
// Image data past kParallelPngInflateBytes, in libpng's 8 KiB IDATs and in one.
std::vector<std::pair<std::string, std::string>> large_pngs(std::mt19937& rng) {
  std::vector<std::pair<std::string, std::string>> files;
  files.emplace_back("RGB8 in 8 KiB IDATs", write_png(random_png(2000, 1400, 8, 2, rng), rng));
  PngSpec p = random_png(1200, 800, 16, 6, rng);
  p.idat_piece = size_t{1} << 30;
  files.emplace_back("RGBA16 in one IDAT", write_png(p, rng));
  return files;
}

TEST(Png, LargeImageDataInflatesOnEveryCoreAsLibpng) {
  setup_messages();
  std::mt19937 rng(21);
  std::vector<std::pair<std::string, std::string>> files = large_pngs(rng);
  {
    PngSpec p = random_png(3000, 2000, 8, 3, rng);
    p.idat_piece = 1 << 20;
    files.emplace_back("palette8 in 1 MiB IDATs", write_png(p, rng));
  }
  const size_t clean = files.size();
  for (int i = 0; i < 3; ++i) files.emplace_back("damaged " + std::to_string(i), damage_image_data(files[0].second, rng));
  files.emplace_back("cut at three quarters", files[0].second.substr(0, files[0].second.size() * 3 / 4));
  files.emplace_back("too much image data", with_height(files[1].second, 700));
  files.emplace_back("too little image data", with_height(files[1].second, 900));
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string& f = files[i].second;  // not a structured binding: lambdas below take it
    SCOPED_TRACE(files[i].first);
    uint64_t idat = 0;
    for (size_t at = 8; at + 12 <= f.size();) {
      const auto* q = bytes(f) + at;
      const uint32_t n = uint32_t{q[0]} << 24 | uint32_t{q[1]} << 16 | uint32_t{q[2]} << 8 | q[3];
      if (std::memcmp(q + 4, "IDAT", 4) == 0) idat += n;
      at += size_t{n} + 12;
    }
    if (i < clean) EXPECT_GE(idat, kParallelPngInflateBytes);
    const Answer b = libpng(f);
    Answer one, many;
    tbb::task_arena(1).execute([&] { one = ours(f); });
    tbb::task_arena(4).execute([&] { many = ours(f); });
    EXPECT_EQ(difference(one, b), "") << one.error;
    EXPECT_EQ(difference(many, b), "") << many.error;
    for (size_t pace : {size_t{0}, size_t{256} << 10, SIZE_MAX}) {
      Answer streamed;
      tbb::task_arena(4).execute([&] { streamed = arriving(f, pace); });
      EXPECT_EQ(difference(streamed, b), "") << "arriving at pace " << pace << ": " << streamed.error;
      EXPECT_EQ(streamed.decoder, many.decoder);
    }
    EXPECT_EQ(one.decoder, many.decoder);
    if (i < clean) EXPECT_EQ(many.decoder, "imgstat-png");
  }
}

// A file arriving is inflated by zlib as it comes while zlib keeps up; once
// the data is far ahead of it (4 MiB), on every core from the block zlib
// ended with; all there from the start, on every core from the start. The
// rows are the same, however the file came, in IDATs of 8 KiB or one.
TEST(Png, ArrivingImageDataGoesToEveryCoreWhenZlibFallsBehind) {
  std::mt19937 rng(24);
  const std::vector<std::pair<std::string, std::string>> files = large_pngs(rng);
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string& f = files[i].second;
    SCOPED_TRACE(files[i].first);
    const DecodedImage whole = decode_image(bytes(f), f.size(), DecodeOptions{});
    const size_t image_bytes = whole.pixels.total() * whole.pixels.elemSize();
    for (size_t pace : {size_t{0}, size_t{256} << 10, SIZE_MAX}) {
      SCOPED_TRACE("pace " + std::to_string(pace));
      Arrival arrival{f, pace};
      const DecodeOptions o = arrival.options();
      const size_t row_bytes = whole.pixels.cols * whole.pixels.elemSize();
      const uint32_t rows = band_rows(row_bytes, whole.pixels.rows);
      std::vector<uint8_t> band(size_t{rows} * row_bytes), joined;
      RowSink sink;
      sink.begin = [&](uint32_t, uint32_t, uint32_t, SampleType) { return RowBand{band.data(), rows}; };
      sink.band = [&](const uint8_t* r, uint32_t, uint32_t count) {
        joined.insert(joined.end(), r, r + size_t{count} * row_bytes);
        return RowBand{band.data(), rows};
      };
      PngDecode d;
      tbb::task_arena(4).execute([&] { d = decode_png(bytes(arrival.buffer), f.size(), {}, sink, {}, o.arrived); });
      ASSERT_TRUE(d.taken);
      ASSERT_EQ(joined.size(), image_bytes);
      EXPECT_EQ(std::memcmp(joined.data(), whole.pixels.data, image_bytes), 0);
      if (pace == 0) EXPECT_EQ(d.parallel_from, -1);
      if (pace == SIZE_MAX) EXPECT_EQ(d.parallel_from, 0);
      if (pace == size_t{256} << 10) EXPECT_GT(d.parallel_from, 0);
    }
  }
}

// Little image data that inflates many times over (a 16-bit label map's
// runs: kHighRatioPngRatio and kHighRatioPngRawBytes) is inflated on every
// core, whole from the start, in chunks whose memory png_stream_memory_bytes
// reckons; one core: zlib. The rows are libpng's either way, and a
// damaged copy (a byte changed in the image data, the data cut short) is
// refused as libpng refuses it.
TEST(Png, LabelMapsInflatingManyTimesOverGoToEveryCore) {
  std::mt19937 rng(31);
  PngSpec p;
  p.width = 8192, p.height = 4100, p.depth = 16, p.colour = 0;
  p.rows.resize(p.row_bytes() * p.height);
  std::vector<uint16_t> label(32 * 14);
  for (uint16_t& v : label) v = static_cast<uint16_t>(rng());
  for (uint32_t y = 0; y < p.height; ++y)
    for (uint32_t x = 0; x < p.width; ++x) {
      const uint16_t v = label[(y / 300) * 32 + x / 256];
      p.rows[(size_t{y} * p.width + x) * 2] = static_cast<uint8_t>(v >> 8);
      p.rows[(size_t{y} * p.width + x) * 2 + 1] = static_cast<uint8_t>(v);
    }
  p.idat_piece = 4096;
  const std::string f = write_png(p, rng);
  const uint64_t raw = uint64_t{p.height} * (p.row_bytes() + 1);
  ASSERT_GE(raw, kHighRatioPngRawBytes);
  ASSERT_GE(raw / f.size(), kHighRatioPngRatio);
  // Its memory, reckoned before the decode, holds the inflater's chunks.
  const uint64_t reckoned = png_stream_memory_bytes(p.width, p.height, 16, 0, false, f.size());
  const uint64_t plain = png_stream_memory_bytes(p.width, p.height, 16, 0, false, raw / kHighRatioPngRatio + 1);
  EXPECT_GT(reckoned, plain + (uint64_t{1} << 20));
  EXPECT_LT(reckoned, plain + kHighRatioPngInflateMemory + (uint64_t{16} << 20));

  const Answer want = libpng(f);
  ASSERT_TRUE(want.ok);
  auto decode = [&](const std::string& file, int cores, std::vector<uint8_t>* rows) {
    const size_t row_bytes = size_t{p.width} * 2;
    const uint32_t n = band_rows(row_bytes, p.height);
    std::vector<uint8_t> band(size_t{n} * row_bytes);
    RowSink sink;
    sink.begin = [&](uint32_t, uint32_t, uint32_t, SampleType) { return RowBand{band.data(), n}; };
    sink.band = [&](const uint8_t* r, uint32_t, uint32_t count) {
      rows->insert(rows->end(), r, r + size_t{count} * row_bytes);
      return RowBand{band.data(), n};
    };
    PngDecode d;
    tbb::task_arena(cores).execute([&] { d = decode_png(bytes(file), file.size(), {}, sink, {}, {}); });
    return d;
  };
  std::vector<uint8_t> one, many;
  const PngDecode d1 = decode(f, 1, &one), d4 = decode(f, 4, &many);
  ASSERT_TRUE(d1.taken && d4.taken);
  EXPECT_EQ(d1.parallel_from, -1);
  EXPECT_EQ(d4.parallel_from, 0);
  EXPECT_EQ(one, many);
  Answer got;
  tbb::task_arena(4).execute([&] { got = ours(f); });
  EXPECT_EQ(difference(got, want), "") << got.error;

  // Damaged copies: a byte of the image data changed at several places,
  // the data cut short.
  const size_t idat_at = f.find("IDAT") + 4, idat_end = f.rfind("IEND") - 8;
  auto fix_crc = [](std::string& file, size_t at) {  // the CRC of the chunk holding byte `at`, made right again
    for (size_t c = 8; c + 12 <= file.size();) {
      const auto* q = reinterpret_cast<const uint8_t*>(file.data() + c);
      const size_t n = size_t{q[0]} << 24 | size_t{q[1]} << 16 | size_t{q[2]} << 8 | q[3];
      if (at < c + 12 + n) {
        const uint32_t crc = static_cast<uint32_t>(crc32(0, q + 4, static_cast<uInt>(n + 4)));
        for (int k = 0; k < 4; ++k) file[c + 8 + n + k] = static_cast<char>(crc >> (24 - 8 * k));
        return;
      }
      c += n + 12;
    }
  };
  int inflate_refused = 0;
  for (size_t at : {idat_at + 40, idat_at + (idat_end - idat_at) / 2}) {
    std::string bad = f;
    bad[at] = static_cast<char>(bad[at] ^ 0x21);
    fix_crc(bad, at);
    SCOPED_TRACE("byte " + std::to_string(at) + " changed");
    Answer a1, a4;
    tbb::task_arena(1).execute([&] { a1 = ours(bad); });
    tbb::task_arena(4).execute([&] { a4 = ours(bad); });
    const Answer b = libpng(bad);
    EXPECT_EQ(difference(a4, b), "") << a4.error;
    EXPECT_EQ(difference(a1, b), "") << a1.error;
    inflate_refused += !b.ok;
  }
  EXPECT_GT(inflate_refused, 0);  // the damage reached the inflater, not only the chunks' checks
  const std::string cut = f.substr(0, idat_at + (idat_end - idat_at) / 3);
  Answer c4;
  tbb::task_arena(4).execute([&] { c4 = ours(cut); });
  EXPECT_EQ(difference(c4, libpng(cut)), "") << c4.error;
}

TEST(Png, CorpusFilesTakenOrNotAnswerAsLibpng) {
  if (!testing::have_corpus()) GTEST_SKIP() << "no corpus";
  setup_messages();
  int taken = 0, left = 0;
  for (const auto& dir : {"png", "bad"}) {
    for (const auto& e : std::filesystem::directory_iterator(testing::corpus_dir() / dir)) {
      if (e.path().extension() != ".png") continue;
      SCOPED_TRACE(e.path().string());
      const std::string f = testing::slurp_file(e.path().string());
      const Answer a = ours(f), b = libpng(f);
      EXPECT_EQ(difference(a, b), "");
      EXPECT_EQ(difference(arriving(f), b), "") << "arriving";
      (a.decoder == "imgstat-png" ? taken : left) += 1;
    }
  }
  std::printf("corpus PNGs: %d by decode_png, %d left to libpng\n", taken, left);
  EXPECT_GE(taken, 60);
}

TEST(Png, BandsCarryEveryRowOnceInOrder) {
  std::mt19937 rng(10);
  PngSpec p = random_png(1500, 1601, 16, 6, rng);  // 12,000 bytes a row: several bands
  const std::string f = write_png(p, rng);
  const DecodedImage whole = decode_image(bytes(f), f.size(), DecodeOptions{});
  ASSERT_EQ(whole.decoder, "imgstat-png");
  std::vector<uint8_t> band, joined;
  uint32_t rows = 0, next_row = 0, calls = 0;
  RowSink sink;
  sink.begin = [&](uint32_t w, uint32_t h, uint32_t c, SampleType t) {
    EXPECT_EQ(t, SampleType::kUint16);
    rows = band_rows(uint64_t{w} * c * 2, h);
    band.resize(size_t{rows} * w * c * 2);
    return RowBand{band.data(), rows};
  };
  sink.band = [&](const uint8_t* r, uint32_t first, uint32_t count) {
    EXPECT_EQ(first, next_row);
    next_row += count;
    ++calls;
    joined.insert(joined.end(), r, r + size_t{count} * 1500 * 4 * 2);
    return RowBand{band.data(), rows};
  };
  ASSERT_TRUE(decode_png(bytes(f), f.size(), {}, sink).taken);
  EXPECT_EQ(next_row, 1601u);
  EXPECT_GT(calls, 2u);
  ASSERT_EQ(joined.size(), whole.pixels.total() * whole.pixels.elemSize());
  EXPECT_EQ(std::memcmp(joined.data(), whole.pixels.data, joined.size()), 0);
  // Cancelled between bands: no more rows, kCancelled.
  calls = 0;
  next_row = 0;
  try {
    decode_png(bytes(f), f.size(), [&] { return calls >= 1; }, sink);
    ADD_FAILURE() << "not cancelled";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCancelled);
  }
  EXPECT_EQ(calls, 1u);
}

// Rows are converted on every thread of the arena, a band's worth at a
// time: bands of any size (one row, a few, more than a chunk of filtered
// rows, the whole image) get every row once, in order, libpng's, whatever
// the filters (every kind, or None and Sub only as OpenCV writes them:
// every row unfiltered apart); a label map inflating many times over too.
TEST(Png, RowsConvertedInParallelFillBandsOfAnySize) {
  std::mt19937 rng(12);
  std::vector<std::pair<std::string, uint64_t>> files;  // file, bytes a row out
  PngSpec photo = random_png(1500, 1601, 16, 6, rng);   // image data past kParallelPngInflateBytes
  files.emplace_back(write_png(photo, rng), uint64_t{1500} * 4 * 2);
  photo.filters = 2;
  files.emplace_back(write_png(photo, rng), uint64_t{1500} * 4 * 2);
  files.emplace_back(write_png(random_png(4001, 997, 8, 2, rng), rng), uint64_t{4001} * 3);
  PngSpec map;  // 16-bit labels in blocks, Sub and None rows: inflated in parallel from little data
  map.width = 8192, map.height = 4100, map.depth = 16, map.colour = 0, map.filters = 2;
  map.rows.resize(map.row_bytes() * map.height);
  for (uint32_t y = 0; y < map.height; ++y)
    for (uint32_t x = 0; x < map.width; ++x) {
      const uint32_t v = (y / 300) * 977 + (x / 256) * 31 + 1;
      map.rows[(size_t{y} * map.width + x) * 2] = static_cast<uint8_t>(v >> 8);
      map.rows[(size_t{y} * map.width + x) * 2 + 1] = static_cast<uint8_t>(v);
    }
  files.emplace_back(write_png(map, rng), uint64_t{8192} * 2);
  for (const auto& file : files) {
    const std::string& f = file.first;  // named, not bound: lambdas below take them (C++17)
    const uint64_t row_bytes = file.second;
    Answer got;
    tbb::task_arena(4).execute([&] { got = ours(f); });
    EXPECT_EQ(difference(got, libpng(f)), "") << got.error;
    EXPECT_EQ(got.decoder, "imgstat-png");
    const DecodedImage whole = decode_image(bytes(f), f.size(), DecodeOptions{});
    ASSERT_EQ(whole.decoder, "imgstat-png");
    const uint32_t height = static_cast<uint32_t>(whole.pixels.rows);
    for (uint32_t rows : {1u, 7u, 300u, 1000u, height}) {
      SCOPED_TRACE(std::to_string(row_bytes) + " bytes a row, bands of " + std::to_string(rows));
      std::vector<uint8_t> band(size_t{rows} * row_bytes), joined;
      uint32_t next_row = 0;
      RowSink sink;
      sink.begin = [&](uint32_t, uint32_t, uint32_t, SampleType) { return RowBand{band.data(), rows}; };
      sink.band = [&](const uint8_t* r, uint32_t first, uint32_t count) {
        EXPECT_EQ(first, next_row);
        EXPECT_LE(count, rows);
        next_row += count;
        joined.insert(joined.end(), r, r + size_t{count} * row_bytes);
        return RowBand{band.data(), rows};
      };
      PngDecode d;
      tbb::task_arena(4).execute([&] { d = decode_png(bytes(f), f.size(), {}, sink); });
      ASSERT_TRUE(d.taken);
      EXPECT_EQ(next_row, height);
      ASSERT_EQ(joined.size(), whole.pixels.total() * whole.pixels.elemSize());
      EXPECT_EQ(std::memcmp(joined.data(), whole.pixels.data, joined.size()), 0);
    }
  }
}

// The filters as the PNG specification writes them, byte by byte.
void unfilter_reference(int f, std::vector<uint8_t>& row, const std::vector<uint8_t>& prev, size_t bpp) {
  for (size_t i = 0; i < row.size(); ++i) {
    const int a = i >= bpp ? row[i - bpp] : 0, b = prev[i], c = i >= bpp ? prev[i - bpp] : 0;
    int pred = 0;
    if (f == 1) pred = a;
    if (f == 2) pred = b;
    if (f == 3) pred = (a + b) / 2;
    if (f == 4) {
      const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
      pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
    }
    row[i] = static_cast<uint8_t>(row[i] + pred);
  }
}

TEST(PngUnfilter, EveryFilterAndPixelSizeAsTheSpecificationSays) {
  std::mt19937 rng(11);
  for (uint32_t bpp = 1; bpp <= 8; ++bpp) {
    for (size_t pixels : {1, 2, 3, 15, 16, 17, 333}) {
      for (int f = 0; f <= 4; ++f) {
        for (bool first : {false, true}) {
          SCOPED_TRACE("bpp " + std::to_string(bpp) + " pixels " + std::to_string(pixels) + " filter " +
                       std::to_string(f) + (first ? " first row" : ""));
          std::vector<uint8_t> row(pixels * bpp), prev(row.size(), 0);
          for (auto& v : row) v = static_cast<uint8_t>(rng());
          if (!first)
            for (auto& v : prev) v = static_cast<uint8_t>(rng() & 1 ? rng() : 0xff);
          std::vector<uint8_t> expected = row;
          unfilter_reference(f, expected, prev, bpp);
          ASSERT_TRUE(png_unfilter_row(static_cast<uint8_t>(f), row.data(), first ? nullptr : prev.data(), row.size(), bpp));
          EXPECT_EQ(row, expected);
        }
      }
    }
  }
  uint8_t one = 0;
  EXPECT_FALSE(png_unfilter_row(5, &one, nullptr, 1, 1));
}

}  // namespace
}  // namespace imgstat
