// The bad-input catalogue, through a real server: every case gets its status
// code and a message that names the problem, the next good request works,
// and the server's memory stays within its budget (peak RSS checked last).
#include <gtest/gtest.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <future>
#include <random>
#include <thread>

#include "corpus.hpp"
#include "hostile/inputs.hpp"
#include "metrics_scrape.hpp"
#include "imgstat/v1/imgstat.grpc.pb.h"
#include "process.hpp"

namespace imgstat::testing {
namespace {

using grpc::StatusCode;

// Under AddressSanitizer freed memory waits in a quarantine of 256 MiB, so
// resident memory says little about what a server holds: the sanitizer
// build checks behaviour, the plain build checks memory.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

void expect_rss_below(double mib, double limit, const std::string& what) {
  if (kSanitized) return;
  EXPECT_LT(mib, limit) << what;
  std::fprintf(stderr, "rss-grown %s: %.1f MiB (limit %.0f)\n", what.c_str(), mib, limit);
}
constexpr uint64_t kDecodeMemory = uint64_t{384} << 20;
// The peak over the server's resident memory once it listens (its engine
// up: the CUDA runtime's context alone is about 340 MiB of it on an H100
// host, 2026-12-05, against 41 MiB for the whole CPU server): the budget,
// two workers' frames, gRPC and the corpus's own decodes.
constexpr double kPeakGrowthMib = 860;
// The CUDA engine adds nvJPEG's pinned bitstream buffers (per decoding lane,
// as large as the largest JPEG seen) and the check's staging: outside the
// decode budget, bounded by the input limit.
constexpr double kCudaExtraGrowthMib = 96;

class Hostile : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess({"--engine", test_engine(), "--threads", "2", "--max-decode-memory",
                                 std::to_string(kDecodeMemory), "--stream-idle-timeout", "1", "--max-queue", "16",
                                 "--batch-window", "4", "--shutdown-grace", "30"});
    serving_rss_mib_ = server_->rss_mib();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(INT_MAX);
    args.SetMaxReceiveMessageSize(INT_MAX);
    channel_ = grpc::CreateCustomChannel(server_->address(), grpc::InsecureChannelCredentials(), args);
    stub_ = v1::ImageStats::NewStub(channel_);
  }
  void TearDown() override { expect_serving(); }
  void parts_that_ask_too_much();

  grpc::Status analyze(const v1::AnalyzeRequest& r, v1::AnalyzeResponse* out = nullptr, double timeout_s = 60) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int>(timeout_s * 1000)));
    v1::AnalyzeResponse scratch;
    return stub_->Analyze(&ctx, r, out ? out : &scratch);
  }
  static v1::AnalyzeRequest encoded(const std::string& data, const std::string& name = "") {
    v1::AnalyzeRequest r;
    r.mutable_input()->set_kind(v1::INPUT_KIND_ENCODED);
    r.mutable_input()->set_data(data);
    r.mutable_input()->set_name(name);
    return r;
  }
  static v1::AnalyzeRequest raw(uint64_t w, uint64_t h, uint32_t c, v1::SampleType t, uint64_t stride,
                                const std::string& data) {
    v1::AnalyzeRequest r;
    r.mutable_input()->set_kind(v1::INPUT_KIND_RAW);
    auto* l = r.mutable_input()->mutable_raw();
    l->set_width(w);
    l->set_height(h);
    l->set_channels(c);
    l->set_sample_type(t);
    l->set_row_stride(stride);
    r.mutable_input()->set_data(data);
    return r;
  }
  // The status, code and words a refusal must have; then a good request works.
  void expect_refused(const grpc::Status& s, StatusCode code, const std::string& words, const std::string& what) {
    EXPECT_EQ(s.error_code(), code) << what << ": " << s.error_message();
    EXPECT_NE(s.error_message().find(words), std::string::npos) << what << ": \"" << s.error_message()
                                                                << "\" should mention \"" << words << "\"";
    expect_serving();
  }
  void expect_serving() {
    ASSERT_TRUE(server_->alive()) << "the server died:\n" << server_->log().substr(0, 4000);
    v1::AnalyzeResponse got;
    const grpc::Status s = analyze(raw(3, 2, 1, v1::SAMPLE_TYPE_UINT8, 0, "\x01\x02\x03\x04\x05\x06"), &got, 10);
    ASSERT_TRUE(s.ok()) << "a good request after a bad one: " << s.error_message();
    EXPECT_EQ(got.channels(0).sum_int(), 21);
  }

  static ServerProcess* server_;
  static double serving_rss_mib_;  // its resident memory once it listens (its engine up)
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ImageStats::Stub> stub_;
};
ServerProcess* Hostile::server_ = nullptr;
double Hostile::serving_rss_mib_ = 0;

// ---- raw layouts whose arithmetic overflows ---------------------------------------------------

TEST_F(Hostile, RowStridesThatOverflowAreRefusedOnEveryPath) {
  // 2^63+1 times 2 rows wraps to 2: as many bytes as the wrapped product.
  const uint64_t wraps = (uint64_t{1} << 63) + 1;
  const auto a = raw(1, 2, 1, v1::SAMPLE_TYPE_UINT8, wraps, "\x07\x07");
  expect_refused(analyze(a), StatusCode::INVALID_ARGUMENT, "raw.row_stride", "stride 2^63+1 (Analyze)");
  // 2^64-2048: the least-bytes sum wraps; the data must not be read past its end.
  // With 4096-byte rows, stride + row wraps to 2048: the bytes sent.
  const auto b = raw(4096, 2, 1, v1::SAMPLE_TYPE_UINT8, ~uint64_t{0} - 2047, std::string(2048, 'x'));
  expect_refused(analyze(b), StatusCode::INVALID_ARGUMENT, "raw.row_stride", "stride 2^64-2048");
  // (2^32-1)^2 pixels of 32 bytes: the packed size overflows; of 1 byte it
  // does not, and the data must then be that large.
  expect_refused(analyze(raw(UINT32_MAX, UINT32_MAX, 4, v1::SAMPLE_TYPE_FLOAT64, 0, "x")),
                 StatusCode::INVALID_ARGUMENT, "overflows", "(2^32-1)^2 x 32 bytes");
  expect_refused(analyze(raw(UINT32_MAX, UINT32_MAX, 1, v1::SAMPLE_TYPE_UINT8, 0, "x")),
                 StatusCode::INVALID_ARGUMENT, "raw data is 1 bytes", "(2^32-1)^2 bytes");

  // AnalyzeBatch: the same request, answered under its id.
  grpc::ClientContext ctx;
  auto stream = stub_->AnalyzeBatch(&ctx);
  v1::BatchRequest br;
  br.set_id("42");
  *br.mutable_request() = a;
  ASSERT_TRUE(stream->Write(br));
  stream->WritesDone();
  v1::BatchResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(resp.id(), "42");
  EXPECT_EQ(resp.error().code(), static_cast<int>(StatusCode::INVALID_ARGUMENT));
  EXPECT_NE(resp.error().message().find("raw.row_stride"), std::string::npos) << resp.error().message();
  EXPECT_TRUE(stream->Finish().ok());

  // AnalyzeStream: refused at the header.
  grpc::ClientContext sctx;
  v1::AnalyzeResponse sresp;
  auto writer = stub_->AnalyzeStream(&sctx, &sresp);
  v1::AnalyzeStreamRequest header;
  *header.mutable_header()->mutable_input() = a.input();
  header.mutable_header()->mutable_input()->clear_data();
  header.mutable_header()->set_total_bytes(2);
  writer->Write(header);
  writer->WritesDone();
  expect_refused(writer->Finish(), StatusCode::INVALID_ARGUMENT, "raw.row_stride", "stride 2^63+1 (AnalyzeStream)");

  // The CLI's --local path goes through the same front door.
  const std::string file = temp_path("stride");
  { std::ofstream(file, std::ios::binary) << "\x07\x07"; }
  const ProcessResult r = run_process({client_bin(), "--local", "--raw", "1x2x1:uint8", "--stride",
                                       std::to_string(wraps), file}, 60);
  std::filesystem::remove(file);
  EXPECT_NE(r.code, 0);
  EXPECT_LT(r.code, 128) << "the client crashed: " << r.err;
  EXPECT_NE((r.out + r.err).find("raw.row_stride"), std::string::npos) << r.out << r.err;
}

// ---- headers that declare more than the file or the limits hold -------------------------------

TEST_F(Hostile, GifFrameFarLargerThanItsScreenIsRefusedBeforeAllocating) {
  const std::string gif = giant_frame_gif();
  ASSERT_EQ(gif.size(), 35u);
  const double before = server_->rss_mib();
  const auto t0 = std::chrono::steady_clock::now();
  expect_refused(analyze(encoded(gif)), StatusCode::RESOURCE_EXHAUSTED, "65535x65535", "1x1 screen, 65535^2 frame");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  expect_rss_below(server_->rss_mib() - before, 64, "MiB grown for a refused GIF");
  // Within the pixel limit but far beyond what 35 bytes of LZW can hold.
  expect_refused(analyze(encoded(giant_frame_gif(30000, 30000))), StatusCode::INVALID_ARGUMENT, "cannot hold",
                 "30000^2 frame in 35 bytes");
}

// A PNG text chunk declaring 2 GB in a file of a few hundred bytes: libpng
// zeroes a buffer of the declared size before it finds the data missing.
TEST_F(Hostile, PngChunkDeclaringMoreThanItsFileIsRefusedBeforeAllocating) {
  for (const bool late : {false, true}) {
    for (const int depth : {8, 4}) {  // the banded decoder's and libpng's own
      std::string png = zero_png(64, 32, 0, depth);
      std::string lie;
      put_be32(lie, 2046820587u);
      lie += std::string("iTXt", 4) + std::string("XML:com.adobe.xmp\0\0\0\0\0", 22);
      png.insert(late ? png.size() - 12 : png.find("IDAT") - 4, lie);
      const double before = server_->rss_mib();
      expect_refused(analyze(encoded(png)), StatusCode::INVALID_ARGUMENT, "iTXt chunk",
                     std::string("iTXt of 2 GB, ") + (late ? "after" : "before") + " the image data, depth " +
                         std::to_string(depth));
      expect_rss_below(server_->rss_mib() - before, 64, "MiB grown for a refused PNG");
      expect_serving();
    }
  }
}

TEST_F(Hostile, Os2BmpWidthsAboveInt16AreReadUnsigned) {
  expect_refused(analyze(encoded(os2_bmp(40000, 40000, false))), StatusCode::RESOURCE_EXHAUSTED, "40000x40000",
                 "OS/2 BMP 40000x40000");
  std::vector<uint8_t> indices;
  v1::AnalyzeResponse got;
  const grpc::Status s = analyze(encoded(os2_bmp(40000, 3, true, &indices)), &got);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(got.width(), 40000u);
  EXPECT_EQ(got.height(), 3u);
  uint64_t sum = 0;
  for (uint8_t v : indices) sum += v;
  EXPECT_EQ(got.channels(0).sum_int(), static_cast<int64_t>(sum));
}

TEST_F(Hostile, JpegTooSmallForItsDeclaredSizeIsRefusedQuickly) {
  cv::Mat small(64, 64, CV_8UC3);
  cv::randu(small, 0, 255);
  std::vector<uchar> jpg;
  cv::imencode(".jpg", small, jpg, {cv::IMWRITE_JPEG_PROGRESSIVE, 1});
  std::string data(jpg.begin(), jpg.end());
  const size_t sof = data.find("\xff\xc2", 2);
  ASSERT_NE(sof, std::string::npos);
  data[sof + 5] = '\x80', data[sof + 6] = '\x00';  // height 32768
  data[sof + 7] = '\x80', data[sof + 8] = '\x00';  // width 32768
  const auto t0 = std::chrono::steady_clock::now();
  expect_refused(analyze(encoded(data)), StatusCode::INVALID_ARGUMENT, "cannot hold", "progressive 32768^2 in a few KB");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
}

TEST_F(Hostile, HalfAJpegWithItsEndMarkerIsTruncated) {
  cv::Mat img(256, 256, CV_8UC3);
  cv::randu(img, 0, 255);
  std::vector<uchar> jpg;
  cv::imencode(".jpg", img, jpg);
  for (bool progressive : {false, true}) {
    if (progressive) cv::imencode(".jpg", img, jpg, {cv::IMWRITE_JPEG_PROGRESSIVE, 1});
    const std::string half = std::string(jpg.begin(), jpg.begin() + jpg.size() / 2) + "\xff\xd9";
    expect_refused(analyze(encoded(half)), StatusCode::INVALID_ARGUMENT, "truncated",
                   progressive ? "half a progressive JPEG + FF D9" : "half a JPEG + FF D9");
    auto allowed = encoded(half);
    allowed.mutable_options()->set_allow_truncated(true);
    v1::AnalyzeResponse got;
    ASSERT_TRUE(analyze(allowed, &got).ok());
    EXPECT_EQ(got.width(), 256u);
  }
  // The whole file is accepted, whole.
  v1::AnalyzeResponse got;
  ASSERT_TRUE(analyze(encoded(std::string(jpg.begin(), jpg.end())), &got).ok());
  EXPECT_EQ(got.warnings_size(), 0);
}

TEST_F(Hostile, DecodesBeyondTheMemoryBudgetAreRefusedByName) {
  // 16384^2 RGBA 16-bit: 2 GiB decoded from about 2 MB of deflate. In bands
  // it needs a few MiB (HostileBands); the luminance needs the whole image.
  const std::string png = zero_png(16384, 16384, 6, 16);
  EXPECT_LT(png.size(), 4u << 20);
  auto whole = encoded(png);
  whole.mutable_options()->add_statistics(v1::STATISTIC_LUMINANCE);
  expect_refused(analyze(whole), StatusCode::RESOURCE_EXHAUSTED, "--max-decode-memory", "2 GiB PNG, whole");
  // A TIFF declaring 32 GiB of float64 RGBA within the pixel limit.
  expect_refused(analyze(encoded(tiff_declaring(32768, 32768, 64, 4, 3))), StatusCode::RESOURCE_EXHAUSTED,
                 "--max-decode-memory", "32 GiB TIFF");
  // A PNG whose IDAT cannot hold what it declares.
  const std::string small = zero_png(64, 64, 0, 8);
  std::string lying = small;
  lying[16] = '\x00', lying[17] = '\x00', lying[18] = '\x80', lying[19] = '\x00';  // width 32768
  lying[20] = '\x00', lying[21] = '\x00', lying[22] = '\x80', lying[23] = '\x00';  // height 32768
  expect_refused(analyze(encoded(lying)), StatusCode::INVALID_ARGUMENT, "cannot hold", "PNG 32768^2 in 100 bytes");
}

// Page chains: twenty thousand pages, a loop, one past the file, and a
// page that declares 32 GiB behind a 1x1 one. Each answered or refused by
// name from the directories alone, in bounded time and memory.
TEST_F(Hostile, TiffPageChainsThatLoopLieOrNeverEnd) {
  const double before = server_->rss_mib();
  v1::AnalyzeResponse got;
  auto t0 = std::chrono::steady_clock::now();
  // About 1 s on 2 cores, 5 s under ASan: the walk and the reading are linear.
  const std::string many = tiff_pages(20000);
  ASSERT_TRUE(analyze(encoded(many), &got).ok());
  EXPECT_EQ(got.facts().planes(), 20000u);
  EXPECT_EQ(got.channels(0).count(), 20000u);
  EXPECT_EQ(got.channels(0).sum_int(), 20000 * 0x2a);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
  expect_rss_below(server_->rss_mib() - before, 96, "MiB grown for 20,000 pages");
  for (const auto& [next, what] : {std::pair<uint32_t, const char*>{12 + 3 * 114, "a loop back to page 3"},
                                   {12, "a loop back to the first page"},
                                   {1u << 30, "a next page past the file"}}) {
    got.Clear();
    ASSERT_TRUE(analyze(encoded(tiff_pages(5, next)), &got).ok()) << what;
    EXPECT_EQ(got.facts().planes(), 5u) << what;
    ASSERT_GT(got.warnings_size(), 0) << what;
    EXPECT_NE(got.warnings(0).find("directories end"), std::string::npos) << what << ": " << got.warnings(0);
  }
  t0 = std::chrono::steady_clock::now();
  // Its own series (pages of another size): refused by the memory limit
  // before anything is allocated, naming the series.
  expect_refused(analyze(encoded(tiff_pages(3, 0, 1))), StatusCode::RESOURCE_EXHAUSTED, "series 1 of 2",
                 "a 32 GiB page behind a 1x1 one");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  expect_rss_below(server_->rss_mib() - before, 96, "MiB grown for the page chains");
  expect_serving();
}

TEST_F(Hostile, GifAnimationsOfManyFramesHugeScreensAndDamage) {
  const double before = server_->rss_mib();
  v1::AnalyzeResponse got;
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(analyze(encoded(gif_frames(20000)), &got).ok());
  EXPECT_EQ(got.facts().planes(), 20000u);
  EXPECT_EQ(got.facts().duration_ms(), 200000u);
  EXPECT_EQ(got.channels(0).count(), 20000u);
  EXPECT_EQ(got.channels(0).sum_int(), 20000 * 255);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
  expect_rss_below(server_->rss_mib() - before, 96, "MiB grown for 20,000 frames");
  // Two 1x1 frames on a 65535x65535 screen: the canvas is over the pixel limit.
  t0 = std::chrono::steady_clock::now();
  expect_refused(analyze(encoded(gif_frames(2, 65535, 65535))), StatusCode::RESOURCE_EXHAUSTED, "over the limit",
                 "a 65535x65535 screen");
  // A frame declaring 65535x65535 with one pixel's data, clipped to a 1x1 screen.
  expect_refused(analyze(encoded(gif_frames(3, 1, 1, true))), StatusCode::INVALID_ARGUMENT, "frame 1",
                 "a 65535x65535 frame of one pixel");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 3.0);
  got.Clear();
  ASSERT_TRUE(analyze(encoded(gif_frames(5, 1, 1, false, true)), &got).ok());
  EXPECT_EQ(got.facts().planes(), 5u);
  ASSERT_GT(got.warnings_size(), 0);
  EXPECT_NE(got.warnings(0).find("damaged after frame 4"), std::string::npos) << got.warnings(0);
  expect_rss_below(server_->rss_mib() - before, 96, "MiB grown for the animations");
  expect_serving();
}

TEST_F(Hostile, ApngAnimationsOfManyFramesHugeCanvasesAndDamage) {
  const double before = server_->rss_mib();
  v1::AnalyzeResponse got;
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(analyze(encoded(apng_frames(20000)), &got).ok());
  EXPECT_EQ(got.facts().planes(), 20000u);
  EXPECT_EQ(got.channels(0).count(), 20000u);
  EXPECT_EQ(got.channels(0).sum_int(), 20000 * 7);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
  expect_rss_below(server_->rss_mib() - before, 96, "MiB grown for 20,000 APNG frames");
  t0 = std::chrono::steady_clock::now();
  expect_refused(analyze(encoded(apng_frames(2, 65535, 65535))), StatusCode::RESOURCE_EXHAUSTED, "over the limit",
                 "a 65535x65535 APNG canvas");
  expect_refused(analyze(encoded(apng_frames(3, 1, 1, true))), StatusCode::INVALID_ARGUMENT,
                 "frame 1's rectangle 65535x65535 at (0, 0) is not inside the 1x1 canvas", "a 65535x65535 frame");
  expect_refused(analyze(encoded(apng_frames(4, 1, 1, false, true))), StatusCode::INVALID_ARGUMENT, "past the end",
                 "an APNG cut in its last frame");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 3.0);
  expect_serving();
}

TEST_F(Hostile, HugeHeadersOfEveryFormat) {
  for (const auto& [w, h] : {std::pair<uint32_t, uint32_t>{4000000000u, 4000000000u}, {65535, 65535}, {40000, 30000}}) {
    for (const auto& [format, data] : huge_headers(w, h)) {
      const std::string what = format + " declaring " + std::to_string(w) + "x" + std::to_string(h);
      const auto t0 = std::chrono::steady_clock::now();
      const grpc::Status s = analyze(encoded(data));
      EXPECT_TRUE(s.error_code() == StatusCode::RESOURCE_EXHAUSTED || s.error_code() == StatusCode::INVALID_ARGUMENT)
          << what << ": " << static_cast<int>(s.error_code()) << " " << s.error_message();
      EXPECT_GT(s.error_message().size(), 10u) << what;
      EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 3.0) << what;
      expect_serving();
    }
  }
}

TEST_F(Hostile, CorpusFilesCutAnywhereGetAClearAnswer) {
  if (!have_corpus()) GTEST_SKIP() << "no corpus";
  int answered = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(corpus_dir())) {
    if (!entry.is_regular_file()) continue;
    const std::string name = entry.path().filename().string();
    if (name == "MANIFEST.tsv" || name == "reference.jsonl" || name == "README.md") continue;
    const std::string data = slurp(entry.path().string());
    for (size_t eighths : {1, 4, 7}) {
      const grpc::Status s = analyze(encoded(data.substr(0, data.size() * eighths / 8), name));
      const StatusCode c = s.error_code();
      EXPECT_TRUE(c == StatusCode::OK || c == StatusCode::INVALID_ARGUMENT || c == StatusCode::RESOURCE_EXHAUSTED)
          << name << " cut at " << eighths << "/8: " << static_cast<int>(c) << " " << s.error_message();
      ++answered;
    }
    ASSERT_TRUE(server_->alive()) << name;
  }
  EXPECT_GT(answered, 600);
}

// ---- parts of images -----------------------------------------------------------------------------

// One round of parts that ask too much, and the 65,536 labels answered.
void Hostile::parts_that_ask_too_much() {
  const uint32_t side = 2048;
  auto image = raw(side, side, 1, v1::SAMPLE_TYPE_UINT8, 0, std::string(size_t{side} * side, '\x07'));
  auto with_labels = [&](v1::SampleType type, const std::string& data, uint32_t w, uint32_t h) {
    auto r = image;
    v1::Input* map = r.mutable_options()->mutable_parts()->mutable_labels()->mutable_image();
    map->set_kind(v1::INPUT_KIND_RAW);
    map->mutable_raw()->set_width(w);
    map->mutable_raw()->set_height(h);
    map->mutable_raw()->set_channels(1);
    map->mutable_raw()->set_sample_type(type);
    map->set_data(data);
    return r;
  };
  // Every pixel its own 32-bit label: 4 million, far past --max-parts.
  std::string distinct(size_t{side} * side * 4, '\0');
  for (uint32_t i = 0; i < side * side; ++i) std::memcpy(&distinct[size_t{i} * 4], &i, 4);
  expect_refused(analyze(with_labels(v1::SAMPLE_TYPE_UINT32, distinct, side, side)), StatusCode::RESOURCE_EXHAUSTED,
                 "distinct labels", "4 million labels");
  // A label image of another size, and one a byte short.
  expect_refused(analyze(with_labels(v1::SAMPLE_TYPE_UINT8, std::string(size_t{side} * 7, '\1'), side, 7)),
                 StatusCode::INVALID_ARGUMENT, "same size", "labels of another size");
  expect_refused(analyze(with_labels(v1::SAMPLE_TYPE_UINT16, std::string(size_t{side} * side * 2 - 1, '\1'), side, side)),
                 StatusCode::INVALID_ARGUMENT, "needs", "labels a byte short");
  // A mask that is a decompression bomb: a few KiB of zlib declaring 16384 x 16384.
  auto bomb = image;
  bomb.mutable_options()->mutable_parts()->mutable_mask()->mutable_image()->set_data(zero_png(16384, 16384, 0, 8));
  expect_refused(analyze(bomb), StatusCode::INVALID_ARGUMENT, "same size", "a mask bomb");
  for (const auto& [format, data] : huge_headers(4000000000u, 4000000000u)) {
    auto huge = image;
    huge.mutable_options()->mutable_parts()->mutable_mask()->mutable_image()->set_data(data);
    const grpc::Status s = analyze(huge);
    EXPECT_TRUE(s.error_code() == StatusCode::RESOURCE_EXHAUSTED || s.error_code() == StatusCode::INVALID_ARGUMENT)
        << format << ": " << s.error_message();
    EXPECT_NE(s.error_message().find("mask"), std::string::npos) << format << ": " << s.error_message();
  }
  // 10^9 tiles; a rectangle overflowing 32 bits; 65,536 histograms past a message.
  auto tiles = image;
  tiles.mutable_options()->mutable_parts()->mutable_tiles()->set_columns(40000);
  tiles.mutable_options()->mutable_parts()->mutable_tiles()->set_rows(25000);
  expect_refused(analyze(tiles), StatusCode::RESOURCE_EXHAUSTED, "--max-parts", "10^9 tiles");
  // 2^96 tiles of a stack: the count saturates, refused as any other too many.
  auto boxes = raw(64, 64, 1, v1::SAMPLE_TYPE_UINT8, 0, std::string(64 * 64 * 3, '\x05'));
  boxes.mutable_input()->mutable_raw()->set_depth(3);
  v1::Tiles* grid = boxes.mutable_options()->mutable_parts()->mutable_tiles();
  grid->set_columns(UINT32_MAX);
  grid->set_rows(UINT32_MAX);
  grid->set_slabs(UINT32_MAX);
  expect_refused(analyze(boxes), StatusCode::RESOURCE_EXHAUSTED, "--max-parts", "2^96 tiles of a stack");
  auto rect = image;
  v1::Rectangle* q = rect.mutable_options()->mutable_parts()->mutable_rectangles()->add_rectangles();
  q->set_x(1);
  q->set_y(4294967295u);
  q->set_width(1);
  q->set_height(4294967295u);
  expect_refused(analyze(rect), StatusCode::INVALID_ARGUMENT, "not inside", "a rectangle past 32 bits");
  std::string blocks(size_t{side} * side * 2, '\0');
  for (uint32_t y = 0; y < side; ++y)
    for (uint32_t x = 0; x < side; ++x) {
      const uint16_t v = static_cast<uint16_t>((y / 8) * 256 + x / 8);
      std::memcpy(&blocks[(size_t{y} * side + x) * 2], &v, 2);
    }
  expect_refused(analyze(with_labels(v1::SAMPLE_TYPE_UINT16, blocks, side, side)), StatusCode::RESOURCE_EXHAUSTED,
                 "largest message", "65,536 labels' histograms");
  // Without histograms the same 65,536 labels are answered.
  auto moments = with_labels(v1::SAMPLE_TYPE_UINT16, blocks, side, side);
  moments.mutable_options()->add_statistics(v1::STATISTIC_MIN_MAX);
  moments.mutable_options()->add_statistics(v1::STATISTIC_SUM);
  v1::AnalyzeResponse got;
  ASSERT_TRUE(analyze(moments, &got).ok());
  EXPECT_EQ(got.parts_size(), 65536);
  EXPECT_EQ(got.parts(65535).channels(0).count(), 64u);
}

TEST_F(Hostile, PartsThatAskTooMuchAreRefusedWithMemoryBounded) {
  // The first rounds may leave the allocator's arenas holding what their
  // requests and answers took (a 20 MiB request received and parsed, 65,536
  // parts answered), each thread's arena its own (up to 2 x threads + 4):
  // RSS then rises in steps as other threads' arenas take a round (seen:
  // +25 to +60 MiB at rounds 3 and 7, flat between; on a 16-core CUDA host
  // 2 MiB a round by round 12). A leak grows every round: so some round
  // after the first two must grow by less than 4 MiB, and all of them
  // together stay bounded.
  const bool cuda = test_engine() == "cuda";
  const double before = server_->rss_mib();
  parts_that_ask_too_much();
  const double first = server_->rss_mib();
  parts_that_ask_too_much();
  const double second = server_->rss_mib();
  // The CUDA engine's parts copy from pageable memory: the driver's staging buffers come on top.
  expect_rss_below(first - before, cuda ? 288 : 224, "MiB grown over refused and answered parts");
  expect_rss_below(second - before, cuda ? 336 : 256, "MiB grown over two rounds");
  double least = 1e9, last = second;
  for (int round = 3; round <= (kSanitized ? 2 : 12) && least >= 4; ++round) {  // sanitizers: RSS is theirs
    parts_that_ask_too_much();
    const double now = server_->rss_mib();
    least = std::min(least, now - last);
    last = now;
  }
  if (!kSanitized) expect_rss_below(least, 4, "MiB grown by the round that grew least of rounds 3 to 12 (a leak grows every round)");
  expect_rss_below(last - before, cuda ? 448 : 384, "MiB grown over every round");
}

// ---- options and stream protocol ---------------------------------------------------------------

TEST_F(Hostile, OptionsOutOfRange) {
  auto r = raw(2, 1, 1, v1::SAMPLE_TYPE_UINT8, 0, "\x01\x02");
  auto bins = r;
  bins.mutable_options()->set_bins(65537);
  expect_refused(analyze(bins), StatusCode::INVALID_ARGUMENT, "options.bins", "65537 bins");
  auto stat = r;
  stat.mutable_options()->add_statistics(static_cast<v1::Statistic>(99));
  expect_refused(analyze(stat), StatusCode::INVALID_ARGUMENT, "options.statistics", "statistic 99");
  for (const auto& [lo, hi] : {std::pair<double, double>{NAN, 1}, {1, 0}, {0, INFINITY}, {0, 1e-320}}) {
    auto range = r;
    range.mutable_options()->mutable_range()->set_lo(lo);
    range.mutable_options()->mutable_range()->set_hi(hi);
    range.mutable_options()->set_bins(65536);
    expect_refused(analyze(range), StatusCode::INVALID_ARGUMENT, "options.range", "range");
  }
  auto kind = r;
  kind.mutable_input()->set_kind(static_cast<v1::InputKind>(7));
  expect_refused(analyze(kind), StatusCode::INVALID_ARGUMENT, "input.kind", "kind 7");
  expect_refused(analyze(raw(2, 1, 5, v1::SAMPLE_TYPE_UINT8, 0, "xx")), StatusCode::INVALID_ARGUMENT, "raw.channels",
                 "5 channels");
  auto decoder = r;
  decoder.mutable_options()->set_decoder(static_cast<v1::DecoderChoice>(7));
  expect_refused(analyze(decoder), StatusCode::INVALID_ARGUMENT, "options.decoder", "decoder 7");
  // The GPU decodes JPEG only, on any server.
  v1::AnalyzeRequest png;
  png.mutable_input()->set_data(zero_png(16, 8, 2, 8));
  png.mutable_options()->set_decoder(v1::DECODER_CHOICE_GPU);
  expect_refused(analyze(png), StatusCode::FAILED_PRECONDITION, "JPEG only", "decoder GPU for a PNG");
}

// Colour spaces and joint histograms asked for wrongly: each refused with
// the reason, before anything is allocated (a joint histogram is checked
// against 2^24 bins from its shape alone, products that wrap 32 or 64 bits
// included), and the server serves on.
TEST_F(Hostile, ColourAndJointHistogramsOutOfRange) {
  const std::string px(3 * 4 * 4, '\x07');
  auto r = raw(4, 4, 3, v1::SAMPLE_TYPE_UINT8, 0, px);
  auto joint = [&](std::vector<uint32_t> channels, std::vector<uint32_t> bins) {
    auto q = r;
    for (uint32_t c : channels) q.mutable_options()->mutable_joint()->add_channels(c);
    for (uint32_t b : bins) q.mutable_options()->mutable_joint()->add_bins(b);
    return q;
  };
  expect_refused(analyze(joint({0, 1, 2}, {256, 256, 257})), StatusCode::INVALID_ARGUMENT, "256x256x257 bins",
                 "2^24 + 65536 bins");
  expect_refused(analyze(joint({0, 1, 2}, {65536, 65536, 65536})), StatusCode::INVALID_ARGUMENT, "2^24",
                 "2^48 bins (wraps 32 bits)");
  expect_refused(analyze(joint({0, 1, 2}, {4294967295u, 4294967295u, 4294967295u})), StatusCode::INVALID_ARGUMENT,
                 "2^24", "(2^32-1)^3 bins (wraps 64 bits)");
  expect_refused(analyze(joint({0, 1}, {0})), StatusCode::INVALID_ARGUMENT, "at least 1", "0 bins");
  expect_refused(analyze(joint({0, 3}, {8})), StatusCode::INVALID_ARGUMENT, "past the 3 channels", "channel 3 of 3");
  expect_refused(analyze(joint({0}, {8})), StatusCode::INVALID_ARGUMENT, "2 or 3 channels", "one channel");
  expect_refused(analyze(joint({0, 1, 2, 0}, {8})), StatusCode::INVALID_ARGUMENT, "2 or 3 channels", "four channels");
  expect_refused(analyze(joint({0, 1}, {8, 8, 8})), StatusCode::INVALID_ARGUMENT, "options.joint.bins", "three bins, two channels");
  auto nan_range = joint({0, 1}, {8});
  for (int a = 0; a < 2; ++a) {
    auto* range = nan_range.mutable_options()->mutable_joint()->add_ranges();
    range->set_lo(NAN);
    range->set_hi(1);
  }
  expect_refused(analyze(nan_range), StatusCode::INVALID_ARGUMENT, "range", "NaN range");
  auto gray = raw(4, 4, 1, v1::SAMPLE_TYPE_UINT8, 0, std::string(16, '\x03'));
  gray.mutable_options()->set_colour_space(v1::COLOUR_SPACE_LAB);
  expect_refused(analyze(gray), StatusCode::INVALID_ARGUMENT, "needs an RGB or RGBA image", "Lab of a gray image");
  auto wide = raw(4, 4, 3, v1::SAMPLE_TYPE_UINT16, 0, std::string(96, '\x03'));
  wide.mutable_options()->set_colour_space(v1::COLOUR_SPACE_HSV);
  expect_refused(analyze(wide), StatusCode::INVALID_ARGUMENT, "uint8 and float32", "HSV of uint16");
  auto space = r;
  space.mutable_options()->set_colour_space(static_cast<v1::ColourSpace>(77));
  expect_refused(analyze(space), StatusCode::INVALID_ARGUMENT, "options.colour_space", "colour space 77");
  auto fine = joint({2, 0}, {7, 13});
  fine.mutable_options()->set_colour_space(v1::COLOUR_SPACE_HSV);
  v1::AnalyzeResponse ok;
  ASSERT_TRUE(analyze(fine, &ok).ok()) << "the server stopped serving";
  EXPECT_EQ(ok.joint().counts_size(), 91);
}

TEST_F(Hostile, HistogramRangesWiderThanADouble) {
  const double values[] = {-1e308, 0, 5e307, 1e308, -DBL_MAX};
  auto r = raw(5, 1, 1, v1::SAMPLE_TYPE_FLOAT64, 0, std::string(reinterpret_cast<const char*>(values), sizeof values));
  // An explicit range whose width overflows a double is refused by name.
  auto wide = r;
  wide.mutable_options()->mutable_range()->set_lo(-1e308);
  wide.mutable_options()->mutable_range()->set_hi(1e308);
  expect_refused(analyze(wide), StatusCode::INVALID_ARGUMENT, "options.range", "range [-1e308, 1e308)");
  // The automatic range [min, max] of such data is as wide: every sample
  // still lands in the bin the float64 formula means.
  r.mutable_options()->set_bins(4);
  v1::AnalyzeResponse got;
  const grpc::Status s = analyze(r, &got);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const auto& a = got.channels(0).histogram();
  ASSERT_EQ(a.counts_size(), 4);
  EXPECT_EQ(a.counts(0), 1u);  // -DBL_MAX
  EXPECT_EQ(a.counts(1), 1u);  // -1e308
  EXPECT_EQ(a.counts(2), 1u);  // 0
  EXPECT_EQ(a.counts(3), 2u);  // 5e307, 1e308
  EXPECT_EQ(got.engine(), test_engine());
}

grpc::Status stream_of(v1::ImageStats::Stub& stub, const std::vector<v1::AnalyzeStreamRequest>& messages) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::AnalyzeResponse response;
  auto writer = stub.AnalyzeStream(&ctx, &response);
  for (const auto& m : messages)
    if (!writer->Write(m)) break;
  writer->WritesDone();
  return writer->Finish();
}

TEST_F(Hostile, StreamsWithBadShapes) {
  v1::AnalyzeStreamRequest header, chunk, with_data, zero;
  header.mutable_header()->mutable_input()->set_kind(v1::INPUT_KIND_BYTES);
  header.mutable_header()->set_total_bytes(8);
  chunk.set_chunk("1234");
  with_data = header;
  with_data.mutable_header()->mutable_input()->set_data("12");
  zero = header;
  zero.mutable_header()->set_total_bytes(0);
  v1::AnalyzeStreamRequest too_big = header;
  too_big.mutable_header()->set_total_bytes(uint64_t{1} << 62);
  const std::vector<std::tuple<std::vector<v1::AnalyzeStreamRequest>, StatusCode, std::string>> cases = {
      {{}, StatusCode::INVALID_ARGUMENT, "no header"},
      {{chunk, chunk}, StatusCode::INVALID_ARGUMENT, "header"},
      {{header, header, chunk, chunk}, StatusCode::INVALID_ARGUMENT, "second header"},
      {{header, chunk}, StatusCode::INVALID_ARGUMENT, "4 of"},
      {{header, chunk, chunk, chunk}, StatusCode::INVALID_ARGUMENT, "more than"},
      {{with_data, chunk}, StatusCode::INVALID_ARGUMENT, "carries data"},
      {{zero}, StatusCode::INVALID_ARGUMENT, "total_bytes"},
      {{too_big, chunk}, StatusCode::RESOURCE_EXHAUSTED, "over the limit"},
  };
  for (size_t i = 0; i < cases.size(); ++i)
    expect_refused(stream_of(*stub_, std::get<0>(cases[i])), std::get<1>(cases[i]), std::get<2>(cases[i]),
                   "stream case " + std::to_string(i));
  EXPECT_TRUE(stream_of(*stub_, {header, chunk, chunk}).ok());
}

// ---- clients that hold the server's memory ----------------------------------------------------

TEST_F(Hostile, StalledUploadsCommitNoMemoryAndAreEnded) {
  const double before = server_->rss_mib();
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientWriter<v1::AnalyzeStreamRequest>>> writers;
  std::vector<v1::AnalyzeResponse> responses(8);
  for (int i = 0; i < 8; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    writers.push_back(stub_->AnalyzeStream(contexts.back().get(), &responses[i]));
    v1::AnalyzeStreamRequest header, chunk;
    header.mutable_header()->mutable_input()->set_kind(i % 2 ? v1::INPUT_KIND_ENCODED : v1::INPUT_KIND_BYTES);
    header.mutable_header()->set_total_bytes((uint64_t{2} << 30) - 1);  // ~2 GiB declared
    chunk.set_chunk("\x89PNG\r\n\x1a\n");
    writers.back()->Write(header);
    writers.back()->Write(chunk);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double grown = server_->rss_mib() - before;
  std::printf("8 stalled uploads (%s engine), 8 bytes sent each: resident +%.1f MiB\n", test_engine().c_str(), grown);
  expect_rss_below(grown, 64, "MiB grown: declared sizes were reserved");
  // Then they stall: the idle timeout (1 s here) ends each.
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& w : writers) {
    const grpc::Status s = w->Finish();
    EXPECT_EQ(s.error_code(), StatusCode::DEADLINE_EXCEEDED) << s.error_message();
    EXPECT_NE(s.error_message().find("--stream-idle-timeout"), std::string::npos) << s.error_message();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

TEST_F(Hostile, EncodedUploadsAreChargedToTheDecodeMemory) {
  // 500 MiB declared, more than the 384 MiB budget: refused when the bytes
  // received pass it, not held.
  grpc::ClientContext ctx;
  v1::AnalyzeResponse response;
  auto writer = stub_->AnalyzeStream(&ctx, &response);
  v1::AnalyzeStreamRequest header, chunk;
  header.mutable_header()->set_total_bytes(uint64_t{500} << 20);
  writer->Write(header);
  chunk.set_chunk(std::string(size_t{1} << 20, '\x42'));
  int sent = 0;
  while (sent < 500 && writer->Write(chunk)) ++sent;
  writer->WritesDone();
  expect_refused(writer->Finish(), StatusCode::RESOURCE_EXHAUSTED, "--max-decode-memory", "500 MiB upload");
  EXPECT_LT(sent, 500);
}

TEST_F(Hostile, BatchClientThatNeverReadsHoldsAWindow) {
  // Answers of 65536 bins x 4 channels of random data: large, and never read.
  std::mt19937 rng(7);
  std::string frame(64 * 64 * 4 * 2, '\0');
  for (char& c : frame) c = static_cast<char>(rng());
  v1::BatchRequest br;
  *br.mutable_request() = raw(64, 64, 4, v1::SAMPLE_TYPE_UINT16, 0, frame);
  br.mutable_request()->mutable_options()->set_bins(65536);
  const double before = server_->rss_mib();
  grpc::ClientContext ctx;
  auto stream = stub_->AnalyzeBatch(&ctx);
  std::atomic<int> written{0};
  std::thread writer([&] {
    for (int i = 0; i < 2000; ++i) {
      br.set_id(std::to_string(i));
      if (!stream->Write(br)) return;
      ++written;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the idle timeout is 1 s
  const double grew = server_->rss_mib() - before;
  ctx.TryCancel();
  writer.join();
  stream->Finish();
  expect_rss_below(grew, 100, "MiB held for a client that never reads, after it wrote " + std::to_string(written.load()));
  EXPECT_LT(written.load(), 2000) << "flow control should have stopped the writer";
}

// Aggregate reads a message only when the last one's inputs are all on
// their way and its window (--batch-window 4) has room: with the server's
// threads busy, a client that floods it with 4 MiB inputs is held by flow
// control, not buffered; and a client that sends nothing more for
// --stream-idle-timeout is ended.
TEST_F(Hostile, AggregateFloodIsHeldByItsWindowAndAStallIsEnded) {
  const std::string slow = zero_png(4096, 4096, 6, 16);
  std::vector<std::future<grpc::Status>> busy;
  for (int i = 0; i < 4; ++i)  // two rounds of the server's two threads
    busy.push_back(std::async(std::launch::async, [&] { return analyze(encoded(slow), nullptr, 120); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::mt19937 rng(11);
  std::string frame(1 << 20, '\0');
  for (char& c : frame) c = static_cast<char>(rng());
  v1::AggregateRequest m;
  m.mutable_options()->add_statistics(v1::STATISTIC_HISTOGRAM);
  const double before = server_->rss_mib();
  grpc::ClientContext ctx;
  v1::AggregateResponse answer;
  auto stream = stub_->Aggregate(&ctx, &answer);
  std::atomic<int> written{0};
  std::thread writer([&] {
    for (int i = 0; i < 400; ++i) {
      v1::Input* in = m.add_inputs();
      in->set_kind(v1::INPUT_KIND_BYTES);
      in->set_data(frame);
      if (!stream->Write(m)) return;
      m.Clear();
      ++written;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the idle timeout is 1 s
  const double grew = server_->rss_mib() - before;
  const int sent = written.load();
  // Only while the slow decodes still hold the threads does the count say
  // anything (a fast host may be through them already, and the flood with them).
  const bool still_busy = busy.back().wait_for(std::chrono::seconds(0)) != std::future_status::ready;
  ctx.TryCancel();
  writer.join();
  stream->Finish();
  for (auto& f : busy) f.get();
  // The slow decodes' images come and go meanwhile (up to 2 x 128 MiB): a
  // server reading the flood ahead would hold its 400 MiB.
  expect_rss_below(grew, 300, "MiB held for an Aggregate flood, after " + std::to_string(sent) + " inputs");
  std::printf("Aggregate flood: %d inputs of 1 MiB written in 0.5 s (slow decodes %s), resident +%.1f MiB\n", sent,
              still_busy ? "still running" : "already done", grew);
  if (still_busy) EXPECT_LT(sent, 100) << "flow control should have stopped the writer";

  grpc::ClientContext stalled_ctx;
  v1::AggregateResponse stalled_answer;
  auto stalled = stub_->Aggregate(&stalled_ctx, &stalled_answer);
  v1::AggregateRequest first;
  first.mutable_options();
  first.add_inputs()->set_data(zero_png(8, 8, 0, 8));
  ASSERT_TRUE(stalled->Write(first));
  const auto t0 = std::chrono::steady_clock::now();
  const grpc::Status s = stalled->Finish();  // without WritesDone: the client says no more
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(s.error_code(), StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_NE(s.error_message().find("--stream-idle-timeout"), std::string::npos) << s.error_message();
  EXPECT_LT(waited, 10.0);
}

// An Aggregate call whose inputs meet a full work queue: each refused at
// once (RESOURCE_EXHAUSTED, named in the answer), the next one taken in its
// place by a loop, not a call inside a call, for all 1,024 of a message;
// the call ends and the server serves on.
TEST_F(Hostile, AggregateInputsMeetingAFullQueueAreNamedAndTheCallEnds) {
  const std::string slow = zero_png(4096, 4096, 6, 16);
  std::vector<std::future<grpc::Status>> busy;
  for (int i = 0; i < 18; ++i)  // two running, sixteen queued (--max-queue 16)
    busy.push_back(std::async(std::launch::async, [&] { return analyze(encoded(slow), nullptr, 120); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  v1::AggregateRequest m;
  m.mutable_options();
  const std::string small = zero_png(8, 8, 0, 8);
  for (int i = 0; i < 1024; ++i) {
    v1::Input* in = m.add_inputs();
    in->set_name("small-" + std::to_string(i));
    in->set_data(small);
  }
  grpc::ClientContext ctx;
  v1::AggregateResponse answer;
  auto stream = stub_->Aggregate(&ctx, &answer);
  ASSERT_TRUE(stream->Write(m));
  stream->WritesDone();
  const grpc::Status s = stream->Finish();
  const bool still_busy = busy.back().wait_for(std::chrono::seconds(0)) != std::future_status::ready;
  for (auto& f : busy) f.get();
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(answer.inputs() + static_cast<uint64_t>(answer.failures_size()), 1024u);
  int full = 0;
  for (const v1::AggregateFailure& f : answer.failures()) {
    EXPECT_EQ(f.name(), "small-" + std::to_string(f.index()));
    full += f.error().code() == StatusCode::RESOURCE_EXHAUSTED;
  }
  EXPECT_EQ(full, answer.failures_size());
  std::printf("Aggregate into a full queue: %d of 1024 refused, %llu merged (slow decodes %s)\n", full,
              static_cast<unsigned long long>(answer.inputs()), still_busy ? "still running" : "already done");
  if (still_busy) EXPECT_GT(full, 900) << "the queue was full for the call's inputs";
}

TEST_F(Hostile, QueueIsBoundedAndDeadlinesAreHonoured) {
  // Slow work: 4096^2 RGBA 16-bit PNGs (128 MiB each decoded) on 2 threads.
  const std::string slow = zero_png(4096, 4096, 6, 16);
  std::vector<std::future<grpc::Status>> busy;
  for (int i = 0; i < 4; ++i)
    busy.push_back(std::async(std::launch::async, [&] { return analyze(encoded(slow), nullptr, 120); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // A small PNG with a short deadline: answered DEADLINE_EXCEEDED at its
  // deadline, not after the queue ahead of it.
  const std::string small = zero_png(8, 8, 0, 8);
  const auto t0 = std::chrono::steady_clock::now();
  const grpc::Status s = analyze(encoded(small, "small-behind-slow"), nullptr, 0.2);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!s.ok()) EXPECT_EQ(s.error_code(), StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_LT(waited, 1.0);
  // A flood beyond --max-queue (16) is refused at once, not queued.
  std::vector<std::future<grpc::Status>> flood;
  for (int i = 0; i < 40; ++i)
    flood.push_back(std::async(std::launch::async, [&] { return analyze(encoded(slow), nullptr, 120); }));
  int refused = 0;
  for (auto& f : flood) {
    const grpc::Status r = f.get();
    if (!r.ok()) {
      EXPECT_EQ(r.error_code(), StatusCode::RESOURCE_EXHAUSTED) << r.error_message();
      ++refused;
    }
  }
  for (auto& f : busy) EXPECT_TRUE(f.get().ok());
  EXPECT_GT(refused, 0) << "40 slow calls on 2 threads with a queue of 16";
}

// ---- the log and shutdown ----------------------------------------------------------------------

TEST_F(Hostile, UntrustedNamesAreEscapedAndCutInTheLog) {
  auto r = raw(1, 1, 1, v1::SAMPLE_TYPE_UINT8, 0, "\x05");
  r.mutable_input()->set_name("evil\nforged line\x1b[31m" + std::string(1 << 20, 'n'));
  ASSERT_TRUE(analyze(r).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::string log = server_->log();
  const size_t at = log.find("evil");
  ASSERT_NE(at, std::string::npos);
  const std::string line = log.substr(at, log.find('\n', at) - at);
  EXPECT_NE(line.find("evil\\nforged line\\x1b[31m"), std::string::npos) << line.substr(0, 200);
  EXPECT_LT(line.size(), 1000u);
  EXPECT_NE(line.find("(1048597 bytes)"), std::string::npos) << line.substr(0, 400);
}

TEST_F(Hostile, PeakMemoryStaysWithinTheBudget) {
  // Last in the file (gtest keeps the order): everything above has run.
  const double peak = server_->peak_rss_mib();
  std::printf("server peak RSS after the catalogue: %.0f MiB, %.0f when it began serving (decode budget %llu MiB)\n",
              peak, serving_rss_mib_, static_cast<unsigned long long>(kDecodeMemory >> 20));
  expect_rss_below(peak - serving_rss_mib_, kPeakGrowthMib + (test_engine() == "cuda" ? kCudaExtraGrowthMib : 0),
                   "MiB grown at the server's peak over its RSS when it began serving");
}

TEST(HostileAdmission, CallsBeyondMaxConcurrentAreRefusedAndTheRestServed) {
  ServerProcess server({"--engine", "cpu", "--threads", "1", "--max-concurrent", "2", "--stream-idle-timeout", "30"});
  auto stub = v1::ImageStats::NewStub(grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
  // Two uploads that hold their calls open.
  grpc::ClientContext c1, c2;
  v1::AnalyzeResponse r1, r2;
  auto w1 = stub->AnalyzeStream(&c1, &r1);
  auto w2 = stub->AnalyzeStream(&c2, &r2);
  v1::AnalyzeStreamRequest header;
  header.mutable_header()->mutable_input()->set_kind(v1::INPUT_KIND_BYTES);
  header.mutable_header()->set_total_bytes(4);
  ASSERT_TRUE(w1->Write(header));
  ASSERT_TRUE(w2->Write(header));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  v1::AnalyzeRequest r;
  r.mutable_input()->set_kind(v1::INPUT_KIND_BYTES);
  r.mutable_input()->set_data("abcd");
  v1::AnalyzeResponse got;
  {
    grpc::ClientContext ctx;
    const grpc::Status s = stub->Analyze(&ctx, r, &got);
    EXPECT_EQ(s.error_code(), StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
    EXPECT_NE(s.error_message().find("--max-concurrent"), std::string::npos) << s.error_message();
  }
  // The two held calls finish normally, and then there is room again.
  v1::AnalyzeStreamRequest chunk;
  chunk.set_chunk("wxyz");
  for (auto* w : {w1.get(), w2.get()}) {
    ASSERT_TRUE(w->Write(chunk));
    w->WritesDone();
    EXPECT_TRUE(w->Finish().ok());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  grpc::ClientContext ctx;
  EXPECT_TRUE(stub->Analyze(&ctx, r, &got).ok());
}

TEST(HostileShutdown, OpenHealthWatchDoesNotHoldSigterm) {
  ServerProcess server({"--engine", "cpu", "--threads", "1", "--shutdown-grace", "30"});
  auto channel = grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  grpc::ClientContext ctx;
  grpc::CompletionQueue cq;
  // grpc.health.v1.Health/Watch with service "" (an empty message).
  auto call = generic.PrepareCall(&ctx, "/grpc.health.v1.Health/Watch", &cq);
  call->StartCall(reinterpret_cast<void*>(1));
  void* tag;
  bool ok;
  cq.Next(&tag, &ok);
  grpc::Slice empty;
  grpc::ByteBuffer request(&empty, 1);
  call->Write(request, grpc::WriteOptions().set_last_message(), reinterpret_cast<void*>(2));
  cq.Next(&tag, &ok);
  grpc::ByteBuffer first;
  call->Read(&first, reinterpret_cast<void*>(3));
  cq.Next(&tag, &ok);
  ASSERT_TRUE(ok) << "no first health status";
  const auto t0 = std::chrono::steady_clock::now();
  const int code = server.terminate(20);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(code, 0);
  EXPECT_LT(took, 3.0) << "an open Watch held the shutdown";
  ctx.TryCancel();
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(4)) {
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

// 64 uploads that send a header and 256 KiB of pixels or bytes, then stall:
// while they wait the server holds what they sent and no more (its resident
// memory within the bound the CPU engine keeps; with the CUDA engine, GPU
// memory only for the float pixels a second pass needs), ordinary calls
// from another client are computed on the engine asked for (the GPU, not the
// CPU standing in for busy workspaces), and the idle timeout gives it all back.
TEST(HostileStalled, SixtyFourStalledStreamsHoldWhatTheySentAndNoMore) {
  const std::string engine = test_engine();
  ServerProcess server({"--engine", engine, "--threads", "2", "--stream-idle-timeout", "3", "--max-queue", "256",
                        "--max-decode-memory", std::to_string(uint64_t{2} << 30), "--metrics-listen", "127.0.0.1:0"});
  const int metrics = server.logged_port("metrics on http://127.0.0.1:");
  ASSERT_GT(metrics, 0) << server.log();
  const auto gpu_memory = [&](const char* state) {
    return sample(http_get(metrics, "/metrics"), std::string("imgstat_gpu_memory_bytes{state=\"") + state + "\"}");
  };
  const auto stub = v1::ImageStats::NewStub(grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
  std::mt19937 rng(64);
  const auto random_bytes = [&](size_t n) {
    std::string b(n, '\0');
    for (char& c : b) c = static_cast<char>(rng());
    return b;
  };
  // An ordinary call from another client: a random 1024x768 RGB frame whose sums are known.
  const std::string frame = random_bytes(1024 * 768 * 3);
  int64_t frame_sum[3] = {0, 0, 0};
  for (size_t i = 0; i < frame.size(); ++i) frame_sum[i % 3] += static_cast<uint8_t>(frame[i]);
  const auto ordinary = [&] {
    const auto other = v1::ImageStats::NewStub(grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
    v1::AnalyzeRequest r;
    r.mutable_input()->set_kind(v1::INPUT_KIND_RAW);
    r.mutable_input()->mutable_raw()->set_width(1024);
    r.mutable_input()->mutable_raw()->set_height(768);
    r.mutable_input()->mutable_raw()->set_channels(3);
    r.mutable_input()->mutable_raw()->set_sample_type(v1::SAMPLE_TYPE_UINT8);
    r.mutable_input()->set_data(frame);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::AnalyzeResponse got;
    const grpc::Status s = other->Analyze(&ctx, r, &got);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(got.engine(), engine) << "an ordinary call went to another engine while uploads stalled";
    for (int c = 0; c < got.channels_size() && c < 3; ++c) EXPECT_EQ(got.channels(c).sum_int(), frame_sum[c]);
  };
  // Five kinds of upload, declaring far more than they send.
  constexpr size_t kSent = 256 << 10;
  const auto header_of = [](int kind) {
    v1::AnalyzeStreamRequest h;
    v1::Input* in = h.mutable_header()->mutable_input();
    const auto raw = [&](uint64_t w, uint64_t hgt, uint32_t c, v1::SampleType t, uint64_t bytes) {
      in->set_kind(v1::INPUT_KIND_RAW);
      in->mutable_raw()->set_width(w);
      in->mutable_raw()->set_height(hgt);
      in->mutable_raw()->set_channels(c);
      in->mutable_raw()->set_sample_type(t);
      h.mutable_header()->set_total_bytes(bytes);
    };
    switch (kind) {
      case 0:
        in->set_kind(v1::INPUT_KIND_BYTES);
        h.mutable_header()->set_total_bytes(uint64_t{1} << 30);
        break;
      case 1: raw(8192, 8192, 4, v1::SAMPLE_TYPE_UINT8, uint64_t{256} << 20); break;
      case 2:  // every value counted on the GPU
        raw(8192, 8192, 1, v1::SAMPLE_TYPE_UINT16, uint64_t{128} << 20);
        h.mutable_header()->mutable_options()->add_statistics(v1::STATISTIC_DISTRIBUTION);
        break;
      case 3: raw(8192, 8192, 1, v1::SAMPLE_TYPE_FLOAT32, uint64_t{256} << 20); break;  // kept for pass 2
      default:
        in->set_kind(v1::INPUT_KIND_ENCODED);
        h.mutable_header()->set_total_bytes(uint64_t{1} << 30);
    }
    return h;
  };
  for (int i = 0; i < 3; ++i) ordinary();
  const double rss0 = server.rss_mib(), held0 = gpu_memory("held"), free0 = gpu_memory("free");

  // 64 here; IMGSTAT_STALLED_UPLOADS (1 to 256) gives other counts' figures.
  const char* count = std::getenv("IMGSTAT_STALLED_UPLOADS");
  const int kStalled = count ? std::clamp(std::atoi(count), 1, 256) : 64;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientWriter<v1::AnalyzeStreamRequest>>> writers;
  std::vector<v1::AnalyzeResponse> responses(kStalled);
  uint64_t float_bytes = 0;
  for (int i = 0; i < kStalled; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    writers.push_back(stub->AnalyzeStream(contexts.back().get(), &responses[i]));
    v1::AnalyzeStreamRequest chunk;
    chunk.set_chunk(random_bytes(kSent));
    ASSERT_TRUE(writers.back()->Write(header_of(i % 5)));
    ASSERT_TRUE(writers.back()->Write(chunk));
    if (i % 5 == 3) float_bytes += kSent;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(800));  // every chunk taken, every stream paused
  // Meanwhile other calls are answered, on the engine asked for.
  std::vector<std::future<void>> calls;
  for (int i = 0; i < 8; ++i) calls.push_back(std::async(std::launch::async, ordinary));
  for (auto& c : calls) c.get();
  const double rss_stalled = server.rss_mib() - rss0;
  const double held_stalled = gpu_memory("held") - held0, used_stalled = free0 - gpu_memory("free");

  for (auto& w : writers) {
    const grpc::Status s = w->Finish();
    EXPECT_EQ(s.error_code(), StatusCode::DEADLINE_EXCEEDED) << s.error_message();
    EXPECT_NE(s.error_message().find("--stream-idle-timeout"), std::string::npos) << s.error_message();
  }
  ordinary();
  const double rss_after = server.rss_mib() - rss0, held_after = gpu_memory("held") - held0;
  std::printf("%d stalled uploads (%s engine), %zu KiB sent each: idle resident %.1f MiB, +%.1f MiB", kStalled,
              engine.c_str(), kSent >> 10, rss0, rss_stalled);
  if (held0 >= 0)
    std::printf(", GPU memory held +%.1f MiB (float pixels sent: %.1f MiB), used on the device +%.1f MiB",
                held_stalled / (1 << 20), float_bytes / double(1 << 20), used_stalled / (1 << 20));
  std::printf("; after the idle timeout: resident +%.1f MiB, GPU memory held +%.1f MiB\n", rss_after,
              held0 >= 0 ? held_after / (1 << 20) : 0.0);
  RecordProperty("stalled_rss_growth_mib", std::to_string(rss_stalled));
  // The CPU engine's bound: what was sent (16 MiB) and gRPC's buffers for 64
  // calls, never what was declared (33 GiB). The CPU engine measures 40 MiB
  // on 2 cores and 59-63 MiB on 16 (more threads, more malloc arenas).
  expect_rss_below(rss_stalled, 96, "MiB grown while " + std::to_string(kStalled) + " uploads stalled");
  expect_rss_below(rss_after, 96, "MiB grown once the stalled uploads were ended");
  if (held0 >= 0) {  // a GPU engine: the only device memory a stalled upload holds is its float pixels
    EXPECT_LE(held_stalled, static_cast<double>(float_bytes)) << "GPU memory held for stalled uploads";
    EXPECT_LT(used_stalled, 64.0 * (1 << 20)) << "device memory used for stalled uploads";
    EXPECT_EQ(held_after, 0) << "GPU memory still held after the stalled uploads ended";
  }
}

}  // namespace
}  // namespace imgstat::testing

namespace imgstat {
namespace {

// A camera-like photo: smooth colour with a little noise, as encoders see it.
cv::Mat photo(int w, int h) {
  cv::RNG rng(5);
  cv::Mat small(h / 64 + 1, w / 64 + 1, CV_8UC3), big, noise(h, w, CV_8UC3);
  rng.fill(small, cv::RNG::UNIFORM, 0, 255);
  cv::resize(small, big, cv::Size(w, h), 0, 0, cv::INTER_CUBIC);
  rng.fill(noise, cv::RNG::UNIFORM, 0, 6);
  return big + noise;
}

// Eight 48 MP JPEGs and eight 12 MP PNGs at once, under a decode budget big
// enough for eight whole images (144 MB each for the JPEG): decoded in bands,
// the server's peak memory stays far below what whole images would hold
// (decoded whole, the JPEGs alone would take 1.1 GiB).
TEST(HostileBands, EightLargeImagesAtOnceHoldBandsNotImages) {
  std::vector<uchar> jpeg, png;
  cv::imencode(".jpg", photo(8000, 6000), jpeg, {cv::IMWRITE_JPEG_QUALITY, 92});
  cv::imencode(".png", photo(4000, 3000), png, {cv::IMWRITE_PNG_COMPRESSION, 1});
  testing::ServerProcess server({"--engine", "cpu", "--threads", "8", "--max-decode-memory", std::to_string(uint64_t{2} << 30),
                        "--max-queue", "32", "--max-message-bytes", std::to_string(64 << 20)});
  auto stub = v1::ImageStats::NewStub(grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
  const double idle = server.peak_rss_mib();
  for (const auto* file : {&jpeg, &png}) {
    const bool is_jpeg = file == &jpeg;
    SCOPED_TRACE(is_jpeg ? "JPEG 8000x6000" : "PNG 4000x3000");
    v1::AnalyzeRequest req;
    req.mutable_input()->set_data(std::string(file->begin(), file->end()));
    req.mutable_options()->set_decoder(v1::DECODER_CHOICE_CPU);
    std::vector<std::future<v1::AnalyzeResponse>> calls;
    for (int i = 0; i < 8; ++i)
      calls.push_back(std::async(std::launch::async, [&] {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
        v1::AnalyzeResponse r;
        const grpc::Status s = stub->Analyze(&ctx, req, &r);
        EXPECT_TRUE(s.ok()) << s.error_message();
        return r;
      }));
    std::vector<v1::AnalyzeResponse> answers;
    for (auto& c : calls) answers.push_back(c.get());
    for (const auto& r : answers) {
      EXPECT_EQ(r.decoder(), is_jpeg ? "libjpeg-turbo" : "imgstat-png");
      EXPECT_EQ(r.width(), is_jpeg ? 8000u : 4000u);
      ASSERT_EQ(r.channels_size(), 3);
      EXPECT_EQ(r.channels(0).sum_int(), answers[0].channels(0).sum_int());
      EXPECT_GT(r.channels(0).sum_int(), 0);
    }
  }
  const double growth = server.peak_rss_mib() - idle;
  std::printf("eight 48 MP JPEGs, then eight 12 MP PNGs, at once: peak RSS %.0f MiB above idle "
              "(whole images: %.0f MiB for the JPEGs alone)\n", growth, 8 * 144e6 / (1 << 20));
  RecordProperty("eight_large_images_peak_rss_growth_mib", std::to_string(growth));
  // 491-550 MiB on a 16-core H200 machine (2026-11-26, the server before and
  // after issue 34's last changes alike): 512 failed one run in three.
  testing::expect_rss_below(growth, 640, "MiB of peak memory growth");
}

}  // namespace
}  // namespace imgstat
