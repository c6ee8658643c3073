// Across real processes: imgstat-server on a loopback port, called through
// the imgstat-client binary (table and --json) and through a C++ stub for all
// four RPCs, the health and reflection services, error codes, streamed
// uploads above the message limit, concurrency and a graceful SIGTERM.
#include <gtest/gtest.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/empty.pb.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <google/protobuf/util/message_differencer.h>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <future>
#include <numeric>
#include <random>

#include "corpus.hpp"
#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "imgstat/v1/imgstat.grpc.pb.h"
#include "process.hpp"

namespace imgstat::testing {
namespace {

using nlohmann::json;
constexpr uint64_t kMessageLimit = 1 << 20;  // small, so streaming is cheap to test

class Integration : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess({"--engine", test_engine(), "--threads", "2", "--max-message-bytes",
                                 std::to_string(kMessageLimit), "--max-pixels", "50000000"});
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    if (!have_corpus()) GTEST_SKIP() << "no corpus";
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(INT_MAX);
    channel_ = grpc::CreateCustomChannel(server_->address(), grpc::InsecureChannelCredentials(), args);
    stub_ = v1::ImageStats::NewStub(channel_);
  }

  ProcessResult client(std::vector<std::string> args, const std::string& in = "/dev/null") {
    args.insert(args.begin(), {client_bin(), "--server", server_->address()});
    return run_process(args, 120, in);
  }
  static std::string corpus(const std::string& f) { return (corpus_dir() / f).string(); }
  static json reference(const std::string& file) {
    for (const json& r : corpus_references())
      if (r["file"] == file) return r;
    return {};
  }

  static ServerProcess* server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ImageStats::Stub> stub_;
};
ServerProcess* Integration::server_ = nullptr;

std::vector<json> json_lines(const std::string& out) {
  std::vector<json> lines;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) lines.push_back(json::parse(line));
  return lines;
}

void expect_json_matches_reference(const json& got, const json& ref) {
  const json& want = ref["reference"];
  EXPECT_TRUE(got["ok"].get<bool>());
  EXPECT_EQ(got["format"], ref["format"]);
  EXPECT_EQ(got["width"], want["width"]);
  EXPECT_EQ(got["height"], want["height"]);
  EXPECT_EQ(got["sample_type"], want["sample_type"]);
  ASSERT_EQ(got["channels"].size(), want["stats"].size());
  for (size_t c = 0; c < want["stats"].size(); ++c) {
    const json& g = got["channels"][c];
    const json& w = want["stats"][c];
    EXPECT_EQ(g["name"], w["channel"]);
    EXPECT_EQ(g["count"], want["pixel_count"]);
    EXPECT_EQ(g["min"], w["min"]);
    EXPECT_EQ(g["max"], w["max"]);
    if (w["sum"].is_number_integer()) {
      EXPECT_TRUE(g["sum"].is_number_integer()) << "integer sums print as JSON integers";
      EXPECT_EQ(g["sum"], w["sum"]);
    } else {
      EXPECT_NEAR(g["sum"].get<double>(), w["sum"].get<double>(), 1e-12 * std::abs(w["sum"].get<double>()));
    }
    EXPECT_NEAR(g["mean"].get<double>(), w["mean"].get<double>(), 1e-12 * std::abs(w["mean"].get<double>()));
    EXPECT_NEAR(g["stddev"].get<double>(), w["stddev"].get<double>(), 1e-9 * w["stddev"].get<double>());
    EXPECT_EQ(g["histogram"]["counts"], w["histogram"]);
  }
}

TEST_F(Integration, ClientPrintsATableWithHistograms) {
  const ProcessResult r = client({corpus("png/skimage_coffee.png")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("PNG 600x400, 3 channels, uint8"), std::string::npos) << r.out;
  // R mean 158.5690875, stddev 62.97286712 per the corpus reference.
  EXPECT_NE(r.out.find("158.569087"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("62.972867"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\u2588"), std::string::npos) << "a histogram drawing: " << r.out;
  EXPECT_NE(r.out.find("engine " + test_engine()), std::string::npos);
}

TEST_F(Integration, ClientJsonMatchesTheCorpusReference) {
  const std::vector<std::string> files = {"png/skimage_coffee.png", "png/pngsuite_basn2c16.png",
                                          "jpeg/ljt_testorig.jpg", "tiff/tiffrs_predictor-3-gray-f32.tif",
                                          "tiff/tiffrs_int8.tif", "bmp/imagers_Core_8_Bit.bmp"};
  // decoder cpu: the reference's pixels are libjpeg-turbo's, and so are these.
  std::vector<std::string> args = {"--json", "--decoder", "cpu"};
  for (const auto& f : files) args.push_back(corpus(f));
  const ProcessResult r = client(args);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    SCOPED_TRACE(files[i]);
    const json ref = reference(files[i]);
    ASSERT_FALSE(ref.is_null()) << "not in reference.jsonl";
    EXPECT_EQ(lines[i]["file"], corpus(files[i]));
    EXPECT_EQ(lines[i]["engine"], test_engine());
    expect_json_matches_reference(lines[i], ref);
    if (files[i].rfind("jpeg/", 0) == 0) EXPECT_EQ(lines[i]["decoder"], "libjpeg-turbo");
  }
  // The default decoder: nvJPEG where the CUDA engine has it, whose pixels
  // are libjpeg-turbo's, so its answer is the reference's exactly too.
  const ProcessResult a = client({"--json", corpus("jpeg/ljt_testorig.jpg")});
  ASSERT_EQ(a.code, 0) << a.err;
  const json got = json_lines(a.out).at(0);
  const std::string decoder = got["decoder"];
  if (decoder != "libjpeg-turbo") {
    EXPECT_EQ(test_engine(), "cuda");
    EXPECT_EQ(decoder.rfind("nvjpeg-", 0), 0u) << decoder;
  }
  expect_json_matches_reference(got, reference("jpeg/ljt_testorig.jpg"));
}

// --json is written without building nlohmann's objects: each line must be
// exactly what nlohmann would write for the same values (its key order, its
// numbers), for every kind of answer: every statistic, float and 16-bit
// images, parts, a joint histogram, a failure.
TEST_F(Integration, ClientJsonIsWhatNlohmannWouldWrite) {
  std::vector<std::string> files;
  for (const json& r : corpus_references()) {
    if (r["status"] == "undecodable") continue;
    files.push_back(corpus(r["file"]));
    if (files.size() == 60) break;
  }
  files.push_back(corpus("bad/imagers_Bad_clrsUsed.bmp"));
  files.push_back(corpus("does-not-exist.png"));
  const std::vector<std::vector<std::string>> runs = {
      {"--json"},
      {"--json", "--stats", "all", "--percentiles", "0,0.1,50,99.99,100"},
      {"--json", "--normalize", "--bins", "17", "--range", "-3.5:300.25"},
      {"--json", "--tiles", "2x2", "--joint", "0,1:8"},
      {"--json", "--colour-space", "lab"},
  };
  for (const auto& run : runs) {
    std::vector<std::string> args = run;
    args.insert(args.end(), files.begin(), files.end());
    const ProcessResult r = client(args);
    SCOPED_TRACE(run.back());
    EXPECT_EQ(r.code, 1) << r.err;  // the missing file, at least
    size_t lines = 0, answered = 0;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line); ++lines) {
      const json j = json::parse(line);
      EXPECT_EQ(line, j.dump());
      answered += j["ok"].get<bool>();
    }
    EXPECT_EQ(lines, files.size());
    EXPECT_GT(answered, 40u);
  }
}

TEST_F(Integration, ClientNamesEachFailureAndExitsNonZero) {
  const ProcessResult r = client({"--json", corpus("png/skimage_coffee.png"), corpus("bad/pngsuite_xcsn0g01.png"),
                        corpus("no/such/file.png")});
  EXPECT_EQ(r.code, 1);
  const auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_TRUE(lines[0]["ok"].get<bool>());
  EXPECT_FALSE(lines[1]["ok"].get<bool>());
  EXPECT_EQ(lines[1]["code"], "INVALID_ARGUMENT");
  // libpng's own reason, caught on the server and given with the error.
  EXPECT_NE(lines[1]["error"].get<std::string>().find("(libpng error: IDAT: CRC error)"), std::string::npos)
      << lines[1]["error"];
  EXPECT_FALSE(lines[2]["ok"].get<bool>());
  EXPECT_NE(r.err.find("pngsuite_xcsn0g01.png: INVALID_ARGUMENT"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("file.png"), std::string::npos) << r.err;
}

TEST_F(Integration, LocalLoadsOpenCvCodecsOnlyForFormatsThatNeedThem) {
  // JPEG, PNG and most TIFFs stream without OpenCV's codecs, whose 140
  // libraries would cost every start 0.15 s: with the module made unloadable
  // they still answer, the same; a 1-bit TIFF needs it and says why it failed.
  const std::vector<std::string> streamed = {corpus("jpeg/imagers_cat.jpg"), corpus("png/skimage_coffee.png"),
                                             corpus("tiff/tiffrs_ladoga.tif"), corpus("tiff/tiffrs_planar-rgb-u8.tif")};
  std::vector<std::string> args = {"--local", "--json"};
  args.insert(args.end(), streamed.begin(), streamed.end());
  const ProcessResult with = client(args);
  ASSERT_EQ(with.code, 0) << with.err;
  setenv("IMGSTAT_OPENCV_CODECS", "/nonexistent/libimgstat-opencv-codecs.so", 1);
  const ProcessResult without = client(args);
  const ProcessResult tiff = client({"--local", "--json", corpus("tiff/imagers_l1.tiff")});
  unsetenv("IMGSTAT_OPENCV_CODECS");
  ASSERT_EQ(without.code, 0) << without.err;
  const auto a = json_lines(with.out), b = json_lines(without.out);
  ASSERT_EQ(a.size(), streamed.size());
  ASSERT_EQ(b.size(), streamed.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(b[i]["ok"].get<bool>()) << b[i];
    EXPECT_EQ(a[i]["channels"], b[i]["channels"]) << streamed[i];
  }
  EXPECT_EQ(tiff.code, 1);
  const auto t = json_lines(tiff.out);
  ASSERT_EQ(t.size(), 1u) << tiff.out << tiff.err;
  EXPECT_EQ(t[0]["code"], "INTERNAL") << t[0];
  EXPECT_NE(t[0]["error"].get<std::string>().find("OpenCV's image codecs could not be loaded"), std::string::npos) << t[0];
}

TEST_F(Integration, LocalDecodesSayWhatLibrariesPrintOnceAndCleanly) {
  const ProcessResult r = client({"--local", corpus("bad/pngsuite_xd0n2c08.png"), corpus("png/skimage_coffee.png")});
  EXPECT_EQ(r.code, 1);
  // One line for the bad file, libpng's words inside it; none of libpng's raw.
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("imgstat-client: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("libpng error: Invalid IHDR data"), std::string::npos) << r.err;
}

// RFC 4180 rows: a comma in a name is quoted, every row has the header's
// fields, numbers are exact (integers) or round-trip (floats).
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      out.back() += '"';
      ++i;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

TEST_F(Integration, ClientCsvHasARowPerChannelAndQuotesWhatItMust) {
  const std::string named = temp_path("a,\"b\".png");
  std::filesystem::copy_file(corpus("png/skimage_coffee.png"), named);
  const ProcessResult r = client({"--csv", named, corpus("bad/pngsuite_xcsn0g01.png")});
  EXPECT_EQ(r.code, 1);
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) rows.push_back(csv_fields(line));
  ASSERT_EQ(rows.size(), 6u) << r.out;  // header, R, G, B, all channels, the failure
  for (const auto& row : rows) EXPECT_EQ(row.size(), rows[0].size()) << r.out;
  const auto col = [&](const std::string& name) {
    return static_cast<size_t>(std::find(rows[0].begin(), rows[0].end(), name) - rows[0].begin());
  };
  const json want = reference("png/skimage_coffee.png")["reference"]["stats"][0];
  EXPECT_EQ(rows[1][col("file")], named);
  EXPECT_EQ(rows[1][col("channel")], "R");
  EXPECT_EQ(rows[1][col("sum")], std::to_string(want["sum"].get<int64_t>()));
  EXPECT_NEAR(std::stod(rows[1][col("mean")]), want["mean"].get<double>(), 1e-12 * want["mean"].get<double>());
  EXPECT_EQ(rows[4][col("channel")], "all");
  EXPECT_EQ(rows[4][col("count")], std::to_string(3 * std::stoull(rows[1][col("count")])));
  int64_t sum = 0;
  for (int i = 1; i <= 3; ++i) sum += std::stoll(rows[i][col("sum")]);
  EXPECT_EQ(rows[4][col("sum")], std::to_string(sum));
  EXPECT_EQ(rows[5][col("ok")], "false");
  EXPECT_EQ(rows[5][col("code")], "INVALID_ARGUMENT");
  EXPECT_NE(rows[5][col("error")].find("CRC error"), std::string::npos);
  std::filesystem::remove(named);
}

// Folders (recursive, images only, sorted), quoted patterns with ** and
// plain ones, many files at once: answers in input order whatever the jobs,
// no progress bar when stderr is not a terminal, patterns that match
// nothing named and counted as failures.
TEST_F(Integration, ClientTakesFoldersAndPatternsInOrder) {
  namespace fs = std::filesystem;
  std::vector<std::string> want;
  for (const auto& e : fs::recursive_directory_iterator(corpus_dir() / "gif")) want.push_back(e.path().string());
  std::sort(want.begin(), want.end());
  std::vector<std::string> bmps;
  for (const auto& e : fs::recursive_directory_iterator(corpus_dir()))
    if (e.path().extension() == ".bmp") bmps.push_back(e.path().string());
  std::sort(bmps.begin(), bmps.end());
  want.insert(want.end(), bmps.begin(), bmps.end());
  std::string sums[2];
  for (int pass = 0; pass < 2; ++pass) {
    const ProcessResult r = client({"--local", "--json", "--stats", "sum", "-j", pass ? "8" : "1",
                                    (corpus_dir() / "gif").string(), (corpus_dir() / "**" / "*.bmp").string()});
    EXPECT_EQ(r.code, 1) << "the corpus's bad BMPs fail";
    const std::vector<json> lines = json_lines(r.out);
    ASSERT_EQ(lines.size(), want.size()) << r.out;
    for (size_t i = 0; i < lines.size(); ++i) {
      EXPECT_EQ(lines[i]["file"], want[i]);
      if (lines[i]["ok"]) sums[pass] += lines[i]["channels"][0]["sum"].dump() + ",";
    }
    EXPECT_EQ(r.err.find('\r'), std::string::npos) << "a progress bar on a pipe";
  }
  EXPECT_EQ(sums[0], sums[1]);
  const ProcessResult none = client({"--local", (corpus_dir() / "png" / "nothing*.png").string(), corpus("png/skimage_coffee.png")});
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.err.find("nothing*.png: nothing matches"), std::string::npos) << none.err;
  EXPECT_NE(none.out.find("2 files: 1 analyzed, 1 failed"), std::string::npos) << none.out;
}

// On a terminal (util-linux's script gives the client one) a bar counts the
// files and, for a large streamed upload, the bytes sent; the answer is
// printed as usual.
TEST_F(Integration, ClientShowsProgressOnATerminalOnly) {
  if (!std::filesystem::exists("/usr/bin/script")) GTEST_SKIP() << "no script(1)";
  const std::string raw = temp_path("big") + ".raw";
  {
    std::ofstream out(raw, std::ios::binary);
    std::vector<char> block(1 << 20, 7);
    for (int i = 0; i < 80; ++i) out.write(block.data(), static_cast<std::streamsize>(block.size()));
  }
  const std::string typescript = temp_path("typescript");
  // Over the socket (a file this large would go to a server on this host in shared memory).
  const std::string command =
      client_bin() + " --server " + server_->address() + " --no-shm --stats min_max --raw 8192x10240x1:uint8 " + raw;
  const ProcessResult r = run_process({"/usr/bin/script", "-qec", command, typescript}, 120);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  std::ifstream in(typescript);
  const std::string seen((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(seen.find("0/1 files"), std::string::npos) << seen.substr(0, 2000);
  EXPECT_NE(seen.find("uploaded"), std::string::npos) << "a streamed upload counts its bytes";
  EXPECT_NE(seen.find("83886080"), std::string::npos) << "the answer itself";
  std::filesystem::remove(raw);
  std::filesystem::remove(typescript);
}

// --plot draws a panel per channel (and the luminance) into a PNG one can
// open; --normalize prints values as fractions of the type's maximum.
TEST_F(Integration, ClientPlotsAndNormalizes) {
  const std::string png = temp_path("plot") + ".png";
  ProcessResult r = client({"--local", "--stats", "histogram,luminance", "--plot", png, corpus("png/skimage_coffee.png")});
  ASSERT_EQ(r.code, 0) << r.err;
  const cv::Mat plot = cv::imread(png, cv::IMREAD_COLOR);
  ASSERT_FALSE(plot.empty());
  EXPECT_EQ(plot.cols, 960);
  EXPECT_EQ(plot.rows, 4 * 240 + 40);  // R, G, B and Y
  int red = 0, green = 0, blue = 0;
  for (int y = 0; y < plot.rows; ++y)
    for (int x = 0; x < plot.cols; ++x) {
      const cv::Vec3b p = plot.at<cv::Vec3b>(y, x);
      red += p == cv::Vec3b(40, 40, 210);
      green += p == cv::Vec3b(40, 160, 40);
      blue += p == cv::Vec3b(200, 90, 30);
    }
  EXPECT_GT(red, 10000);  // bars, not just the labels
  EXPECT_GT(green, 10000);
  EXPECT_GT(blue, 10000);
  std::filesystem::remove(png);
  r = client({"--local", "--stats", "sum", "--plot", png, corpus("png/skimage_coffee.png")});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("no histogram to plot"), std::string::npos) << r.err;

  const json plain = json_lines(client({"--local", "--json", corpus("png/skimage_coffee.png")}).out).at(0);
  const json scaled = json_lines(client({"--local", "--json", "--normalize", corpus("png/skimage_coffee.png")}).out).at(0);
  for (size_t c = 0; c < 3; ++c) {
    EXPECT_EQ(scaled["channels"][c]["max"].get<double>(), plain["channels"][c]["max"].get<double>() / 255);
    EXPECT_EQ(scaled["channels"][c]["mean"].get<double>(), plain["channels"][c]["mean"].get<double>() / 255);
    EXPECT_EQ(scaled["channels"][c]["median"].get<double>(), plain["channels"][c]["median"].get<double>() / 255);
  }
}

TEST_F(Integration, ClientExitCodesAndTheSummaryLine) {
  ProcessResult r = client({corpus("png/skimage_coffee.png"), corpus("bad/pngsuite_xcsn0g01.png")});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("2 files: 1 analyzed, 1 failed"), std::string::npos) << r.out;
  r = client({corpus("png/skimage_coffee.png")});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out.find(" files: "), std::string::npos) << "no summary for one file";
  for (const std::vector<std::string>& usage : std::vector<std::vector<std::string>>{
           {"--bins", "0", "x.png"}, {"--no-such-flag"}, {"--decoder", "tpu", "x.png"}})
    EXPECT_EQ(client(usage).code, 2) << usage.front();
  r = client({"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("Examples:"), std::string::npos);
  EXPECT_NE(r.out.find("Exit status:"), std::string::npos);
}

TEST_F(Integration, ClientRawBytesAndStdin) {
  const json ref = reference("raw/raw_astronaut_512x512x3_u8.raw");
  ProcessResult r = client({"--json", "--raw", "512x512x3:uint8", corpus("raw/raw_astronaut_512x512x3_u8.raw")});
  ASSERT_EQ(r.code, 0) << r.err;
  auto line = json_lines(r.out).at(0);
  line["format"] = "raw";
  expect_json_matches_reference(line, ref);

  r = client({"--json", "--bytes", corpus("png/skimage_coffee.png")});
  ASSERT_EQ(r.code, 0) << r.err;
  line = json_lines(r.out).at(0);
  const auto counts = line["channels"][0]["histogram"]["counts"].get<std::vector<uint64_t>>();
  EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), uint64_t{0}),
            std::filesystem::file_size(corpus("png/skimage_coffee.png")));
  EXPECT_GE(counts[0x89], 1u);  // the PNG signature's first byte
  r = client({"--json", "-"}, corpus("png/skimage_coffee.png"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json_lines(r.out).at(0)["file"], "-");
  expect_json_matches_reference(json_lines(r.out).at(0), reference("png/skimage_coffee.png"));
}

// The client reads the next piece of a file while it sends this one: every
// byte arrives once, in order, whatever the size against the piece (one
// short, exact, one over, several).
TEST_F(Integration, StreamedFilesAroundThePieceSizeArriveWhole) {
  const uint64_t piece = std::min<uint64_t>(uint64_t{4} << 20, kMessageLimit - (64 << 10));
  std::mt19937_64 rng(17);
  for (const uint64_t size : {piece - 1, piece, piece + 1, 2 * piece, 3 * piece + 7}) {
    SCOPED_TRACE(size);
    std::string bytes(size, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() % 251);  // 251..255 never: a dropped or doubled piece shows
    bytes[size - 1] = static_cast<char>(255);                 // and the last byte is one of its own
    const std::string file = temp_path("pieces.bin");
    std::ofstream(file, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    const ProcessResult remote = client({"--json", "--no-shm", "--stream", "--bytes", file});
    const ProcessResult local = client({"--json", "--local", "--bytes", file});
    ASSERT_EQ(remote.code, 0) << remote.err;
    ASSERT_EQ(local.code, 0) << local.err;
    const json a = json_lines(remote.out).at(0), b = json_lines(local.out).at(0);
    EXPECT_EQ(a["channels"][0]["count"], size);
    EXPECT_EQ(a["channels"][0]["max"], 255);
    EXPECT_EQ(a["channels"][0]["histogram"]["counts"][255], 1);
    EXPECT_EQ(a["channels"], b["channels"]);
    std::filesystem::remove(file);
  }
}

TEST_F(Integration, UploadsAboveTheMessageLimitAreStreamed) {
  // 3 MiB of random uint16 samples, and a PNG of noise: both over 1 MiB.
  std::mt19937_64 rng(99);
  std::vector<uint16_t> samples(1024 * 1536);
  for (auto& s : samples) s = static_cast<uint16_t>(rng());
  const std::string raw = temp_path("big.raw");
  std::ofstream(raw, std::ios::binary).write(reinterpret_cast<const char*>(samples.data()), samples.size() * 2);
  cv::Mat noise(900, 900, CV_8UC3);
  cv::randu(noise, 0, 256);
  const std::string png = temp_path("noise") + ".png";
  ASSERT_TRUE(cv::imwrite(png, noise));
  ASSERT_GT(std::filesystem::file_size(png), kMessageLimit);

  for (const auto& args : std::vector<std::vector<std::string>>{{"--raw", "1024x1536x1:uint16", raw}, {png}}) {
    // Over the socket, in a region, and in-process: one answer.
    std::vector<std::string> remote_args = {"--json", "--no-shm"}, region_args = {"--json"},
                             local_args = {"--json", "--local"};
    remote_args.insert(remote_args.end(), args.begin(), args.end());
    region_args.insert(region_args.end(), args.begin(), args.end());
    local_args.insert(local_args.end(), args.begin(), args.end());
    const ProcessResult remote = client(remote_args), region = client(region_args), local = client(local_args);
    ASSERT_EQ(remote.code, 0) << remote.err;
    ASSERT_EQ(region.code, 0) << region.err;
    ASSERT_EQ(local.code, 0) << local.err;
    json a = json_lines(remote.out).at(0), b = json_lines(local.out).at(0), c = json_lines(region.out).at(0);
    EXPECT_EQ(a["channels"], b["channels"]);
    EXPECT_EQ(a["channels"], c["channels"]);
  }
  // The server logged them as streamed uploads.
  EXPECT_NE(server_->log().find("AnalyzeStream"), std::string::npos);
  std::filesystem::remove(raw);
  std::filesystem::remove(png);
}

// AnalyzeStream messages as raw bytes on a generic call: the server's
// method is raw too, reading a chunk's bytes from gRPC's slices where the
// chunk is in protobuf's plain encoding, and parsing anything else.
struct RawStream {
  grpc::Status status;
  v1::AnalyzeResponse response;
};
RawStream raw_stream(const std::shared_ptr<grpc::Channel>& channel, const std::vector<std::string>& messages) {
  grpc::TemplatedGenericStub<grpc::ByteBuffer, grpc::ByteBuffer> generic(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto call = generic.PrepareCall(&ctx, "/imgstat.v1.ImageStats/AnalyzeStream", &cq);
  void* tag;
  bool ok = false;
  const auto step = [&](void* t) { return cq.Next(&tag, &ok) && tag == t && ok; };
  call->StartCall(reinterpret_cast<void*>(1));
  bool sending = step(reinterpret_cast<void*>(1));
  for (const std::string& m : messages) {
    if (!sending) break;
    grpc::Slice slice(m.data(), m.size());
    grpc::ByteBuffer b(&slice, 1);
    call->Write(b, reinterpret_cast<void*>(2));
    sending = step(reinterpret_cast<void*>(2));
  }
  if (sending) {
    call->WritesDone(reinterpret_cast<void*>(3));
    step(reinterpret_cast<void*>(3));
  }
  grpc::ByteBuffer answer;
  call->Read(&answer, reinterpret_cast<void*>(4));
  const bool answered = step(reinterpret_cast<void*>(4));
  RawStream out;
  call->Finish(&out.status, reinterpret_cast<void*>(5));
  while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(5)) {
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (answered && out.status.ok()) {
    grpc::ProtoBufferReader reader(&answer);
    EXPECT_TRUE(out.response.ParseFromZeroCopyStream(&reader));
  }
  return out;
}

std::string varint(uint64_t v, size_t at_least = 1) {
  std::string out;
  do {
    uint8_t b = v & 0x7f;
    v >>= 7;
    if (v || out.size() + 1 < at_least) b |= 0x80;
    out += static_cast<char>(b);
  } while (v || out.size() < at_least);
  return out;
}
std::string header_message(const v1::StreamHeader& h) {
  v1::AnalyzeStreamRequest m;
  *m.mutable_header() = h;
  return m.SerializeAsString();
}
std::string chunk_message(std::string_view bytes) {
  v1::AnalyzeStreamRequest m;
  m.set_chunk(std::string(bytes));
  return m.SerializeAsString();
}

TEST_F(Integration, RawStreamChunksOfEverySizeAndEncodingAnswerAsOneMessage) {
  std::mt19937_64 rng(36);
  // A PNG (decoded as it arrives) and raw pixels (to the engine chunk by chunk).
  cv::Mat noise(300, 401, CV_8UC3);
  cv::randu(noise, 0, 256);
  std::vector<uchar> png_bytes;
  ASSERT_TRUE(cv::imencode(".png", noise, png_bytes));
  const std::string png(png_bytes.begin(), png_bytes.end());
  std::string pixels(1021 * 67 * 3 * 2, '\0');
  for (char& c : pixels) c = static_cast<char>(rng());
  v1::AnalyzeRequest png_request, raw_request;
  png_request.mutable_input()->set_kind(v1::INPUT_KIND_ENCODED);
  png_request.mutable_input()->set_data(png);
  raw_request.mutable_input()->set_kind(v1::INPUT_KIND_RAW);
  raw_request.mutable_input()->mutable_raw()->set_width(1021);
  raw_request.mutable_input()->mutable_raw()->set_height(67);
  raw_request.mutable_input()->mutable_raw()->set_channels(3);
  raw_request.mutable_input()->mutable_raw()->set_sample_type(v1::SAMPLE_TYPE_UINT16);
  raw_request.mutable_input()->set_data(pixels);

  v1::AnalyzeRequest bytes_request;  // any length: a lie is found only as the bytes come
  bytes_request.mutable_input()->set_kind(v1::INPUT_KIND_BYTES);
  bytes_request.mutable_input()->set_data(pixels.substr(0, 99991));
  for (const v1::AnalyzeRequest* request : {&png_request, &raw_request, &bytes_request}) {
    const std::string& data = request->input().data();
    v1::AnalyzeResponse want;
    {
      grpc::ClientContext ctx;
      ASSERT_TRUE(stub_->Analyze(&ctx, *request, &want).ok());
    }
    v1::StreamHeader header;
    *header.mutable_input() = request->input();
    header.mutable_input()->clear_data();
    header.set_total_bytes(data.size());
    const size_t limit = kMessageLimit - (64 << 10);
    // Chunk sizes: 0 and 1 byte, around gRPC's frames and slices, the
    // message limit, and random ones.
    std::vector<std::vector<size_t>> plans = {
        {0, 1, 0, 2, 3, 4095, 4096, 4097, 0, 16383, 16384, 16385, 65535, 65536, 65537},
        {limit},
        {1, limit - 1},
    };
    std::vector<size_t> random;
    for (size_t k = 0; k < 200; ++k) random.push_back(rng() % 3 == 0 ? rng() % 3 : rng() % 20000);
    plans.push_back(random);
    for (size_t p = 0; p < plans.size(); ++p) {
      // Each plan repeats until the data is sent.
      std::vector<std::string> messages = {header_message(header)};
      for (size_t at = 0, k = 0; at < data.size(); ++k) {
        const size_t n = std::min(plans[p][k % plans[p].size()], data.size() - at);
        messages.push_back(chunk_message(std::string_view(data).substr(at, n)));
        at += n;
      }
      SCOPED_TRACE("plan " + std::to_string(p) + ", " + std::to_string(messages.size()) + " messages");
      const RawStream got = raw_stream(channel_, messages);
      ASSERT_TRUE(got.status.ok()) << got.status.error_message();
      EXPECT_EQ(got.response.channels_size(), want.channels_size());
      for (int c = 0; c < want.channels_size(); ++c)
        EXPECT_EQ(got.response.channels(c).SerializeAsString(), want.channels(c).SerializeAsString()) << c;
    }
    // Encodings other than the plain one read as protobuf reads them: an
    // unknown field after the chunk, a length written in five bytes, and
    // the chunk field twice (the last wins).
    const size_t third = data.size() / 3;
    const std::string a = data.substr(0, third), b = data.substr(third, third), c = data.substr(2 * third);
    const std::string tag = "\x12";
    const std::vector<std::string> odd = {
        header_message(header),
        chunk_message(a) + "\x78\x05",                                   // field 15, varint 5: unknown
        tag + varint(b.size(), 5) + b,                                    // a long varint
        tag + varint(7) + std::string(7, 'x') + tag + varint(c.size()) + c,  // twice: c counts
    };
    const RawStream got = raw_stream(channel_, odd);
    ASSERT_TRUE(got.status.ok()) << got.status.error_message();
    for (int i = 0; i < want.channels_size(); ++i)
      EXPECT_EQ(got.response.channels(i).SerializeAsString(), want.channels(i).SerializeAsString()) << i;

    // A stream that lies about its total, one that is cut short, bytes that
    // are no message, a chunk first: refused, and the server serves on.
    v1::StreamHeader small = header;
    small.set_total_bytes(data.size() - 10);
    v1::StreamHeader large = header;
    large.set_total_bytes(data.size() + 10);
    const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
        // Raw pixels: a total that the layout does not fit is refused with the header.
        {{header_message(small), chunk_message(data)}, request == &raw_request ? "needs" : "more than the header's total_bytes"},
        {{header_message(large), chunk_message(data)}, request == &raw_request ? "needs" : "stream ended after"},
        {{header_message(header), chunk_message(a), "\xff\xff\xff"}, "not an AnalyzeStreamRequest"},
        {{header_message(header), tag + varint(1000) + "short"}, "not an AnalyzeStreamRequest"},
        {{chunk_message(a)}, "the first AnalyzeStream message must be a header"},
        {{header_message(header), header_message(header)}, "second header"},
    };
    for (const auto& [messages, says] : bad) {
      const RawStream r = raw_stream(channel_, messages);
      EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << says;
      EXPECT_NE(r.status.error_message().find(says), std::string::npos) << says << ": " << r.status.error_message();
    }
  }
  grpc::ClientContext ctx;
  v1::AnalyzeResponse after;
  EXPECT_TRUE(stub_->Analyze(&ctx, png_request, &after).ok());
}

// A raw stack (RawLayout.depth) with padded rows: unary and streamed in
// chunks that cut rows and planes anywhere, each plane's answer equal to the
// plane sent alone, the planes together equal to the sums of their samples.
TEST_F(Integration, RawStacksAnswerEachPlaneUnaryAndStreamed) {
  const uint32_t w = 37, h = 11, depth = 9, stride = 37 * 2 * 2 + 6;  // uint16 gray+alpha, 6 bytes of padding
  std::mt19937 rng(494);
  std::string data(size_t{stride} * h * depth - 6, '\0');  // the last row without its padding
  for (auto& b : data) b = static_cast<char>(rng());
  auto layout = [&](v1::RawLayout* raw, uint32_t d) {
    raw->set_width(w);
    raw->set_height(h);
    raw->set_channels(2);
    raw->set_sample_type(v1::SAMPLE_TYPE_UINT16);
    raw->set_row_stride(stride);
    raw->set_depth(d);
  };
  v1::AnalyzeRequest request;
  request.mutable_input()->set_kind(v1::INPUT_KIND_RAW);
  layout(request.mutable_input()->mutable_raw(), depth);
  request.mutable_input()->set_data(data);
  request.mutable_options()->mutable_planes()->set_each(true);
  request.mutable_options()->add_statistics(v1::STATISTIC_MIN_MAX);
  request.mutable_options()->add_statistics(v1::STATISTIC_SUM);
  request.mutable_options()->add_statistics(v1::STATISTIC_POSITIONS);
  grpc::ClientContext ctx;
  v1::AnalyzeResponse unary;
  ASSERT_TRUE(stub_->Analyze(&ctx, request, &unary).ok());
  ASSERT_EQ(unary.planes_size(), static_cast<int>(depth));
  EXPECT_EQ(unary.facts().planes(), depth);
  EXPECT_EQ(unary.height(), h);
  int64_t sum = 0;
  for (uint32_t p = 0; p < depth; ++p) {
    v1::AnalyzeRequest one = request;
    layout(one.mutable_input()->mutable_raw(), 0);
    one.mutable_input()->set_data(data.substr(size_t{p} * h * stride, size_t{h} * stride - (p + 1 == depth ? 6 : 0)));
    one.mutable_options()->clear_planes();
    grpc::ClientContext c;
    v1::AnalyzeResponse alone;
    ASSERT_TRUE(stub_->Analyze(&c, one, &alone).ok());
    EXPECT_EQ(unary.planes(p).index(), p);
    for (int k = 0; k < 2; ++k) {
      EXPECT_EQ(unary.planes(p).channels(k).sum_int(), alone.channels(k).sum_int()) << p;
      EXPECT_EQ(unary.planes(p).channels(k).min(), alone.channels(k).min()) << p;
      EXPECT_EQ(unary.planes(p).channels(k).max_position().x(), alone.channels(k).max_position().x()) << p;
    }
    sum += alone.channels(0).sum_int();
  }
  EXPECT_EQ(unary.channels(0).sum_int(), sum);
  for (size_t piece : {size_t{1000}, size_t{stride} * h, size_t{7919}}) {
    grpc::ClientContext sctx;
    v1::AnalyzeResponse streamed;
    auto writer = stub_->AnalyzeStream(&sctx, &streamed);
    v1::AnalyzeStreamRequest m;
    *m.mutable_header()->mutable_input() = request.input();
    m.mutable_header()->mutable_input()->clear_data();
    *m.mutable_header()->mutable_options() = request.options();
    m.mutable_header()->set_total_bytes(data.size());
    ASSERT_TRUE(writer->Write(m));
    for (size_t off = 0; off < data.size(); off += piece) {
      m.set_chunk(data.substr(off, piece));
      ASSERT_TRUE(writer->Write(m));
    }
    writer->WritesDone();
    ASSERT_TRUE(writer->Finish().ok()) << piece;
    ASSERT_EQ(streamed.planes_size(), static_cast<int>(depth)) << piece;
    for (uint32_t p = 0; p < depth; ++p)
      EXPECT_EQ(streamed.planes(p).SerializeAsString(), unary.planes(p).SerializeAsString()) << piece << " plane " << p;
    EXPECT_EQ(streamed.channels(1).SerializeAsString(), unary.channels(1).SerializeAsString()) << piece;
  }
  // Planes chosen of raw pixels, and a depth past --max-planes, are refused.
  v1::AnalyzeRequest chosen = request;
  chosen.mutable_options()->mutable_planes()->set_first(2);
  grpc::ClientContext cctx;
  v1::AnalyzeResponse refused;
  EXPECT_EQ(stub_->Analyze(&cctx, chosen, &refused).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::AnalyzeRequest deep = request;
  deep.mutable_input()->mutable_raw()->set_depth(1u << 30);
  grpc::ClientContext dctx;
  const grpc::Status s = stub_->Analyze(&dctx, deep, &refused);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("--max-planes"), std::string::npos) << s.error_message();
}

TEST_F(Integration, StubCallsAllFourRpcs) {
  grpc::ClientContext info_ctx;
  v1::ServerInfo info;
  ASSERT_TRUE(stub_->GetServerInfo(&info_ctx, v1::GetServerInfoRequest(), &info).ok());
  EXPECT_EQ(info.engine().kind(), test_engine());
  EXPECT_EQ(info.limits().max_message_bytes(), kMessageLimit);

  const std::string coffee = read_file(corpus("png/skimage_coffee.png"));
  v1::AnalyzeRequest request;
  request.mutable_input()->set_data(coffee);
  grpc::ClientContext ctx;
  v1::AnalyzeResponse unary;
  ASSERT_TRUE(stub_->Analyze(&ctx, request, &unary).ok());
  EXPECT_EQ(unary.channels(0).sum_int(), 38056581);

  grpc::ClientContext sctx;
  v1::AnalyzeResponse streamed;
  auto writer = stub_->AnalyzeStream(&sctx, &streamed);
  v1::AnalyzeStreamRequest m;
  m.mutable_header()->set_total_bytes(coffee.size());
  ASSERT_TRUE(writer->Write(m));
  for (size_t off = 0; off < coffee.size(); off += 100000) {
    m.set_chunk(coffee.substr(off, 100000));
    ASSERT_TRUE(writer->Write(m));
  }
  writer->WritesDone();
  ASSERT_TRUE(writer->Finish().ok());
  EXPECT_EQ(streamed.channels(0).SerializeAsString(), unary.channels(0).SerializeAsString());

  grpc::ClientContext bctx;
  auto batch = stub_->AnalyzeBatch(&bctx);
  const std::vector<std::pair<std::string, std::string>> inputs = {
      {"coffee", coffee}, {"broken", "not an image"}, {"gif", read_file(corpus("gif/imagers_sample_1.gif"))}};
  for (const auto& [id, data] : inputs) {
    v1::BatchRequest b;
    b.set_id(id);
    b.mutable_request()->mutable_input()->set_data(data);
    ASSERT_TRUE(batch->Write(b));
  }
  batch->WritesDone();
  std::map<std::string, v1::BatchResponse> answers;
  v1::BatchResponse answer;
  while (batch->Read(&answer)) answers[answer.id()] = answer;
  ASSERT_TRUE(batch->Finish().ok());
  ASSERT_EQ(answers.size(), 3u);
  EXPECT_EQ(answers["coffee"].response().channels(0).SerializeAsString(), unary.channels(0).SerializeAsString());
  EXPECT_EQ(answers["broken"].error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(answers["broken"].error().message().find("unrecognized"), std::string::npos);
  EXPECT_EQ(answers["gif"].response().format(), "GIF");
}

// Aggregate merges on the server what the CLI's --aggregate merges from a
// call a file: the same Partial, its groups (8-bit grey, 8-bit RGB, 16-bit
// RGB, RGBA ...) in the order their first inputs came whatever order the
// analyses ended in; a damaged input is named by its place and left out;
// malformed calls are refused and the server keeps serving.
TEST_F(Integration, AggregateMergesOnTheServerAsTheClientsMergeDoes) {
  std::vector<std::string> files;
  for (const char* f : {"png/skimage_camera.png", "png/skimage_coffee.png", "png/pngsuite_basn2c16.png",
                        "png/pngsuite_basn4a08.png", "jpeg/imagers_cat.jpg", "png/pngsuite_basn0g08.png",
                        "png/pngsuite_basn6a16.png", "gif/imagers_sample_1.gif", "jpeg/imagers_3.jpg"})
    files.push_back(corpus(f));
  std::vector<std::string> sent = files;
  sent.insert(sent.end(), files.rbegin(), files.rend());
  constexpr size_t kBroken = 5;
  sent.insert(sent.begin() + kBroken, "");  // "not an image" goes here

  auto call = [&](const std::vector<std::vector<size_t>>& messages, v1::AggregateResponse* out) {
    grpc::ClientContext ctx;
    auto writer = stub_->Aggregate(&ctx, out);
    bool first = true;
    for (const auto& indices : messages) {
      v1::AggregateRequest m;
      if (first) m.mutable_options()->add_statistics(v1::STATISTIC_ALL);
      first = false;
      for (size_t i : indices) {
        v1::Input* in = m.add_inputs();
        in->set_name(sent[i].empty() ? "broken" : sent[i]);
        in->set_data(sent[i].empty() ? std::string("not an image") : read_file(sent[i]));
      }
      if (!writer->Write(m)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  };
  std::vector<size_t> all(sent.size());
  std::iota(all.begin(), all.end(), 0);
  v1::AggregateResponse server;
  const grpc::Status status = call({{0}, {1, 2, 3, 4, 5, 6, 7, 8, 9}, {}, std::vector<size_t>(all.begin() + 10, all.end())}, &server);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(server.inputs(), sent.size() - 1);
  ASSERT_EQ(server.failures_size(), 1);
  EXPECT_EQ(server.failures(0).index(), kBroken);
  EXPECT_EQ(server.failures(0).name(), "broken");
  EXPECT_EQ(server.failures(0).error().code(), grpc::StatusCode::INVALID_ARGUMENT);

  // The CLI's merge of a call a file over the same inputs.
  std::vector<std::string> args = {"--aggregate", "--per-file", "--partial-out", temp_path("aggregate-partial")};
  for (const std::string& f : sent)
    if (!f.empty()) args.push_back(f);
  const ProcessResult r = client(args);
  ASSERT_EQ(r.code, 0) << r.err;
  v1::Partial cli;
  ASSERT_TRUE(cli.ParseFromString(read_file(args[3])));
  std::filesystem::remove(args[3]);
  cli.clear_done();
  ASSERT_GE(cli.groups_size(), 4);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(server.partial(), cli))
      << server.partial().ShortDebugString().substr(0, 2000) << "\n" << cli.ShortDebugString().substr(0, 2000);

  // The same inputs one a message (the analyses end in another order): the same state.
  std::vector<std::vector<size_t>> one_each;
  for (size_t i : all) one_each.push_back({i});
  v1::AggregateResponse again;
  const grpc::Status again_status = call(one_each, &again);
  ASSERT_TRUE(again_status.ok()) << again_status.error_message();
  EXPECT_EQ(again.partial().SerializeAsString(), server.partial().SerializeAsString());

  // Refused: no options first, options again, too many inputs in a message.
  auto refused = [&](const std::vector<v1::AggregateRequest>& messages, const std::string& why) {
    grpc::ClientContext ctx;
    v1::AggregateResponse out;
    auto writer = stub_->Aggregate(&ctx, &out);
    for (const v1::AggregateRequest& m : messages) writer->Write(m);
    writer->WritesDone();
    const grpc::Status s = writer->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << why;
    EXPECT_NE(s.error_message().find(why), std::string::npos) << s.error_message();
  };
  v1::AggregateRequest options_alone, input_alone, with_both, too_many;
  options_alone.mutable_options();
  input_alone.add_inputs()->set_data(read_file(files[0]));
  with_both = input_alone;
  with_both.mutable_options();
  too_many.mutable_options();
  for (int i = 0; i < 1025; ++i) too_many.add_inputs()->set_name("x");
  refused({input_alone}, "first message");
  refused({options_alone, with_both}, "first message only");
  refused({too_many}, "1025 inputs (at most 1024)");
  grpc::ClientContext info_ctx;
  v1::ServerInfo info;
  ASSERT_TRUE(stub_->GetServerInfo(&info_ctx, v1::GetServerInfoRequest(), &info).ok());
  EXPECT_EQ(info.limits().aggregate_inputs(), 1024u);
}

// The CLI's --aggregate sends its files on the server's Aggregate calls,
// a few slices at once, and merges their partials; its answer is the one
// a call a file gives (--per-file), byte for byte: the groups in the
// order their first files come (a 16-bit image first met in a later
// slice), a damaged file and an empty one named in their places, the same
// exit status and partial, in shared memory or over the socket. Files the
// calls cannot take (too large for a message, a shard's members) go a call
// a file in their places, the runs around them on the calls: the same
// answer.
TEST_F(Integration, AggregateOnTheServersCallsAnswersAsACallAFile) {
  const std::filesystem::path dir = temp_path("aggregate-on-server");
  std::filesystem::create_directories(dir);
  const std::vector<std::string> kinds = {"png/skimage_camera.png", "jpeg/imagers_cat.jpg", "png/skimage_coffee.png",
                                          "gif/imagers_sample_1.gif"};
  // A file that reads shorter than its size (a sysfs file says 4096 bytes):
  // it fails here, before its call, and the server's failures after it in
  // its slice are still named by their own places.
  std::string shorter = "/sys/kernel/mm/transparent_hugepage/enabled";
  {
    std::ifstream in(shorter, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::error_code ec;
    if (text.empty() || std::filesystem::file_size(shorter, ec) <= text.size() || ec) shorter.clear();
  }
  std::vector<std::string> files;
  for (int i = 0; i < 100; ++i) {
    const std::string name = (dir / (std::to_string(1000 + i) + "-")).string();
    if (i == 35 && !shorter.empty()) {
      files.push_back(shorter);
    } else if (i == 40) {
      files.push_back(name + "broken.png");
      std::ofstream(files.back(), std::ios::binary) << "\x89PNG not an image";
    } else if (i == 90) {
      files.push_back(name + "empty.png");
      std::ofstream(files.back(), std::ios::binary);
    } else {
      // Grey and alpha first in the second slice, 16-bit RGB in the third (slices of 32 files here).
      const std::string from = corpus(i == 70   ? "png/pngsuite_basn2c16.png"
                                      : i == 45 || i == 75 ? "png/pngsuite_basn4a08.png"
                                                           : kinds[(i * 7) % kinds.size()]);
      files.push_back(name + std::filesystem::path(from).filename().string());
      std::filesystem::copy_file(from, files.back());
    }
  }
  auto aggregate = [&](const std::vector<std::string>& flags, const std::vector<std::string>& inputs) {
    const std::string partial = temp_path("aggregate-on-server-partial");
    std::vector<std::string> args = {"--aggregate", "--json", "--stats", "all", "--partial-out", partial};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), inputs.begin(), inputs.end());
    const size_t logged = server_->log().size();
    ProcessResult r = client(args);
    const std::string log = server_->log().substr(logged);
    size_t on_server = 0;
    for (size_t at = log.find("info Aggregate "); at != std::string::npos; at = log.find("info Aggregate ", at + 1))
      ++on_server;
    std::string bytes = read_file(partial);
    std::filesystem::remove(partial);
    return std::make_tuple(std::move(r), std::move(bytes), on_server);
  };
  const auto [each, each_partial, each_on_server] = aggregate({"--per-file"}, files);
  EXPECT_EQ(each.code, 1) << each.err;
  EXPECT_EQ(each_on_server, 0u);
  const std::vector<json> groups = json_lines(each.out);
  ASSERT_GE(groups.size(), 4u) << each.out;
  EXPECT_EQ(groups[groups.size() - 2]["channel_count"], 4);  // grey and alpha (as RGBA), first met in the second slice
  EXPECT_EQ(groups.back()["sample_type"], "uint16");         // and 16-bit RGB in the third
  auto images = [](const std::string& out) {
    uint64_t n = 0;
    for (const json& g : json_lines(out)) n += g["images"].get<uint64_t>();
    return n;
  };
  EXPECT_EQ(images(each.out), files.size() - (shorter.empty() ? 2 : 3));
  if (!shorter.empty()) EXPECT_NE(each.err.find(shorter + ": NOT_FOUND: cannot read"), std::string::npos) << each.err;
  for (const std::string bad : {"broken.png", "empty.png"})
    EXPECT_NE(each.err.find(bad + ": INVALID_ARGUMENT"), std::string::npos) << each.err;
  for (const std::vector<std::string>& flags : {std::vector<std::string>{}, {"--no-shm"}, {"-j", "3"}}) {
    SCOPED_TRACE(flags.empty() ? "default" : flags[0]);
    const auto [got, got_partial, got_on_server] = aggregate(flags, files);
    EXPECT_EQ(got.code, each.code);
    EXPECT_EQ(got.out, each.out);
    EXPECT_EQ(got.err, each.err);
    EXPECT_TRUE(got_partial == each_partial) << "the partials differ";
    EXPECT_EQ(got_on_server, files.size() - (shorter.empty() ? 0 : 1));  // every file read on an Aggregate call
  }

  // Ten files, all plain: on the calls too (the least run applies among other inputs).
  const std::vector<std::string> few(files.begin(), files.begin() + 10);
  const auto [few_each, few_each_partial, few_ignored] = aggregate({"--per-file"}, few);
  const auto [few_got, few_got_partial, few_on_server] = aggregate({}, few);
  EXPECT_EQ(few_got.code, 0) << few_got.err;
  EXPECT_EQ(few_got.out, few_each.out);
  EXPECT_TRUE(few_got_partial == few_each_partial) << "the partials differ";
  EXPECT_EQ(few_on_server, few.size());

  // Among them a shard's members (one a kind first met there), a short run
  // of files after it and one file over the message's limit (1 MiB here):
  // they go a call a file, in their places, and the runs of files around
  // them on the calls.
  cv::Mat noise(720, 720, CV_8UC3);
  cv::randu(noise, 0, 256);
  const std::string large = (dir / "1050-noise.png").string();
  ASSERT_TRUE(cv::imwrite(large, noise));
  ASSERT_GT(std::filesystem::file_size(large), kMessageLimit);
  std::filesystem::copy_file(corpus("png/pngsuite_basn6a16.png"), dir / "rgba16.png");
  const std::string shard = (dir / "shard.tar").string();
  ASSERT_EQ(std::system(("tar -C " + dir.string() + " -cf " + shard + " rgba16.png " +
                         std::filesystem::path(files[1]).filename().string())
                            .c_str()),
            0);
  std::vector<std::string> mixed(files.begin(), files.begin() + 34);  // on the calls
  mixed.push_back(shard);                                             // a call a file
  mixed.insert(mixed.end(), files.begin() + 34, files.begin() + 44);  // a run of 10: a call a file
  mixed.push_back(large);                                             // a call a file
  mixed.insert(mixed.end(), files.begin() + 44, files.end());         // on the calls
  const auto [mixed_each, mixed_each_partial, ignored] = aggregate({"--per-file"}, mixed);
  const auto [mixed_got, mixed_got_partial, mixed_on_server] = aggregate({}, mixed);
  const std::vector<json> mixed_groups = json_lines(mixed_each.out);
  ASSERT_EQ(mixed_groups.size(), groups.size() + 1);
  EXPECT_EQ(mixed_groups[groups.size() - 2]["sample_type"], "uint16");  // 16-bit RGBA, before 8-bit
  EXPECT_EQ(mixed_groups[groups.size() - 2]["channel_count"], 4);
  EXPECT_EQ(mixed_got.code, mixed_each.code);
  EXPECT_EQ(mixed_got.out, mixed_each.out);
  EXPECT_EQ(mixed_got.err, mixed_each.err);
  EXPECT_TRUE(mixed_got_partial == mixed_each_partial) << "the partials differ";
  EXPECT_EQ(images(mixed_got.out), images(each.out) + 3);
  EXPECT_EQ(mixed_on_server, 34u + 56u);
  std::filesystem::remove_all(dir);
}

TEST_F(Integration, ErrorCodesAndTheServerKeepsServing) {
  auto analyze = [&](const v1::AnalyzeRequest& r) {
    grpc::ClientContext ctx;
    v1::AnalyzeResponse response;
    return stub_->Analyze(&ctx, r, &response);
  };
  v1::AnalyzeRequest r;
  r.mutable_input()->set_data(std::string(kMessageLimit + 10, 'x'));
  EXPECT_EQ(analyze(r).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  r.mutable_input()->set_data(read_file(corpus("bad/imagers_Bad_reallybig.bmp")));
  EXPECT_EQ(analyze(r).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  for (const char* f : {"bad/pngsuite_xcsn0g01.png", "bad/trunc50_tiffrs_kodim07-lzw.tif", "bad/jpegdec_empty.jpg",
                        "jpeg/ljt_monkey12.jpg", "bad/skimage_truncated.jpg"}) {
    r.mutable_input()->set_data(read_file(corpus(f)));
    const grpc::Status s = analyze(r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << f << ": " << s.error_message();
  }
  r.mutable_input()->set_kind(v1::INPUT_KIND_RAW);
  r.mutable_input()->set_data(std::string(100, '\1'));
  r.mutable_input()->mutable_raw()->set_width(10);
  r.mutable_input()->mutable_raw()->set_height(11);
  r.mutable_input()->mutable_raw()->set_channels(1);
  r.mutable_input()->mutable_raw()->set_sample_type(v1::SAMPLE_TYPE_UINT8);
  grpc::Status s = analyze(r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("110"), std::string::npos) << s.error_message();
  r.mutable_input()->mutable_raw()->set_height(10);
  r.mutable_options()->set_bins(70000);
  EXPECT_EQ(analyze(r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  r.mutable_options()->set_bins(4);
  EXPECT_TRUE(analyze(r).ok()) << "the server still serves after bad requests";
}

// One request to gRPC's own reflection v1alpha as raw message bytes (no
// generated code for it ships with gRPC 1.51), and the first answer's bytes.
std::string v1alpha_answer(const std::shared_ptr<grpc::Channel>& channel, const std::string& request_bytes) {
  grpc::TemplatedGenericStub<grpc::ByteBuffer, grpc::ByteBuffer> generic(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  auto call = generic.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag;
  bool ok;
  std::string bytes;
  call->StartCall(reinterpret_cast<void*>(1));
  if (cq.Next(&tag, &ok) && ok) {
    grpc::Slice slice(request_bytes.data(), request_bytes.size());
    grpc::ByteBuffer request(&slice, 1), response;
    call->Write(request, reinterpret_cast<void*>(2));
    if (cq.Next(&tag, &ok) && ok) {
      call->Read(&response, reinterpret_cast<void*>(3));
      std::vector<grpc::Slice> slices;
      if (cq.Next(&tag, &ok) && ok && response.Dump(&slices).ok())
        for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  ctx.TryCancel();
  grpc::Status finished;
  call->Finish(&finished, reinterpret_cast<void*>(4));
  while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(4)) {
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return bytes;
}

// Reflection v1 answers as v1alpha does, from the same descriptors: the
// services, imgstat's proto with its imports, and NOT_FOUND for the unknown.
TEST_F(Integration, ReflectionV1AnswersAsV1alphaDoes) {
  namespace rv1 = grpc::reflection::v1;
  auto stub = rv1::ServerReflection::NewStub(channel_);
  grpc::ClientContext ctx;
  auto stream = stub->ServerReflectionInfo(&ctx);
  rv1::ServerReflectionRequest list, symbol, missing;
  list.set_list_services("");
  symbol.set_file_containing_symbol("imgstat.v1.ImageStats");
  missing.set_file_containing_symbol("no.such.Service");
  rv1::ServerReflectionResponse r;
  ASSERT_TRUE(stream->Write(list));
  ASSERT_TRUE(stream->Read(&r));
  std::vector<std::string> names;
  for (const auto& s : r.list_services_response().service()) names.push_back(s.name());
  for (const char* want : {"imgstat.v1.ImageStats", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
                           "grpc.reflection.v1alpha.ServerReflection"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;

  ASSERT_TRUE(stream->Write(symbol));
  ASSERT_TRUE(stream->Read(&r));
  ASSERT_TRUE(r.has_file_descriptor_response()) << r.DebugString();
  std::string imgstat_file;
  std::vector<std::string> files;
  for (const std::string& bytes : r.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto f;
    ASSERT_TRUE(f.ParseFromString(bytes));
    files.push_back(f.name());
    if (f.name() == "imgstat/v1/imgstat.proto") {
      imgstat_file = bytes;
      ASSERT_EQ(f.service_size(), 1);
      EXPECT_EQ(f.service(0).name(), "ImageStats");
      EXPECT_EQ(f.service(0).method(0).name(), "Analyze");
    }
  }
  EXPECT_NE(std::find(files.begin(), files.end(), "google/protobuf/duration.proto"), files.end());
  ASSERT_FALSE(imgstat_file.empty());

  ASSERT_TRUE(stream->Write(missing));
  ASSERT_TRUE(stream->Read(&r));
  EXPECT_EQ(r.error_response().error_code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());

  // v1alpha, through the same message bytes (the protocols are wire-identical):
  // the same file, to the byte.
  rv1::ServerReflectionResponse alpha;
  ASSERT_TRUE(alpha.ParseFromString(v1alpha_answer(channel_, symbol.SerializeAsString())));
  bool same = false;
  for (const std::string& bytes : alpha.file_descriptor_response().file_descriptor_proto()) same |= bytes == imgstat_file;
  EXPECT_TRUE(same) << alpha.DebugString();
}

TEST_F(Integration, HealthAndReflection) {
  const ProcessResult r = client({"--health"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("SERVING"), std::string::npos);

  // grpc.reflection.v1alpha ServerReflectionRequest{list_services: ""} is
  // field 7, empty: bytes 3a 00. The answer names every service.
  const std::string bytes = v1alpha_answer(channel_, std::string("\x3a\x00", 2));
  EXPECT_NE(bytes.find("imgstat.v1.ImageStats"), std::string::npos);
  EXPECT_NE(bytes.find("grpc.health.v1.Health"), std::string::npos);
}

TEST_F(Integration, ClientStatsListDoesNotSwallowTheFileAndInfoPrintsJson) {
  // "--stats min_max FILE": FILE is a file, not a second statistic.
  ProcessResult r = client({"--stats", "min_max", corpus("png/skimage_coffee.png")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("PNG 600x400"), std::string::npos) << r.out;
  r = client({"--json", "--stats", "min_max,sum", corpus("png/skimage_coffee.png")});
  ASSERT_EQ(r.code, 0) << r.err;
  const json one = json_lines(r.out).at(0);
  EXPECT_TRUE(one["channels"][0]["sum"].is_number_integer());
  EXPECT_TRUE(one["channels"][0]["stddev"].is_null());  // not asked for

  r = client({"--info", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const json info = json::parse(r.out);  // JSON, not protobuf text
  EXPECT_EQ(info["engine"]["kind"], test_engine());
  EXPECT_EQ(info["limits"]["max_message_bytes"], std::to_string(kMessageLimit));  // 64-bit ints are strings in proto JSON
}

TEST_F(Integration, ClientDrawsTheDataNotTheTypeRange) {
  // uint16 samples 1000..1999, each equally often: the drawing spans the
  // data (not 0..65535), and 100 bins folded into 64 columns stay level.
  const std::string file = temp_path("u16.raw");
  {
    std::vector<uint16_t> px(100 * 100);
    for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint16_t>(1000 + i % 1000);
    std::ofstream(file, std::ios::binary).write(reinterpret_cast<const char*>(px.data()), px.size() * 2);
  }
  ProcessResult r = client({"--raw", "100x100x1:uint16", file});
  ASSERT_EQ(r.code, 0) << r.err;
  std::string drawn = r.out.substr(r.out.rfind("Gray"));
  EXPECT_NE(drawn.find("[768, 2048)"), std::string::npos) << drawn;  // the bins of 256 holding 1000..1999
  const std::string u8 = temp_path("u8.raw");
  {
    std::vector<uint8_t> px(256 * 40);
    for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i % 256);
    std::ofstream(u8, std::ios::binary).write(reinterpret_cast<const char*>(px.data()), px.size());
  }
  r = client({"--raw", "256x40x1:uint8", "--bins", "100", u8});
  ASSERT_EQ(r.code, 0) << r.err;
  drawn = r.out.substr(r.out.rfind("Gray"));
  const std::string full = "\u2588", seven = "\u2587";
  size_t blocks = 0;
  for (size_t at = drawn.find(full); at != std::string::npos; at = drawn.find(full, at + 1)) ++blocks;
  // Bins of 2 or 3 values: per-bin means within 3:2 of each other, never a
  // column of half height.
  for (const char* low : {"\u2583", "\u2584", "\u2585"}) EXPECT_EQ(drawn.find(low), std::string::npos) << drawn;
  EXPECT_GT(blocks, 0u) << drawn;
  std::filesystem::remove(file);
  std::filesystem::remove(u8);
}

// A server that takes the connection and never answers: --timeout is the
// longest the client waits, all its calls for a file together.
TEST(ClientDeadline, AHungServerCostsTheTimeoutAndNoMore) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string silent = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  const std::string file = temp_path("deadline.bin");
  { std::ofstream(file) << std::string(1000, 'x'); }

  const auto seconds = [](auto t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(run_process({client_bin(), "--version"}).code, 0);
  const double start_up = seconds(t0);  // the process's own cost, on this machine and build
  constexpr double kTimeout = 2;
  for (const std::vector<std::string>& what : std::vector<std::vector<std::string>>{
           {"--bytes", "--json", file}, {"--info"}, {"--health"}}) {
    std::vector<std::string> argv = {client_bin(), "--server", silent, "--timeout", "2"};
    argv.insert(argv.end(), what.begin(), what.end());
    t0 = std::chrono::steady_clock::now();
    const ProcessResult r = run_process(argv, 30);
    const double took = seconds(t0);
    EXPECT_EQ(r.code, 1) << what.front();
    EXPECT_NE((r.out + r.err).find("DEADLINE_EXCEEDED"), std::string::npos) << r.out << r.err;
    EXPECT_GE(took, kTimeout) << what.front();
    // A retry or a second deadline would cost another kTimeout; a loaded CI machine costs
    // fractions of a second, so the bound sits halfway.
    EXPECT_LT(took, kTimeout * 1.5 + start_up) << what.front() << ": started in " << start_up << " s";
  }
  std::filesystem::remove(file);
  ::close(fd);
}

TEST_F(Integration, ConcurrentCallsAllAnswerTheSame) {
  const std::string coffee = read_file(corpus("png/skimage_coffee.png"));
  std::vector<std::future<std::string>> results;
  for (int t = 0; t < 8; ++t)
    results.push_back(std::async(std::launch::async, [&] {
      std::string first;
      for (int i = 0; i < 5; ++i) {
        v1::AnalyzeRequest r;
        r.mutable_input()->set_data(coffee);
        grpc::ClientContext ctx;
        v1::AnalyzeResponse response;
        if (!stub_->Analyze(&ctx, r, &response).ok()) return std::string("failed");
        std::string stats;
        for (const auto& c : response.channels()) stats += c.SerializeAsString();
        if (i == 0) first = stats;
        if (stats != first) return std::string("differs");
      }
      return first;
    }));
  std::string want;
  for (auto& f : results) {
    const std::string got = f.get();
    ASSERT_NE(got, "failed");
    ASSERT_NE(got, "differs");
    if (want.empty()) want = got;
    EXPECT_EQ(got, want);
  }
}

TEST(Shutdown, SigtermFinishesTheCallInFlight) {
  if (!have_corpus()) GTEST_SKIP() << "no corpus";
  ServerProcess server({"--engine", test_engine(), "--shutdown-grace", "20"});
  auto channel = grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials());
  auto stub = v1::ImageStats::NewStub(channel);
  const std::string coffee = read_file((corpus_dir() / "png/skimage_coffee.png").string());
  grpc::ClientContext ctx;
  v1::AnalyzeResponse response;
  auto writer = stub->AnalyzeStream(&ctx, &response);
  v1::AnalyzeStreamRequest m;
  m.mutable_header()->set_total_bytes(coffee.size());
  ASSERT_TRUE(writer->Write(m));
  m.set_chunk(coffee.substr(0, coffee.size() / 2));
  ASSERT_TRUE(writer->Write(m));
  // A write returns once buffered; give the server time to start the call,
  // or SIGTERM would find nothing in flight and refuse it as new.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  server.signal_term();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  m.set_chunk(coffee.substr(coffee.size() / 2));
  ASSERT_TRUE(writer->Write(m));
  writer->WritesDone();
  const grpc::Status s = writer->Finish();
  ASSERT_TRUE(s.ok()) << s.error_message() << "\nserver log:\n" << server.log();
  ASSERT_EQ(response.channels_size(), 3);
  EXPECT_EQ(response.channels(0).sum_int(), 38056581);
  EXPECT_EQ(server.wait(10), 0) << server.log();
  EXPECT_NE(server.log().find("SIGTERM"), std::string::npos);
  EXPECT_NE(server.log().find("stopped"), std::string::npos);
}

}  // namespace
}  // namespace imgstat::testing
