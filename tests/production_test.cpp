// Running it in production, across real processes: TLS and its reload,
// mutual TLS, bearer tokens (checked before the body is buffered), the
// health-only port, plaintext refused off loopback, Prometheus metrics after
// known calls, request ids both ways, and JSON logs parsed line by line.
// Certificates come from tests/tls/make-certs (openssl).
#include <gtest/gtest.h>
#include <google/protobuf/empty.pb.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdio>
#include <future>
#include <map>
#include <random>
#include <sstream>

#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "imgstat/v1/imgstat.grpc.pb.h"
#include "metrics_scrape.hpp"
#include "process.hpp"

namespace imgstat::testing {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const char* const kToken = "ci-token-0123456789abcdef";
const char* const kReaderToken = "reader-token-0123456789abcdef";

// Certificates for the whole suite, made once.
const fs::path& certs() {
  static const fs::path dir = [] {
    const fs::path d = temp_path("certs");
    const std::string cmd =
        "bash " + program("IMGSTAT_SOURCE_DIR", IMGSTAT_SOURCE_DIR) + "/tests/tls/make-certs " + d.string();
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("make-certs failed (is openssl installed?)");
    return d;
  }();
  return dir;
}
std::string cert(const char* name) { return (certs() / name).string(); }

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::string token_file(const std::string& text) {
  const std::string path = temp_path("tokens");
  write(path, text);
  return path;
}

// A random 97x61 RGB PNG: the pixels a test expects to be counted.
const std::string& png() {
  static const std::string bytes = [] {
    cv::Mat m(61, 97, CV_8UC3);
    cv::randu(m, 0, 256);
    std::vector<uint8_t> out;
    cv::imencode(".png", m, out);
    return std::string(out.begin(), out.end());
  }();
  return bytes;
}

v1::AnalyzeRequest png_request(const std::string& name = "random.png") {
  v1::AnalyzeRequest r;
  r.mutable_input()->set_kind(v1::INPUT_KIND_ENCODED);
  r.mutable_input()->set_data(png());
  r.mutable_input()->set_name(name);
  return r;
}

std::shared_ptr<grpc::Channel> tls_channel(int port, const std::string& ca, const std::string& client_cert = "",
                                           const std::string& client_key = "") {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = slurp(ca);
  if (!client_cert.empty()) {
    o.pem_cert_chain = slurp(client_cert);
    o.pem_private_key = slurp(client_key);
  }
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("imgstat.test");
  args.SetMaxSendMessageSize(INT_MAX);
  return grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port), grpc::SslCredentials(o), args);
}

std::shared_ptr<grpc::Channel> plain_channel(int port) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(INT_MAX);
  return grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials(), args);
}

void prepare(grpc::ClientContext& ctx, const std::string& token, double seconds = 10) {
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000)));
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
}

grpc::Status server_info(const std::shared_ptr<grpc::Channel>& channel, const std::string& token = "") {
  grpc::ClientContext ctx;
  prepare(ctx, token, 5);
  v1::ServerInfo info;
  return v1::ImageStats::NewStub(channel)->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info);
}

grpc::Status analyze(const std::shared_ptr<grpc::Channel>& channel, const std::string& token,
                     const v1::AnalyzeRequest& request = png_request(), v1::AnalyzeResponse* out = nullptr) {
  grpc::ClientContext ctx;
  prepare(ctx, token, 30);
  v1::AnalyzeResponse response;
  return v1::ImageStats::NewStub(channel)->Analyze(&ctx, request, out ? out : &response);
}

// grpc.health.v1.Health/Check; the status as a number (1: SERVING), or -code.
int health(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::TemplatedGenericStub<google::protobuf::Empty, google::protobuf::Empty> stub(channel);
  grpc::ClientContext ctx;
  prepare(ctx, "", 5);
  google::protobuf::Empty request, response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) { done.set_value(s); });
  const grpc::Status s = done.get_future().get();
  if (!s.ok()) return -s.error_code();
  const auto& unknown = response.GetReflection()->GetUnknownFields(response);
  return unknown.field_count() ? static_cast<int>(unknown.field(0).varint()) : 0;
}

grpc::StatusCode reflection(const std::shared_ptr<grpc::Channel>& channel, const std::string& token) {
  auto stub = grpc::reflection::v1::ServerReflection::NewStub(channel);
  grpc::ClientContext ctx;
  prepare(ctx, token, 5);
  auto stream = stub->ServerReflectionInfo(&ctx);
  grpc::reflection::v1::ServerReflectionRequest request;
  request.set_list_services("");
  grpc::reflection::v1::ServerReflectionResponse response;
  stream->Write(request);
  stream->WritesDone();
  while (stream->Read(&response)) {
  }
  return stream->Finish().error_code();
}

ProcessResult client(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {client_bin()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, 60);
}

std::string png_file() {
  static const std::string path = [] {
    const std::string p = temp_path("random") + ".png";
    write(p, png());
    return p;
  }();
  return path;
}

TEST(Tls, ServesTlsOnlyAndReloadsTheCertificateWhenItsFilesChange) {
  const std::string dir = temp_path("served");
  fs::create_directories(dir);
  fs::copy_file(cert("server.pem"), dir + "/cert.pem");
  fs::copy_file(cert("server.key"), dir + "/key.pem");
  ServerProcess server({"--engine", test_engine(), "--threads", "2", "--tls-cert", dir + "/cert.pem", "--tls-key",
                        dir + "/key.pem", "--tls-reload-interval", "1"});
  EXPECT_NE(server.log().find("TLS on 127.0.0.1:0: CN = imgstat.test"), std::string::npos) << server.log();
  EXPECT_TRUE(server_info(tls_channel(server.port(), cert("ca.pem"))).ok());
  EXPECT_TRUE(analyze(tls_channel(server.port(), cert("ca.pem")), "").ok());
  // No plaintext on a TLS port, and no trust in a certificate another CA signed.
  EXPECT_EQ(server_info(plain_channel(server.port())).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(server_info(tls_channel(server.port(), cert("other-ca.pem"))).error_code(),
            grpc::StatusCode::UNAVAILABLE);

  // New files, written as a deployment tool would (a rename each): served
  // to new connections within the reload interval, with no restart.
  fs::copy_file(cert("other-server.key"), dir + "/key.new");
  fs::copy_file(cert("other-server.pem"), dir + "/cert.new");
  fs::rename(dir + "/key.new", dir + "/key.pem");
  fs::rename(dir + "/cert.new", dir + "/cert.pem");
  bool reloaded = false;
  for (int i = 0; i < 100 && !reloaded; ++i) {
    reloaded = server_info(tls_channel(server.port(), cert("other-ca.pem"))).ok();
    if (!reloaded) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(reloaded) << "the new certificate was not served within 10 s";
  EXPECT_EQ(server_info(tls_channel(server.port(), cert("ca.pem"))).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(server.alive());
  fs::remove_all(dir);
}

TEST(Tls, MutualTlsTakesAGoodClientCertificateOnly) {
  ServerProcess server({"--engine", test_engine(), "--threads", "2", "--tls-cert", cert("server.pem"), "--tls-key",
                        cert("server.key"), "--tls-client-ca", cert("ca.pem")});
  // Good: signed by the client CA; its name is the caller in the log.
  v1::AnalyzeResponse r;
  ASSERT_TRUE(analyze(tls_channel(server.port(), cert("ca.pem"), cert("client.pem"), cert("client.key")), "",
                      png_request(), &r)
                  .ok());
  EXPECT_EQ(r.width(), 97u);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_NE(server.log().find("caller=\"batch-worker\""), std::string::npos) << server.log();
  // Wrong: signed by another CA. None: no certificate at all.
  EXPECT_EQ(analyze(tls_channel(server.port(), cert("ca.pem"), cert("other-client.pem"), cert("other-client.key")), "")
                .error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(analyze(tls_channel(server.port(), cert("ca.pem")), "").error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(server.log().find("caller=\"stranger\""), std::string::npos);
  // Refused handshakes leave the server serving the good ones.
  EXPECT_TRUE(server_info(tls_channel(server.port(), cert("ca.pem"), cert("client.pem"), cert("client.key"))).ok());

  // The CLI, with the same files.
  const auto ok = client({"--server", "localhost:" + std::to_string(server.port()), "--tls-ca", cert("ca.pem"),
                          "--tls-cert", cert("client.pem"), "--tls-key", cert("client.key"), "--json", png_file()});
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(ok.out.find("\"width\":97"), std::string::npos) << ok.out;
  const auto none = client({"--server", "localhost:" + std::to_string(server.port()), "--tls-ca", cert("ca.pem"),
                            png_file()});
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.err.find("UNAVAILABLE"), std::string::npos) << none.err;
}

TEST(Tokens, MissingAndWrongTokensAreRefusedAndHealthStaysOpen) {
  const std::string tokens = token_file(std::string("# name and methods are optional\n") + kToken + " ci\n" +
                                        kReaderToken + " dashboard GetServerInfo\n");
  ServerProcess server({"--engine", test_engine(), "--threads", "2", "--auth-token-file", tokens});
  const auto channel = plain_channel(server.port());
  EXPECT_EQ(analyze(channel, "").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(analyze(channel, "not-the-token-0123456789").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", std::string("Basic ") + kToken);
    v1::AnalyzeResponse r;
    EXPECT_EQ(v1::ImageStats::NewStub(channel)->Analyze(&ctx, png_request(), &r).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(server_info(channel).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(reflection(channel, ""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(health(channel), 1) << "health must stay open";

  EXPECT_TRUE(analyze(channel, kToken).ok());
  EXPECT_EQ(reflection(channel, kToken), grpc::StatusCode::OK);
  // Known, but not allowed this method: PERMISSION_DENIED, as gRPC documents.
  EXPECT_TRUE(server_info(channel, kReaderToken).ok());
  const grpc::Status denied = analyze(channel, kReaderToken);
  EXPECT_EQ(denied.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(denied.error_message().find("dashboard may not call Analyze"), std::string::npos);
  // The token never reaches the log; its name does.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(server.log().find(kToken), std::string::npos);
  EXPECT_NE(server.log().find("caller=\"ci\""), std::string::npos) << server.log();

  // Streams are refused before their first message too.
  {
    grpc::ClientContext ctx;
    v1::AnalyzeResponse r;
    auto writer = v1::ImageStats::NewStub(channel)->AnalyzeStream(&ctx, &r);
    v1::AnalyzeStreamRequest header;
    header.mutable_header()->mutable_input()->set_kind(v1::INPUT_KIND_ENCODED);
    writer->Write(header);
    writer->WritesDone();
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }

  // The CLI: $IMGSTAT_TOKEN or --token-file, and a clear failure without.
  const std::string address = server.address();
  const auto without = client({"--server", address, png_file()});
  EXPECT_EQ(without.code, 1);
  EXPECT_NE(without.err.find("UNAUTHENTICATED"), std::string::npos) << without.err;
  const std::string file = token_file(std::string(kToken) + "\n");
  EXPECT_EQ(client({"--server", address, "--token-file", file, png_file()}).code, 0);
  setenv("IMGSTAT_TOKEN", kToken, 1);
  EXPECT_EQ(client({"--server", address, png_file()}).code, 0);
  unsetenv("IMGSTAT_TOKEN");

  // SIGHUP re-reads the file: the old token stops working, the new one works.
  write(tokens, "fresh-token-0123456789abcdef fresh\n");
  server.send_signal(SIGHUP);
  bool swapped = false;
  for (int i = 0; i < 100 && !swapped; ++i) {
    swapped = analyze(channel, "fresh-token-0123456789abcdef").ok();
    if (!swapped) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(swapped) << server.log();
  EXPECT_EQ(analyze(channel, kToken).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // A broken file on SIGHUP keeps the tokens in use.
  write(tokens, "short\n");
  server.send_signal(SIGHUP);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(analyze(channel, "fresh-token-0123456789abcdef").ok());
  EXPECT_NE(server.log().find("the tokens in use are kept"), std::string::npos) << server.log();
  fs::remove(tokens);
  fs::remove(file);
}

// gRPC's auth context belongs to the connection, not the call: the caller's
// name must come from each call's own token, however calls share it.
TEST(Tokens, EachCallOnASharedConnectionIsNamedByItsOwnToken) {
  const std::string tokens = token_file(std::string(kToken) + " ci\n" + kReaderToken + " dashboard\n");
  ServerProcess server({"--engine", test_engine(), "--threads", "2", "--auth-token-file", tokens});
  const auto channel = plain_channel(server.port());
  constexpr int kCalls = 48;
  std::vector<std::future<bool>> calls;
  for (int i = 0; i < kCalls; ++i)
    calls.push_back(std::async(std::launch::async, [&, i] {
      grpc::ClientContext ctx;
      prepare(ctx, i % 2 ? kReaderToken : kToken, 30);
      ctx.AddMetadata("x-request-id", "call-" + std::to_string(i));
      v1::AnalyzeResponse r;
      return v1::ImageStats::NewStub(channel)->Analyze(&ctx, png_request(), &r).ok();
    }));
  for (auto& c : calls) EXPECT_TRUE(c.get());
  // Each call's line, by its id; the log is written as calls end.
  std::map<int, std::string> lines;
  for (int tries = 0; tries < 100 && lines.size() < kCalls; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::istringstream log(server.log());
    for (std::string line; std::getline(log, line);)
      for (int i = 0; i < kCalls; ++i)
        if (line.find("Analyze id=call-" + std::to_string(i) + " ") != std::string::npos) lines[i] = line;
  }
  ASSERT_EQ(lines.size(), static_cast<size_t>(kCalls)) << server.log();
  for (const auto& [i, line] : lines)
    EXPECT_NE(line.find(i % 2 ? "caller=\"dashboard\"" : "caller=\"ci\""), std::string::npos) << line;
  EXPECT_TRUE(server.alive());
}

TEST(Tokens, AreCheckedBeforeTheBodyIsBuffered) {
  const std::string tokens = token_file(std::string(kToken) + "\n");
  ServerProcess server({"--engine", test_engine(), "--threads", "2", "--auth-token-file", tokens});
  const auto channel = plain_channel(server.port());
  ASSERT_TRUE(analyze(channel, kToken).ok());
  const double before = server.peak_rss_mib();
  // 16 strangers at once, 48 MiB each: 768 MiB if bodies were taken in.
  v1::AnalyzeRequest big = png_request();
  big.mutable_input()->set_data(std::string(size_t{48} << 20, 'x'));
  std::vector<std::future<grpc::StatusCode>> calls;
  for (int i = 0; i < 16; ++i)
    calls.push_back(std::async(std::launch::async, [&] { return analyze(channel, "", big).error_code(); }));
  for (auto& c : calls) EXPECT_EQ(c.get(), grpc::StatusCode::UNAUTHENTICATED);
  const double growth = server.peak_rss_mib() - before;
  EXPECT_LT(growth, 200) << "peak memory grew by " << growth << " MiB for refused calls";
  RecordProperty("refused_calls_peak_rss_growth_mib", std::to_string(growth));
  std::printf("16 refused 48 MiB calls grew peak RSS by %.1f MiB\n", growth);
  EXPECT_TRUE(analyze(channel, kToken).ok());
  fs::remove(tokens);
}

TEST(Ports, PlaintextOffLoopbackNeedsInsecureAndSaysSoOnce) {
  const auto refused = run_process({server_bin(), "--listen", "0.0.0.0:0", "--engine", test_engine()}, 20);
  EXPECT_EQ(refused.code, 1);
  EXPECT_NE(refused.err.find("refusing plaintext on 0.0.0.0:0"), std::string::npos) << refused.err;

  ServerProcess server({"--engine", test_engine(), "--threads", "2", "--listen", "0.0.0.0:0", "--insecure"});
  EXPECT_TRUE(server_info(plain_channel(server.logged_port("listening on 0.0.0.0:"))).ok());
  const std::string log = server.log();
  size_t warnings = 0;
  for (size_t at = 0; (at = log.find("warning", at)) != std::string::npos; ++at) ++warnings;
  EXPECT_EQ(warnings, 1u) << log;
  EXPECT_NE(log.find("plaintext on 0.0.0.0:0 (--insecure)"), std::string::npos) << log;
}

TEST(Ports, TheHealthPortServesHealthOnly) {
  const std::string tokens = token_file(std::string(kToken) + "\n");
  ServerProcess server({"--engine", test_engine(), "--threads", "2", "--tls-cert", cert("server.pem"), "--tls-key",
                        cert("server.key"), "--auth-token-file", tokens, "--health-listen", "127.0.0.1:0"});
  const int port = server.logged_port("health only, plaintext, on 127.0.0.1:");
  ASSERT_GT(port, 0) << server.log();
  EXPECT_EQ(health(plain_channel(port)), 1);
  EXPECT_EQ(analyze(plain_channel(port), kToken).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(server_info(plain_channel(port), kToken).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // The CLI's health check, as the container runs it.
  const auto probe = client({"--server", "127.0.0.1:" + std::to_string(port), "--health"});
  EXPECT_EQ(probe.code, 0);
  EXPECT_EQ(probe.out, "SERVING\n");
  fs::remove(tokens);
}

// Each line's channels, or its file and error code, in order (timings
// differ from run to run).
std::vector<json> channels_of(const std::string& out) {
  std::vector<json> v;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const json j = json::parse(line);
    v.push_back(j.contains("channels") ? j.at("channels") : json{{"file", j.at("file")}, {"code", j.at("code")}});
  }
  return v;
}

TEST(Lanes, SmallFilesRideAnalyzeBatchAndATokenWithoutItFallsBackToACallAFile) {
  const char* const kLimited = "limited-token-0123456789";
  const std::string tokens =
      token_file(std::string(kToken) + "\n" + kLimited + " limited Analyze,GetServerInfo\n");
  ServerProcess server({"--engine", test_engine(), "--threads", "2", "--auth-token-file", tokens, "--metrics-listen",
                        "127.0.0.1:0"});
  const int port = server.logged_port("metrics on http://127.0.0.1:");
  ASSERT_GT(port, 0) << server.log();
  // Files of 1 to 3,000 random bytes; one empty, refused.
  std::mt19937_64 rng(35);
  std::vector<std::string> args = {"--json", "--bytes"};
  constexpr int kFiles = 60;
  for (int i = 0; i < kFiles; ++i) {
    std::string bytes(i == 17 ? 0 : 1 + rng() % 3000, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    const std::string path = temp_path("lane" + std::to_string(i));
    write(path, bytes);
    args.push_back(path);
  }
  const auto run = [&](const std::string& token, std::vector<std::string> extra) {
    const std::string token_path = temp_path("client-token");
    write(token_path, token + "\n");
    std::vector<std::string> a = {"--server", "127.0.0.1:" + std::to_string(server.port()), "--token-file", token_path};
    a.insert(a.end(), extra.begin(), extra.end());
    a.insert(a.end(), args.begin(), args.end());
    return client(a);
  };
  const auto count = [&](const std::string& series) {
    const double v = sample(http_get(port, "/metrics"), series);
    return v < 0 ? 0.0 : v;
  };
  const ProcessResult local = client([&] {
    std::vector<std::string> a = {"--local"};
    a.insert(a.end(), args.begin(), args.end());
    return a;
  }());
  ASSERT_EQ(local.code, 1) << local.err;  // the empty file
  const std::vector<json> want = channels_of(local.out);
  ASSERT_EQ(want.size(), size_t{kFiles});
  EXPECT_EQ(want[17]["code"], "INVALID_ARGUMENT");

  const ProcessResult batched = run(kToken, {});
  EXPECT_EQ(batched.code, 1) << batched.err;
  EXPECT_EQ(channels_of(batched.out), want);
  EXPECT_NE(batched.err.find(args[2 + 17] + ": INVALID_ARGUMENT"), std::string::npos) << batched.err;
  EXPECT_EQ(count(R"(imgstat_images_total{code="OK",method="AnalyzeBatch"})"), kFiles - 1);
  EXPECT_EQ(count(R"(imgstat_images_total{code="INVALID_ARGUMENT",method="AnalyzeBatch"})"), 1);
  EXPECT_EQ(count(R"(imgstat_requests_total{code="OK",method="Analyze"})"), 0);
  // A few lanes carry them all, not a call each.
  EXPECT_LE(count(R"(imgstat_requests_total{code="OK",method="AnalyzeBatch"})"), 16);

  const ProcessResult unary = run(kToken, {"--no-batch"});
  EXPECT_EQ(unary.code, 1) << unary.err;
  EXPECT_EQ(channels_of(unary.out), want);
  EXPECT_EQ(count(R"(imgstat_requests_total{code="OK",method="Analyze"})"), kFiles - 1);

  // A token that may call Analyze but not AnalyzeBatch: every file answered all the same.
  const ProcessResult limited = run(kLimited, {});
  EXPECT_EQ(limited.code, 1) << limited.err;
  EXPECT_EQ(channels_of(limited.out), want);
  EXPECT_EQ(limited.err.find("PERMISSION_DENIED"), std::string::npos) << limited.err;
  EXPECT_EQ(count(R"(imgstat_requests_total{code="OK",method="Analyze"})"), 2 * (kFiles - 1));
  EXPECT_GE(count(R"(imgstat_requests_total{code="PERMISSION_DENIED",method="AnalyzeBatch"})"), 1);
  for (int i = 0; i < kFiles; ++i) fs::remove(args[2 + i]);
  fs::remove(tokens);
}

TEST(Metrics, CountWhatKnownCallsDid) {
  const std::string tokens = token_file(std::string(kToken) + "\n");
  const uint64_t decode_memory = uint64_t{300} << 20;
  ServerProcess server({"--engine", test_engine(), "--threads", "2", "--auth-token-file", tokens, "--metrics-listen",
                        "127.0.0.1:0", "--max-decode-memory", std::to_string(decode_memory)});
  const int port = server.logged_port("metrics on http://127.0.0.1:");
  ASSERT_GT(port, 0) << server.log();
  const auto channel = plain_channel(server.port());

  for (int i = 0; i < 3; ++i) ASSERT_TRUE(analyze(channel, kToken).ok());
  v1::AnalyzeRequest bad = png_request("bad.png");
  bad.mutable_input()->set_data("not an image at all");
  EXPECT_EQ(analyze(channel, kToken, bad).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(analyze(channel, "").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  {  // a batch of two, one of them bad
    grpc::ClientContext ctx;
    prepare(ctx, kToken);
    auto stream = v1::ImageStats::NewStub(channel)->AnalyzeBatch(&ctx);
    v1::BatchRequest a, b;
    a.set_id("a");
    *a.mutable_request() = png_request();
    b.set_id("b");
    *b.mutable_request() = bad;
    stream->Write(a);
    stream->Write(b);
    stream->WritesDone();
    v1::BatchResponse r;
    int answers = 0;
    while (stream->Read(&r)) ++answers;
    EXPECT_EQ(answers, 2);
    EXPECT_TRUE(stream->Finish().ok());
  }
  // A stream that stalls after its header is in progress while it stalls.
  grpc::ClientContext stalled;
  prepare(stalled, kToken);
  v1::AnalyzeResponse stalled_response;
  auto writer = v1::ImageStats::NewStub(channel)->AnalyzeStream(&stalled, &stalled_response);
  v1::AnalyzeStreamRequest header;
  header.mutable_header()->mutable_input()->set_kind(v1::INPUT_KIND_ENCODED);
  header.mutable_header()->set_total_bytes(1000);
  ASSERT_TRUE(writer->Write(header));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));

  const std::string text = http_get(port, "/metrics");
  ASSERT_FALSE(text.empty());
  const double pixels = 97.0 * 61;
  EXPECT_EQ(sample(text, R"(imgstat_requests_total{code="OK",method="Analyze"})"), 3);
  EXPECT_EQ(sample(text, R"(imgstat_requests_total{code="INVALID_ARGUMENT",method="Analyze"})"), 1);
  EXPECT_EQ(sample(text, R"(imgstat_requests_total{code="UNAUTHENTICATED",method="Analyze"})"), 1);
  EXPECT_EQ(sample(text, R"(imgstat_requests_total{code="OK",method="AnalyzeBatch"})"), 1);
  EXPECT_EQ(sample(text, R"(imgstat_images_total{code="OK",method="AnalyzeBatch"})"), 1);
  EXPECT_EQ(sample(text, R"(imgstat_images_total{code="INVALID_ARGUMENT",method="AnalyzeBatch"})"), 1);
  EXPECT_EQ(sample(text, R"(imgstat_request_duration_seconds_count{method="Analyze"})"), 5);
  EXPECT_EQ(sample(text, R"(imgstat_stage_duration_seconds_count{method="Analyze",stage="decode"})"), 3);
  EXPECT_EQ(sample(text, R"(imgstat_stage_duration_seconds_count{method="Analyze",stage="queue"})"), 4);
  EXPECT_EQ(text.find("stage=\"check\""), std::string::npos);  // the decode is the check
  EXPECT_EQ(sample(text, R"(imgstat_pixels_total{method="Analyze"})"), 3 * pixels);
  EXPECT_EQ(sample(text, R"(imgstat_pixels_total{method="AnalyzeBatch"})"), pixels);
  EXPECT_EQ(sample(text, R"(imgstat_input_bytes_total{method="Analyze"})"), 3.0 * png().size() + 19);
  const std::string engine = test_engine();
  EXPECT_EQ(sample(text, R"(imgstat_images_served_total{decoder="imgstat-png",engine=")" + engine + "\"}"), 4) << text;
  EXPECT_EQ(sample(text, "imgstat_calls_in_progress"), 1);
  EXPECT_EQ(sample(text, "imgstat_queue_length"), 0);
  EXPECT_EQ(sample(text, R"(imgstat_decode_memory_bytes{state="limit"})"), static_cast<double>(decode_memory));
  EXPECT_EQ(sample(text, R"(imgstat_decode_memory_bytes{state="in_use"})"), 0);
  if (engine == "cpu") {
    EXPECT_EQ(sample(text, R"(imgstat_engine_info{device="cpu",engine="cpu",jpeg_decoder="cpu"})"), 1);
    EXPECT_EQ(text.find("imgstat_gpu_memory_bytes{"), std::string::npos);
  } else {  // the GPU's own series
    EXPECT_NE(text.find("imgstat_engine_info{device=\"NVIDIA"), std::string::npos) << text;
    EXPECT_GT(sample(text, R"(imgstat_gpu_memory_bytes{state="total"})"), 1e9);
    EXPECT_GT(sample(text, R"(imgstat_gpu_memory_bytes{state="free"})"), 0);
    // The engine's workspaces, held from the start, within the device.
    EXPECT_GT(sample(text, R"(imgstat_gpu_memory_bytes{state="held"})"), 0);
    EXPECT_LT(sample(text, R"(imgstat_gpu_memory_bytes{state="held"})"),
              sample(text, R"(imgstat_gpu_memory_bytes{state="total"})"));
    EXPECT_EQ(sample(text, "imgstat_gpu_lost"), 0);
    EXPECT_EQ(sample(text, "imgstat_gpu_fallbacks_total"), 0);
  }
  // Histograms, so that replicas add up: cumulative buckets ending in +Inf.
  EXPECT_EQ(sample(text, R"(imgstat_request_duration_seconds_bucket{method="Analyze",le="+Inf"})"), 5);
  EXPECT_NE(text.find("# TYPE imgstat_request_duration_seconds histogram"), std::string::npos);
  EXPECT_EQ(text.find("summary\n# HELP imgstat"), std::string::npos);

  stalled.TryCancel();
  writer->Finish();
  fs::remove(tokens);
}

std::string metadata(const std::multimap<grpc::string_ref, grpc::string_ref>& md, const std::string& key) {
  const auto it = md.find(key);
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

TEST(RequestIds, TheCallersIdComesBackAndIsLoggedElseOneIsMade) {
  ServerProcess server({"--engine", test_engine(), "--threads", "2"});
  auto stub = v1::ImageStats::NewStub(plain_channel(server.port()));
  // Given, on success and on failure.
  for (const bool good : {true, false}) {
    grpc::ClientContext ctx;
    const std::string id = good ? "trace-4bf92f3577b34da6.a3ce929d" : "trace-failed-0001";
    ctx.AddMetadata("x-request-id", id);
    v1::AnalyzeRequest r = png_request();
    if (!good) r.mutable_input()->set_data("junk");
    v1::AnalyzeResponse response;
    EXPECT_EQ(stub->Analyze(&ctx, r, &response).ok(), good);
    const std::string back = metadata(ctx.GetServerInitialMetadata(), "x-request-id") +
                             metadata(ctx.GetServerTrailingMetadata(), "x-request-id");
    EXPECT_EQ(back, id);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_NE(server.log().find("Analyze id=" + id + " "), std::string::npos) << server.log();
  }
  // None, or one unfit for a log: a new one, returned and logged.
  for (const std::string given : {std::string(), std::string("evil id\"=x} {"), std::string(300, 'a')}) {
    grpc::ClientContext ctx;
    if (!given.empty()) ctx.AddMetadata("x-request-id", given);
    v1::AnalyzeResponse response;
    ASSERT_TRUE(stub->Analyze(&ctx, png_request(), &response).ok());
    const std::string id = metadata(ctx.GetServerInitialMetadata(), "x-request-id");
    EXPECT_TRUE(std::regex_match(id, std::regex("[0-9a-f]{32}"))) << id;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_NE(server.log().find("Analyze id=" + id + " "), std::string::npos);
  }
  EXPECT_EQ(server.log().find("evil"), std::string::npos);
  // Streams and batches carry theirs too.
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-request-id", "batch-77");
    auto stream = stub->AnalyzeBatch(&ctx);
    v1::BatchRequest a;
    a.set_id("first");
    *a.mutable_request() = png_request();
    stream->Write(a);
    stream->WritesDone();
    v1::BatchResponse r;
    while (stream->Read(&r)) {
    }
    EXPECT_TRUE(stream->Finish().ok());
    EXPECT_EQ(metadata(ctx.GetServerInitialMetadata(), "x-request-id"), "batch-77");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_NE(server.log().find("AnalyzeBatch id=batch-77 item=\"first\""), std::string::npos) << server.log();
  }
}

TEST(JsonLogs, EveryLineIsAnObjectWithTheRequestsFields) {
  const std::string tokens = token_file(std::string(kToken) + "\n");
  ServerProcess server({"--engine", test_engine(), "--threads", "2", "--log-format", "json", "--auth-token-file", tokens});
  const auto channel = plain_channel(server.port());
  ASSERT_TRUE(analyze(channel, kToken).ok());
  // An untrusted name: control bytes, quotes, a newline, and far too long.
  v1::AnalyzeRequest hostile = png_request("a\"b\nc\x1b[2J" + std::string(5000, 'z'));
  hostile.mutable_input()->set_data("junk");
  {
    grpc::ClientContext ctx;
    prepare(ctx, kToken);
    ctx.AddMetadata("x-request-id", "json-1");
    v1::AnalyzeResponse r;
    EXPECT_FALSE(v1::ImageStats::NewStub(channel)->Analyze(&ctx, hostile, &r).ok());
  }
  EXPECT_EQ(analyze(channel, "").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));

  std::istringstream lines(server.log());
  std::string line;
  std::vector<json> requests;
  int refused = 0, total = 0;
  while (std::getline(lines, line)) {
    ++total;
    json j;
    ASSERT_NO_THROW(j = json::parse(line)) << line;
    ASSERT_TRUE(j.contains("time") && j.contains("level")) << line;
    EXPECT_TRUE(std::regex_match(j["time"].get<std::string>(), std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")));
    if (j.value("msg", "") == "request") requests.push_back(j);
    if (j.value("msg", "") == "refused") {
      ++refused;
      EXPECT_EQ(j["status"], "UNAUTHENTICATED");
    }
  }
  EXPECT_GE(total, 5);
  EXPECT_EQ(refused, 1);
  ASSERT_EQ(requests.size(), 2u);
  const json& ok = requests[0];
  EXPECT_EQ(ok["method"], "Analyze");
  EXPECT_EQ(ok["status"], "OK");
  EXPECT_EQ(ok["width"], 97);
  EXPECT_EQ(ok["height"], 61);
  EXPECT_EQ(ok["input"], "random.png");
  EXPECT_EQ(ok["input_bytes"], png().size());
  EXPECT_EQ(ok["caller"], "token1");
  EXPECT_TRUE(ok["total_ms"].is_number() && ok["decode_ms"].is_number() && ok["queue_ms"].is_number());
  const json& failed = requests[1];
  EXPECT_EQ(failed["request_id"], "json-1");
  EXPECT_EQ(failed["status"], "INVALID_ARGUMENT");
  const std::string name = failed["input"];
  EXPECT_EQ(name.find('\n'), std::string::npos);
  EXPECT_EQ(name.find('\x1b'), std::string::npos);
  EXPECT_LT(name.size(), 400u) << "the name was not cut";
  EXPECT_EQ(name.rfind("a\\\"b\\nc\\x1b[2J", 0), 0u) << name;
  fs::remove(tokens);
}

}  // namespace
}  // namespace imgstat::testing
