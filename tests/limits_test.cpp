// Limits before allocation: a tiny file or request that declares too much is
// refused with the limit's name before the memory is asked of malloc, on
// each engine. Every size a file header or a request gives reaches one of
// these places: a decoder (each format, and OpenCV's own buffers beside
// it), a stream that keeps its pixels, what an engine allocates beside the
// pixels (a luminance plane, a colour-converted copy, gathered part pixels,
// part counters, a joint histogram), a mask or label image. AllocWatch sees
// the largest single allocation, failed or not.
#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>
#include <tiffio.h>
#include <zlib.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "core/analyzer.hpp"
#include "decode/allocation_ceiling.hpp"
#include "hostile/inputs.hpp"
#include "raw_request.hpp"
#include "support/alloc_watch.hpp"
#include "test_images.hpp"

namespace imgstat {
namespace {

using testing::AllocWatch;

constexpr uint64_t kBudget = uint64_t{24} << 20;
// What may be allocated below the budget whatever the request: protobuf's
// copies of it, a thread's counters.
constexpr uint64_t kLargestAllowed = kBudget;

struct Outcome {
  bool ok = false;
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  uint64_t largest = 0;  // bytes of the largest single allocation meanwhile
};

class Limits : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!AllocWatch::works()) GTEST_SKIP() << "allocations are not seen in this build";
    std::shared_ptr<Engine> engine;
    if (GetParam() == "cpu") {
      engine = make_cpu_engine(2);
    } else {
      std::string note;
      bool absent = false;
      EngineOptions o;
      o.kind = EngineKind::kCuda;
      try {
        engine = make_engine(o, &note, &absent);
      } catch (const Error& e) {
        GTEST_SKIP() << "no CUDA engine here: " << e.what();
      }
    }
    imgstat::Limits limits;
    limits.max_decode_memory = kBudget;
    limits.queue_timeout_seconds = 1;
    engine_ = engine;
    analyzer_ = std::make_unique<Analyzer>(engine, limits);
  }

  template <class Fn>
  Outcome run(Fn&& fn) {
    Outcome out;
    AllocWatch watch;
    try {
      fn();
      out.ok = true;
    } catch (const Error& e) {
      out.code = e.code();
      out.message = e.what();
    } catch (const std::exception& e) {
      out.message = std::string("not an imgstat::Error: ") + e.what();
    }
    out.largest = watch.largest();
    return out;
  }

  Outcome analyze(const v1::AnalyzeRequest& r) {
    return run([&] { analyzer_->analyze(r); });
  }

  // Refused naming `limit`, and nothing near the declared size was asked of malloc.
  void expect_refused(const Outcome& o, const std::string& limit, const std::string& what) {
    SCOPED_TRACE(what);
    EXPECT_FALSE(o.ok);
    EXPECT_TRUE(o.code == ErrorCode::kResourceExhausted || o.code == ErrorCode::kInvalidArgument) << o.message;
    EXPECT_NE(o.message.find(limit), std::string::npos) << o.message;
    EXPECT_LE(o.largest, kLargestAllowed) << "bytes asked of malloc at once";
  }

  std::shared_ptr<Engine> engine_;
  std::unique_ptr<Analyzer> analyzer_;
};

// bytes through zlib's deflate: gzip (window_bits 15 + 16) or raw (-15).
std::string deflated(const std::string& bytes, int window_bits) {
  std::string packed(compressBound(bytes.size()), '\0');
  z_stream z{};
  if (deflateInit2(&z, 9, Z_DEFLATED, window_bits, 9, Z_DEFAULT_STRATEGY) != Z_OK) return "";
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(packed.data());
  z.avail_out = static_cast<uInt>(packed.size());
  const int rc = deflate(&z, Z_FINISH);
  packed.resize(rc == Z_STREAM_END ? z.total_out : 0);
  deflateEnd(&z);
  return packed;
}

v1::AnalyzeRequest encoded(const std::string& bytes) {
  v1::AnalyzeRequest r;
  r.mutable_input()->set_kind(v1::INPUT_KIND_ENCODED);
  r.mutable_input()->set_data(bytes);
  return r;
}

v1::AnalyzeRequest raw(uint32_t w, uint32_t h, uint32_t c, v1::SampleType t, const std::string& data) {
  v1::AnalyzeRequest r;
  r.mutable_input()->set_kind(v1::INPUT_KIND_RAW);
  v1::RawLayout* l = r.mutable_input()->mutable_raw();
  l->set_width(w);
  l->set_height(h);
  l->set_channels(c);
  l->set_sample_type(t);
  r.mutable_input()->set_data(data);
  return r;
}

// A classic TIFF of one strip of `strip` bytes that declares w x h.
std::string tiff_with_strip(uint32_t w, uint32_t h, uint16_t bits, uint16_t samples, uint16_t photometric,
                            uint16_t format, uint32_t rows_per_strip, uint32_t strip, uint16_t compression = 1) {
  using testing::put_le16;
  using testing::put_le32;
  struct Entry {
    uint16_t tag, type;
    uint32_t count, value;
  };
  std::vector<Entry> e = {{256, 4, 1, w},      {257, 4, 1, h},
                          {258, 3, 1, bits},   {259, 3, 1, compression},
                          {262, 3, 1, photometric}, {273, 4, 1, 0},
                          {277, 3, 1, samples}, {278, 4, 1, rows_per_strip},
                          {279, 4, 1, strip},  {339, 3, 1, format}};
  if (samples == 2 || samples == 4) e.insert(e.end() - 1, Entry{338, 3, 1, 2});
  std::string t = "II*";
  t += '\0';
  put_le32(t, 8);
  const uint32_t data_at = static_cast<uint32_t>(8 + 2 + 12 * e.size() + 4);
  put_le16(t, static_cast<uint32_t>(e.size()));
  for (Entry x : e) {
    if (x.tag == 273) x.value = data_at;
    put_le16(t, x.tag);
    put_le16(t, x.type);
    put_le32(t, x.count);
    put_le32(t, x.value);
  }
  put_le32(t, 0);
  t += std::string(strip, '\x11');
  return t;
}

TEST_P(Limits, DecodersRefuseWhatFileHeadersDeclare) {
  // 32768^2 RGBA float64 (32 GiB) in one 64-byte strip: libtiff cuts it into
  // strips of its own, and a float image binned over its own range keeps
  // every pixel (issue 47: the server tried to allocate 32 GiB).
  expect_refused(analyze(encoded(tiff_with_strip(32768, 32768, 64, 4, PHOTOMETRIC_RGB, SAMPLEFORMAT_IEEEFP, 32768, 64))),
                 "--max-decode-memory", "32 GiB float TIFF in 238 bytes");
  expect_refused(analyze(encoded(testing::tiff_declaring(32768, 32768, 64, 4, 3))), "--max-decode-memory",
                 "32 GiB TIFF without strips");
  // A 64 x 1 image whose LZW strip of 12-bit samples declares 8 million
  // rows: OpenCV's strip buffer (768 MiB) for a 64-pixel image.
  expect_refused(
      analyze(encoded(tiff_with_strip(64, 1, 12, 1, PHOTOMETRIC_MINISBLACK, SAMPLEFORMAT_UINT, 8u << 20, 96, COMPRESSION_LZW))),
      "--max-decode-memory", "12-bit TIFF, 8M rows a strip");
  // An OpenEXR header attribute declaring 1.8 GB in a 60-byte file: OpenEXR
  // allocates what an attribute declares before it reads it.
  {
    std::string exr("\x76\x2f\x31\x01\x02\x00\x00\x00", 8);
    exr += std::string("comments\0string\0", 16);
    testing::put_le32(exr, 0x6e6a5b00u);
    exr += "nothing like that many bytes";
    const Outcome o = analyze(encoded(exr));
    EXPECT_FALSE(o.ok);
    EXPECT_NE(o.message.find("more than the"), std::string::npos) << o.message;
    EXPECT_LE(o.largest, kLargestAllowed) << "an EXR attribute's declared size";
  }
  // Every format's header declaring 30000 x 30000.
  for (const auto& [format, data] : testing::huge_headers(30000, 30000)) {
    const Outcome o = analyze(encoded(data));
    SCOPED_TRACE(format);
    EXPECT_FALSE(o.ok);
    EXPECT_LE(o.largest, kLargestAllowed) << o.message;
  }
  auto png = encoded(testing::zero_png(16384, 16384, 6, 16));
  png.mutable_options()->add_statistics(v1::STATISTIC_LUMINANCE);  // the whole image, not bands
  expect_refused(analyze(png), "--max-decode-memory", "PNG 2 GiB, whole");
}

TEST_P(Limits, StreamsThatKeepTheirPixelsAreChargedAsTheyGrow) {
  // A raw float64 stream declaring 2^30 pixels of 4 channels: its histogram
  // over its own range keeps every pixel (32 GiB), refused at the header.
  v1::StreamHeader header;
  header.mutable_input()->set_kind(v1::INPUT_KIND_RAW);
  v1::RawLayout* l = header.mutable_input()->mutable_raw();
  l->set_width(32768);
  l->set_height(32768);
  l->set_channels(4);
  l->set_sample_type(v1::SAMPLE_TYPE_FLOAT64);
  header.set_total_bytes(uint64_t{32768} * 32768 * 32);
  const Outcome o = run([&] { analyzer_->begin_upload(header); });
  if (analyzer_->limits().max_input_bytes < header.total_bytes()) {
    EXPECT_FALSE(o.ok);  // the upload limit says so first
    EXPECT_LE(o.largest, kLargestAllowed);
  } else if (GetParam() == "cpu") {
    expect_refused(o, "--max-decode-memory", "32 GiB float stream");
  }
  // Within the limit it runs, charged as it comes: 512 x 1024 float64 RGBA (16 MiB).
  l->set_width(512);
  l->set_height(1024);
  header.set_total_bytes(uint64_t{512} * 1024 * 32);
  std::string chunk(4 << 20, '\0');
  const Outcome ok = run([&] {
    auto upload = analyzer_->begin_upload(header);
    for (int i = 0; i < 4; ++i) upload->add(chunk);
    upload->finish(CallContext{});
  });
  EXPECT_TRUE(ok.ok) << ok.message;
  EXPECT_LE(ok.largest, kLargestAllowed);
  EXPECT_EQ(analyzer_->budget().in_use(), 0u);
}

TEST_P(Limits, WhatAnEngineAllocatesBesideThePixelsIsInTheBudget) {
  // Raw inputs small enough to be a message, whose analysis needs more than
  // the budget beside them.
  const uint32_t side = 2048;
  const std::string rgb64(size_t{side} * side * 3 * 8, '\0');  // 96 MiB of float64 RGB
  auto luminance = raw(side, side, 3, v1::SAMPLE_TYPE_FLOAT64, rgb64);
  luminance.mutable_options()->add_statistics(v1::STATISTIC_LUMINANCE);
  expect_refused(analyze(luminance), "--max-decode-memory", "a 32 MiB luminance plane");

  const std::string rgb8(size_t{4096} * 4096 * 3, '\x40');  // 48 MiB of RGB bytes
  auto colour_parts = raw(4096, 4096, 3, v1::SAMPLE_TYPE_UINT8, rgb8);
  colour_parts.mutable_options()->set_colour_space(v1::COLOUR_SPACE_LAB);
  colour_parts.mutable_options()->mutable_parts()->mutable_tiles()->set_columns(4);
  colour_parts.mutable_options()->mutable_parts()->mutable_tiles()->set_rows(4);
  expect_refused(analyze(colour_parts), "--max-decode-memory", "tiles of a colour space: a 48 MiB converted copy");

  auto joint = raw(64, 64, 3, v1::SAMPLE_TYPE_UINT8, std::string(64 * 64 * 3, '\x10'));
  v1::JointHistogramOptions* j = joint.mutable_options()->mutable_joint();
  for (uint32_t c : {0u, 1u, 2u}) j->add_channels(c);
  j->add_bins(256);  // 2^24 bins: 128 MiB of counters
  const Outcome o = analyze(joint);
  if (!o.ok) expect_refused(o, "--max-decode-memory", "a 2^24-bin joint histogram");
  EXPECT_LE(o.largest, kLargestAllowed);

  const std::string gray32(size_t{3000} * 3000 * 4, '\0');  // float32, 36 MB
  auto masked = raw(3000, 3000, 1, v1::SAMPLE_TYPE_FLOAT32, gray32);
  masked.mutable_options()->add_statistics(v1::STATISTIC_POSITIONS);
  v1::Input* mask = masked.mutable_options()->mutable_parts()->mutable_mask()->mutable_image();
  mask->set_kind(v1::INPUT_KIND_RAW);
  mask->mutable_raw()->set_width(3000);
  mask->mutable_raw()->set_height(3000);
  mask->mutable_raw()->set_channels(1);
  mask->mutable_raw()->set_sample_type(v1::SAMPLE_TYPE_UINT8);
  mask->set_data(std::string(size_t{3000} * 3000, '\1'));
  expect_refused(analyze(masked), "--max-decode-memory", "a float mask's gathered pixels and positions (108 MB)");
  EXPECT_EQ(analyzer_->budget().in_use(), 0u);
}

// A float image's parts with the distribution: within the budget on each
// engine (the CUDA engine leaves float parts to the CPU's, and its estimate
// is not counts of 2^32 float values), equal to the CPU engine's answer.
TEST_P(Limits, PartsWithTheDistributionFitTheBudget) {
  std::mt19937 rng(497);
  std::uniform_real_distribution<float> u(-5, 5);
  std::string f32(size_t{61} * 37 * 4, '\0');
  for (size_t i = 0; i < f32.size(); i += 4) {
    const float v = u(rng);
    std::memcpy(&f32[i], &v, 4);
  }
  auto masked = raw(61, 37, 1, v1::SAMPLE_TYPE_FLOAT32, f32);
  masked.mutable_options()->add_statistics(v1::STATISTIC_DISTRIBUTION);
  masked.mutable_options()->add_statistics(v1::STATISTIC_SUM);
  v1::Input* mask = masked.mutable_options()->mutable_parts()->mutable_mask()->mutable_image();
  mask->set_kind(v1::INPUT_KIND_RAW);
  mask->mutable_raw()->set_width(61);
  mask->mutable_raw()->set_height(37);
  mask->mutable_raw()->set_channels(1);
  mask->mutable_raw()->set_sample_type(v1::SAMPLE_TYPE_UINT8);
  std::string m(size_t{61} * 37, '\0');
  for (size_t i = 0; i < m.size(); i += 3) m[i] = 1;
  mask->set_data(m);
  v1::AnalyzeResponse got;
  const Outcome o = run([&] { got = analyzer_->analyze(masked); });
  ASSERT_TRUE(o.ok) << o.message;
  imgstat::Limits limits;
  const v1::AnalyzeResponse want = Analyzer(std::shared_ptr<Engine>(make_cpu_engine(1)), limits).analyze(masked);
  EXPECT_EQ(got.channels(0).count(), (m.size() + 2) / 3);
  EXPECT_EQ(got.channels(0).sum(), want.channels(0).sum());
  EXPECT_EQ(got.channels(0).median(), want.channels(0).median());

  // uint16 labels with the distribution: estimated from the labels a
  // uint16 map may hold, the part counts stop where they would be refused
  // anyway (kMaxPartCountBytes), not at 65,536 labels' value counts (64 GiB).
  std::string u16(size_t{61} * 37 * 2, '\0'), labels(size_t{61} * 37 * 2, '\0');
  for (size_t i = 0; i < u16.size(); i += 2) {
    const uint16_t v = static_cast<uint16_t>(rng()), k = static_cast<uint16_t>(rng() % 7 * 1000);
    std::memcpy(&u16[i], &v, 2);
    std::memcpy(&labels[i], &k, 2);
  }
  auto labelled = raw(61, 37, 1, v1::SAMPLE_TYPE_UINT16, u16);
  labelled.mutable_options()->add_statistics(v1::STATISTIC_DISTRIBUTION);
  v1::Input* map = labelled.mutable_options()->mutable_parts()->mutable_labels()->mutable_image();
  map->set_kind(v1::INPUT_KIND_RAW);
  map->mutable_raw()->set_width(61);
  map->mutable_raw()->set_height(37);
  map->mutable_raw()->set_channels(1);
  map->mutable_raw()->set_sample_type(v1::SAMPLE_TYPE_UINT16);
  map->set_data(labels);
  // (With a budget of 1 GiB: this suite's 24 MiB is below any labels' estimate.)
  imgstat::Limits roomy;
  roomy.max_decode_memory = uint64_t{1} << 30;
  Analyzer with_room(engine_, roomy);
  const Outcome l = run([&] { got = with_room.analyze(labelled); });
  ASSERT_TRUE(l.ok) << l.message;
  EXPECT_EQ(got.parts_size(), 7);
  EXPECT_EQ(with_room.budget().in_use(), 0u);
}

TEST_P(Limits, MapsThatDeclareTooMuchAreRefused) {
  auto r = raw(2048, 2048, 1, v1::SAMPLE_TYPE_UINT8, std::string(size_t{2048} * 2048, '\x07'));
  // A mask bomb: a few KiB of zlib declaring 16384^2.
  r.mutable_options()->mutable_parts()->mutable_mask()->mutable_image()->set_data(testing::zero_png(16384, 16384, 0, 8));
  const Outcome o = analyze(r);
  EXPECT_FALSE(o.ok);
  EXPECT_NE(o.message.find("mask"), std::string::npos) << o.message;
  EXPECT_LE(o.largest, kLargestAllowed);
}

// The science formats' headers, each declaring what no file holds: refused
// before anything near it is allocated. A FITS tile whose descriptor
// declares 1.8 GB of compressed bytes (cfitsio allocates what it says: found
// by fuzz_fits), FITS axes of 10^12 pixels, a gzip-compressed FITS that
// inflates past the decode memory (and a deflated DICOM data set), a NIfTI
// of 30000^3 voxels, a DICOM element of 1.3 GB, of 134 MB inside a UN
// sequence, a fragments' delimiter of 128 MiB (declared frames: tests/dicom).
TEST_P(Limits, ScienceHeadersThatDeclareTooMuchAreRefused) {
  auto with_series = [](v1::AnalyzeRequest r, uint32_t series) {
    r.mutable_options()->mutable_planes()->set_series(series);
    return r;
  };
  {
    std::ifstream in(std::string(IMGSTAT_FUZZ_CRASHES) + "/fits-tile-descriptor-declaring-1.8-gb", std::ios::binary);
    const std::string fits((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_FALSE(fits.empty());
    const Outcome first = analyze(with_series(encoded(fits), 0));
    EXPECT_TRUE(first.ok) << "its first image is whole: " << first.message;
    // Its compressed image is decoded in a process of its own, whose heap
    // is bounded: refused, and nothing near 1.8 GB asked of this one.
    expect_refused(analyze(with_series(encoded(fits), 1)), "FITS HDU 3", "a FITS tile declaring 1.8 GB");
    expect_refused(analyze(encoded(fits)), "FITS HDU 3", "the same file, every series");
  }
  auto card = [](const std::string& text) { return text + std::string(80 - text.size(), ' '); };
  auto fits_header = [&](std::vector<std::string> cards) {
    std::string h;
    cards.push_back("END");
    for (const std::string& c : cards) h += card(c);
    return h + std::string((2880 - h.size() % 2880) % 2880, ' ');
  };
  expect_refused(analyze(encoded(fits_header({"SIMPLE  =                    T", "BITPIX  =                  -64",
                                              "NAXIS   =                    2", "NAXIS1  =              1000000",
                                              "NAXIS2  =              1000000"}))),
                 "pixels", "FITS axes of 10^12 pixels");
  {
    // 200 MiB of a FITS (header, then zeros) as gzip: past the 24 MiB budget.
    std::string raw = fits_header({"SIMPLE  =                    T", "BITPIX  =                    8",
                                   "NAXIS   =                    2", "NAXIS1  =                10240",
                                   "NAXIS2  =                20480"});
    raw.resize(raw.size() + (uint64_t{200} << 20), '\0');
    const std::string packed = deflated(raw, 15 + 16);
    ASSERT_FALSE(packed.empty());
    raw.clear();
    raw.shrink_to_fit();
    expect_refused(analyze(encoded(packed)), "--max-decode-memory", "a gzip FITS inflating to 200 MiB");
  }
  {
    std::string nii(352, '\0');
    const uint32_t sizeof_hdr = 348;
    std::memcpy(nii.data(), &sizeof_hdr, 4);
    const int16_t dims[8] = {3, 30000, 30000, 30000, 1, 1, 1, 1};
    std::memcpy(nii.data() + 40, dims, sizeof dims);
    const int16_t datatype = 16, bitpix = 32;  // FLOAT32
    std::memcpy(nii.data() + 70, &datatype, 2);
    std::memcpy(nii.data() + 72, &bitpix, 2);
    const float offset = 352, slope = 1;
    std::memcpy(nii.data() + 108, &offset, 4);
    std::memcpy(nii.data() + 112, &slope, 4);
    std::memcpy(nii.data() + 344, "n+1", 4);
    const Outcome o = analyze(encoded(nii));
    expect_refused(o, "NIfTI", "a NIfTI of 30000^3 voxels");
  }
  {
    // A deflated DICOM data set of one 200 MiB element of zeros (200 KiB
    // deflated): inflated within the decode memory, so refused.
    std::string file(128, '\0');
    file += "DICM";
    const std::string syntax = "1.2.840.10008.1.2.1.99";
    auto u16 = [](uint16_t v) { return std::string{static_cast<char>(v & 0xff), static_cast<char>(v >> 8)}; };
    auto u32 = [&](uint32_t v) { return u16(static_cast<uint16_t>(v)) + u16(static_cast<uint16_t>(v >> 16)); };
    file += u16(0x0002) + u16(0x0010) + "UI" + u16(static_cast<uint16_t>(syntax.size())) + syntax;
    std::string set = u16(0x0011) + u16(0x1010) + "OB" + u16(0) + u32(200u << 20);
    set.resize(set.size() + (size_t{200} << 20), '\0');
    const std::string packed = deflated(set, -15);
    ASSERT_FALSE(packed.empty());
    set.clear();
    set.shrink_to_fit();
    expect_refused(analyze(encoded(file + packed)), "--max-decode-memory", "a deflated DICOM inflating to 200 MiB");
  }
  // GDCM allocates what an element declares before reading it, and reads
  // lengths of its own where a file does not read as it should.
  struct Hostile {
    const char* file;
    const char* refusal;
    const char* what;
  };
  const Hostile dicoms[] = {
      // 1.3 GB in a 2 KB file (found by fuzz_nifti, whose input became a DICOM).
      {"dicom-element-declaring-1.3-gb", "DICOM: ", "a DICOM element declaring 1.3 GB"},
      // A UN element of undefined length whose item holds an explicit-VR
      // element: GDCM reads the item as implicit VR (CP-246), where "LO" and
      // a length of 2048 declare 134 MB, then the file again as other encodings.
      {"dicom-un-sequence-gdcm-reads-as-134-mb", "element (0009,1011) declares 134238028 bytes",
       "a UN sequence GDCM reads as implicit VR"},
      // A fragments' sequence delimiter's length, which GDCM reads as a fragment.
      {"dicom-fragments-delimiter-declaring-128-mib", "sequence delimiter declares 134217728 bytes",
       "a fragments' delimiter declaring 128 MiB"},
      // A group-2 element in an implicit-VR data set: "OB" and its bytes 1.9 GB.
      {"dicom-group-2-in-an-implicit-data-set-declaring-1.9-gb", "element (0002,0001) declares 1895842383 bytes",
       "a group-2 element of an implicit data set"},
  };
  for (const Hostile& h : dicoms) {
    std::ifstream in(std::string(IMGSTAT_FUZZ_CRASHES) + "/" + h.file, std::ios::binary);
    const std::string dicom((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_FALSE(dicom.empty()) << h.file;
    expect_refused(analyze(encoded(dicom)), h.refusal, h.what);
  }
}

// Files as one tar, as the client sends a Zarr store.
std::string tar_of(const std::vector<std::pair<std::string, std::string>>& files) {
  std::vector<char> out(1 << 20);
  size_t used = 0;
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  archive_write_open_memory(a, out.data(), out.size(), &used);
  for (const auto& [name, content] : files) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, name.c_str());
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, static_cast<la_int64_t>(content.size()));
    archive_write_header(a, e);
    archive_write_data(a, content.data(), content.size());
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
  return std::string(out.data(), used);
}

TEST_P(Limits, ZarrMetadataThatDeclaresTooMuchIsRefused) {
  auto zarray = [](const std::string& shape, const std::string& chunks) {
    return R"({"zarr_format": 2, "shape": )" + shape + R"(, "chunks": )" + chunks +
           R"(, "dtype": "|u1", "order": "C", "fill_value": 0, "filters": null, "compressor": null})";
  };
  expect_refused(analyze(encoded(tar_of({{".zarray", zarray("[64, 4096, 4096]", "[1, 1, 1]")}}))), "chunks are more than",
                 "a Zarr grid of 10^9 chunks");
  expect_refused(analyze(encoded(tar_of({{".zarray", zarray("[4096, 4096, 4096]", "[4096, 64, 64]")}}))),
                 "decode memory limit", "a Zarr pass of 64 GiB");
  expect_refused(analyze(encoded(tar_of({{".zarray", zarray("[1000000, 1000000]", "[1000, 1000]")}}))), "pixels",
                 "a Zarr plane of 10^12 pixels");
  expect_refused(analyze(encoded(tar_of({{".zarray", zarray("[100000000, 2, 2]", "[1, 2, 2]")}}))), "planes",
                 "a Zarr of 10^8 planes");
  // Metadata of other types than Zarr's: the file's error, not the server's.
  expect_refused(analyze(encoded(tar_of({{".zgroup", R"({"zarr_format": 2})"},
                                         {".zattrs", R"({"multiscales": [{"axes": [{"name": 5}, {"name": []}],
                                                          "datasets": [{"path": "0"}]}]})"},
                                         {"0/.zarray", zarray("[8, 8]", "[8, 8]")}}))),
                 "Zarr: ", "OME axes named by numbers");
  expect_refused(analyze(encoded(tar_of({{".zarray", R"({"zarr_format": 2, "shape": [8, 8], "chunks": [8, 8],
                                                          "dtype": "|u1", "order": "C", "fill_value": 0,
                                                          "filters": [{"id": 7}], "compressor": null})"}}))),
                 "Zarr: ", "a filter whose id is a number");
  // A chunk that inflates to other than its size: damaged, named.
  std::string tar = tar_of({{".zarray", zarray("[8, 8]", "[8, 8]")}, {"0.0", std::string(63, 'x')}});
  expect_refused(analyze(encoded(tar)), "chunk 0", "a Zarr chunk one byte short");
  // The tar itself cut short inside a member.
  tar = tar_of({{".zarray", zarray("[8, 8]", "[8, 8]")}, {"0.0", std::string(64, 'x')}});
  expect_refused(analyze(encoded(tar.substr(0, 1100))), "tar: ", "a tar cut inside a member");
}

INSTANTIATE_TEST_SUITE_P(Engines, Limits, ::testing::Values("cpu", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// The ceiling under which GDCM reads (decode/allocation_ceiling.hpp): an
// allocation above it is refused before malloc sees it, on this thread
// only, each form of new, and the ceiling is restored as it was.
TEST(AllocationCeiling, RefusesAboveItBeforeMallocOnItsThreadOnly) {
  if (!AllocWatch::works()) GTEST_SKIP() << "allocations are not seen in this build";
  constexpr size_t kCeiling = size_t{1} << 20;
  {
    AllocWatch watch;
    const size_t before = exchange_allocation_ceiling(kCeiling);
    EXPECT_THROW(static_cast<void>(::operator new(kCeiling + 1)), std::bad_alloc);
    EXPECT_EQ(last_refused_allocation(), kCeiling + 1);
    EXPECT_THROW(static_cast<void>(::operator new[](3 * kCeiling)), std::bad_alloc);
    EXPECT_THROW(static_cast<void>(::operator new(2 * kCeiling, std::align_val_t{64})), std::bad_alloc);
    EXPECT_EQ(::operator new(2 * kCeiling, std::nothrow), nullptr);
    EXPECT_THROW(std::vector<char>(2 * kCeiling), std::bad_alloc);
    EXPECT_EQ(last_refused_allocation(), 2 * kCeiling);
    std::vector<char> within(kCeiling, 'x');
    EXPECT_EQ(within[kCeiling - 1], 'x');
    EXPECT_LE(watch.largest(), kCeiling) << "malloc was asked for more than the ceiling";
    EXPECT_EQ(exchange_allocation_ceiling(before), kCeiling);
  }
  const size_t before = exchange_allocation_ceiling(kCeiling);
  size_t other_thread = 0;
  std::thread([&] { other_thread = std::vector<char>(4 * kCeiling, 'y').size(); }).join();
  EXPECT_EQ(other_thread, 4 * kCeiling);
  exchange_allocation_ceiling(before);
  EXPECT_EQ(last_refused_allocation(), 0u);
  EXPECT_EQ(std::vector<char>(4 * kCeiling).size(), 4 * kCeiling) << "the ceiling was not restored";
}

}  // namespace
}  // namespace imgstat
