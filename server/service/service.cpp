#include "service/service.hpp"

namespace imgstat {
namespace {

// Analyze: admitted, queued, analyzed on a worker, answered from there.
class AnalyzeReactor final : public grpc::ServerUnaryReactor {
 public:
  AnalyzeReactor(grpc::CallbackServerContext* ctx, const v1::AnalyzeRequest* request, v1::AnalyzeResponse* response,
                 CallEnv& env)
      : ctx_(ctx), request_(request), response_(response), env_(env) {
    const CallContext call = call_context(ctx);
    const bool queued = env_.submit(call, [this, call](const grpc::Status& why_not) {
      grpc::Status status = why_not;
      if (status.ok()) status = run_guarded([&] { *response_ = env_.analyzer.analyze(*request_, call); });
      finish(status);
    });
    if (!queued) finish(queue_full_status(env_.queue));
  }

  void OnDone() override {
    env_.admission.leave();
    delete this;
  }

 private:
  void finish(const grpc::Status& status) {
    log_request("Analyze", ctx_->peer(), request_->input(), response_, status, started_);
    Finish(status);
  }

  grpc::CallbackServerContext* ctx_;
  const v1::AnalyzeRequest* request_;
  v1::AnalyzeResponse* response_;
  CallEnv& env_;
  const Clock::time_point started_ = Clock::now();
};

template <class Reactor>
Reactor* refuse(grpc::CallbackServerContext* ctx, const grpc::Status& status);

template <>
grpc::ServerUnaryReactor* refuse(grpc::CallbackServerContext* ctx, const grpc::Status& status) {
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

// A streaming call refused at once: it reads nothing and ends.
template <class Base>
class Refusal final : public Base {
 public:
  explicit Refusal(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace

ImageStatsService::ImageStatsService(const Analyzer& analyzer, WorkQueue& queue)
    : admission_(analyzer.limits().max_concurrent),
      idle_(analyzer.limits().stream_idle_timeout_seconds),
      env_{analyzer, queue, admission_, idle_, analyzer.limits()} {}

ImageStatsService::~ImageStatsService() = default;

grpc::ServerUnaryReactor* ImageStatsService::Analyze(grpc::CallbackServerContext* ctx,
                                                      const v1::AnalyzeRequest* request,
                                                      v1::AnalyzeResponse* response) {
  const grpc::Status admitted = admission_.enter();
  if (!admitted.ok()) {
    log_request("Analyze", ctx->peer(), request->input(), nullptr, admitted, Clock::now());
    return refuse<grpc::ServerUnaryReactor>(ctx, admitted);
  }
  return new AnalyzeReactor(ctx, request, response, env_);
}

grpc::ServerReadReactor<v1::AnalyzeStreamRequest>* ImageStatsService::AnalyzeStream(grpc::CallbackServerContext* ctx,
                                                                                    v1::AnalyzeResponse* response) {
  const grpc::Status admitted = admission_.enter();
  if (!admitted.ok()) return new Refusal<grpc::ServerReadReactor<v1::AnalyzeStreamRequest>>(admitted);
  return make_stream_reactor(ctx, response, env_);
}

grpc::ServerBidiReactor<v1::BatchRequest, v1::BatchResponse>* ImageStatsService::AnalyzeBatch(
    grpc::CallbackServerContext* ctx) {
  const grpc::Status admitted = admission_.enter();
  if (!admitted.ok()) return new Refusal<grpc::ServerBidiReactor<v1::BatchRequest, v1::BatchResponse>>(admitted);
  return make_batch_reactor(ctx, env_);
}

grpc::ServerUnaryReactor* ImageStatsService::GetServerInfo(grpc::CallbackServerContext* ctx,
                                                            const v1::GetServerInfoRequest*,
                                                            v1::ServerInfo* response) {
  *response = env_.analyzer.server_info();
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace imgstat
