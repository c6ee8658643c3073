#include "service/operations/metrics.hpp"

#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <map>
#include <mutex>

#include "core/status_name.hpp"
#include "imgstat/error.hpp"

namespace imgstat {
namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;

// A label value per method; anything else a caller names is "other", so a
// stranger cannot grow the series.
constexpr std::array<std::string_view, 12> kMethods = {
    "Analyze",     "AnalyzeStream",  "AnalyzeBatch",     "Aggregate",        "GetServerInfo", "ListObjects",
    "RegisterRegion", "ListRegions", "UnregisterRegion", "ServerReflection", "Health",        "other"};
// The decode is also each file's check (libjpeg-turbo's one pass, the GPU's
// entropy check beside nvJPEG): no stage of its own.
constexpr std::array<std::string_view, 3> kStages = {"queue", "decode", "compute"};

size_t method_index(std::string_view m) {
  if (m == "ServerReflectionInfo") m = "ServerReflection";
  if (m == "Check" || m == "Watch") m = "Health";
  for (size_t i = 0; i + 1 < kMethods.size(); ++i)
    if (kMethods[i] == m) return i;
  return kMethods.size() - 1;
}

double seconds(const google::protobuf::Duration& d) { return d.seconds() + d.nanos() * 1e-9; }

prometheus::Histogram::BucketBoundaries latency_buckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

}  // namespace

struct Metrics::Families {
  explicit Families(prometheus::Registry& r)
      : requests(prometheus::BuildCounter()
                     .Name("imgstat_requests_total")
                     .Help("Calls ended, by method and gRPC status code (refused ones included)")
                     .Register(r)),
        request_seconds(prometheus::BuildHistogram()
                            .Name("imgstat_request_duration_seconds")
                            .Help("Time from a call's start to its status, by method")
                            .Register(r)),
        stage_seconds(prometheus::BuildHistogram()
                          .Name("imgstat_stage_duration_seconds")
                          .Help("Time one image spent in each stage: waiting for a worker (queue), decoding "
                                "(which checks the file), computing")
                          .Register(r)),
        images(prometheus::BuildCounter()
                   .Name("imgstat_images_total")
                   .Help("Images answered, by method and gRPC status code (each of a batch counts)")
                   .Register(r)),
        served(prometheus::BuildCounter()
                   .Name("imgstat_images_served_total")
                   .Help("Images analyzed, by the engine and the decoder that served them")
                   .Register(r)),
        input_bytes(prometheus::BuildCounter()
                        .Name("imgstat_input_bytes_total")
                        .Help("Bytes of images received (encoded files or raw pixels), by method")
                        .Register(r)),
        pixels(prometheus::BuildCounter()
                   .Name("imgstat_pixels_total")
                   .Help("Pixels analyzed, by method")
                   .Register(r)),
        levels(prometheus::BuildGauge().Name("imgstat_calls_in_progress").Help("Calls of imgstat.v1 in progress").Register(r)),
        queue(prometheus::BuildGauge()
                  .Name("imgstat_queue_length")
                  .Help("Pieces of work waiting for a worker thread")
                  .Register(r)),
        decode_memory(prometheus::BuildGauge()
                          .Name("imgstat_decode_memory_bytes")
                          .Help("Decoded-image memory budget (--max-decode-memory): in use and its limit")
                          .Register(r)),
        decode_waiting(prometheus::BuildGauge()
                           .Name("imgstat_decode_memory_waiting")
                           .Help("Decodes waiting for room in the decoded-memory budget")
                           .Register(r)),
        info(prometheus::BuildGauge()
                 .Name("imgstat_engine_info")
                 .Help("The engine, its device and the JPEG decoder this server uses (value 1)")
                 .Register(r)),
        gpu_memory(prometheus::BuildGauge()
                       .Name("imgstat_gpu_memory_bytes")
                       .Help("GPU memory: held by the engine (workspaces and calls in progress), free on the device, its total")
                       .Register(r)),
        gpu_lost(prometheus::BuildGauge().Name("imgstat_gpu_lost").Help("1 once the GPU failed and the CPU took over").Register(r)),
        fallbacks(prometheus::BuildCounter()
                      .Name("imgstat_gpu_fallbacks_total")
                      .Help("Images the GPU could not take, computed on the CPU")
                      .Register(r)),
        gpu_in_service(prometheus::BuildGauge()
                           .Name("imgstat_gpu_in_service")
                           .Help("Each GPU of --cuda-devices (by slot and CUDA ordinal): 1 while it takes work, 0 "
                                 "once a fault took it out")
                           .Register(r)),
        gpu_in_flight(prometheus::BuildGauge()
                          .Name("imgstat_gpu_in_flight")
                          .Help("Decodes and analyses on each GPU now: the load that places the next image")
                          .Register(r)),
        gpu_images(prometheus::BuildCounter()
                       .Name("imgstat_gpu_images_total")
                       .Help("Images each GPU computed")
                       .Register(r)) {
    for (size_t m = 0; m < kMethods.size(); ++m) {
      const std::string method(kMethods[m]);
      call_seconds[m] = &request_seconds.Add({{"method", method}}, latency_buckets());
      bytes[m] = &input_bytes.Add({{"method", method}});
      pixel_count[m] = &pixels.Add({{"method", method}});
      for (size_t s = 0; s < kStages.size(); ++s)
        stage[m][s] = &stage_seconds.Add({{"method", method}, {"stage", std::string(kStages[s])}}, latency_buckets());
    }
    in_progress = &levels.Add({});
    queue_length = &queue.Add({});
    decode_in_use = &decode_memory.Add({{"state", "in_use"}});
    decode_limit = &decode_memory.Add({{"state", "limit"}});
    decode_waits = &decode_waiting.Add({});
  }

  Family<Counter>& requests;
  Family<prometheus::Histogram>& request_seconds;
  Family<prometheus::Histogram>& stage_seconds;
  Family<Counter>& images;
  Family<Counter>& served;
  Family<Counter>& input_bytes;
  Family<Counter>& pixels;
  Family<Gauge>& levels;
  Family<Gauge>& queue;
  Family<Gauge>& decode_memory;
  Family<Gauge>& decode_waiting;
  Family<Gauge>& info;
  Family<Gauge>& gpu_memory;
  Family<Gauge>& gpu_lost;
  Family<Counter>& fallbacks;
  Family<Gauge>& gpu_in_service;
  Family<Gauge>& gpu_in_flight;
  Family<Counter>& gpu_images;

  std::array<prometheus::Histogram*, kMethods.size()> call_seconds{};
  std::array<Counter*, kMethods.size()> bytes{};
  std::array<Counter*, kMethods.size()> pixel_count{};
  std::array<std::array<prometheus::Histogram*, kStages.size()>, kMethods.size()> stage{};
  Gauge* in_progress = nullptr;
  Gauge* queue_length = nullptr;
  Gauge* decode_in_use = nullptr;
  Gauge* decode_limit = nullptr;
  Gauge* decode_waits = nullptr;
  // GPU series exist only on a CUDA engine.
  Gauge* gpu_held = nullptr;
  Gauge* gpu_free = nullptr;
  Gauge* gpu_total = nullptr;
  Gauge* lost = nullptr;
  Counter* fallback_count = nullptr;
};

// Reads the levels, then hands over the registry's families.
class Metrics::Scrape final : public prometheus::Collectable {
 public:
  Scrape(std::shared_ptr<prometheus::Registry> registry, Families& f, MetricSources sources)
      : registry_(std::move(registry)), f_(f), sources_(std::move(sources)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto set = [](Gauge* g, const std::function<uint64_t()>& read) {
        if (g && read) g->Set(static_cast<double>(read()));
      };
      set(f_.in_progress, sources_.calls_in_progress);
      set(f_.queue_length, sources_.queue_length);
      set(f_.decode_in_use, sources_.decode_memory_in_use);
      set(f_.decode_waits, sources_.decode_memory_waiting);
      if (f_.gpu_held && sources_.engine_usage) {
        const EngineUsage u = sources_.engine_usage();
        f_.gpu_held->Set(static_cast<double>(u.device_bytes_held));
        f_.gpu_free->Set(static_cast<double>(u.device_bytes_free));
        f_.gpu_total->Set(static_cast<double>(u.device_bytes_total));
        f_.lost->Set(u.gpu_lost ? 1 : 0);
        if (u.cpu_fallbacks > fallbacks_seen_) {
          f_.fallback_count->Increment(static_cast<double>(u.cpu_fallbacks - fallbacks_seen_));
          fallbacks_seen_ = u.cpu_fallbacks;
        }
      }
      if (sources_.gpus) {
        const std::vector<GpuStatus> gpus = sources_.gpus();
        images_seen_.resize(gpus.size(), 0);
        for (size_t i = 0; i < gpus.size(); ++i) {
          const std::map<std::string, std::string> labels{{"slot", std::to_string(i)},
                                                          {"device", std::to_string(gpus[i].device)}};
          f_.gpu_in_service.Add(labels).Set(gpus[i].in_service ? 1 : 0);
          f_.gpu_in_flight.Add(labels).Set(gpus[i].in_flight);
          Counter& images = f_.gpu_images.Add(labels);
          if (gpus[i].images > images_seen_[i]) {
            images.Increment(static_cast<double>(gpus[i].images - images_seen_[i]));
            images_seen_[i] = gpus[i].images;
          }
        }
      }
    }
    return registry_->Collect();
  }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  Families& f_;
  MetricSources sources_;
  mutable std::mutex mu_;
  mutable uint64_t fallbacks_seen_ = 0;
  mutable std::vector<uint64_t> images_seen_;  // per GPU slot
};

Metrics::Metrics(const EngineInfo& engine, const std::string& jpeg_decoder, uint64_t decode_memory_limit)
    : registry_(std::make_shared<prometheus::Registry>()), f_(std::make_unique<Families>(*registry_)) {
  f_->info
      .Add({{"engine", engine.kind},
            {"device", engine.kind == "cuda" ? engine.device_name : "cpu"},
            {"jpeg_decoder", jpeg_decoder}})
      .Set(1);
  f_->decode_limit->Set(static_cast<double>(decode_memory_limit));
  if (engine.kind == "cuda") {
    f_->gpu_held = &f_->gpu_memory.Add({{"state", "held"}});
    f_->gpu_free = &f_->gpu_memory.Add({{"state", "free"}});
    f_->gpu_total = &f_->gpu_memory.Add({{"state", "total"}});
    f_->lost = &f_->gpu_lost.Add({});
    f_->fallback_count = &f_->fallbacks.Add({});
  }
}

Metrics::~Metrics() = default;

void Metrics::serve(const std::string& address, MetricSources sources) {
  scrape_ = std::make_shared<Scrape>(registry_, *f_, std::move(sources));
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(address, 2);
  } catch (const std::exception& e) {
    fail(ErrorCode::kUnavailable, "cannot serve metrics on " + address + ": " + e.what());
  }
  exposer_->RegisterCollectable(scrape_);
  const std::vector<int> ports = exposer_->GetListeningPorts();
  port_ = ports.empty() ? 0 : ports.front();
}

void Metrics::call_ended(std::string_view method, grpc::StatusCode code, double secs) {
  const size_t m = method_index(method);
  f_->requests.Add({{"method", std::string(kMethods[m])}, {"code", status_code_name(code)}}).Increment();
  f_->call_seconds[m]->Observe(secs);
}

void Metrics::image(std::string_view method, grpc::StatusCode code, uint64_t input_bytes, double queue_seconds,
                    const v1::AnalyzeResponse* response) {
  const size_t m = method_index(method);
  f_->images.Add({{"method", std::string(kMethods[m])}, {"code", status_code_name(code)}}).Increment();
  const v1::AnalyzeResponse* ok = code == grpc::StatusCode::OK ? response : nullptr;
  f_->bytes[m]->Increment(static_cast<double>(input_bytes));
  f_->stage[m][0]->Observe(queue_seconds);
  if (!ok) return;
  f_->stage[m][1]->Observe(seconds(ok->decode_time()));
  f_->stage[m][2]->Observe(seconds(ok->compute_time()));
  f_->pixel_count[m]->Increment(static_cast<double>(uint64_t{ok->width()} * ok->height()));
  f_->served.Add({{"engine", ok->engine()}, {"decoder", ok->decoder().empty() ? "none" : ok->decoder()}}).Increment();
}

}  // namespace imgstat
