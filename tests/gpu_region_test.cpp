// Regions on the CUDA engine, across real processes (GPU machine only; skips
// elsewhere): GPU memory shared through a CUDA IPC handle is computed in
// place and answers as the same bytes sent in a message do, and as the CPU
// engine does; host regions are page-locked for the GPU; a handle that lies
// about its size or is not one gets a clear error and the server serves on.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <cmath>

#include "process.hpp"
#include "region_client.hpp"
#include "region_memfd.hpp"
#include "imgstat/v1/imgstat.grpc.pb.h"

namespace imgstat::testing {
namespace {

using client::RegionSocketClient;

bool have_gpu() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  cudaGetLastError();
  return ok;
}

std::string region_socket_of(const ServerProcess& server) {
  const std::string key = "regions: descriptors on ";
  for (int i = 0; i < 300; ++i) {
    const std::string log = server.log();
    const size_t at = log.find(key);
    if (at != std::string::npos) return log.substr(at + key.size(), log.find('\n', at) - at - key.size());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return {};
}

struct Server {
  explicit Server(const char* engine)
      : process({"--engine", engine, "--threads", "4"}),
        stub(v1::ImageStats::NewStub(grpc::CreateCustomChannel(process.address(), grpc::InsecureChannelCredentials(), [] {
          grpc::ChannelArguments a;
          a.SetMaxSendMessageSize(INT32_MAX);
          return a;
        }()))),
        socket(region_socket_of(process)) {}
  grpc::Status analyze(const v1::AnalyzeRequest& r, v1::AnalyzeResponse* out) {
    grpc::ClientContext ctx;
    return stub->Analyze(&ctx, r, out);
  }
  grpc::Status register_region(const v1::RegisterRegionRequest& r, v1::Region* out) {
    grpc::ClientContext ctx;
    return stub->RegisterRegion(&ctx, r, out);
  }
  ServerProcess process;
  std::unique_ptr<v1::ImageStats::Stub> stub;
  RegionSocketClient socket;
};

// Device memory of this process, shared.
struct SharedDeviceMemory {
  explicit SharedDeviceMemory(const std::vector<uint8_t>& bytes) : size(bytes.size()) {
    EXPECT_EQ(cudaMalloc(&data, size), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data, bytes.data(), size, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaIpcGetMemHandle(&handle, data), cudaSuccess);
  }
  ~SharedDeviceMemory() { cudaFree(data); }
  v1::RegisterRegionRequest registration(const std::string& ticket, uint64_t declared) const {
    v1::RegisterRegionRequest r;
    r.set_ticket(ticket);
    r.mutable_cuda()->set_handle(std::string(reinterpret_cast<const char*>(&handle), sizeof(handle)));
    r.mutable_cuda()->set_size(declared);
    return r;
  }
  void* data = nullptr;
  size_t size;
  cudaIpcMemHandle_t handle{};
};

// Integers exact; float sums within 1e-12 of each other.
void expect_same_statistics(const v1::AnalyzeResponse& a, const v1::AnalyzeResponse& b, const std::string& what) {
  ASSERT_EQ(a.channels_size(), b.channels_size()) << what;
  for (int c = 0; c < a.channels_size(); ++c) {
    const v1::ChannelStats &x = a.channels(c), &y = b.channels(c);
    EXPECT_EQ(x.count(), y.count()) << what;
    EXPECT_EQ(x.min(), y.min()) << what;
    EXPECT_EQ(x.max(), y.max()) << what;
    EXPECT_EQ(x.sum_int(), y.sum_int()) << what;
    EXPECT_EQ(x.median(), y.median()) << what;
    EXPECT_NEAR(x.stddev(), y.stddev(), 1e-12 * std::abs(x.stddev())) << what;
    EXPECT_EQ(x.histogram().counts().size(), y.histogram().counts().size()) << what;
    EXPECT_TRUE(std::equal(x.histogram().counts().begin(), x.histogram().counts().end(), y.histogram().counts().begin()))
        << what << " channel " << c;
  }
}

v1::AnalyzeRequest raw16(uint32_t w, uint32_t h, uint64_t stride) {
  v1::AnalyzeRequest r;
  r.mutable_input()->set_kind(v1::INPUT_KIND_RAW);
  auto* raw = r.mutable_input()->mutable_raw();
  raw->set_width(w);
  raw->set_height(h);
  raw->set_channels(3);
  raw->set_sample_type(v1::SAMPLE_TYPE_UINT16);
  raw->set_row_stride(stride);
  r.mutable_options()->add_statistics(v1::STATISTIC_MIN_MAX);
  r.mutable_options()->add_statistics(v1::STATISTIC_SUM);
  r.mutable_options()->add_statistics(v1::STATISTIC_STDDEV);
  r.mutable_options()->add_statistics(v1::STATISTIC_HISTOGRAM);
  r.mutable_options()->add_statistics(v1::STATISTIC_DISTRIBUTION);
  return r;
}

TEST(GpuRegions, CudaIpcMemoryAnswersAsTheBytesInAMessageAndAsTheCpuEngine) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  Server cuda("cuda"), cpu("cpu");
  // A prime width, padded rows, at an offset no vector load likes; random samples.
  const uint32_t w = 1009, h = 501;
  const uint64_t stride = uint64_t{w} * 6 + 10, offset = 6;
  const std::vector<uint8_t> bytes = random_bytes(offset + stride * h + 4096, 21);
  SharedDeviceMemory shared(bytes);
  v1::Region region;
  ASSERT_TRUE(cuda.register_region(shared.registration(cuda.socket.connection_ticket(), bytes.size()), &region).ok());
  EXPECT_TRUE(region.on_device());
  EXPECT_EQ(region.size(), bytes.size());
  for (const bool packed : {false, true}) {
    v1::AnalyzeRequest in_region = raw16(w, h, packed ? 0 : stride);
    const uint64_t length = packed ? uint64_t{w} * 6 * h : stride * h;
    in_region.mutable_input()->mutable_region()->set_region_id(region.region_id());
    in_region.mutable_input()->mutable_region()->set_offset(packed ? 16 : offset);
    in_region.mutable_input()->mutable_region()->set_length(length);
    v1::AnalyzeRequest in_message = in_region;
    in_message.mutable_input()->clear_region();
    const size_t from = packed ? 16 : offset;
    in_message.mutable_input()->set_data(std::string(bytes.begin() + from, bytes.begin() + from + length));
    v1::AnalyzeResponse device, message, on_cpu;
    const grpc::Status s = cuda.analyze(in_region, &device);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(device.engine(), "cuda");
    ASSERT_TRUE(cuda.analyze(in_message, &message).ok());
    ASSERT_TRUE(cpu.analyze(in_message, &on_cpu).ok());
    EXPECT_EQ(device.channels(0).count(), uint64_t{w} * h);
    expect_same_statistics(device, message, packed ? "packed, against the message" : "strided, against the message");
    expect_same_statistics(device, on_cpu, packed ? "packed, against the CPU engine" : "strided, against the CPU engine");
  }
  // The bytes of it, as a 1 x N image.
  v1::AnalyzeRequest b;
  b.mutable_input()->set_kind(v1::INPUT_KIND_BYTES);
  b.mutable_input()->mutable_region()->set_region_id(region.region_id());
  v1::AnalyzeRequest m = b;
  m.mutable_input()->clear_region();
  m.mutable_input()->set_data(std::string(bytes.begin(), bytes.end()));
  v1::AnalyzeResponse x, y;
  ASSERT_TRUE(cuda.analyze(b, &x).ok());
  ASSERT_TRUE(cpu.analyze(m, &y).ok());
  expect_same_statistics(x, y, "bytes");
  // An encoded file is not decoded from GPU memory.
  b.mutable_input()->set_kind(v1::INPUT_KIND_ENCODED);
  EXPECT_EQ(cuda.analyze(b, &x).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(GpuRegions, AHandleThatLiesOrIsNoneIsRefusedAndTheServerServesOn) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  Server cuda("cuda");
  const std::vector<uint8_t> bytes = random_bytes(1 << 20, 22);
  SharedDeviceMemory shared(bytes);
  const std::string ticket = cuda.socket.connection_ticket();
  v1::Region region;
  // One byte more than the allocation: reading it would fault the device for every caller.
  grpc::Status s = cuda.register_region(shared.registration(ticket, bytes.size() + (4 << 20)), &region);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  v1::RegisterRegionRequest junk = shared.registration(ticket, 100);
  junk.mutable_cuda()->set_handle(std::string(64, '\x5a'));
  EXPECT_EQ(cuda.register_region(junk, &region).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  junk.mutable_cuda()->set_handle("short");
  EXPECT_EQ(cuda.register_region(junk, &region).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(cuda.register_region(shared.registration("s-not-a-ticket", 100), &region).error_code(),
            grpc::StatusCode::NOT_FOUND);
  s = cuda.register_region(shared.registration(ticket, bytes.size()), &region);
  ASSERT_TRUE(s.ok()) << s.error_message();
  v1::AnalyzeRequest r;
  r.mutable_input()->set_kind(v1::INPUT_KIND_BYTES);
  r.mutable_input()->mutable_region()->set_region_id(region.region_id());
  v1::AnalyzeResponse out;
  ASSERT_TRUE(cuda.analyze(r, &out).ok());
  EXPECT_EQ(out.channels(0).count(), bytes.size());
  EXPECT_EQ(out.engine(), "cuda");
}

TEST(GpuRegions, HostRegionsArePinnedForTheCudaEngine) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  Server cuda("cuda");
  const std::vector<uint8_t> bytes = random_bytes(size_t{24} << 20, 23);
  const int fd = memfd_with(bytes, F_SEAL_SHRINK);
  v1::RegisterRegionRequest reg;
  reg.set_ticket(cuda.socket.pass(fd));
  close(fd);
  v1::Region region;
  ASSERT_TRUE(cuda.register_region(reg, &region).ok());
  EXPECT_TRUE(region.pinned());
  EXPECT_FALSE(region.on_device());
  v1::AnalyzeRequest r;
  r.mutable_input()->set_kind(v1::INPUT_KIND_BYTES);
  r.mutable_input()->mutable_region()->set_region_id(region.region_id());
  v1::AnalyzeRequest m = r;
  m.mutable_input()->clear_region();
  m.mutable_input()->set_data(std::string(bytes.begin(), bytes.end()));
  v1::AnalyzeResponse a, b;
  ASSERT_TRUE(cuda.analyze(r, &a).ok());
  ASSERT_TRUE(cuda.analyze(m, &b).ok());
  expect_same_statistics(a, b, "pinned host region");
  // Asked to leave it pageable (--aggregate's scratch of encoded files): mapped, not locked, the same answer.
  const int again = memfd_with(bytes, F_SEAL_SHRINK);
  reg.set_ticket(cuda.socket.pass(again));
  close(again);
  reg.set_pageable(true);
  v1::Region pageable;
  ASSERT_TRUE(cuda.register_region(reg, &pageable).ok());
  EXPECT_FALSE(pageable.pinned());
  EXPECT_TRUE(pageable.mapped());
  r.mutable_input()->mutable_region()->set_region_id(pageable.region_id());
  v1::AnalyzeResponse c;
  ASSERT_TRUE(cuda.analyze(r, &c).ok());
  expect_same_statistics(c, b, "pageable host region");
}

}  // namespace
}  // namespace imgstat::testing
