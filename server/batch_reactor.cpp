// AnalyzeBatch: each request runs on the workers as soon as it is read; its
// response (or its error, under its id) is written when done, in completion
// order. At most kInFlight requests are held at once: reading pauses beyond.
//
// StartRead, StartWrite and Finish may run the next reaction on the calling
// thread, so they are decided under the lock and called outside it.
#include <chrono>
#include <deque>
#include <mutex>

#include "call_support.hpp"
#include "service.hpp"

namespace imgstat {
namespace {

constexpr size_t kInFlight = 64;

class BatchReactor final : public grpc::ServerBidiReactor<v1::BatchRequest, v1::BatchResponse> {
 public:
  BatchReactor(grpc::CallbackServerContext* ctx, const Analyzer& analyzer, Workers& workers)
      : ctx_(ctx), analyzer_(analyzer), workers_(workers) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    bool read_more = false, finish = false;
    std::shared_ptr<v1::BatchRequest> job;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!ok) {
        reads_done_ = true;
        finish = ready_to_finish();
      } else {
        // Moved out under the lock: a worker may restart reading into request_.
        job = std::make_shared<v1::BatchRequest>(std::move(request_));
        request_.Clear();
        ++in_flight_;
        read_more = in_flight_ < kInFlight;
        reading_ = read_more;
      }
    }
    if (job) workers_.submit([this, job] { run(*job); });
    if (read_more) StartRead(&request_);
    if (finish) Finish(final_status());
  }

  void OnWriteDone(bool ok) override {
    const v1::BatchResponse* next = nullptr;
    bool finish = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      outbox_.pop_front();
      if (!ok) {  // the client has gone: nothing more can be written
        broken_ = true;
        outbox_.clear();
      }
      writing_ = !outbox_.empty();
      if (writing_) next = &outbox_.front();
      finish = ready_to_finish();
    }
    if (next) StartWrite(next);
    if (finish) Finish(final_status());
  }

  void OnDone() override { delete this; }

 private:
  void run(const v1::BatchRequest& request) {
    const auto started = std::chrono::steady_clock::now();
    v1::BatchResponse response;
    response.set_id(request.id());
    const grpc::Status status =
        run_guarded([&] { *response.mutable_response() = analyzer_.analyze(request.request()); });
    if (!status.ok()) {
      response.mutable_error()->set_code(status.error_code());
      response.mutable_error()->set_message(status.error_message());
    }
    log_request("AnalyzeBatch", ctx_->peer(), request.request().input(),
                status.ok() ? &response.response() : nullptr, status, started);

    const v1::BatchResponse* write = nullptr;
    bool read_more = false, finish = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --in_flight_;
      if (!broken_) {
        outbox_.push_back(std::move(response));
        if (!writing_) {
          writing_ = true;
          write = &outbox_.front();
        }
      }
      if (!reading_ && !reads_done_ && in_flight_ < kInFlight) read_more = reading_ = true;
      finish = ready_to_finish();
    }
    if (write) StartWrite(write);
    if (read_more) StartRead(&request_);
    if (finish) Finish(final_status());
  }

  // Under mu_. True once, when nothing is left to read, run or write.
  bool ready_to_finish() {
    if (finished_ || !reads_done_ || in_flight_ > 0 || writing_) return false;
    finished_ = true;
    return true;
  }

  grpc::Status final_status() const {
    if (broken_ || ctx_->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
    return grpc::Status::OK;
  }

  grpc::CallbackServerContext* ctx_;
  const Analyzer& analyzer_;
  Workers& workers_;
  v1::BatchRequest request_;
  std::mutex mu_;
  std::deque<v1::BatchResponse> outbox_;  // front() is being written when writing_
  size_t in_flight_ = 0;
  bool reading_ = true;
  bool reads_done_ = false;
  bool writing_ = false;
  bool broken_ = false;
  bool finished_ = false;
};

}  // namespace

grpc::ServerBidiReactor<v1::BatchRequest, v1::BatchResponse>* make_batch_reactor(grpc::CallbackServerContext* ctx,
                                                                                 const Analyzer& analyzer,
                                                                                 Workers& workers) {
  return new BatchReactor(ctx, analyzer, workers);
}

}  // namespace imgstat
