// Aggregate: many inputs merged here into one Partial. Each message's inputs
// go to the work queue one by one as the window allows (--batch-window
// inputs of one call analyzed or waiting at once); the next message is read
// only when the last one's inputs are all on their way and the window has
// room, so a call holds at most the window's inputs and one message's. Each
// answer is merged as it completes, with its place on the call, so that the
// partial's groups come in the order of their first inputs whatever order
// the analyses end in. A call that waits on its client for
// --stream-idle-timeout is ended.
//
// StartRead and Finish may run the next reaction on the calling thread, so
// they are decided under the lock and called outside it.
#include <algorithm>
#include <deque>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>

#include "core/aggregation.hpp"
#include "service/call_support.hpp"
#include "service/service.hpp"

namespace imgstat {
namespace {

struct AggregateItem {
  std::shared_ptr<v1::AggregateRequest> message;  // holds the input until it is taken
  int at = 0;                                     // its place in the message
  uint64_t index = 0;                             // its place on the call
};

class AggregateReactor final : public grpc::ServerReadReactor<v1::AggregateRequest>, IdleWatch::Target {
 public:
  AggregateReactor(grpc::CallbackServerContext* ctx, v1::AggregateResponse* response, CallEnv& env)
      : ctx_(ctx), response_(response), env_(env), call_(call_context(ctx, env.auth)), id_(take_request_id(ctx)),
        window_(std::max<uint32_t>(1, env.limits.batch_window)) {
    env_.idle.add(this);
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    Next next;
    {
      std::lock_guard<std::mutex> lock(mu_);
      progress_ = Clock::now();
      reading_ = false;
      if (finished_) return;  // ended while this read was under way
      if (!ok) {
        reads_done_ = true;
      } else if (const grpc::Status refused = take_message(); !refused.ok()) {
        error_ = refused;
      }
      next.items = take_items();
      next.read_more = resume_reading();
      next.finish = ready_to_finish();
    }
    launch(std::move(next));
  }

  void OnDone() override {
    env_.idle.remove(this);
    env_.admission.leave();
    delete this;
  }

  void check_idle(Clock::time_point now, Clock::duration timeout) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_ || running_ > 0 || !reading_ || now - progress_ < timeout) return;
      finished_ = true;
      error_ = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                            "Aggregate waited on its client for " +
                                seconds_text(env_.limits.stream_idle_timeout_seconds) + " s (--stream-idle-timeout)");
    }
    end();
  }

 private:
  // Under mu_: the message just read, checked and queued as items.
  grpc::Status take_message() {
    auto message = std::make_shared<v1::AggregateRequest>(std::move(request_));
    request_.Clear();
    if (!aggregation_) {
      if (!message->has_options())
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "Aggregate's first message must hold the options (AggregateRequest.options)");
      const grpc::Status made = run_guarded([&] { aggregation_.emplace(message->options()); });
      if (!made.ok()) return made;
      message->clear_options();
    } else if (message->has_options()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "Aggregate takes its options in the first message only");
    }
    if (static_cast<uint64_t>(message->inputs_size()) > kAggregateInputsPerMessage)
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "an Aggregate message of " + std::to_string(message->inputs_size()) +
                              " inputs (at most " + std::to_string(kAggregateInputsPerMessage) + ")");
    for (int i = 0; i < message->inputs_size(); ++i) pending_.push_back({message, i, next_index_++});
    return grpc::Status::OK;
  }

  // Under mu_: the items the window has room for now.
  std::vector<AggregateItem> take_items() {
    std::vector<AggregateItem> out;
    while (error_.ok() && !pending_.empty() && running_ < window_) {
      out.push_back(std::move(pending_.front()));
      pending_.pop_front();
      ++running_;
    }
    return out;
  }

  // What an input's end lets happen next (decided under mu_, done outside it).
  struct Next {
    std::vector<AggregateItem> items;
    bool read_more = false;
    bool finish = false;
  };

  // Queues the items; one the full queue refuses at once is settled here and
  // the items its place lets in are queued by this loop, not by recursion.
  void launch(Next next) {
    std::deque<AggregateItem> todo(std::make_move_iterator(next.items.begin()),
                                   std::make_move_iterator(next.items.end()));
    while (!todo.empty()) {
      AggregateItem item = std::move(todo.front());
      todo.pop_front();
      auto request = std::make_shared<v1::AnalyzeRequest>();
      request->mutable_input()->Swap(item.message->mutable_inputs(item.at));  // the bytes move, not copied
      item.message.reset();
      *request->mutable_options() = aggregation_->part_options();
      const uint64_t index = item.index;
      if (env_.submit_request(call_, request.get(),
                              [this, request, index](const grpc::Status& why_not, Clock::duration waited,
                                                     v1::AnalyzeResponse* answered) {
                                launch(analyzed(*request, index, why_not, waited, answered));
                              }))
        continue;
      Next more = analyzed(*request, index, queue_full_status(env_.queue), {}, nullptr);
      for (AggregateItem& i : more.items) todo.push_back(std::move(i));
      next.read_more |= more.read_more;
      next.finish |= more.finish;
    }
    if (next.read_more) StartRead(&request_);
    if (next.finish) end();
  }

  Next analyzed(const v1::AnalyzeRequest& request, uint64_t index, const grpc::Status& why_not, Clock::duration waited,
                v1::AnalyzeResponse* answered) {
    const auto started = Clock::now();
    v1::AnalyzeResponse response;
    grpc::Status status = why_not;
    uint64_t input_bytes = request.input().data().size();
    if (status.ok() && answered)
      response = std::move(*answered);
    else if (status.ok())
      status = run_guarded([&] { response = env_.analyzer.analyze(request, call_, &input_bytes); });
    if (status.ok()) {  // each series of a file of several joins its own kind, as the clients merge them
      std::string why;
      std::lock_guard<std::mutex> lock(merge_mu_);
      bool added = aggregation_->add(response, &why, index);
      for (int i = 0; added && i < response.other_series_size(); ++i)
        added = aggregation_->add(response.other_series(i), &why, index);
      if (added)
        ++merged_;
      else
        status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, why);
    }
    const std::string item = std::to_string(index);
    env_.record({"Aggregate", id_, ctx_->peer(), caller_of(ctx_, env_.auth), request.input().name(), input_bytes,
                 status.ok() ? &response : nullptr, status, to_ms(waited), ms_since(started), item});

    Next next;
    std::lock_guard<std::mutex> lock(mu_);
    --running_;
    progress_ = Clock::now();
    if (!status.ok()) {
      v1::AggregateFailure f;
      f.set_index(index);
      f.set_name(request.input().name());
      f.mutable_error()->set_code(status.error_code());
      f.mutable_error()->set_message(status.error_message());
      failures_.push_back(std::move(f));
    }
    if (!finished_) next.items = take_items();
    next.read_more = resume_reading();
    next.finish = ready_to_finish();
    return next;
  }

  // Under mu_.
  bool resume_reading() {
    if (reading_ || reads_done_ || finished_ || !error_.ok() || !pending_.empty() || running_ >= window_) return false;
    reading_ = true;
    progress_ = Clock::now();
    return true;
  }

  // Under mu_. True once: everything read and merged, or refused and nothing running.
  bool ready_to_finish() {
    if (finished_ || running_ > 0 || reading_) return false;
    if (error_.ok() && !(reads_done_ && pending_.empty())) return false;
    finished_ = true;
    return true;
  }

  void end() {
    grpc::Status status = error_;
    if (status.ok() && ctx_->IsCancelled()) status = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
    if (status.ok()) {
      status = run_guarded([&] {
        std::lock_guard<std::mutex> lock(merge_mu_);
        *response_->mutable_partial() = aggregation_ ? aggregation_->partial() : v1::Partial();
      });
      response_->set_inputs(merged_);
      std::sort(failures_.begin(), failures_.end(),
                [](const v1::AggregateFailure& a, const v1::AggregateFailure& b) { return a.index() < b.index(); });
      for (v1::AggregateFailure& f : failures_) *response_->add_failures() = std::move(f);
    }
    env_.call_ended("Aggregate", status, started_);
    Finish(status);
  }

  grpc::CallbackServerContext* ctx_;
  v1::AggregateResponse* response_;
  CallEnv& env_;
  const CallContext call_;
  const std::string id_;
  const size_t window_;
  v1::AggregateRequest request_;
  std::mutex mu_;
  std::deque<AggregateItem> pending_;  // read, not yet queued
  std::vector<v1::AggregateFailure> failures_;
  uint64_t next_index_ = 0;
  size_t running_ = 0;  // queued or being analyzed
  bool reading_ = true;
  bool reads_done_ = false;
  bool finished_ = false;
  grpc::Status error_;  // the call's own failure: nothing more is read
  // The merge, apart from mu_: an answer merges while others are read.
  std::mutex merge_mu_;
  std::optional<Aggregation> aggregation_;  // made from the first message
  uint64_t merged_ = 0;
  Clock::time_point progress_ = Clock::now();  // last read or answer
  const Clock::time_point started_ = Clock::now();
};

}  // namespace

grpc::ServerReadReactor<v1::AggregateRequest>* make_aggregate_reactor(grpc::CallbackServerContext* ctx,
                                                                      v1::AggregateResponse* response, CallEnv& env) {
  return new AggregateReactor(ctx, response, env);
}

}  // namespace imgstat
