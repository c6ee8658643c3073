// AnalyzeStream: a header, then data chunks in order. Raw pixels and bytes go
// to the engine as each chunk arrives, on this callback (the engine's feed is
// short: a copy for CUDA, one parallel pass over the chunk on the CPU), while
// gRPC keeps receiving the next ones; decoding an encoded upload, the long
// part, runs on the workers.
#include <chrono>

#include "call_support.hpp"
#include "service.hpp"

namespace imgstat {
namespace {

class StreamReactor final : public grpc::ServerReadReactor<v1::AnalyzeStreamRequest> {
 public:
  StreamReactor(grpc::CallbackServerContext* ctx, v1::AnalyzeResponse* response, const Analyzer& analyzer,
                Workers& workers)
      : ctx_(ctx), response_(response), analyzer_(analyzer), workers_(workers) {
    StartRead(&message_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client has sent everything (or gave up)
      if (ctx_->IsCancelled()) return finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
      if (!upload_)
        return finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "AnalyzeStream received no header"));
      workers_.submit([this] {
        finish(run_guarded([&] { *response_ = upload_->finish(); }));
      });
      return;
    }
    grpc::Status status = run_guarded([&] {
      if (!upload_) {
        if (!message_.has_header())
          fail(ErrorCode::kInvalidArgument, "the first AnalyzeStream message must be a header");
        input_ = message_.header().input();
        upload_ = analyzer_.begin_upload(message_.header());
      } else if (message_.has_header()) {
        fail(ErrorCode::kInvalidArgument, "AnalyzeStream received a second header");
      } else {
        upload_->add(message_.chunk());
      }
    });
    if (!status.ok()) return finish(status);
    StartRead(&message_);
  }

  void OnDone() override { delete this; }

 private:
  void finish(const grpc::Status& status) {
    log_request("AnalyzeStream", ctx_->peer(), input_, response_, status, started_);
    Finish(status);
  }

  grpc::CallbackServerContext* ctx_;
  v1::AnalyzeResponse* response_;
  const Analyzer& analyzer_;
  Workers& workers_;
  v1::AnalyzeStreamRequest message_;
  v1::Input input_;  // the header's, for the log
  std::unique_ptr<Upload> upload_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace

grpc::ServerReadReactor<v1::AnalyzeStreamRequest>* make_stream_reactor(grpc::CallbackServerContext* ctx,
                                                                      v1::AnalyzeResponse* response,
                                                                      const Analyzer& analyzer, Workers& workers) {
  return new StreamReactor(ctx, response, analyzer, workers);
}

}  // namespace imgstat
