// imgstat-region-bench: what a caller on the server's host measures, the
// same bytes three ways in one run: sent over gRPC (AnalyzeStream chunks
// from memory, the baseline), in a shared-memory region (a sealed memfd),
// and, with a GPU, in GPU memory through a CUDA IPC handle. Then many raw
// frames from several callers at once, in messages against in regions.
// Every way must give the same answer; the table comes last.
#include <CLI/CLI.hpp>
#include <grpcpp/grpcpp.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#ifdef IMGSTAT_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "core/malloc_tuning.hpp"
#include "imgstat/v1/imgstat.grpc.pb.h"
#include "region_client.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using imgstat::client::RegionSocketClient;
namespace v1 = imgstat::v1;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string answer_of(v1::AnalyzeResponse r) {
  r.clear_decode_time();
  r.clear_compute_time();
  return r.SerializeAsString();
}

struct Table {
  std::vector<std::string> rows;
  void add(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    char line[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(line, sizeof(line), fmt, args);
    va_end(args);
    rows.emplace_back(line);
    std::printf("%s\n", line);
    std::fflush(stdout);
  }
};

v1::AnalyzeRequest raw_request(uint32_t w, uint32_t h, uint32_t c) {
  v1::AnalyzeRequest r;
  r.mutable_input()->set_kind(v1::INPUT_KIND_RAW);
  r.mutable_input()->mutable_raw()->set_width(w);
  r.mutable_input()->mutable_raw()->set_height(h);
  r.mutable_input()->mutable_raw()->set_channels(c);
  r.mutable_input()->mutable_raw()->set_sample_type(v1::SAMPLE_TYPE_UINT8);
  return r;
}

// A sealed memfd of n random bytes (seeded), and a read-only view of it here.
int random_memfd(size_t n, uint32_t seed, std::vector<uint8_t>* copy) {
  const int fd = memfd_create("imgstat-bench", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(n)) != 0) throw std::runtime_error("memfd");
  auto* p = static_cast<uint8_t*>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  if (p == MAP_FAILED) throw std::runtime_error("mmap");
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(p + i, &v, 8);
  }
  if (copy) copy->assign(p, p + n);
  munmap(p, n);
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) throw std::runtime_error("seal");
  return fd;
}

class Bench {
 public:
  explicit Bench(const std::string& target) {
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(INT32_MAX);
    args.SetMaxReceiveMessageSize(INT32_MAX);
    channel_ = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
    stub_ = v1::ImageStats::NewStub(channel_);
    grpc::ClientContext ctx;
    if (!stub_->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info_).ok()) throw std::runtime_error("no server at " + target);
    if (info_.region_socket().empty()) throw std::runtime_error("the server offers no regions");
  }
  const v1::ServerInfo& info() const { return info_; }
  v1::ImageStats::Stub& stub() { return *stub_; }

  v1::AnalyzeResponse stream(const v1::AnalyzeRequest& r, const uint8_t* data, size_t n, size_t chunk) {
    grpc::ClientContext ctx;
    v1::AnalyzeResponse out;
    auto writer = stub_->AnalyzeStream(&ctx, &out);
    v1::AnalyzeStreamRequest m;
    *m.mutable_header()->mutable_input() = r.input();
    m.mutable_header()->set_total_bytes(n);
    writer->Write(m);
    for (size_t at = 0; at < n; at += chunk) {
      m.set_chunk(data + at, std::min(chunk, n - at));
      if (!writer->Write(m)) break;
    }
    writer->WritesDone();
    check(writer->Finish(), "AnalyzeStream");
    return out;
  }
  v1::Region register_region(const std::string& ticket, const v1::CudaIpcMemory* cuda = nullptr) {
    grpc::ClientContext ctx;
    v1::RegisterRegionRequest r;
    r.set_ticket(ticket);
    if (cuda) *r.mutable_cuda() = *cuda;
    v1::Region out;
    check(stub_->RegisterRegion(&ctx, r, &out), "RegisterRegion");
    return out;
  }
  v1::AnalyzeResponse analyze(v1::AnalyzeRequest r, const std::string& region, uint64_t offset = 0, uint64_t length = 0) {
    r.mutable_input()->mutable_region()->set_region_id(region);
    r.mutable_input()->mutable_region()->set_offset(offset);
    r.mutable_input()->mutable_region()->set_length(length);
    return analyze(r);
  }
  v1::AnalyzeResponse analyze(const v1::AnalyzeRequest& r) {
    grpc::ClientContext ctx;
    v1::AnalyzeResponse out;
    check(stub_->Analyze(&ctx, r, &out), "Analyze");
    return out;
  }
  static void check(const grpc::Status& s, const char* what) {
    if (!s.ok()) throw std::runtime_error(std::string(what) + ": " + s.error_message());
  }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ImageStats::Stub> stub_;
  v1::ServerInfo info_;
};

}  // namespace

int main(int argc, char** argv) {
  imgstat::tune_malloc_for_large_messages();
  std::string target = "127.0.0.1:50051";
  uint64_t mib = 1024;
  int runs = 5, frames = 64, callers = 8;
  CLI::App app{"imgstat-region-bench: gRPC bytes against shared-memory and CUDA IPC regions, one run"};
  app.add_option("--server", target)->capture_default_str();
  app.add_option("--mib", mib, "bytes of the large raw input, in MiB")->capture_default_str();
  app.add_option("--runs", runs)->capture_default_str();
  app.add_option("--frames", frames, "raw 4000x3000 RGB frames of the many-callers case")->capture_default_str();
  app.add_option("--callers", callers)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    Bench bench(target);
    const v1::EngineInfo& engine = bench.info().engine();
    std::printf("server engine %s %s; region socket %s\n", engine.kind().c_str(), engine.device_name().c_str(),
                bench.info().region_socket().c_str());
    Table table;
    bool equal = true;
    const size_t n = size_t{mib} << 20;
    std::vector<uint8_t> bytes;
    const int fd = random_memfd(n, 1, &bytes);
    const v1::AnalyzeRequest big = raw_request(32768, static_cast<uint32_t>(n / 32768), 1);

    std::vector<double> t;
    v1::AnalyzeResponse want;
    for (int i = 0; i < runs; ++i) {
      const auto t0 = Clock::now();
      want = bench.stream(big, bytes.data(), n, size_t{4} << 20);
      t.push_back(since(t0));
    }
    table.add("%-44s %9.1f ms  %6.2f GB/s", ("gRPC AnalyzeStream, " + std::to_string(mib) + " MiB raw uint8").c_str(),
              median(t) * 1e3, n / median(t) / 1e9);

    RegionSocketClient socket(bench.info().region_socket());
    auto t0 = Clock::now();
    const v1::Region host = bench.register_region(socket.pass(fd));
    const double reg = since(t0);
    t.clear();
    for (int i = 0; i < runs; ++i) {
      t0 = Clock::now();
      const v1::AnalyzeResponse got = bench.analyze(big, host.region_id());
      t.push_back(since(t0));
      equal &= answer_of(got) == answer_of(want);
    }
    table.add("%-44s %9.1f ms  %6.2f GB/s  (registration %.0f ms, pinned %s)", "host region (sealed memfd), Analyze",
              median(t) * 1e3, n / median(t) / 1e9, reg * 1e3, host.pinned() ? "yes" : "no");

#ifdef IMGSTAT_WITH_CUDA
    int devices = 0;
    if (engine.kind() == "cuda" && cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) {
      void* d = nullptr;
      cudaIpcMemHandle_t h;
      if (cudaMalloc(&d, n) != cudaSuccess || cudaMemcpy(d, bytes.data(), n, cudaMemcpyHostToDevice) != cudaSuccess ||
          cudaIpcGetMemHandle(&h, d) != cudaSuccess)
        throw std::runtime_error("CUDA: cannot share 1 GiB of device memory");
      v1::CudaIpcMemory cuda;
      cuda.set_handle(std::string(reinterpret_cast<const char*>(&h), sizeof(h)));
      cuda.set_size(n);
      t0 = Clock::now();
      const v1::Region dev = bench.register_region(socket.connection_ticket(), &cuda);
      const double dreg = since(t0);
      t.clear();
      for (int i = 0; i < runs; ++i) {
        t0 = Clock::now();
        const v1::AnalyzeResponse got = bench.analyze(big, dev.region_id());
        t.push_back(since(t0));
        equal &= answer_of(got) == answer_of(want);
      }
      table.add("%-44s %9.2f ms  %6.1f GB/s  (registration %.0f ms)", "GPU region (CUDA IPC), Analyze", median(t) * 1e3,
                n / median(t) / 1e9, dreg * 1e3);
      cudaFree(d);
    } else {
      std::printf("GPU region: skipped (engine %s, %d devices here)\n", engine.kind().c_str(), devices);
    }
#endif

    // Many frames from several callers: each caller's frames in one region,
    // against the same frames in messages.
    const uint32_t fw = 4000, fh = 3000;
    const size_t frame = size_t{fw} * fh * 3;
    const int per_caller = std::max(1, frames / callers);
    std::vector<int> fds(callers);
    std::vector<std::vector<uint8_t>> data(callers);
    std::vector<v1::Region> regions(callers);
    for (int c = 0; c < callers; ++c) {
      fds[c] = random_memfd(frame * per_caller, 100 + c, &data[c]);
      regions[c] = bench.register_region(socket.pass(fds[c]));
    }
    const v1::AnalyzeRequest one = raw_request(fw, fh, 3);
    // One message per frame, a stream of 4 MiB chunks per frame, a region.
    static const char* kWays[] = {"messages", "streams", "regions"};
    for (int way = 0; way < 3; ++way) {
      t0 = Clock::now();
      std::vector<std::future<void>> done;
      for (int c = 0; c < callers; ++c)
        done.push_back(std::async(std::launch::async, [&, c] {
          for (int f = 0; f < per_caller; ++f) {
            if (way == 2) {
              bench.analyze(one, regions[c].region_id(), frame * f, frame);
            } else if (way == 1) {
              bench.stream(one, data[c].data() + frame * f, frame, size_t{4} << 20);
            } else {
              v1::AnalyzeRequest r = one;
              r.mutable_input()->set_data(data[c].data() + frame * f, frame);
              bench.analyze(r);
            }
          }
        }));
      for (auto& d : done) d.get();
      const double s = since(t0);
      table.add("%-44s %9.1f images/s", (std::to_string(per_caller * callers) + " raw 4000x3000 RGB frames, " +
                                         std::to_string(callers) + " callers, " + kWays[way])
                                            .c_str(),
                per_caller * callers / s);
    }
    // One frame both ways, for the answers.
    {
      v1::AnalyzeRequest r = one;
      r.mutable_input()->set_data(data[0].data(), frame);
      equal &= answer_of(bench.analyze(r)) == answer_of(bench.analyze(one, regions[0].region_id(), 0, frame));
    }
    std::printf("\n== imgstat-region-bench, engine %s (%s)\n", engine.kind().c_str(), engine.device_name().c_str());
    for (const std::string& row : table.rows) std::printf("== %s\n", row.c_str());
    std::printf("== answers equal every way: %s\n", equal ? "yes" : "NO");
    return equal ? 0 : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "imgstat-region-bench: %s\n", e.what());
    return 1;
  }
}
