// The server's modules without gRPC: format sniffing, request validation and
// the analyzer (unary and streamed uploads).
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include <google/protobuf/util/field_comparator.h>
#include <google/protobuf/util/message_differencer.h>

#include "core/analyzer.hpp"
#include "decode/jpeg/verify.hpp"
#include "corpus.hpp"
#include "error_code.hpp"
#include "jpeg_samples.hpp"

#include <tbb/task_arena.h>
#include "decode/sniff.hpp"
#include "raw_request.hpp"
#include "test_images.hpp"
#include "core/validate.hpp"

namespace imgstat::testing {
namespace {


std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Sniff, NamesEveryCorpusFormatAndReadsSizesFromHeaders) {
  if (!have_corpus()) GTEST_SKIP() << "no corpus";
  std::map<std::string, std::map<std::string, std::string>> manifest;
  for (const auto& row : corpus_manifest()) manifest[row.at("file")] = row;
  int sized = 0;
  for (const auto& ref : corpus_references()) {
    const std::string file = ref["file"], format = ref["format"];
    if (format == "raw" || format == "empty") continue;
    SCOPED_TRACE(file);
    const std::string data = read_file(corpus_dir() / file);
    const Probe p = probe(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    EXPECT_EQ(p.format, format);
    const auto& m = manifest.at(file);
    if (p.has_size && !m.at("width").empty()) {
      EXPECT_EQ(std::to_string(p.width), m.at("width"));
      EXPECT_EQ(std::to_string(p.height), m.at("height"));
      ++sized;
    }
  }
  EXPECT_GT(sized, 150);
}

TEST(Sniff, UnknownAndEmptyData) {
  const uint8_t text[] = "hello, world";
  EXPECT_EQ(probe(text, sizeof text).format, "unknown");
  EXPECT_EQ(probe(text, 0).format, "unknown");
}

// A ustar header as POSIX lays it out: name, size, magic, and the checksum
// of its 512 bytes (the checksum field counted as spaces).
std::string ustar_header(const std::string& name, bool right_checksum) {
  std::string h(512, '\0');
  h.replace(0, name.size(), name);
  h.replace(100, 7, "0000644");
  h.replace(124, 11, "00000000012");
  h.replace(257, 6, std::string("ustar\0", 6));
  h.replace(263, 2, "00");
  h.replace(148, 8, "        ");
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  char field[8];
  std::snprintf(field, sizeof field, "%06o", sum + (right_checksum ? 0 : 1));
  h.replace(148, 7, std::string(field, 6) + '\0');
  return h + std::string(512, 'x');
}

TEST(Sniff, TarIsAUstarHeaderWhoseChecksumHolds) {
  auto format = [](const std::string& d) { return probe(reinterpret_cast<const uint8_t*>(d.data()), d.size()).format; };
  // A first member whose name starts as a BMP or PNM does is still a tar.
  EXPECT_EQ(format(ustar_header("BMW.jpg", true)), "tar");
  EXPECT_EQ(format(ustar_header("P1 scan.png", true)), "tar");
  // "ustar" at 257 without its checksum is those bytes, nothing more.
  EXPECT_EQ(format(ustar_header("BMW.jpg", false)), "BMP");
  EXPECT_EQ(format(ustar_header("store/.zarray", false)), "unknown");
  // A TIFF whose strip holds "ustar" at 257, checksum and all, is a TIFF
  // (fuzz_tiff: it was refused as a damaged tar).
  EXPECT_EQ(format(ustar_header(std::string("II*\0", 4), true)), "TIFF");
}

TEST(Sniff, DicomIsDicmAfterAPreambleThatIsNoOtherFormatsMagic) {
  auto format = [](const std::string& d) { return probe(reinterpret_cast<const uint8_t*>(d.data()), d.size()).format; };
  std::string dicom(512, '\0');
  dicom.replace(128, 4, "DICM");
  EXPECT_EQ(format(dicom), "DICOM");
  dicom.replace(0, 2, "BM");  // a preamble may be anything: a weak magic is no BMP
  EXPECT_EQ(format(dicom), "DICOM");
  // A dual-personality file whose preamble is a TIFF header is read as the
  // TIFF it starts as (fuzz_tiff: it was refused as a damaged DICOM).
  dicom.replace(0, 4, std::string("II*\0", 4));
  EXPECT_EQ(format(dicom), "TIFF");
}

TEST(Validate, OptionsAreCheckedAndDefaulted) {
  v1::Options o;
  StatsRequest r = stats_request_of(o);
  EXPECT_EQ(r.hist.bins, 256u);
  EXPECT_TRUE(r.min_max && r.sum && r.stddev && r.histogram);
  EXPECT_FALSE(r.hist.explicit_range);
  o.add_statistics(v1::STATISTIC_HISTOGRAM);
  r = stats_request_of(o);
  EXPECT_TRUE(r.histogram);
  EXPECT_FALSE(r.min_max || r.sum || r.stddev);
  o.set_bins(65537);
  EXPECT_EQ(code_of([&] { stats_request_of(o); }), ErrorCode::kInvalidArgument);
  o.set_bins(10);
  o.mutable_range()->set_lo(5);
  o.mutable_range()->set_hi(5);
  EXPECT_NE(message_of([&] { stats_request_of(o); }).find("lo < hi"), std::string::npos);
  o.mutable_range()->set_hi(std::numeric_limits<double>::infinity());
  EXPECT_EQ(code_of([&] { stats_request_of(o); }), ErrorCode::kInvalidArgument);
  o.clear_range();
  o.add_statistics(static_cast<v1::Statistic>(99));
  EXPECT_EQ(code_of([&] { stats_request_of(o); }), ErrorCode::kInvalidArgument);
  o.clear_statistics();
  o.set_decoder(v1::DECODER_CHOICE_GPU);
  EXPECT_NO_THROW(stats_request_of(o));
  o.set_decoder(static_cast<v1::DecoderChoice>(7));
  EXPECT_NE(message_of([&] { stats_request_of(o); }).find("options.decoder"), std::string::npos);
}

TEST(Validate, RawLayoutsAndSizes) {
  v1::RawLayout raw;
  raw.set_width(10);
  raw.set_height(3);
  raw.set_channels(3);
  raw.set_sample_type(v1::SAMPLE_TYPE_UINT16);
  Layout l = raw_layout_of(raw);
  EXPECT_EQ(l.row_bytes(), 60u);
  EXPECT_NO_THROW(check_raw_size(l, 180));
  const std::string m = message_of([&] { check_raw_size(l, 179); });
  EXPECT_NE(m.find("179"), std::string::npos) << m;
  EXPECT_NE(m.find("180"), std::string::npos) << m;
  raw.set_row_stride(64);  // padded rows; the last row's padding may be left out
  l = raw_layout_of(raw);
  EXPECT_NO_THROW(check_raw_size(l, 192));
  EXPECT_NO_THROW(check_raw_size(l, 188));
  EXPECT_THROW(check_raw_size(l, 190), Error);
  raw.set_row_stride(59);
  EXPECT_EQ(code_of([&] { raw_layout_of(raw); }), ErrorCode::kInvalidArgument);
  raw.set_row_stride(0);
  raw.set_channels(5);
  EXPECT_EQ(code_of([&] { raw_layout_of(raw); }), ErrorCode::kInvalidArgument);
  raw.set_channels(1);
  raw.set_sample_type(v1::SAMPLE_TYPE_UNSPECIFIED);
  EXPECT_NE(message_of([&] { raw_layout_of(raw); }).find("sample_type"), std::string::npos);
}

// A JPEG decoded on the CPU reaches the engine in bands (two of 4 MiB held,
// not the image): every statistic equals the whole-image path's (taken when
// the luminance is asked for, which needs the whole image), for gray and
// colour, several bands, a file cut short and analyzed anyway, a tiny one.
TEST(AnalyzerBands, JpegInBandsAnswersAsTheWholeImage) {
  Limits limits;
  Analyzer analyzer(make_cpu_engine(2), limits);
  std::vector<std::pair<std::string, std::string>> files = {
      {"gray 2600x1700", write_jpeg(2600, 1700, jpeg_samplings()[5], 0, 90, 1)},
      {"4:2:0 1500x1300", write_jpeg(1500, 1300, jpeg_samplings()[2], 0, 90, 2)},
      {"4:4:4 17x5", write_jpeg(17, 5, jpeg_samplings()[0], 0, 90, 3)},
  };
  const std::string whole = write_jpeg(1201, 1700, jpeg_samplings()[1], 4, 90, 4);
  files.emplace_back("4:2:2 1201x1700 cut", whole.substr(0, whole.size() / 2));
  // Restart markers each MCU row: decoded in runs on several cores. With
  // stray bytes before one marker a run warns, and the decode starts over in
  // one pass into the same sink: the warning is libjpeg's.
  const std::string runs = write_jpeg(2000, 1500, jpeg_samplings()[2], 125, 90, 5);
  files.emplace_back("4:2:0 2000x1500 restart each row", runs);
  size_t marker = 0;
  for (int seen = 0; marker + 1 < runs.size() && seen < 40; ++marker)
    if (static_cast<uint8_t>(runs[marker]) == 0xff && (static_cast<uint8_t>(runs[marker + 1]) & 0xf8) == 0xd0) ++seen;
  files.emplace_back("4:2:0 2000x1500 restart, stray bytes", runs.substr(0, marker - 1) + std::string(100, '\x55') + runs.substr(marker - 1));
  tbb::task_arena four(4);  // runs, whatever this machine's cores
  google::protobuf::util::DefaultFieldComparator approx;
  approx.set_float_comparison(google::protobuf::util::DefaultFieldComparator::APPROXIMATE);
  approx.SetDefaultFractionAndMargin(1e-12, 0);  // float sums: 1e-12 relative; integers exact
  for (const auto& [name, f] : files) {
    SCOPED_TRACE(name);
    v1::AnalyzeRequest req;
    req.mutable_input()->set_data(f);
    req.mutable_options()->set_allow_truncated(true);
    for (v1::Statistic s : {v1::STATISTIC_MIN_MAX, v1::STATISTIC_SUM, v1::STATISTIC_STDDEV, v1::STATISTIC_HISTOGRAM,
                            v1::STATISTIC_DISTRIBUTION, v1::STATISTIC_SHAPE, v1::STATISTIC_POSITIONS,
                            v1::STATISTIC_UNIQUE_COLORS, v1::STATISTIC_SUMMARY})
      req.mutable_options()->add_statistics(s);
    v1::AnalyzeResponse bands = four.execute([&] { return analyzer.analyze(req); });
    req.mutable_options()->add_statistics(v1::STATISTIC_LUMINANCE);
    v1::AnalyzeResponse image = four.execute([&] { return analyzer.analyze(req); });
    if (name.find("stray") != std::string::npos) {
      ASSERT_GT(bands.warnings_size(), 0);
      EXPECT_NE(bands.warnings(0).find("extraneous bytes before marker"), std::string::npos) << bands.warnings(0);
    }
    EXPECT_EQ(bands.decoder(), "libjpeg-turbo");
    EXPECT_EQ(image.decoder(), "libjpeg-turbo");
    // A gray image asked for its luminance says there is none; nothing else differs.
    if (image.channel_count() == 1 && image.warnings_size() > 0 && image.warnings(image.warnings_size() - 1).rfind("no luminance", 0) == 0)
      image.mutable_warnings()->RemoveLast();
    for (v1::AnalyzeResponse* r : {&bands, &image}) {
      r->clear_decode_time();
      r->clear_compute_time();
      r->clear_check_time();
      r->clear_luminance();
    }
    ASSERT_GT(bands.channels_size(), 0);
    google::protobuf::util::MessageDifferencer diff;
    diff.set_field_comparator(&approx);
    std::string report;
    diff.ReportDifferencesToString(&report);
    EXPECT_TRUE(diff.Compare(bands, image)) << report;
  }
}

// What a band costs the memory budget: a 13 MB colour image goes through a
// 12 MiB budget in bands, and is refused when the whole image is needed.
TEST(AnalyzerBands, TheBudgetIsChargedBandsNotTheImage) {
  Limits limits;
  limits.max_decode_memory = uint64_t{12} << 20;
  Analyzer analyzer(make_cpu_engine(2), limits);
  v1::AnalyzeRequest req;
  req.mutable_input()->set_data(write_jpeg(2600, 1700, jpeg_samplings()[2], 0, 90, 9));
  EXPECT_EQ(analyzer.analyze(req).width(), 2600u);
  req.mutable_options()->add_statistics(v1::STATISTIC_LUMINANCE);
  EXPECT_EQ(code_of([&] { analyzer.analyze(req); }), ErrorCode::kResourceExhausted);
}

class AnalyzerTest : public ::testing::Test {
 protected:
  AnalyzerTest() {
    Limits limits;
    limits.max_pixels = 1 << 20;
    analyzer_ = std::make_unique<Analyzer>(make_cpu_engine(), limits);
  }


  std::unique_ptr<Analyzer> analyzer_;
};

TEST_F(AnalyzerTest, RawPixelsMatchTheReference) {
  std::mt19937_64 rng(21);
  for (SampleType t : {SampleType::kUint8, SampleType::kInt16, SampleType::kFloat32}) {
    TestImage img = random_image(rng, 37, 11, 3, t, 6, 0);
    const v1::AnalyzeResponse r = analyzer_->analyze(raw_request(img));
    const auto ref = reference_stats(img.view);
    EXPECT_EQ(r.format(), "raw");
    EXPECT_EQ(r.engine(), "cpu");
    EXPECT_FALSE(r.has_check_time());  // JPEG only
    ASSERT_EQ(r.channels_size(), 3);
    for (int c = 0; c < 3; ++c) {
      EXPECT_EQ(r.channels(c).name(), std::string(1, "RGB"[c]));  // raw buffers keep their stored order
      EXPECT_EQ(r.channels(c).min(), ref[c].min);
      EXPECT_EQ(r.channels(c).max(), ref[c].max);
      EXPECT_EQ(std::vector<uint64_t>(r.channels(c).histogram().counts().begin(),
                                      r.channels(c).histogram().counts().end()),
                ref[c].hist);
    }
  }
}

TEST_F(AnalyzerTest, BytesAreAOneRowUint8Image) {
  v1::AnalyzeRequest r;
  r.mutable_input()->set_kind(v1::INPUT_KIND_BYTES);
  r.mutable_input()->set_data(std::string("abcabcz\x00\xff", 9));
  const v1::AnalyzeResponse got = analyzer_->analyze(r);
  EXPECT_EQ(got.format(), "bytes");
  EXPECT_EQ(got.width(), 9u);
  EXPECT_EQ(got.height(), 1u);
  ASSERT_EQ(got.channels_size(), 1);
  EXPECT_EQ(got.channels(0).histogram().counts('a'), 2u);
  EXPECT_EQ(got.channels(0).histogram().counts('z'), 1u);
  EXPECT_EQ(got.channels(0).min(), 0);
  EXPECT_EQ(got.channels(0).max(), 255);
  EXPECT_EQ(got.channels(0).sum_int(), 2 * ('a' + 'b' + 'c') + 'z' + 255);
  r.mutable_input()->clear_data();
  EXPECT_EQ(code_of([&] { analyzer_->analyze(r); }), ErrorCode::kInvalidArgument);
}

TEST_F(AnalyzerTest, UnrequestedStatisticsAreAbsent) {
  std::mt19937_64 rng(2);
  v1::AnalyzeRequest r = raw_request(random_image(rng, 16, 16, 1, SampleType::kUint8, 0, 0));
  r.mutable_options()->add_statistics(v1::STATISTIC_MIN_MAX);
  const v1::AnalyzeResponse got = analyzer_->analyze(r);
  EXPECT_TRUE(got.channels(0).has_min());
  EXPECT_FALSE(got.channels(0).has_mean());
  EXPECT_FALSE(got.channels(0).has_stddev());
  EXPECT_FALSE(got.channels(0).has_histogram());
  EXPECT_EQ(got.channels(0).count(), 256u);
}

TEST_F(AnalyzerTest, RejectsWithCodesThatNameTheProblem) {
  v1::AnalyzeRequest r;
  r.mutable_input()->set_data("definitely not an image");
  EXPECT_NE(message_of([&] { analyzer_->analyze(r); }).find("unrecognized image format"), std::string::npos);
  r.mutable_input()->set_data("");
  EXPECT_NE(message_of([&] { analyzer_->analyze(r); }).find("empty"), std::string::npos);
  // A PNG header claiming 4096 x 4096 is over this analyzer's 2^20 pixels,
  // refused before any decoding.
  std::string png("\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR\0\0\x10\0\0\0\x10\0\x08\x02\0\0\0", 29);
  r.mutable_input()->set_data(png);
  EXPECT_EQ(code_of([&] { analyzer_->analyze(r); }), ErrorCode::kResourceExhausted);
  EXPECT_NE(message_of([&] { analyzer_->analyze(r); }).find("4096x4096"), std::string::npos);
}

TEST_F(AnalyzerTest, StreamedUploadsEqualOneMessage) {
  std::mt19937_64 rng(8);
  for (SampleType t : {SampleType::kUint8, SampleType::kUint16, SampleType::kFloat64}) {
    TestImage img = random_image(rng, 123, 45, 4, t, 0, 0);
    const v1::AnalyzeRequest whole = raw_request(img);
    const v1::AnalyzeResponse want = analyzer_->analyze(whole);
    v1::StreamHeader header;
    *header.mutable_input() = whole.input();
    header.mutable_input()->clear_data();
    header.set_total_bytes(whole.input().data().size());
    auto upload = analyzer_->begin_upload(header);
    const std::string& data = whole.input().data();
    for (size_t off = 0; off < data.size(); off += 1000) upload->add(data.substr(off, 1000));
    const v1::AnalyzeResponse got = upload->finish({});
    for (int c = 0; c < 4; ++c) {
      EXPECT_EQ(got.channels(c).min(), want.channels(c).min());
      EXPECT_EQ(got.channels(c).max(), want.channels(c).max());
      EXPECT_NEAR(got.channels(c).mean(), want.channels(c).mean(), 1e-12 * std::abs(want.channels(c).mean()));
      EXPECT_EQ(got.channels(c).histogram().SerializeAsString(), want.channels(c).histogram().SerializeAsString());
    }
  }
}

TEST_F(AnalyzerTest, UploadsMustAddUpToTheirDeclaredLength) {
  v1::StreamHeader header;
  header.mutable_input()->set_kind(v1::INPUT_KIND_BYTES);
  header.set_total_bytes(10);
  auto upload = analyzer_->begin_upload(header);
  upload->add("12345");
  EXPECT_NE(message_of([&] { upload->finish({}); }).find("5 of"), std::string::npos);
  upload = analyzer_->begin_upload(header);
  upload->add("12345678");
  EXPECT_EQ(code_of([&] { upload->add("901"); }), ErrorCode::kInvalidArgument);
  header.set_total_bytes(0);
  EXPECT_EQ(code_of([&] { analyzer_->begin_upload(header); }), ErrorCode::kInvalidArgument);
  header.set_total_bytes(uint64_t{1} << 50);
  EXPECT_EQ(code_of([&] { analyzer_->begin_upload(header); }), ErrorCode::kResourceExhausted);
  header.set_total_bytes(10);
  header.mutable_input()->set_data("x");
  EXPECT_EQ(code_of([&] { analyzer_->begin_upload(header); }), ErrorCode::kInvalidArgument);
}

TEST_F(AnalyzerTest, EncodedUploadEqualsOneMessage) {
  if (!have_corpus()) GTEST_SKIP() << "no corpus";
  v1::AnalyzeRequest whole;
  whole.mutable_input()->set_data(read_file(corpus_dir() / "png/skimage_coffee.png"));
  const v1::AnalyzeResponse want = analyzer_->analyze(whole);
  v1::StreamHeader header;
  header.set_total_bytes(whole.input().data().size());
  auto upload = analyzer_->begin_upload(header);
  const std::string& data = whole.input().data();
  for (size_t off = 0; off < data.size(); off += 65536) upload->add(data.substr(off, 65536));
  const v1::AnalyzeResponse got = upload->finish({});
  EXPECT_EQ(got.format(), "PNG");
  for (int c = 0; c < 3; ++c)
    EXPECT_EQ(got.channels(c).SerializeAsString(), want.channels(c).SerializeAsString());
}

TEST_F(AnalyzerTest, ServerInfoSaysEngineAndLimits) {
  const v1::ServerInfo info = analyzer_->server_info();
  EXPECT_EQ(info.engine().kind(), "cpu");
  EXPECT_GE(info.engine().threads(), 1u);
  EXPECT_EQ(info.limits().max_pixels(), 1u << 20);
  EXPECT_EQ(info.limits().max_bins(), 65536u);
  EXPECT_FALSE(info.version().empty());
  EXPECT_NE(std::find(info.formats().begin(), info.formats().end(), "PNG"), info.formats().end());
}


namespace gpu_path {

// A stand-in for nvJPEG: checks the data with the GPU's algorithm run on the
// host, decodes on the CPU and hands over packed R,G,B pixels as a GPU
// decoder would (in host memory, which the stand-in engine below reads), or
// fails as told.
class FakeGpuDecoder final : public GpuJpegDecoder {
 public:
  ErrorCode fail_with = ErrorCode::kInternal;  // kInternal: do not fail
  int decodes = 0;
  int outstanding = 0;  // announced, not yet withdrawn

  class FakeTicket final : public Ticket {
   public:
    explicit FakeTicket(int& n) : n_(n) { ++n_; }
    ~FakeTicket() override { --n_; }

   private:
    int& n_;
  };
  std::unique_ptr<Ticket> announce() override { return std::make_unique<FakeTicket>(outstanding); }

  GpuDecodedImage decode(Ticket&, const uint8_t* data, size_t size) override {
    ++decodes;
    if (fail_with != ErrorCode::kInternal) fail(fail_with, "fake GPU decoder told to fail");
    bool covered = false;
    GpuDecodedImage out;
    out.check = verify_jpeg_on_host(data, size, &covered);
    if (!covered) fail(ErrorCode::kUnimplemented, "the check leaves it to libjpeg");
    if (out.check.truncated || out.check.corrupt) return out;  // answered by the verdict
    const DecodedImage cpu = decode_image(data, size, DecodeOptions{});
    const Layout& l = cpu.view.layout;
    auto px = std::make_shared<std::vector<uint8_t>>(l.pixels() * l.channels);
    const auto* base = static_cast<const uint8_t*>(cpu.view.data);
    for (uint64_t y = 0; y < l.height; ++y)
      for (uint64_t x = 0; x < l.width; ++x)
        for (uint32_t c = 0; c < l.channels; ++c)  // the CPU decoder's channels in R,G,B order
          (*px)[(y * l.width + x) * l.channels + c] = base[y * l.stride() + x * l.channels + cpu.channel_order[c]];
    out.decoder = "fake-gpu";
    out.view = DeviceImageView{px->data(), Layout{l.width, l.height, l.channels, SampleType::kUint8, 0}};
    out.memory = px;
    return out;
  }
  std::string description() const override { return "fake GPU decoder"; }
};

// The CPU engine, pretending its host memory is a GPU's.
class FakeGpuEngine final : public Engine {
 public:
  bool fail_device = false;
  EngineInfo info() const override { return cpu_->info(); }
  Result analyze(const ImageView& i, const StatsRequest& r) override { return cpu_->analyze(i, r); }
  std::unique_ptr<StreamAnalysis> open_stream(const Layout& l, const StatsRequest& r) override {
    return cpu_->open_stream(l, r);
  }
  bool takes_device_images() const override { return true; }
  Result analyze_device(const DeviceImageView& image, const StatsRequest& r) override {
    if (fail_device) fail(ErrorCode::kUnavailable, "the GPU fell off the bus");
    Result out = cpu_->analyze(ImageView{image.data, image.layout}, r);
    out.engine = "fake-gpu";
    return out;
  }

 private:
  std::unique_ptr<Engine> cpu_ = make_cpu_engine();
};

class GpuPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_corpus()) GTEST_SKIP() << "no corpus";
    analyzer_ = std::make_unique<Analyzer>(engine_, Limits{}, decoder_);
    jpeg_.mutable_input()->set_data(slurp_file((corpus_dir() / "jpeg/ljt_testorig.jpg").string()));
  }

  v1::AnalyzeResponse on_cpu() {
    v1::AnalyzeRequest r = jpeg_;
    r.mutable_options()->set_decoder(v1::DECODER_CHOICE_CPU);
    return analyzer_->analyze(r);
  }

  static void expect_same_channels(const v1::AnalyzeResponse& a, const v1::AnalyzeResponse& b) {
    ASSERT_EQ(a.channels_size(), b.channels_size());
    for (int c = 0; c < a.channels_size(); ++c)
      EXPECT_EQ(a.channels(c).SerializeAsString(), b.channels(c).SerializeAsString()) << "channel " << c;
  }

  std::shared_ptr<FakeGpuEngine> engine_ = std::make_shared<FakeGpuEngine>();
  std::shared_ptr<FakeGpuDecoder> decoder_ = std::make_shared<FakeGpuDecoder>();
  std::unique_ptr<Analyzer> analyzer_;
  v1::AnalyzeRequest jpeg_;
};

TEST_F(GpuPathTest, DevicePixelsGiveTheCpuPathsAnswerInRgbOrder) {
  const v1::AnalyzeResponse cpu = on_cpu();
  EXPECT_EQ(cpu.decoder(), "libjpeg-turbo");
  EXPECT_EQ(decoder_->decodes, 0);  // decoder=cpu never reaches the GPU
  const v1::AnalyzeResponse gpu = analyzer_->analyze(jpeg_);
  EXPECT_EQ(decoder_->decodes, 1);
  EXPECT_EQ(gpu.decoder(), "fake-gpu");
  EXPECT_EQ(gpu.engine(), "fake-gpu");
  EXPECT_EQ(gpu.format(), "JPEG");
  EXPECT_EQ(gpu.width(), cpu.width());
  EXPECT_EQ(gpu.channels(0).name(), "R");
  expect_same_channels(gpu, cpu);
  EXPECT_EQ(decoder_->outstanding, 0);
  EXPECT_EQ(analyzer_->server_info().gpu_decoder(), "fake GPU decoder");
  // Each decoder's pass is its check: no separate check time on either path.
  EXPECT_FALSE(cpu.has_check_time());
  EXPECT_FALSE(gpu.has_check_time());
  EXPECT_TRUE(cpu.has_decode_time());
}

TEST_F(GpuPathTest, AFailingGpuFallsBackToTheCpuDecoderWithNothingLost) {
  const v1::AnalyzeResponse cpu = on_cpu();
  for (ErrorCode code : {ErrorCode::kUnavailable, ErrorCode::kUnimplemented}) {
    decoder_->fail_with = code;  // lost mid-batch, or a file nvJPEG will not take
    const v1::AnalyzeResponse r = analyzer_->analyze(jpeg_);
    EXPECT_EQ(r.decoder(), "libjpeg-turbo");
    expect_same_channels(r, cpu);
  }
  decoder_->fail_with = ErrorCode::kInternal;
  engine_->fail_device = true;  // decoded, then the GPU fails: decoded again on the CPU
  const v1::AnalyzeResponse r = analyzer_->analyze(jpeg_);
  EXPECT_EQ(r.decoder(), "libjpeg-turbo");
  expect_same_channels(r, cpu);
  EXPECT_EQ(decoder_->outstanding, 0);
}

TEST_F(GpuPathTest, DecoderGpuIsAFailedPreconditionWhenItCannotBeHad) {
  v1::AnalyzeRequest r = jpeg_;
  r.mutable_options()->set_decoder(v1::DECODER_CHOICE_GPU);
  EXPECT_EQ(analyzer_->analyze(r).decoder(), "fake-gpu");
  decoder_->fail_with = ErrorCode::kUnimplemented;
  EXPECT_EQ(code_of([&] { analyzer_->analyze(r); }), ErrorCode::kFailedPrecondition);
  v1::AnalyzeRequest png = r;
  png.mutable_input()->set_data(slurp_file((corpus_dir() / "png/skimage_coffee.png").string()));
  EXPECT_NE(message_of([&] { analyzer_->analyze(png); }).find("JPEG only"), std::string::npos);
  EXPECT_EQ(code_of([&] { analyzer_->analyze(png); }), ErrorCode::kFailedPrecondition);
  Analyzer without(engine_, Limits{});
  EXPECT_EQ(code_of([&] { without.analyze(r); }), ErrorCode::kFailedPrecondition);
}

TEST_F(GpuPathTest, CutAndCorruptJpegsGetTheCpuPathsAnswersFromTheGpuCheck) {
  v1::AnalyzeRequest cut = jpeg_;
  const std::string& whole = jpeg_.input().data();
  cut.mutable_input()->set_data(whole.substr(0, whole.size() / 2) + "\xff\xd9");
  v1::AnalyzeRequest cut_on_cpu = cut;
  cut_on_cpu.mutable_options()->set_decoder(v1::DECODER_CHOICE_CPU);
  EXPECT_EQ(code_of([&] { analyzer_->analyze(cut); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(message_of([&] { analyzer_->analyze(cut); }), message_of([&] { analyzer_->analyze(cut_on_cpu); }));
  EXPECT_EQ(decoder_->decodes, 2);  // the GPU's check answered, no CPU decode
  cut.mutable_options()->set_allow_truncated(true);  // libjpeg's gray fill, on the CPU
  const v1::AnalyzeResponse r = analyzer_->analyze(cut);
  EXPECT_EQ(r.decoder(), "libjpeg-turbo");
  EXPECT_GT(r.warnings_size(), 0);
  EXPECT_EQ(decoder_->outstanding, 0);
  // A bad Huffman code is refused by both paths alike, allowed truncation or not.
  bool found = false;
  for (size_t at = whole.size() / 3; at < whole.size() - 2 && !found; ++at)
    for (int bit = 0; bit < 8 && !found; ++bit) {
      v1::AnalyzeRequest flipped = cut;
      std::string d = whole;
      d[at] = static_cast<char>(d[at] ^ (1 << bit));
      flipped.mutable_input()->set_data(d);
      const std::string gpu = message_of([&] { analyzer_->analyze(flipped); });
      if (gpu.find("bad Huffman code") == std::string::npos) continue;
      found = true;
      flipped.mutable_options()->set_decoder(v1::DECODER_CHOICE_CPU);
      EXPECT_EQ(message_of([&] { analyzer_->analyze(flipped); }), gpu);
      EXPECT_EQ(code_of([&] { analyzer_->analyze(flipped); }), ErrorCode::kInvalidArgument);
    }
  EXPECT_TRUE(found);
}

}  // namespace gpu_path

}  // namespace
}  // namespace imgstat::testing
