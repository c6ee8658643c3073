// Shared-memory regions across real processes: imgstat-server, its region
// socket, a C++ caller passing sealed memfds, and the CLI using them by
// itself. Answers from a region must be the answers from the same bytes sent
// in the message; what a caller does to its memory or its connection must
// never cost the server more than a clear error.
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <arpa/inet.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <regex>
#include <thread>

#include "corpus.hpp"
#include "imgstat/v1/imgstat.grpc.pb.h"
#include "process.hpp"
#include "region_client.hpp"
#include "png_samples.hpp"
#include "region_memfd.hpp"

namespace imgstat::testing {
namespace {

using client::RegionSocketClient;
using client::connect_unix_socket;
using client::send_descriptors;

std::string region_socket_of(const ServerProcess& server) {
  const std::regex logged(R"(regions: descriptors on (\S+))");
  for (int i = 0; i < 300; ++i) {
    std::smatch m;
    const std::string log = server.log();
    if (std::regex_search(log, m, logged)) return m[1];
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return {};
}

std::unique_ptr<v1::ImageStats::Stub> stub_for(const std::string& address) {
  return v1::ImageStats::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

struct Caller {
  explicit Caller(v1::ImageStats::Stub* s, std::string t = "") : stub(s), token(std::move(t)) {}
  v1::ImageStats::Stub* stub;
  std::string token;

  void prepare(grpc::ClientContext& ctx) const {
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  }
  grpc::Status register_region(const std::string& ticket, v1::Region* out, uint64_t offset = 0, uint64_t size = 0) const {
    grpc::ClientContext ctx;
    prepare(ctx);
    v1::RegisterRegionRequest r;
    r.set_ticket(ticket);
    r.set_offset(offset);
    r.set_size(size);
    r.set_name("region_test");
    return stub->RegisterRegion(&ctx, r, out);
  }
  grpc::Status analyze(const v1::AnalyzeRequest& r, v1::AnalyzeResponse* out) const {
    grpc::ClientContext ctx;
    prepare(ctx);
    return stub->Analyze(&ctx, r, out);
  }
  grpc::Status unregister(const std::string& id) const {
    grpc::ClientContext ctx;
    prepare(ctx);
    v1::UnregisterRegionRequest r;
    r.set_region_id(id);
    v1::UnregisterRegionResponse ignored;
    return stub->UnregisterRegion(&ctx, r, &ignored);
  }
  std::vector<v1::Region> list() const {
    grpc::ClientContext ctx;
    prepare(ctx);
    v1::ListRegionsResponse r;
    EXPECT_TRUE(stub->ListRegions(&ctx, v1::ListRegionsRequest(), &r).ok());
    return {r.regions().begin(), r.regions().end()};
  }
};

// The same request with its bytes in the message.
v1::AnalyzeRequest with_data(v1::AnalyzeRequest r, const std::vector<uint8_t>& bytes) {
  const v1::RegionRef ref = r.input().region();
  const uint64_t length = ref.length() ? ref.length() : bytes.size() - ref.offset();
  r.mutable_input()->clear_region();
  r.mutable_input()->set_data(std::string(bytes.begin() + static_cast<ptrdiff_t>(ref.offset()),
                                          bytes.begin() + static_cast<ptrdiff_t>(ref.offset() + length)));
  return r;
}

v1::AnalyzeRequest in_region(const std::string& id, uint64_t offset, uint64_t length, v1::InputKind kind) {
  v1::AnalyzeRequest r;
  r.mutable_input()->set_kind(kind);
  r.mutable_input()->mutable_region()->set_region_id(id);
  r.mutable_input()->mutable_region()->set_offset(offset);
  r.mutable_input()->mutable_region()->set_length(length);
  return r;
}

std::string answer_of(v1::AnalyzeResponse r) {
  r.clear_decode_time();
  r.clear_compute_time();
  std::string s;
  google::protobuf::io::StringOutputStream out(&s);
  google::protobuf::io::CodedOutputStream coded(&out);
  coded.SetSerializationDeterministic(true);
  r.SerializeToCodedStream(&coded);
  return s;
}

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class Regions : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerProcess({"--engine", test_engine(), "--threads", "2"}); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    socket_path_ = region_socket_of(*server_);
    ASSERT_FALSE(socket_path_.empty()) << server_->log();
    stub_ = stub_for(server_->address());
    me_ = std::make_unique<Caller>(stub_.get());
  }
  static ServerProcess* server_;
  std::string socket_path_;
  std::unique_ptr<v1::ImageStats::Stub> stub_;
  std::unique_ptr<Caller> me_;
};
ServerProcess* Regions::server_ = nullptr;

TEST_F(Regions, ServerInfoNamesTheSocketAndTheLimits) {
  grpc::ClientContext ctx;
  v1::ServerInfo info;
  ASSERT_TRUE(stub_->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info).ok());
  EXPECT_EQ(info.region_socket(), socket_path_);
  EXPECT_TRUE(std::filesystem::exists(socket_path_));
  EXPECT_EQ(info.limits().max_regions(), 64u);
  EXPECT_EQ(info.limits().max_region_bytes(), uint64_t{64} << 30);
}

TEST_F(Regions, EveryInputKindAndRpcAnswersAsWithTheBytesInTheMessage) {
  // Raw uint16 of a prime width with row padding at an odd offset; the bytes
  // of the same memory; a PNG from the corpus placed after them.
  const uint32_t w = 1009, h = 31, stride = w * 3 * 2 + 6;
  std::vector<uint8_t> bytes = random_bytes(size_t{stride} * h + 4097, 7);
  const uint64_t png_at = bytes.size();
  std::vector<uint8_t> png;
  if (have_corpus()) png = file_bytes((corpus_dir() / "png/pngsuite_basn2c16.png").string());
  bytes.insert(bytes.end(), png.begin(), png.end());
  RegionSocketClient socket(socket_path_);
  // Sealed: mapped; unsealed: read at each use. Both answer alike.
  for (int seals : {F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE, 0}) {
  SCOPED_TRACE(seals ? "mapped" : "read");
  const int fd = memfd_with(bytes, seals);
  const std::string ticket = socket.pass(fd);
  close(fd);
  v1::Region region;
  ASSERT_TRUE(me_->register_region(ticket, &region).ok());
  EXPECT_EQ(region.size(), bytes.size());
  EXPECT_EQ(region.mapped(), seals != 0);

  std::vector<v1::AnalyzeRequest> requests;
  v1::AnalyzeRequest raw = in_region(region.region_id(), 4097, uint64_t{stride} * h, v1::INPUT_KIND_RAW);
  raw.mutable_input()->mutable_raw()->set_width(w);
  raw.mutable_input()->mutable_raw()->set_height(h);
  raw.mutable_input()->mutable_raw()->set_channels(3);
  raw.mutable_input()->mutable_raw()->set_sample_type(v1::SAMPLE_TYPE_UINT16);
  raw.mutable_input()->mutable_raw()->set_row_stride(stride);
  raw.mutable_options()->add_statistics(v1::STATISTIC_ALL);
  requests.push_back(raw);
  requests.push_back(in_region(region.region_id(), 1, png_at - 1, v1::INPUT_KIND_BYTES));
  if (!png.empty()) requests.push_back(in_region(region.region_id(), png_at, 0, v1::INPUT_KIND_ENCODED));
  for (const v1::AnalyzeRequest& r : requests) {
    SCOPED_TRACE(v1::InputKind_Name(r.input().kind()));
    v1::AnalyzeResponse want, got;
    ASSERT_TRUE(me_->analyze(with_data(r, bytes), &want).ok());
    const grpc::Status s = me_->analyze(r, &got);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(answer_of(got), answer_of(want));
    EXPECT_GT(got.channels(0).count(), 0u);
    // AnalyzeStream: a header naming the region, no chunks.
    {
      grpc::ClientContext ctx;
      me_->prepare(ctx);
      v1::AnalyzeResponse streamed;
      auto writer = stub_->AnalyzeStream(&ctx, &streamed);
      v1::AnalyzeStreamRequest header;
      *header.mutable_header()->mutable_input() = r.input();
      *header.mutable_header()->mutable_options() = r.options();
      ASSERT_TRUE(writer->Write(header));
      writer->WritesDone();
      const grpc::Status st = writer->Finish();
      ASSERT_TRUE(st.ok()) << st.error_message();
      EXPECT_EQ(answer_of(streamed), answer_of(want));
    }
    // AnalyzeBatch: two of it on one call.
    {
      grpc::ClientContext ctx;
      me_->prepare(ctx);
      auto stream = stub_->AnalyzeBatch(&ctx);
      for (const char* id : {"a", "b"}) {
        v1::BatchRequest b;
        b.set_id(id);
        *b.mutable_request() = r;
        ASSERT_TRUE(stream->Write(b));
      }
      stream->WritesDone();
      v1::BatchResponse b;
      int answered = 0;
      while (stream->Read(&b)) {
        ASSERT_TRUE(b.has_response()) << b.error().message();
        EXPECT_EQ(answer_of(b.response()), answer_of(want));
        ++answered;
      }
      EXPECT_EQ(answered, 2);
      EXPECT_TRUE(stream->Finish().ok());
    }
  }
  EXPECT_TRUE(me_->unregister(region.region_id()).ok());
  }
  const int fd = memfd_with(bytes, F_SEAL_SHRINK);
  v1::Region region;
  ASSERT_TRUE(me_->register_region(socket.pass(fd), &region).ok());
  close(fd);
  std::vector<v1::AnalyzeRequest> requests = {in_region(region.region_id(), 1, png_at - 1, v1::INPUT_KIND_BYTES)};
  // A header that names a region and carries chunks, or data and a region.
  {
    grpc::ClientContext ctx;
    me_->prepare(ctx);
    v1::AnalyzeResponse ignored;
    auto writer = stub_->AnalyzeStream(&ctx, &ignored);
    v1::AnalyzeStreamRequest header;
    *header.mutable_header()->mutable_input() = requests[0].input();
    writer->Write(header);
    v1::AnalyzeStreamRequest chunk;
    chunk.set_chunk("xyz");
    writer->Write(chunk);
    writer->WritesDone();
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  v1::AnalyzeRequest both = requests[0];
  both.mutable_input()->set_data("x");
  v1::AnalyzeResponse ignored;
  EXPECT_EQ(me_->analyze(both, &ignored).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(me_->unregister(region.region_id()).ok());
}

// A PNG of 1 MiB or more in a file that is read goes to the spool as an
// upload does, decoded while it is read: the answer with its bytes in the
// message, damage met late (a CRC in the last IDAT) included, and a region
// cut short gets the same clear error as before.
// Pixels in a region that is read come in chunks, each read by several
// threads in pieces: every byte counted once, whatever the offset and length
// against the chunks and pieces (two whole chunks, a partial one, a piece cut short).
TEST_F(Regions, PixelsInARegionThatIsReadAreCountedOnceInEveryPiece) {
  const std::vector<uint8_t> bytes = random_bytes((size_t{36} << 20) + 12345, 21);
  const uint64_t offset = 4097, length = bytes.size() - offset - 5;
  uint64_t want[256] = {};
  for (uint64_t i = offset; i < offset + length; ++i) ++want[bytes[i]];
  RegionSocketClient socket(socket_path_);
  const int fd = memfd_with(bytes, 0);  // unsealed: read, not mapped
  const std::string ticket = socket.pass(fd);
  close(fd);
  v1::Region region;
  ASSERT_TRUE(me_->register_region(ticket, &region).ok());
  ASSERT_FALSE(region.mapped());
  v1::AnalyzeRequest r = in_region(region.region_id(), offset, length, v1::INPUT_KIND_BYTES);
  r.mutable_options()->add_statistics(v1::STATISTIC_HISTOGRAM);
  r.mutable_options()->add_statistics(v1::STATISTIC_SUM);
  v1::AnalyzeResponse got;
  const grpc::Status s = me_->analyze(r, &got);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(got.channels_size(), 1);
  EXPECT_EQ(got.channels(0).count(), length);
  ASSERT_EQ(got.channels(0).histogram().counts_size(), 256);
  uint64_t sum = 0;
  for (int v = 0; v < 256; ++v) {
    EXPECT_EQ(got.channels(0).histogram().counts(v), want[v]) << v;
    sum += want[v] * static_cast<uint64_t>(v);
  }
  EXPECT_EQ(got.channels(0).sum_int(), static_cast<int64_t>(sum));
}

TEST_F(Regions, LargePngsInAFileThatIsReadAnswerAsInTheMessage) {
  RegionSocketClient socket(socket_path_);
  std::mt19937 rng(31);
  const std::string good = testing::write_png(testing::random_png(1200, 900, 8, 2, rng), rng);
  ASSERT_GE(good.size(), size_t{1} << 20);
  std::string bad = good;
  bad[bad.size() - 20] ^= 1;  // the last IDAT's data: its CRC is wrong now
  for (const std::string* f : {&good, static_cast<const std::string*>(&bad)}) {
    SCOPED_TRACE(f == &good ? "good" : "bad CRC in the last IDAT");
    const std::vector<uint8_t> bytes(f->begin(), f->end());
    const std::string path = temp_path("region-png");
    std::ofstream(path, std::ios::binary).write(f->data(), static_cast<std::streamsize>(f->size()));
    const int file = open(path.c_str(), O_RDWR | O_CLOEXEC);
    std::filesystem::remove(path);
    v1::Region read;
    ASSERT_TRUE(me_->register_region(socket.pass(file), &read).ok());
    EXPECT_FALSE(read.mapped());
    const v1::AnalyzeRequest all = in_region(read.region_id(), 0, 0, v1::INPUT_KIND_ENCODED);
    v1::AnalyzeResponse got, want;
    const grpc::Status a = me_->analyze(all, &got), b = me_->analyze(with_data(all, bytes), &want);
    EXPECT_EQ(a.error_code(), b.error_code());
    EXPECT_EQ(a.error_message(), b.error_message());
    if (f == &good) {
      ASSERT_TRUE(a.ok()) << a.error_message();
      EXPECT_EQ(got.decoder(), "imgstat-png");
      EXPECT_EQ(answer_of(got), answer_of(want));
      // The log counts the region's bytes as it counts the message's.
      const std::string log = server_->log(), counted = "bytes=" + std::to_string(bytes.size()) + " PNG";
      size_t lines = 0;
      for (size_t at = log.find(counted); at != std::string::npos; at = log.find(counted, at + 1)) ++lines;
      EXPECT_EQ(lines, 2u) << log.substr(log.size() > 2000 ? log.size() - 2000 : 0);
      ASSERT_EQ(ftruncate(file, static_cast<off_t>(bytes.size() / 2)), 0);
      const grpc::Status cut = me_->analyze(all, &got);
      EXPECT_EQ(cut.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << cut.error_message();
      EXPECT_NE(cut.error_message().find("cut short"), std::string::npos) << cut.error_message();
    }
    close(file);
    EXPECT_TRUE(me_->unregister(read.region_id()).ok());
  }
}

// An encoded file in a region that is read is decoded where it lies,
// mapped: cut short while a call decodes it, that call gets
// FAILED_PRECONDITION (or its whole answer, had it finished first), never a
// server killed by SIGBUS; the server serves on, and the file restored is
// answered as in the message.
TEST_F(Regions, AnEncodedFileCutShortWhileItIsDecodedFailsTheCallNotTheServer) {
  RegionSocketClient socket(socket_path_);
  std::mt19937 rng(37);
  const std::string png = testing::write_png(testing::random_png(3000, 2000, 8, 2, rng), rng);
  const std::string path = temp_path("region-cut-png");
  std::ofstream(path, std::ios::binary).write(png.data(), static_cast<std::streamsize>(png.size()));
  const int file = open(path.c_str(), O_RDWR | O_CLOEXEC);
  std::filesystem::remove(path);
  v1::Region read;
  ASSERT_TRUE(me_->register_region(socket.pass(file), &read).ok());
  const v1::AnalyzeRequest all = in_region(read.region_id(), 0, 0, v1::INPUT_KIND_ENCODED);
  v1::AnalyzeResponse want, got;
  ASSERT_TRUE(me_->analyze(with_data(all, std::vector<uint8_t>(png.begin(), png.end())), &want).ok());
  int failed = 0;
  for (int delay_ms : {0, 5, 20, 60}) {
    SCOPED_TRACE(delay_ms);
    ASSERT_EQ(pwrite(file, png.data(), png.size(), 0), static_cast<ssize_t>(png.size()));
    auto call = std::async(std::launch::async, [&] {
      v1::AnalyzeResponse r;
      const grpc::Status s = me_->analyze(all, &r);
      return std::make_pair(s, r);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ASSERT_EQ(ftruncate(file, static_cast<off_t>(png.size() / 3)), 0);
    const auto [s, r] = call.get();
    if (s.ok()) {
      EXPECT_EQ(answer_of(r), answer_of(want));
    } else {
      ++failed;
      EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
      EXPECT_NE(s.error_message().find("cut short"), std::string::npos) << s.error_message();
    }
  }
  EXPECT_GT(failed, 0);  // the file cut before the call began fails it at least
  ASSERT_EQ(pwrite(file, png.data(), png.size(), 0), static_cast<ssize_t>(png.size()));
  ASSERT_TRUE(me_->analyze(all, &got).ok());
  EXPECT_EQ(answer_of(got), answer_of(want));
  close(file);
  EXPECT_TRUE(me_->unregister(read.region_id()).ok());
}

// Parts with the image and its label image both in a region (one memfd,
// two ranges): the answer is the one with their bytes in the message.
TEST_F(Regions, AnImageAndItsLabelImageInARegionAnswerAsInTheMessage) {
  const uint32_t w = 211, h = 37;
  std::vector<uint8_t> bytes = random_bytes(size_t{w} * h * 3, 21);
  const uint64_t labels_at = bytes.size();
  std::vector<uint8_t> labels(size_t{w} * h * 4);
  for (size_t i = 0; i < size_t{w} * h; ++i) {
    const uint32_t v = static_cast<uint32_t>(i % w / 30 + 7 * (i / w / 10));
    std::memcpy(&labels[i * 4], &v, 4);
  }
  bytes.insert(bytes.end(), labels.begin(), labels.end());
  RegionSocketClient socket(socket_path_);
  const int fd = memfd_with(bytes, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE);
  v1::Region region;
  ASSERT_TRUE(me_->register_region(socket.pass(fd), &region).ok());
  close(fd);
  v1::AnalyzeRequest r = in_region(region.region_id(), 0, labels_at, v1::INPUT_KIND_RAW);
  auto* raw = r.mutable_input()->mutable_raw();
  raw->set_width(w);
  raw->set_height(h);
  raw->set_channels(3);
  raw->set_sample_type(v1::SAMPLE_TYPE_UINT8);
  v1::Input* map = r.mutable_options()->mutable_parts()->mutable_labels()->mutable_image();
  map->set_kind(v1::INPUT_KIND_RAW);
  *map->mutable_raw() = *raw;
  map->mutable_raw()->set_channels(1);
  map->mutable_raw()->set_sample_type(v1::SAMPLE_TYPE_UINT32);
  map->mutable_region()->set_region_id(region.region_id());
  map->mutable_region()->set_offset(labels_at);
  v1::AnalyzeRequest inline_request = r;
  inline_request.mutable_input()->clear_region();
  inline_request.mutable_input()->set_data(bytes.data(), labels_at);
  map = inline_request.mutable_options()->mutable_parts()->mutable_labels()->mutable_image();
  map->clear_region();
  map->set_data(labels.data(), labels.size());
  v1::AnalyzeResponse want, got;
  ASSERT_TRUE(me_->analyze(inline_request, &want).ok());
  const grpc::Status s = me_->analyze(r, &got);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(got.parts_size(), want.parts_size());
  EXPECT_GT(got.parts_size(), 20);
  for (int i = 0; i < got.parts_size(); ++i) EXPECT_EQ(got.parts(i).SerializeAsString(), want.parts(i).SerializeAsString());
  EXPECT_TRUE(me_->unregister(region.region_id()).ok());
}

TEST_F(Regions, BadReferencesAndDescriptorsGetClearErrorsAndTheServerServesOn) {
  RegionSocketClient socket(socket_path_);
  const std::vector<uint8_t> bytes = random_bytes(100000, 8);
  // A file that can be cut short or unlinked is read, never mapped: cut
  // short between calls (or during one), it gets a clear error.
  {
    const std::string path = temp_path("region-file");
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    const int file = open(path.c_str(), O_RDWR | O_CLOEXEC);
    std::filesystem::remove(path);  // unlinked: the descriptor still reads
    v1::Region read;
    ASSERT_TRUE(me_->register_region(socket.pass(file), &read).ok());
    EXPECT_FALSE(read.mapped());
    v1::AnalyzeRequest all = in_region(read.region_id(), 0, 0, v1::INPUT_KIND_BYTES);
    v1::AnalyzeResponse got, want;
    ASSERT_TRUE(me_->analyze(all, &got).ok());
    ASSERT_TRUE(me_->analyze(with_data(all, bytes), &want).ok());
    EXPECT_EQ(answer_of(got), answer_of(want));
    ASSERT_EQ(ftruncate(file, 5000), 0);
    const grpc::Status cut = me_->analyze(all, &got);
    EXPECT_EQ(cut.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << cut.error_message();
    EXPECT_NE(cut.error_message().find("cut short"), std::string::npos) << cut.error_message();
    close(file);
  }
  const int fd = memfd_with(bytes, F_SEAL_SHRINK);
  v1::Region region;
  EXPECT_EQ(me_->register_region("t-0123456789abcdef0123456789abcdef", &region).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(me_->register_region(socket.pass(fd), &region, 100000).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(me_->register_region(socket.pass(fd), &region, 99999, 2).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  const std::string ticket = socket.pass(fd);
  ASSERT_TRUE(me_->register_region(ticket, &region).ok());
  EXPECT_EQ(me_->register_region(ticket, &region).error_code(), grpc::StatusCode::NOT_FOUND);  // good once
  v1::AnalyzeResponse r;
  EXPECT_EQ(me_->analyze(in_region(region.region_id(), 100001, 0, v1::INPUT_KIND_BYTES), &r).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(me_->analyze(in_region(region.region_id(), 1, UINT64_MAX, v1::INPUT_KIND_BYTES), &r).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(me_->analyze(in_region("r-nonesuch", 0, 0, v1::INPUT_KIND_BYTES), &r).error_code(),
            grpc::StatusCode::NOT_FOUND);
  v1::AnalyzeRequest raw = in_region(region.region_id(), 0, 0, v1::INPUT_KIND_RAW);
  raw.mutable_input()->mutable_raw()->set_width(1000);
  raw.mutable_input()->mutable_raw()->set_height(1000);
  raw.mutable_input()->mutable_raw()->set_channels(1);
  raw.mutable_input()->mutable_raw()->set_sample_type(v1::SAMPLE_TYPE_UINT8);
  EXPECT_EQ(me_->analyze(raw, &r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);  // 100000 bytes, not 10^6
  // The seal holds against the caller; the server answers from the same bytes.
  EXPECT_NE(ftruncate(fd, 10), 0);
  close(fd);
  const grpc::Status s = me_->analyze(in_region(region.region_id(), 0, 0, v1::INPUT_KIND_BYTES), &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(r.channels(0).count(), 100000u);
  EXPECT_TRUE(server_->alive());
}

TEST_F(Regions, TheSocketAnswersWhatItCannotTakeAndClosingItDropsTheRegions) {
  {  // two descriptors on one byte
    const int s = connect_unix_socket(socket_path_);
    const int fds[2] = {memfd_with(random_bytes(10, 1), F_SEAL_SHRINK), memfd_with(random_bytes(10, 2), F_SEAL_SHRINK)};
    ASSERT_EQ(send_descriptors(s, fds, 2), 1);
    char line[256] = {};
    EXPECT_GT(recv(s, line, sizeof(line) - 1, 0), 0);
    EXPECT_EQ(std::string(line).rfind("error ", 0), 0u) << line;
    close(s);
    close(fds[0]);
    close(fds[1]);
  }
  {  // a byte alone: the connection's own ticket, for GPU memory only
    RegionSocketClient socket(socket_path_);
    const std::string own = socket.connection_ticket();
    EXPECT_EQ(own, socket.connection_ticket());
    v1::Region region;
    EXPECT_EQ(me_->register_region(own, &region).error_code(), grpc::StatusCode::NOT_FOUND);
    grpc::ClientContext ctx;
    me_->prepare(ctx);
    v1::RegisterRegionRequest r;
    r.set_ticket(own);
    r.mutable_cuda()->set_handle(std::string(64, '\0'));
    r.mutable_cuda()->set_size(1024);
    const grpc::Status s = stub_->RegisterRegion(&ctx, r, &region);
    // The CPU engine reads no GPU memory; the CUDA engine cannot open a zero handle.
    EXPECT_TRUE(s.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
                s.error_code() == grpc::StatusCode::INVALID_ARGUMENT)
        << s.error_message();
  }
  std::string id;
  {
    RegionSocketClient socket(socket_path_);
    const int fd = memfd_with(random_bytes(4096, 9), F_SEAL_SHRINK);
    v1::Region region;
    ASSERT_TRUE(me_->register_region(socket.pass(fd), &region).ok());
    close(fd);
    id = region.region_id();
    bool listed = false;
    for (const v1::Region& r : me_->list()) listed |= r.region_id() == id;
    EXPECT_TRUE(listed);
  }  // the connection closes: as when the caller exits
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = true;
    for (const v1::Region& r : me_->list()) gone &= r.region_id() != id;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone);
  v1::AnalyzeResponse r;
  EXPECT_EQ(me_->analyze(in_region(id, 0, 0, v1::INPUT_KIND_BYTES), &r).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(Regions, UnregisteringWhileCallsReadItNeverTearsAnAnswer) {
  const std::vector<uint8_t> bytes = random_bytes(size_t{48} << 20, 10);
  RegionSocketClient socket(socket_path_);
  v1::AnalyzeResponse want;
  {
    v1::AnalyzeRequest r;
    r.mutable_input()->set_kind(v1::INPUT_KIND_BYTES);
    r.mutable_input()->set_data(std::string(bytes.begin(), bytes.begin() + (8 << 20)));
    ASSERT_TRUE(me_->analyze(r, &want).ok());
  }
  const int fd = memfd_with(bytes, F_SEAL_SHRINK);
  for (int round = 0; round < 4; ++round) {
    v1::Region region;
    ASSERT_TRUE(me_->register_region(socket.pass(fd), &region).ok());
    std::vector<std::future<grpc::Status>> calls;
    std::vector<v1::AnalyzeResponse> answers(6);
    for (int i = 0; i < 6; ++i)
      calls.push_back(std::async(std::launch::async, [&, i] {
        return me_->analyze(in_region(region.region_id(), 0, 8 << 20, v1::INPUT_KIND_BYTES), &answers[i]);
      }));
    std::this_thread::sleep_for(std::chrono::milliseconds(round * 5));
    EXPECT_TRUE(me_->unregister(region.region_id()).ok());
    for (int i = 0; i < 6; ++i) {
      const grpc::Status s = calls[i].get();
      // Either it found the region (and read all of it) or it did not.
      if (s.ok()) EXPECT_EQ(answer_of(answers[i]), answer_of(want));
      else EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
    }
    v1::AnalyzeResponse r;
    EXPECT_EQ(me_->analyze(in_region(region.region_id(), 0, 0, v1::INPUT_KIND_BYTES), &r).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  close(fd);
  EXPECT_TRUE(server_->alive());
}

TEST(RegionOwners, ACallerCannotReachAnothersRegion) {
  const std::string tokens = temp_path("tokens");
  std::ofstream(tokens) << "alice-token-0123456789abcdef alice\nbob-token-0123456789abcdef0 bob\n";
  ServerProcess server({"--engine", test_engine(), "--threads", "2", "--auth-token-file", tokens, "--max-regions", "2"});
  const std::string path = region_socket_of(server);
  ASSERT_FALSE(path.empty());
  auto stub = stub_for(server.address());
  const Caller alice(stub.get(), "alice-token-0123456789abcdef"), bob(stub.get(), "bob-token-0123456789abcdef0");
  RegionSocketClient socket(path);
  const int fd = memfd_with(random_bytes(1000, 11), F_SEAL_SHRINK);
  v1::Region region;
  ASSERT_TRUE(alice.register_region(socket.pass(fd), &region).ok());
  v1::AnalyzeResponse r;
  const v1::AnalyzeRequest request = in_region(region.region_id(), 0, 0, v1::INPUT_KIND_BYTES);
  EXPECT_TRUE(alice.analyze(request, &r).ok());
  EXPECT_EQ(bob.analyze(request, &r).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(bob.list().empty());
  EXPECT_EQ(bob.unregister(region.region_id()).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(alice.list().size(), 1u);
  // Without a token nothing at all.
  EXPECT_EQ(Caller(stub.get()).analyze(request, &r).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // --max-regions 2 for alice; bob has his own two.
  v1::Region more;
  EXPECT_TRUE(alice.register_region(socket.pass(fd), &more).ok());
  EXPECT_EQ(alice.register_region(socket.pass(fd), &more).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(bob.register_region(socket.pass(fd), &more).ok());
  close(fd);
  std::filesystem::remove(tokens);
}

// An address of this host that is not loopback, if it has one.
std::string outside_address() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return {};
  std::string found;
  for (ifaddrs* a = list; a && found.empty(); a = a->ifa_next)
    if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET) {
      char text[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof(text));
      if (std::string(text).rfind("127.", 0) != 0) found = text;
    }
  freeifaddrs(list);
  return found;
}

TEST(RegionOwners, OnlyCallersOnTheServersHostMayNameRegions) {
  const std::string outside = outside_address();
  if (outside.empty()) GTEST_SKIP() << "this machine has no address but loopback";
  ServerProcess server({"--engine", test_engine(), "--threads", "2", "--listen", "0.0.0.0:0", "--insecure"});
  const std::string path = region_socket_of(server);
  ASSERT_FALSE(path.empty());
  auto local = stub_for("127.0.0.1:" + std::to_string(server.port()));
  auto remote = stub_for(outside + ":" + std::to_string(server.port()));
  RegionSocketClient socket(path);
  const int fd = memfd_with(random_bytes(1000, 12), F_SEAL_SHRINK);
  v1::Region region;
  EXPECT_EQ(Caller(remote.get()).register_region(socket.pass(fd), &region).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(Caller(local.get()).register_region(socket.pass(fd), &region).ok());
  v1::AnalyzeResponse r;
  const v1::AnalyzeRequest request = in_region(region.region_id(), 0, 0, v1::INPUT_KIND_BYTES);
  EXPECT_EQ(Caller(remote.get()).analyze(request, &r).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(Caller(local.get()).analyze(request, &r).ok());
  close(fd);
}

TEST(RegionOwners, RegionsOffMeansNoSocketAndAClearRefusal) {
  ServerProcess server({"--engine", test_engine(), "--threads", "2", "--region-socket", "off"});
  auto stub = stub_for(server.address());
  grpc::ClientContext ctx;
  v1::ServerInfo info;
  ASSERT_TRUE(stub->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info).ok());
  EXPECT_TRUE(info.region_socket().empty());
  v1::AnalyzeResponse r;
  EXPECT_EQ(Caller(stub.get()).analyze(in_region("r-x", 0, 0, v1::INPUT_KIND_BYTES), &r).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST(RegionOwners, TheSocketBoundsItsConnectionsAndDropsOneThatNeverReads) {
  ServerProcess server({"--engine", test_engine(), "--threads", "2", "--max-region-connections", "3"});
  const std::string path = region_socket_of(server);
  ASSERT_FALSE(path.empty());
  std::vector<std::unique_ptr<RegionSocketClient>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(std::make_unique<RegionSocketClient>(path));
    held.back()->connection_ticket();
  }
  {  // a fourth: the server answers with the limit as it accepts, and closes
    const int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un to{};
    to.sun_family = AF_UNIX;
    std::strncpy(to.sun_path, path.c_str(), sizeof(to.sun_path) - 1);
    ASSERT_EQ(connect(s, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
    std::string answer;
    char c;
    while (recv(s, &c, 1, 0) == 1 && c != '\n') answer += c;
    close(s);
    EXPECT_EQ(answer.rfind("error ", 0), 0u) << answer;
    EXPECT_NE(answer.find("--max-region-connections"), std::string::npos) << answer;
  }
  // A caller that asks and never reads the answers: disconnected once its
  // answers fill the socket, never waited for.
  held.pop_back();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const int flood = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(connect(flood, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string bytes(4096, 'R');
  bool dropped = false;
  for (const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
       !dropped && std::chrono::steady_clock::now() < until;) {
    if (send(flood, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT) >= 0) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    else dropped = true;  // EPIPE or ECONNRESET: the server hung up
  }
  close(flood);
  EXPECT_TRUE(dropped) << "the server still reads a caller that never reads its answers";
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // Its place is free again, and the others were served throughout.
  RegionSocketClient next(path);
  EXPECT_FALSE(next.connection_ticket().empty());
  EXPECT_FALSE(held[0]->connection_ticket().empty());
  EXPECT_TRUE(server.alive());
}

TEST(RegionOwners, AStoppingServerLetsGoOfItsRegionsAndRemovesItsSocket) {
  ServerProcess server({"--engine", test_engine(), "--threads", "2"});
  const std::string path = region_socket_of(server);
  ASSERT_TRUE(std::filesystem::exists(path));
  auto stub = stub_for(server.address());
  RegionSocketClient socket(path);
  const int fd = memfd_with(random_bytes(1 << 20, 15), F_SEAL_SHRINK);
  v1::Region region;
  ASSERT_TRUE(Caller(stub.get()).register_region(socket.pass(fd), &region).ok());
  close(fd);
  EXPECT_EQ(server.terminate(30), 0);
  EXPECT_FALSE(std::filesystem::exists(path));
  // The connection the regions lived on is closed from the server's side.
  EXPECT_THROW(socket.connection_ticket(), std::runtime_error);
}

TEST_F(Regions, TheClientPutsLargeFilesInARegionByItselfWithTheSameAnswers) {
  const std::string small = temp_path("small.raw"), large = temp_path("large.raw");
  {
    const std::vector<uint8_t> a = random_bytes(100000, 13), b = random_bytes(size_t{3} << 20, 14);
    std::ofstream(small, std::ios::binary).write(reinterpret_cast<const char*>(a.data()), static_cast<std::streamsize>(a.size()));
    std::ofstream(large, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  auto registrations = [&] {
    const std::string log = server_->log();
    size_t n = 0;
    for (size_t at = log.find("RegisterRegion"); at != std::string::npos; at = log.find("RegisterRegion", at + 1)) ++n;
    return n;
  };
  auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = {client_bin(), "--server", server_->address(), "--json", "--bytes"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const ProcessResult p = run_process(argv, 120);
    EXPECT_EQ(p.code, 0) << p.err;
    // The times differ from run to run; nothing else may.
    return std::regex_replace(p.out, std::regex(R"("(decode|compute)_ms":[0-9.e+-]+)"), "");
  };
  const size_t before = registrations();
  const std::string via_region = run({large, small});
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the log is written after the answer
  EXPECT_EQ(registrations(), before + 1) << "the large file alone goes through a region";
  const std::string via_socket = run({"--no-shm", large, small});
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(registrations(), before + 1);
  EXPECT_EQ(via_region, via_socket);
  EXPECT_NE(via_region.find("\"count\":3145728"), std::string::npos) << via_region;
  EXPECT_TRUE(me_->list().empty()) << "the client unregisters what it registered";
  std::filesystem::remove(small);
  std::filesystem::remove(large);
}

}  // namespace
}  // namespace imgstat::testing
