// imgstat-load: a load generator for imgstat-server on gRPC's callback API.
// N callers each keep one call in flight (unary Analyze, AnalyzeStream
// uploads, or AnalyzeBatch streams with a window), with files or synthetic
// raw frames and a share of bad inputs; prints images/s, MB/s, latency
// percentiles, statuses (bad inputs' refusals counted apart as expected) and
// the server's RSS after warm-up and at the end. Exit 1 on any unexpected
// status or RSS growth beyond --max-rss-growth.
#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "core/status_name.hpp"
#include "imgstat/v1/imgstat.grpc.pb.h"

namespace imgstat::load {
namespace {

using Clock = std::chrono::steady_clock;
namespace v1 = imgstat::v1;

struct Input {
  v1::AnalyzeRequest request;
  bool bad = false;  // refused by design: INVALID_ARGUMENT or RESOURCE_EXHAUSTED expected
};

struct Stats {
  std::mutex mu;
  std::vector<double> latencies_ms;  // after warm-up
  std::map<std::string, uint64_t> statuses, expected_refusals;
  uint64_t images = 0, bytes = 0, unexpected = 0;

  void record(const Input& in, const grpc::Status& s, double ms, bool counted) {
    std::lock_guard<std::mutex> lock(mu);
    const std::string name = status_code_name(s.error_code());
    const bool refusal = s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
                         s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
    if (in.bad && refusal) {
      ++expected_refusals[name];
    } else {
      ++statuses[name];
      if (!s.ok()) ++unexpected;
    }
    if (!counted) return;
    latencies_ms.push_back(ms);
    if (s.ok()) {
      ++images;
      bytes += in.request.input().data().size();
    }
  }
};

double rss_mib(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

// User plus system CPU seconds the process has used (/proc/PID/stat fields 14, 15).
double cpu_seconds(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 2));
  std::string f;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = std::stod(f);
    if (i == 15) stime = std::stod(f);
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Bad inputs a hostile caller sends: overflowing strides, a huge GIF frame,
// garbage, a JPEG cut in half.
std::vector<Input> bad_inputs() {
  std::vector<Input> out;
  Input stride;
  auto* raw = stride.request.mutable_input()->mutable_raw();
  stride.request.mutable_input()->set_kind(v1::INPUT_KIND_RAW);
  raw->set_width(1);
  raw->set_height(2);
  raw->set_channels(1);
  raw->set_sample_type(v1::SAMPLE_TYPE_UINT8);
  raw->set_row_stride((uint64_t{1} << 63) + 1);
  stride.request.mutable_input()->set_data("xx");
  out.push_back(stride);
  Input gif;
  gif.request.mutable_input()->set_data(std::string("GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff"
                                                    "\x2c\x00\x00\x00\x00\xff\xff\xff\xff\x00\x02\x02\x44\x01\x00\x3b",
                                                    35));
  out.push_back(gif);
  Input garbage;
  garbage.request.mutable_input()->set_data("this is not an image at all");
  out.push_back(garbage);
  for (Input& i : out) i.bad = true;
  return out;
}

std::vector<Input> file_inputs(const std::vector<std::string>& paths, uint64_t max_bytes) {
  std::vector<Input> out;
  auto add = [&](const std::filesystem::path& p) {
    if (std::filesystem::file_size(p) > max_bytes) return;
    const std::string ext = p.extension().string();
    if (ext == ".tsv" || ext == ".jsonl" || ext == ".md" || p.parent_path().filename() == "bad" ||
        p.parent_path().filename() == "raw")
      return;
    Input in;
    in.request.mutable_input()->set_data(slurp(p));
    in.request.mutable_input()->set_name(p.filename().string());
    out.push_back(std::move(in));
  };
  for (const auto& path : paths) {
    if (std::filesystem::is_directory(path)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(path))
        if (e.is_regular_file()) add(e.path());
    } else {
      add(path);
    }
  }
  return out;
}

std::vector<Input> synthetic_inputs(uint32_t w, uint32_t h, uint32_t c, int count) {
  std::vector<Input> out;
  std::mt19937 rng(1);
  for (int i = 0; i < count; ++i) {
    Input in;
    auto* input = in.request.mutable_input();
    input->set_kind(v1::INPUT_KIND_RAW);
    input->mutable_raw()->set_width(w);
    input->mutable_raw()->set_height(h);
    input->mutable_raw()->set_channels(c);
    input->mutable_raw()->set_sample_type(v1::SAMPLE_TYPE_UINT8);
    std::string data(static_cast<size_t>(w) * h * c, '\0');
    for (char& b : data) b = static_cast<char>(rng());
    input->set_data(std::move(data));
    out.push_back(std::move(in));
  }
  return out;
}

struct Plan {
  std::string mode = "unary";
  std::vector<Input> good, bad;
  double bad_share = 0;
  Clock::time_point warm, end;
  uint32_t batch_window = 8;
  size_t chunk = size_t{1} << 20;
};

// Picks inputs for one caller: bad ones at the given share.
class Picker {
 public:
  Picker(const Plan& plan, unsigned seed) : plan_(plan), rng_(seed) {}
  const Input& next() {
    if (!plan_.bad.empty() && std::uniform_real_distribution<>(0, 1)(rng_) < plan_.bad_share)
      return plan_.bad[rng_() % plan_.bad.size()];
    return plan_.good[rng_() % plan_.good.size()];
  }

 private:
  const Plan& plan_;
  std::mt19937 rng_;
};

// One caller: one unary call or one upload at a time, back to back.
class Caller {
 public:
  Caller(v1::ImageStats::Stub& stub, const Plan& plan, Stats& stats, unsigned seed)
      : stub_(stub), plan_(plan), stats_(stats), picker_(plan, seed) {}
  virtual ~Caller() = default;
  void run() {
    while (Clock::now() < plan_.end) once();
  }

 private:
  void once() {
    const Input& in = picker_.next();
    const auto t0 = Clock::now();
    grpc::Status status = plan_.mode == "stream" ? upload(in) : unary(in);
    stats_.record(in, status, std::chrono::duration<double, std::milli>(Clock::now() - t0).count(), t0 >= plan_.warm);
  }

  grpc::Status unary(const Input& in) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::AnalyzeResponse response;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    grpc::Status status;
    stub_.async()->Analyze(&ctx, &in.request, &response, [&](grpc::Status s) {
      std::lock_guard<std::mutex> lock(mu);
      status = std::move(s);
      done = true;
      cv.notify_one();
    });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    return status;
  }

  // AnalyzeStream on a ClientWriteReactor: the header, then chunks.
  class Upload final : public grpc::ClientWriteReactor<v1::AnalyzeStreamRequest> {
   public:
    Upload(v1::ImageStats::Stub& stub, const Input& in, size_t chunk) : in_(in), chunk_(chunk) {
      ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
      stub.async()->AnalyzeStream(&ctx_, &response_, this);
      *message_.mutable_header()->mutable_input() = in.request.input();
      message_.mutable_header()->mutable_input()->clear_data();
      *message_.mutable_header()->mutable_options() = in.request.options();
      message_.mutable_header()->set_total_bytes(in.request.input().data().size());
      StartWrite(&message_);
      StartCall();
    }
    void OnWriteDone(bool ok) override {
      const std::string& data = in_.request.input().data();
      if (!ok || sent_ >= data.size()) return StartWritesDone();
      const size_t n = std::min(chunk_, data.size() - sent_);
      message_.set_chunk(data.substr(sent_, n));
      sent_ += n;
      StartWrite(&message_);
    }
    void OnDone(const grpc::Status& s) override {
      std::lock_guard<std::mutex> lock(mu_);
      status_ = s;
      done_ = true;
      cv_.notify_one();
    }
    grpc::Status wait() {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return done_; });
      return status_;
    }

   private:
    const Input& in_;
    const size_t chunk_;
    grpc::ClientContext ctx_;
    v1::AnalyzeResponse response_;
    v1::AnalyzeStreamRequest message_;
    size_t sent_ = 0;
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
    grpc::Status status_;
  };

  grpc::Status upload(const Input& in) {
    Upload u(stub_, in, plan_.chunk);
    return u.wait();
  }

  v1::ImageStats::Stub& stub_;
  const Plan& plan_;
  Stats& stats_;
  Picker picker_;
};

// AnalyzeBatch on a ClientBidiReactor: up to `window` requests unanswered.
class BatchCaller final : public grpc::ClientBidiReactor<v1::BatchRequest, v1::BatchResponse> {
 public:
  BatchCaller(v1::ImageStats::Stub& stub, const Plan& plan, Stats& stats, unsigned seed)
      : plan_(plan), stats_(stats), picker_(plan, seed) {
    stub.async()->AnalyzeBatch(&ctx_, this);
    StartRead(&response_);
    fill();
    StartCall();
  }
  void OnWriteDone(bool ok) override {
    std::unique_lock<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) return;
    lock.unlock();
    fill();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = sent_.find(response_.id());
      if (it != sent_.end()) {
        const grpc::Status s = response_.has_error()
                                   ? grpc::Status(static_cast<grpc::StatusCode>(response_.error().code()),
                                                  response_.error().message())
                                   : grpc::Status::OK;
        stats_.record(*it->second.first, s,
                      std::chrono::duration<double, std::milli>(Clock::now() - it->second.second).count(),
                      it->second.second >= plan_.warm);
        sent_.erase(it);
      }
    }
    StartRead(&response_);
    fill();
  }
  void OnDone(const grpc::Status& s) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!s.ok()) stats_.record(Input{}, s, 0, false);
    done_ = true;
    cv_.notify_one();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
  }

 private:
  void fill() {
    std::unique_lock<std::mutex> lock(mu_);
    if (writing_ || closed_) return;
    if (Clock::now() >= plan_.end) {
      if (sent_.empty()) {
        closed_ = true;
        lock.unlock();
        StartWritesDone();
      }
      return;
    }
    if (sent_.size() >= plan_.batch_window) return;
    const Input& in = picker_.next();
    const std::string id = std::to_string(next_id_++);
    sent_[id] = {&in, Clock::now()};
    request_.set_id(id);
    *request_.mutable_request() = in.request;
    writing_ = true;
    lock.unlock();
    StartWrite(&request_);
  }

  const Plan& plan_;
  Stats& stats_;
  Picker picker_;
  grpc::ClientContext ctx_;
  v1::BatchRequest request_;
  v1::BatchResponse response_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::pair<const Input*, Clock::time_point>> sent_;
  uint64_t next_id_ = 0;
  bool writing_ = false, closed_ = false, done_ = false;
};

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * v.size()));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

}  // namespace
}  // namespace imgstat::load

int main(int argc, char** argv) {
  using namespace imgstat::load;
  CLI::App app{"imgstat-load: N callers against an imgstat-server"};
  std::string server = "localhost:50051", synthetic;
  std::vector<std::string> files;
  unsigned callers = 8;
  double seconds = 10, warmup = 2, max_rss_growth = -1;
  int server_pid = 0;
  uint64_t max_file_bytes = uint64_t{16} << 20;
  Plan plan;
  app.add_option("--server", server, "address of the server")->capture_default_str();
  app.add_option("--callers", callers, "concurrent callers")->capture_default_str();
  app.add_option("--mode", plan.mode, "unary, stream or batch")->check(CLI::IsMember({"unary", "stream", "batch"}))->capture_default_str();
  app.add_option("--seconds", seconds, "length of the run")->capture_default_str();
  app.add_option("--warmup", warmup, "seconds not counted at the start (and the RSS baseline's moment)")->capture_default_str();
  app.add_option("--files", files, "image files or folders (recursive; bad/ and raw/ skipped)");
  app.add_option("--synthetic", synthetic, "random raw uint8 frames WxHxC instead of files, e.g. 640x480x3");
  app.add_option("--bad-share", plan.bad_share, "share of requests that are hostile inputs, 0 to 1")->capture_default_str();
  app.add_option("--batch-window", plan.batch_window, "batch mode: requests unanswered per caller")->capture_default_str();
  app.add_option("--server-pid", server_pid, "read the server's RSS from /proc");
  app.add_option("--max-rss-growth", max_rss_growth, "fail when the server's RSS grows more than this % after warm-up");
  app.add_option("--max-file-bytes", max_file_bytes, "skip larger files")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  if (!synthetic.empty()) {
    uint32_t w = 0, h = 0, c = 0;
    if (std::sscanf(synthetic.c_str(), "%ux%ux%u", &w, &h, &c) != 3 || !w || !h || !c || c > 4) {
      std::fprintf(stderr, "imgstat-load: --synthetic wants WxHxC\n");
      return 2;
    }
    plan.good = synthetic_inputs(w, h, c, 16);
  } else {
    plan.good = file_inputs(files, max_file_bytes);
  }
  if (plan.good.empty()) {
    std::fprintf(stderr, "imgstat-load: no inputs (--files or --synthetic)\n");
    return 2;
  }
  if (plan.bad_share > 0) plan.bad = bad_inputs();

  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(INT_MAX);
  args.SetMaxReceiveMessageSize(INT_MAX);
  // Several connections, as several client processes would have.
  std::vector<std::unique_ptr<imgstat::v1::ImageStats::Stub>> stubs;
  for (unsigned i = 0; i < std::min(callers, 8u); ++i) {
    args.SetInt("imgstat.load.channel", static_cast<int>(i));  // distinct channels
    stubs.push_back(imgstat::v1::ImageStats::NewStub(
        grpc::CreateCustomChannel(server, grpc::InsecureChannelCredentials(), args)));
  }
  // Files the server refuses (unsupported or corrupt) are expected refusals,
  // told apart by one call each before the run.
  size_t refused_files = 0;
  for (Input& in : plan.good) {
    if (!synthetic.empty()) break;
    grpc::ClientContext ctx;
    imgstat::v1::AnalyzeResponse response;
    const grpc::Status s = stubs[0]->Analyze(&ctx, in.request, &response);
    if (s.error_code() == grpc::StatusCode::INVALID_ARGUMENT || s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED)
      in.bad = true, ++refused_files;
  }
  const double rss_start = server_pid ? rss_mib(server_pid) : 0;
  const auto start = Clock::now();
  plan.warm = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(warmup));
  plan.end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  Stats stats;
  double rss_warm = 0, cpu_warm = 0;
  std::thread rss_probe([&] {
    std::this_thread::sleep_until(plan.warm);
    if (server_pid) {
      rss_warm = rss_mib(server_pid);
      cpu_warm = cpu_seconds(server_pid);
    }
  });
  if (plan.mode == "batch") {
    std::vector<std::unique_ptr<BatchCaller>> batch;
    for (unsigned i = 0; i < callers; ++i)
      batch.push_back(std::make_unique<BatchCaller>(*stubs[i % stubs.size()], plan, stats, i + 1));
    for (auto& b : batch) b->wait();
  } else {
    std::vector<std::thread> threads;
    for (unsigned i = 0; i < callers; ++i)
      threads.emplace_back([&, i] { Caller(*stubs[i % stubs.size()], plan, stats, i + 1).run(); });
    for (auto& t : threads) t.join();
  }
  rss_probe.join();
  const double measured = std::chrono::duration<double>(Clock::now() - plan.warm).count();
  const double rss_end = server_pid ? rss_mib(server_pid) : 0;
  const double cpu_end = server_pid ? cpu_seconds(server_pid) : 0;

  std::printf("imgstat-load: %u callers, %s, %.0f s (%.0f s warm-up), %zu inputs%s (%zu refused by the server), "
              "hostile share %.0f%%\n",
              callers, plan.mode.c_str(), seconds, warmup, plan.good.size(),
              synthetic.empty() ? " (files)" : " (synthetic)", refused_files, plan.bad_share * 100);
  std::vector<double>& lat = stats.latencies_ms;
  std::printf("%10s %10s %10s %9s %9s %9s\n", "calls", "images/s", "MB/s", "p50 ms", "p90 ms", "p99 ms");
  const size_t calls = lat.size();
  const double p50 = percentile(lat, 50), p90 = percentile(lat, 90), p99 = percentile(lat, 99);
  std::printf("%10zu %10.1f %10.1f %9.2f %9.2f %9.2f\n", calls, stats.images / measured,
              stats.bytes / measured / 1e6, p50, p90, p99);
  std::printf("statuses:");
  for (const auto& [name, n] : stats.statuses) std::printf(" %s %llu", name.c_str(), static_cast<unsigned long long>(n));
  std::printf("\nexpected refusals (hostile inputs, refused files):");
  for (const auto& [name, n] : stats.expected_refusals)
    std::printf(" %s %llu", name.c_str(), static_cast<unsigned long long>(n));
  std::printf("\nunexpected errors: %llu\n", static_cast<unsigned long long>(stats.unexpected));
  bool ok = stats.unexpected == 0 && calls > 0;
  if (server_pid) {
    const double growth = rss_warm > 0 ? (rss_end - rss_warm) / rss_warm * 100 : 0;
    std::printf("server RSS: %.0f MiB at start, %.0f MiB after warm-up, %.0f MiB at the end (%+.1f%% after warm-up)\n",
                rss_start, rss_warm, rss_end, growth);
    const double cpu = cpu_end - cpu_warm;
    std::printf("server CPU: %.2f s after warm-up, %.2f ms per image, %.1f cores busy\n", cpu,
                stats.images ? cpu * 1000 / static_cast<double>(stats.images) : 0.0, cpu / measured);
    if (max_rss_growth >= 0 && growth > max_rss_growth) {
      std::printf("RSS grew more than %.1f%% after warm-up\n", max_rss_growth);
      ok = false;
    }
  }
  return ok ? 0 : 1;
}
