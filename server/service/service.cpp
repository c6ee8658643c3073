#include "service/service.hpp"

namespace imgstat {
namespace {

// Analyze: admitted, queued, analyzed on a worker, answered from there.
class AnalyzeReactor final : public grpc::ServerUnaryReactor {
 public:
  AnalyzeReactor(grpc::CallbackServerContext* ctx, const v1::AnalyzeRequest* request, v1::AnalyzeResponse* response,
                 CallEnv& env)
      : ctx_(ctx), request_(request), response_(response), env_(env), id_(take_request_id(ctx)) {
    const CallContext call = call_context(ctx, env_.auth);
    // An object to fetch: the request's own copy takes its bytes.
    if (!request_->input().url().empty()) {
      fetched_ = *request_;
      analyzed_ = &fetched_;
    }
    const bool queued = env_.submit_request(call, &fetched_, [this, call](const grpc::Status& why_not, Clock::duration waited,
                                                                          v1::AnalyzeResponse* answered) {
      waited_ = waited;
      grpc::Status status = why_not;
      if (status.ok() && answered) *response_ = std::move(*answered);  // analyzed as it was fetched
      else if (status.ok()) status = run_guarded([&] { *response_ = env_.analyzer.analyze(*analyzed_, call, &input_bytes_); });
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
    env_.record({"Analyze", id_, ctx_->peer(), caller_of(ctx_, env_.auth), request_->input().name(), input_bytes_,
                 response_, status, to_ms(waited_), ms_since(started_)});
    env_.call_ended("Analyze", status, started_);
    Finish(status);
  }

  grpc::CallbackServerContext* ctx_;
  const v1::AnalyzeRequest* request_;
  v1::AnalyzeRequest fetched_;  // a request naming an object, its bytes fetched into it
  const v1::AnalyzeRequest* analyzed_ = request_;
  v1::AnalyzeResponse* response_;
  CallEnv& env_;
  const std::string id_;
  // The message's data, or the region's part once the analyzer has found it.
  uint64_t input_bytes_ = request_->input().data().size();
  Clock::duration waited_{};
  const Clock::time_point started_ = Clock::now();
};

// A call refused at admission still gets its id, its line and its count.
void note_refusal(const char* method, grpc::CallbackServerContext* ctx, const grpc::Status& status,
                  const CallEnv& env) {
  log_request({method, take_request_id(ctx), ctx->peer(), caller_of(ctx, env.auth), {}, 0, nullptr, status, 0, 0});
  env.call_ended(method, status, Clock::now());
}

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

ImageStatsService::ImageStatsService(const Analyzer& analyzer, WorkQueue& queue, Metrics* metrics,
                                     const Authenticator* auth)
    : admission_(analyzer.limits().max_concurrent),
      idle_(analyzer.limits().stream_idle_timeout_seconds),
      fetch_queue_(analyzer.limits().fetch_allow.empty()
                       ? nullptr
                       : std::make_unique<WorkQueue>(analyzer.limits().fetch_threads, analyzer.limits().max_queue)),
      env_{analyzer, queue, admission_, idle_, analyzer.limits(), metrics, auth, fetch_queue_.get()} {}

ImageStatsService::~ImageStatsService() {
  fetch_queue_.reset();  // its threads use env_: gone first
}

grpc::ServerUnaryReactor* ImageStatsService::Analyze(grpc::CallbackServerContext* ctx,
                                                      const v1::AnalyzeRequest* request,
                                                      v1::AnalyzeResponse* response) {
  const grpc::Status admitted = admission_.enter();
  if (!admitted.ok()) {
    note_refusal("Analyze", ctx, admitted, env_);
    return refuse<grpc::ServerUnaryReactor>(ctx, admitted);
  }
  return new AnalyzeReactor(ctx, request, response, env_);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* ImageStatsService::AnalyzeStream(grpc::CallbackServerContext* ctx,
                                                                           grpc::ByteBuffer* response) {
  const grpc::Status admitted = admission_.enter();
  if (!admitted.ok()) {
    note_refusal("AnalyzeStream", ctx, admitted, env_);
    return new Refusal<grpc::ServerReadReactor<grpc::ByteBuffer>>(admitted);
  }
  return make_stream_reactor(ctx, response, env_);
}

grpc::ServerBidiReactor<v1::BatchRequest, v1::BatchResponse>* ImageStatsService::AnalyzeBatch(
    grpc::CallbackServerContext* ctx) {
  const grpc::Status admitted = admission_.enter();
  if (!admitted.ok()) {
    note_refusal("AnalyzeBatch", ctx, admitted, env_);
    return new Refusal<grpc::ServerBidiReactor<v1::BatchRequest, v1::BatchResponse>>(admitted);
  }
  return make_batch_reactor(ctx, env_);
}

grpc::ServerReadReactor<v1::AggregateRequest>* ImageStatsService::Aggregate(grpc::CallbackServerContext* ctx,
                                                                            v1::AggregateResponse* response) {
  const grpc::Status admitted = admission_.enter();
  if (!admitted.ok()) {
    note_refusal("Aggregate", ctx, admitted, env_);
    return new Refusal<grpc::ServerReadReactor<v1::AggregateRequest>>(admitted);
  }
  return make_aggregate_reactor(ctx, response, env_);
}

grpc::ServerWriteReactor<v1::ListObjectsResponse>* ImageStatsService::ListObjects(
    grpc::CallbackServerContext* ctx, const v1::ListObjectsRequest* request) {
  const grpc::Status admitted = admission_.enter();
  if (!admitted.ok()) {
    note_refusal("ListObjects", ctx, admitted, env_);
    return new Refusal<grpc::ServerWriteReactor<v1::ListObjectsResponse>>(admitted);
  }
  return make_list_reactor(ctx, request, env_);
}

grpc::ServerUnaryReactor* ImageStatsService::GetServerInfo(grpc::CallbackServerContext* ctx,
                                                            const v1::GetServerInfoRequest*,
                                                            v1::ServerInfo* response) {
  const auto started = Clock::now();
  *response = env_.analyzer.server_info();
  log_request({"GetServerInfo", take_request_id(ctx), ctx->peer(), caller_of(ctx, env_.auth), {}, 0, nullptr,
               grpc::Status::OK, 0, ms_since(started)});
  env_.call_ended("GetServerInfo", grpc::Status::OK, started);
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

namespace {

// The region RPCs, on a worker: registering page-locks the memory for the
// GPU, which takes a while for large regions, and no reaction may block.
class RegionReactor final : public grpc::ServerUnaryReactor {
 public:
  using Work = std::function<void(RegionTable&, const CallContext&)>;
  RegionReactor(const char* method, grpc::CallbackServerContext* ctx, CallEnv& env, Work work)
      : method_(method), ctx_(ctx), env_(env), call_(call_context(ctx, env.auth)), work_(std::move(work)) {
    if (!env_.submit(call_, [this](const grpc::Status& why_not, Clock::duration) {
          finish(why_not.ok() ? run_guarded([&] { run(); }) : why_not);
        }))
      finish(queue_full_status(env_.queue));
  }
  void OnDone() override { delete this; }

 private:
  void run() {
    RegionTable* table = env_.analyzer.regions();
    if (!table) fail(ErrorCode::kFailedPrecondition, "this server offers no shared-memory regions (--region-socket off)");
    if (!call_.same_host)
      fail(ErrorCode::kPermissionDenied, "regions are for callers on the server's own host (loopback or Unix socket)");
    work_(*table, call_);
  }
  void finish(const grpc::Status& status) {
    log_request({method_, take_request_id(ctx_), ctx_->peer(), call_.caller, {}, 0, nullptr, status, 0, ms_since(started_)});
    env_.call_ended(method_, status, started_);
    Finish(status);
  }

  const char* method_;
  grpc::CallbackServerContext* ctx_;
  CallEnv& env_;
  const CallContext call_;
  Work work_;
  const Clock::time_point started_ = Clock::now();
};

}  // namespace

grpc::ServerUnaryReactor* ImageStatsService::RegisterRegion(grpc::CallbackServerContext* ctx,
                                                             const v1::RegisterRegionRequest* request,
                                                             v1::Region* response) {
  return new RegionReactor("RegisterRegion", ctx, env_, [=](RegionTable& table, const CallContext& call) {
    *response = table.register_region(*request, call.caller);
  });
}

grpc::ServerUnaryReactor* ImageStatsService::ListRegions(grpc::CallbackServerContext* ctx,
                                                          const v1::ListRegionsRequest*,
                                                          v1::ListRegionsResponse* response) {
  return new RegionReactor("ListRegions", ctx, env_, [=](RegionTable& table, const CallContext& call) {
    for (v1::Region& r : table.list(call.caller)) *response->add_regions() = std::move(r);
  });
}

grpc::ServerUnaryReactor* ImageStatsService::UnregisterRegion(grpc::CallbackServerContext* ctx,
                                                               const v1::UnregisterRegionRequest* request,
                                                               v1::UnregisterRegionResponse*) {
  return new RegionReactor("UnregisterRegion", ctx, env_, [=](RegionTable& table, const CallContext& call) {
    table.unregister(request->region_id(), call.caller);
  });
}

}  // namespace imgstat
