#include "service.hpp"

#include "call_support.hpp"

namespace imgstat {

grpc::ServerUnaryReactor* ImageStatsService::Analyze(grpc::CallbackServerContext* ctx,
                                                      const v1::AnalyzeRequest* request,
                                                      v1::AnalyzeResponse* response) {
  auto* reactor = ctx->DefaultReactor();
  const auto started = std::chrono::steady_clock::now();
  workers_.submit([this, ctx, request, response, reactor, started] {
    grpc::Status status;
    if (ctx->IsCancelled())
      status = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled before it started");
    else
      status = run_guarded([&] { *response = analyzer_.analyze(*request); });
    log_request("Analyze", ctx->peer(), request->input(), response, status, started);
    reactor->Finish(status);
  });
  return reactor;
}

grpc::ServerReadReactor<v1::AnalyzeStreamRequest>* ImageStatsService::AnalyzeStream(grpc::CallbackServerContext* ctx,
                                                                                    v1::AnalyzeResponse* response) {
  return make_stream_reactor(ctx, response, analyzer_, workers_);
}

grpc::ServerBidiReactor<v1::BatchRequest, v1::BatchResponse>* ImageStatsService::AnalyzeBatch(
    grpc::CallbackServerContext* ctx) {
  return make_batch_reactor(ctx, analyzer_, workers_);
}

grpc::ServerUnaryReactor* ImageStatsService::GetServerInfo(grpc::CallbackServerContext* ctx,
                                                            const v1::GetServerInfoRequest*,
                                                            v1::ServerInfo* response) {
  *response = analyzer_.server_info();
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace imgstat
