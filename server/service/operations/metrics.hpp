// Prometheus metrics on their own port (--metrics-listen), by prometheus-cpp.
// Latencies are histograms, not summaries, so that replicas aggregate. What
// is a level now (calls in progress, queue, memory) is read at each scrape.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "imgstat/engine.hpp"
#include "imgstat/v1/imgstat.pb.h"

namespace prometheus {
class Exposer;
class Registry;
}  // namespace prometheus

namespace imgstat {

// The levels read at each scrape.
struct MetricSources {
  std::function<uint64_t()> calls_in_progress;
  std::function<uint64_t()> queue_length;
  std::function<uint64_t()> decode_memory_in_use;
  std::function<uint64_t()> decode_memory_waiting;
  std::function<EngineUsage()> engine_usage;
  // Each GPU of the CUDA engine; empty for the CPU engine.
  std::function<std::vector<GpuStatus>()> gpus;
};

class Metrics {
 public:
  // engine and decoder name what serves ("cuda", "NVIDIA H100 …", "nvjpeg").
  Metrics(const EngineInfo& engine, const std::string& jpeg_decoder, uint64_t decode_memory_limit);
  ~Metrics();

  // Serves GET /metrics on address ("0.0.0.0:9464"; port 0 picks one).
  // Throws imgstat::Error (kUnavailable) when it cannot be bound.
  void serve(const std::string& address, MetricSources sources);
  int port() const { return port_; }

  // A call of imgstat.v1 (or one refused before its handler) ended.
  void call_ended(std::string_view method, grpc::StatusCode code, double seconds);
  // One image answered (each of a batch counts): its bytes, its stages and
  // what served it; response is null when it failed.
  void image(std::string_view method, grpc::StatusCode code, uint64_t input_bytes, double queue_seconds,
             const v1::AnalyzeResponse* response);

 private:
  struct Families;
  class Scrape;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Families> f_;
  std::shared_ptr<Scrape> scrape_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace imgstat
