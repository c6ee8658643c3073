// AnalyzeBatch: each request goes to the work queue as soon as it is read;
// its response (or its error, under its id) is written when done, in
// completion order. A request counts against --batch-window from the moment
// it is read until its answer is written, and reading pauses while the
// window is full: a client that sends and never reads holds at most that
// many requests and answers. A call that waits on its client (to send or to
// read) for --stream-idle-timeout is ended.
//
// StartRead, StartWrite and Finish may run the next reaction on the calling
// thread, so they are decided under the lock and called outside it.
#include <deque>
#include <mutex>

#include "service/call_support.hpp"
#include "service/service.hpp"

namespace imgstat {
namespace {

class BatchReactor final : public grpc::ServerBidiReactor<v1::BatchRequest, v1::BatchResponse>, IdleWatch::Target {
 public:
  BatchReactor(grpc::CallbackServerContext* ctx, CallEnv& env)
      : ctx_(ctx), env_(env), call_(call_context(ctx, env.auth)), id_(take_request_id(ctx)), window_(env.limits.batch_window) {
    env_.idle.add(this);
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    bool read_more = false, finish = false;
    std::shared_ptr<v1::BatchRequest> job;
    {
      std::lock_guard<std::mutex> lock(mu_);
      progress_ = Clock::now();
      reading_ = false;
      if (finished_) return;  // ended while this read was under way
      if (!ok) {
        reads_done_ = true;
        finish = ready_to_finish();
      } else {
        // Moved out under the lock: a worker may restart reading into request_.
        job = std::make_shared<v1::BatchRequest>(std::move(request_));
        request_.Clear();
        ++held_;
        ++running_;
        read_more = reading_ = held_ < window_ && !broken_;
      }
    }
    if (job && !env_.submit_request(call_, job->mutable_request(), [this, job](const grpc::Status& why_not, Clock::duration waited,
                                                                               v1::AnalyzeResponse* answered) {
          run(*job, why_not, waited, answered);
        }))
      run(*job, queue_full_status(env_.queue), {});
    if (read_more) StartRead(&request_);
    if (finish) end();
  }

  void OnWriteDone(bool ok) override {
    const v1::BatchResponse* next = nullptr;
    bool read_more = false, finish = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      progress_ = Clock::now();
      outbox_.pop_front();
      --held_;
      if (!ok) {  // the client has gone: nothing more can be written
        broken_ = true;
        held_ -= outbox_.size();
        outbox_.clear();
      }
      writing_ = !outbox_.empty() && !finished_;
      if (writing_) next = &outbox_.front();
      read_more = resume_reading();
      finish = ready_to_finish();
    }
    if (next) StartWrite(next);
    if (read_more) StartRead(&request_);
    if (finish) end();
  }

  void OnDone() override {
    env_.idle.remove(this);
    env_.admission.leave();
    delete this;
  }

  void check_idle(Clock::time_point now, Clock::duration timeout) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_ || running_ > 0 || !(reading_ || writing_) || now - progress_ < timeout) return;
      finished_ = true;
      idle_ = true;
    }
    end();
  }

 private:
  void end() {
    const grpc::Status status = final_status();
    env_.call_ended("AnalyzeBatch", status, started_);
    Finish(status);
  }

  void run(const v1::BatchRequest& request, const grpc::Status& why_not, Clock::duration waited,
           v1::AnalyzeResponse* answered = nullptr) {
    const auto started = Clock::now();
    v1::BatchResponse response;
    response.set_id(request.id());
    grpc::Status status = why_not;
    uint64_t input_bytes = request.request().input().data().size();  // or the region's part, once found
    if (status.ok() && answered)
      *response.mutable_response() = std::move(*answered);  // analyzed as it was fetched
    else if (status.ok())
      status = run_guarded(
          [&] { *response.mutable_response() = env_.analyzer.analyze(request.request(), call_, &input_bytes); });
    if (!status.ok()) {
      response.mutable_error()->set_code(status.error_code());
      response.mutable_error()->set_message(status.error_message());
    }
    env_.record({"AnalyzeBatch", id_, ctx_->peer(), caller_of(ctx_, env_.auth), request.request().input().name(),
                 input_bytes, status.ok() ? &response.response() : nullptr, status,
                 to_ms(waited), ms_since(started), request.id().empty() ? "-" : request.id()});

    const v1::BatchResponse* write = nullptr;
    bool read_more = false, finish = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --running_;
      if (broken_ || finished_) {
        --held_;
      } else {
        outbox_.push_back(std::move(response));
        if (!writing_) {
          writing_ = true;
          progress_ = Clock::now();
          write = &outbox_.front();
        }
      }
      read_more = resume_reading();
      finish = ready_to_finish();
    }
    if (write) StartWrite(write);
    if (read_more) StartRead(&request_);
    if (finish) end();
  }

  // Under mu_.
  bool resume_reading() {
    if (reading_ || reads_done_ || broken_ || finished_ || held_ >= window_) return false;
    reading_ = true;
    progress_ = Clock::now();
    return true;
  }

  // Under mu_. True once, when nothing is left to read, run or write.
  bool ready_to_finish() {
    if (finished_ || !(reads_done_ || broken_) || running_ > 0 || writing_) return false;
    finished_ = true;
    return true;
  }

  grpc::Status final_status() const {
    if (idle_)
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          "AnalyzeBatch waited on its client for " +
                              seconds_text(env_.limits.stream_idle_timeout_seconds) + " s (--stream-idle-timeout)");
    if (broken_ || ctx_->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
    return grpc::Status::OK;
  }

  grpc::CallbackServerContext* ctx_;
  CallEnv& env_;
  const CallContext call_;
  const std::string id_;
  const size_t window_;
  v1::BatchRequest request_;
  std::mutex mu_;
  std::deque<v1::BatchResponse> outbox_;  // front() is being written when writing_
  size_t held_ = 0;     // read and not yet answered: running, or in the outbox
  size_t running_ = 0;  // on the work queue
  bool reading_ = true;
  bool reads_done_ = false;
  bool writing_ = false;
  bool broken_ = false;
  bool finished_ = false;
  bool idle_ = false;
  Clock::time_point progress_ = Clock::now();  // last read, write or answer
  const Clock::time_point started_ = Clock::now();
};

}  // namespace

grpc::ServerBidiReactor<v1::BatchRequest, v1::BatchResponse>* make_batch_reactor(grpc::CallbackServerContext* ctx,
                                                                                 CallEnv& env) {
  return new BatchReactor(ctx, env);
}

}  // namespace imgstat
