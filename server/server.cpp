#include "server.hpp"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include <chrono>
#include <climits>
#include <thread>

#include "service.hpp"
#include "workers.hpp"

namespace imgstat {

constexpr const char* kServiceName = "imgstat.v1.ImageStats";

std::shared_ptr<Engine> choose_engine(const ServerOptions& options, std::string* note) {
  if (options.engine == EngineKind::kCpu) return make_cpu_engine(options.threads);
  std::string why_not;
  if (auto cuda = make_cuda_engine(options.cuda_device, &why_not)) return cuda;
  if (options.engine == EngineKind::kCuda) fail(ErrorCode::kUnavailable, "--engine cuda: " + why_not);
  *note = "no usable CUDA device (" + why_not + "): using the CPU engine";
  return make_cpu_engine(options.threads);
}

Server::Server(const ServerOptions& options, std::shared_ptr<Engine> engine)
    : options_(options), engine_(std::move(engine)) {
  if (options_.threads == 0) options_.threads = std::max(1u, std::thread::hardware_concurrency());
  analyzer_ = std::make_unique<Analyzer>(engine_, options_.limits);
  workers_ = std::make_unique<Workers>(options_.threads);
  service_ = std::make_unique<ImageStatsService>(*analyzer_, *workers_);
}

Server::~Server() {
  if (server_) shutdown();
}

void Server::start() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.listen, grpc::InsecureServerCredentials(), &port_);
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min<uint64_t>(options_.limits.max_message_bytes, INT_MAX)));
  builder.SetMaxSendMessageSize(INT_MAX);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    server_.reset();
    fail(ErrorCode::kUnavailable, "cannot listen on " + options_.listen);
  }
  auto* health = server_->GetHealthCheckService();
  health->SetServingStatus(true);
  health->SetServingStatus(kServiceName, true);
}

void Server::shutdown() {
  if (!server_) return;
  server_->GetHealthCheckService()->SetServingStatus(false);
  const auto grace = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(options_.shutdown_grace_seconds));
  server_->Shutdown(std::chrono::system_clock::now() + grace);
  workers_->drain();
  server_->Wait();
  server_.reset();
}

}  // namespace imgstat
