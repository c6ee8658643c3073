#include "service/server.hpp"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include <chrono>
#include <algorithm>
#include <climits>
#include <thread>

#include <spdlog/spdlog.h>

#include "service/operations/metrics.hpp"
#include "service/reflection_v1.hpp"
#include "service/operations/region_socket.hpp"
#include "service/operations/request_log.hpp"
#include "service/service.hpp"
#include "core/work_queue.hpp"

namespace imgstat {

constexpr const char* kServiceName = "imgstat.v1.ImageStats";

std::shared_ptr<Engine> choose_engine(const ServerOptions& options, std::string* note, bool* gpu_absent) {
  EngineOptions e;
  e.kind = options.engine;
  e.cpu_threads = options.threads;
  e.cuda_device = options.cuda_device;
  e.cuda_devices = options.cuda_devices;
  e.every_cuda_device = options.every_cuda_device;
  e.cuda_memory_limit = options.cuda_memory_limit;
  e.cuda_wait = options.cuda_wait;
  e.cuda_workspaces = options.cuda_workspaces;
  e.cuda_workspaces_at_start = true;  // no caller can make it commit more than its idle figure
  e.on_fallback = [](const std::string& why) { spdlog::warn("{}", why); };
  e.on_error = [](const std::string& what) { spdlog::error("{}", what); };
  return make_engine(e, note, gpu_absent);
}

unsigned default_decode_waiting_threads(const GpuJpegOptions& jpeg, size_t gpus) {
  const uint64_t n = uint64_t{2} * jpeg.lanes * jpeg.batch_max * std::max<size_t>(1, gpus);
  return static_cast<unsigned>(std::min<uint64_t>(n, kMaxDecodeWaitingThreads));
}

std::shared_ptr<GpuJpegDecoder> choose_gpu_jpeg(const ServerOptions& options, const Engine& engine, std::string* note) {
  if (!options.gpu_decode) {
    *note = "JPEG decodes on the CPU (--gpu-decode false)";
    return nullptr;
  }
  const std::shared_ptr<Placement> placement = engine.placement();
  if (!engine.takes_device_images() || !placement) return nullptr;  // the CPU engine: nothing to say
  // Lanes of their own on each GPU, so that each GPU's JPEGs batch together.
  std::vector<std::unique_ptr<GpuJpegDecoder>> decoders;
  std::string why;
  bool any = false;
  for (size_t slot = 0; slot < placement->size(); ++slot) {
    GpuJpegOptions o = options.gpu_jpeg;
    o.device = placement->device(slot);
    std::string why_here;
    decoders.push_back(open_gpu_jpeg_decoder(o, &why_here));
    any |= decoders.back() != nullptr;
    if (!decoders.back() && why.empty()) why = why_here;
  }
  if (!any) {
    *note = "JPEG decodes on the CPU: " + why;
    return nullptr;
  }
  std::shared_ptr<GpuJpegDecoder> d = make_placed_gpu_jpeg_decoder(std::move(decoders), placement);
  *note = "JPEG decodes on the GPU: " + d->description();
  return d;
}

Server::Server(const ServerOptions& options, std::shared_ptr<Engine> engine, std::shared_ptr<GpuJpegDecoder> gpu_jpeg)
    : options_(options), engine_(std::move(engine)) {
  if (options_.threads == 0) options_.threads = std::max(1u, std::thread::hardware_concurrency());
  options_.limits = resolve(options_.limits, options_.threads);
  std::shared_ptr<RegionTable> regions;
  if (options_.region_socket != "off")
    regions = std::make_shared<RegionTable>(
        options_.limits,
        [engine = engine_](const void* data, size_t bytes) { return engine->pin_host_memory(data, bytes); },
        [engine = engine_](const std::string& handle, uint64_t bytes) { return engine->open_ipc_memory(handle, bytes); });
  if (gpu_jpeg) {
    const std::shared_ptr<Placement> placement = engine_->placement();
    decode_waiting_threads_ = std::min(options_.decode_waiting_threads.value_or(default_decode_waiting_threads(
                                  options_.gpu_jpeg, placement ? placement->size() : 1)),
                              kMaxDecodeWaitingThreads);
  }
  analyzer_ = std::make_unique<Analyzer>(engine_, options_.limits, std::move(gpu_jpeg), regions);
  queue_ = std::make_unique<WorkQueue>(options_.threads, options_.limits.max_queue, decode_waiting_threads_);
  if (!options_.metrics_listen.empty()) {
    const std::string decoder = analyzer_->server_info().gpu_decoder();
    metrics_ = std::make_unique<Metrics>(engine_->info(), decoder.empty() ? "cpu" : decoder,
                                         options_.limits.max_decode_memory);
  }
  auth_ = std::make_shared<Authenticator>(
      options_.security.auth_token_file,
      [metrics = metrics_.get()](const std::string& method, const std::string& id, const Authenticator::Decision& d) {
        log_refused(method, id, d.code, d.message);
        if (metrics) metrics->call_ended(method, d.code, 0);
      });
  service_ = std::make_unique<ImageStatsService>(*analyzer_, *queue_, metrics_.get(), auth_.get());
}

int Server::metrics_port() const { return metrics_ ? metrics_->port() : 0; }

std::string Server::reload() {
  std::string note;
  if (auth_->enabled()) {
    auth_->reload();
    note = "tokens re-read: " + std::to_string(auth_->token_count()) + " in " + options_.security.auth_token_file;
  }
  if (!options_.security.tls_cert.empty()) {
    if (!note.empty()) note += "; ";
    note += "certificate on disk: " + describe_certificate(options_.security.tls_cert) + " (served within " +
            std::to_string(options_.security.tls_reload_seconds) + " s of a change)";
  }
  return note.empty() ? "nothing to reload: no tokens, no TLS" : note;
}

Server::~Server() {
  if (server_) shutdown();
}

void Server::start() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  security_note_ = check_security(options_.security, options_.listen);
  const bool tls = !options_.security.tls_cert.empty();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.listen,
                           make_server_credentials(options_.security, tls, auth_, Authenticator::Port::kService),
                           &port_);
  if (!options_.health_listen.empty())
    builder.AddListeningPort(options_.health_listen,
                             make_server_credentials(options_.security, false, auth_, Authenticator::Port::kHealthOnly),
                             &health_port_);
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min<uint64_t>(options_.limits.max_message_bytes, INT_MAX)));
  builder.SetMaxSendMessageSize(INT_MAX);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, kMinClientPingIntervalMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, kServerPingIntervalMs);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kServerPingTimeoutMs);
  if (options_.limits.max_connection_age_seconds > 0) {
    auto ms = [](double s) { return static_cast<int>(std::min(s * 1000, double{INT_MAX})); };
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, ms(options_.limits.max_connection_age_seconds));
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS, ms(options_.shutdown_grace_seconds));
  }
  builder.RegisterService(service_.get());
  reflection_v1_ = std::make_unique<ReflectionV1>(std::vector<std::string>{
      kServiceName, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
      "grpc.reflection.v1alpha.ServerReflection"});
  builder.RegisterService(reflection_v1_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0 || (!options_.health_listen.empty() && health_port_ == 0)) {
    server_.reset();
    fail(ErrorCode::kUnavailable, "cannot listen on " + options_.listen +
                                      (options_.health_listen.empty() ? "" : " and " + options_.health_listen));
  }
  if (analyzer_->regions()) {
    const std::string path =
        options_.region_socket == "auto" ? default_region_socket_path() : options_.region_socket;
    region_socket_ = std::make_unique<RegionSocket>(path, analyzer_->shared_regions());
    analyzer_->set_region_socket(path);
  }
  if (metrics_) {
    MetricSources sources;
    sources.calls_in_progress = [this] { return service_->calls_in_progress(); };
    sources.queue_length = [this] { return queue_->waiting(); };
    sources.decode_memory_in_use = [this] { return analyzer_->budget().in_use(); };
    sources.decode_memory_waiting = [this] { return analyzer_->budget().waiting(); };
    sources.engine_usage = [this] { return engine_->usage(); };
    if (const std::shared_ptr<Placement> placement = engine_->placement())
      sources.gpus = [placement] { return placement->status(); };
    metrics_->serve(options_.metrics_listen, std::move(sources));
  }
  auto* health = server_->GetHealthCheckService();
  health->SetServingStatus(true);
  health->SetServingStatus(kServiceName, true);
}

void Server::shutdown() {
  if (!server_) return;
  // NOT_SERVING for every service, and no later change (Watch streams see it).
  server_->GetHealthCheckService()->Shutdown();
  service_->stop_admitting();
  const auto grace_end = std::chrono::steady_clock::now() +
                         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                             std::chrono::duration<double>(options_.shutdown_grace_seconds));
  // Only imgstat's own calls are waited for: a health Watch stream never
  // ends by itself and would hold the whole grace period.
  while (service_->calls_in_progress() > 0 && std::chrono::steady_clock::now() < grace_end)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  server_->Shutdown(std::chrono::system_clock::now());  // cancels what is left, Watch streams included
  service_->drain_fetches();  // a fetch ends by queueing its analysis (or failing): before the workers drain
  queue_->drain();
  server_->Wait();
  server_.reset();
  region_socket_.reset();  // its connections' regions go
}

}  // namespace imgstat
