// Lanes: AnalyzeBatch calls that carry small files, a few in flight on
// each, rather than a call each (calls.hpp says why).
#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>

#include "call_support.hpp"
#include "calls.hpp"

namespace imgstat::client {



// One AnalyzeBatch call carrying files as they come, each answered under its
// id in the order the server finishes them. It takes files while it is open
// and has room; it closes (WritesDone) once empty after taking no more: left
// idle, expired (with --timeout its call's deadline is --timeout from its
// start, and it takes files for the first quarter of that only, so each has
// at least three quarters of --timeout), or at the end. Its call ending
// hands back every file not yet answered (a killed server's), to go again.
//
// StartWrite and StartWritesDone are decided under mu_ and called outside
// it (a reaction may run on the calling thread); a hold keeps the call,
// and so this object, alive until no such call can come.
class Remote::Lane final : public grpc::ClientBidiReactor<v1::BatchRequest, v1::BatchResponse> {
 public:
  // until: its first file's deadline, the call's.
  Lane(Remote& owner, uint64_t id, size_t capacity, std::chrono::system_clock::time_point until)
      : owner_(owner), id_(id), capacity_(capacity) {
    if (owner.timeout_ > 0) {
      ctx_.set_deadline(until);
      const auto left = until - std::chrono::system_clock::now();
      takes_until_ = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         left - std::chrono::duration<double>(owner.timeout_ * 3 / 4));
    }
    if (!owner.authorization_.empty()) ctx_.AddMetadata("authorization", owner.authorization_);
    owner.stub_->async()->AnalyzeBatch(&ctx_, this);
    AddHold();
    StartRead(&response_);
    StartCall();
  }

  // What a lane was asked to do, done with no lock held: a reaction may run
  // on the calling thread. The lane stays alive until done: it holds its
  // call while a write is decided, and its hold goes last.
  struct Step {
    bool taken = false;
    const v1::BatchRequest* write = nullptr;
    bool writes_done = false;
    bool release = false;
  };
  void perform(const Step& step) {
    if (step.write) StartWrite(step.write);
    if (step.writes_done) StartWritesDone();
    if (step.release) RemoveHold();
  }

  // Takes the item if open and with room (then perform() sends it); a new
  // lane (first) takes it unless its call is already over. That happens:
  // with no server reachable a call can fail inside StartCall, its hold
  // given back before the first offer, and its OnDone waiting on lanes_mu_
  // to delete it.
  Step offer(const std::shared_ptr<BatchItem>& item, bool first = false) {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_ || !held_) return Step{};
    const auto now = std::chrono::steady_clock::now();
    if (!first && !closing_ &&
        (now >= takes_until_ || taken_ >= kLaneTurn || (pending_.empty() && now - last_ > kLaneIdle)))
      closing_ = true;
    if (!first && (closing_ || pending_.size() >= capacity_)) return decide();
    ++taken_;
    pending_.emplace(item->request.id(), item);
    to_write_.push_back(item);
    last_ = now;
    Step step;
    step.taken = true;
    if (!writing_) {
      writing_ = true;
      step.write = &to_write_.front()->request;
    }
    return step;
  }

  size_t load() {
    std::lock_guard<std::mutex> lock(mu_);
    return closing_ ? SIZE_MAX : pending_.size();
  }

  // Takes no more files, and closes once its files are answered.
  Step close() {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
    return decide();
  }

  uint64_t id() const { return id_; }

  void OnWriteDone(bool ok) override {
    Step step;
    {
      std::lock_guard<std::mutex> lock(mu_);
      to_write_.pop_front();
      if (!ok) {  // the call is over: the rest come back in OnDone
        closing_ = broken_ = true;
        to_write_.clear();
      }
      writing_ = !to_write_.empty();
      if (!writing_) step = decide();
      step.write = writing_ ? &to_write_.front()->request : nullptr;
    }
    perform(step);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the server finished the call: nothing more can be written either
      Step step;
      {
        std::lock_guard<std::mutex> lock(mu_);
        closing_ = broken_ = true;
        step = decide();
      }
      perform(step);
      return;
    }
    v1::BatchResponse got = std::move(response_);
    response_.Clear();
    std::shared_ptr<BatchItem> item;
    Step step;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto it = pending_.find(got.id());
      if (it != pending_.end()) {
        item = std::move(it->second);
        pending_.erase(it);
      }
      answered_ = true;
      last_ = std::chrono::steady_clock::now();
      step = decide();
    }
    StartRead(&response_);
    perform(step);
    if (!item) return;  // not ours: ignored
    if (got.has_error())
      owner_.item_done(std::move(item),
                       grpc::Status(static_cast<grpc::StatusCode>(got.error().code()), got.error().message()), {});
    else
      owner_.item_done(std::move(item), grpc::Status::OK, std::move(*got.mutable_response()));
  }

  void OnDone(const grpc::Status& status) override {
    std::vector<std::shared_ptr<BatchItem>> unanswered;
    for (auto& [id, item] : pending_) unanswered.push_back(std::move(item));
    Remote& owner = owner_;
    const uint64_t id = id_;
    const bool answered = answered_;
    {
      std::lock_guard<std::mutex> lock(owner.lanes_mu_);  // out of reach before it goes
      owner.lanes_.erase(id);
    }
    delete this;
    owner.lane_ended(id, status, answered, std::move(unanswered));
  }

 private:
  // Under mu_, with no write in flight: closing, and what that needs now.
  Step decide() {
    Step step;
    if (!closing_ || writing_) return step;
    if (!writes_done_ && !broken_ && pending_.empty()) step.writes_done = writes_done_ = true;
    if (held_ && (writes_done_ || broken_)) {
      step.release = true;
      held_ = false;
    }
    return step;
  }

  Remote& owner_;
  const uint64_t id_;
  const size_t capacity_;
  grpc::ClientContext ctx_;
  v1::BatchResponse response_;
  std::chrono::steady_clock::time_point takes_until_ = std::chrono::steady_clock::time_point::max();
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<BatchItem>> pending_;  // sent or queued, not answered
  std::deque<std::shared_ptr<BatchItem>> to_write_;           // front() is being written when writing_
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  bool writing_ = false;
  bool closing_ = false;
  bool broken_ = false;  // no more writes can go (the call is over)
  bool writes_done_ = false;
  bool held_ = true;
  bool answered_ = false;  // the server answered a file on it
  uint64_t taken_ = 0;     // files it took
};

size_t Remote::lane_capacity(std::chrono::system_clock::time_point until) {
  v1::ServerInfo info;
  const uint64_t window = server_info(until, &info) ? info.limits().batch_window() : 8;
  return static_cast<size_t>(std::clamp<uint64_t>(window, 1, kLaneFiles));
}

void Remote::send_on_lane(std::shared_ptr<BatchItem> item) {
  if (batch_refused_) {  // an older server: a call each
    auto call = std::make_shared<UnaryCall>(this);
    call->file = item->file;
    call->until = item->until;
    call->done = std::move(item->done);
    call->request = std::move(*item->request.mutable_request());
    call->attempt = item->attempt;
    call->backoff = item->backoff;
    call_unary(std::move(call));
    return;
  }
  const size_t capacity = lane_capacity(item->until);
  std::vector<std::pair<Lane*, Lane::Step>> steps;  // performed once lanes_mu_ is let go
  bool refused = false;
  {
    std::lock_guard<std::mutex> lock(lanes_mu_);
    std::vector<std::pair<size_t, Lane*>> open;
    for (auto& [id, l] : lanes_) open.emplace_back(l->load(), l);
    std::sort(open.begin(), open.end());
    bool taken = false;
    for (auto& [load, lane] : open) {
      if (load >= capacity) break;  // the rest are as full, or closing
      steps.emplace_back(lane, lane->offer(item));
      if ((taken = steps.back().second.taken)) break;
    }
    if (!taken) {
      const uint64_t id = next_lane_++;
      Lane* lane = new Lane(*this, id, capacity, item->until);
      lanes_.emplace(id, lane);
      ++lanes_alive_;
      steps.emplace_back(lane, lane->offer(item, true));
      refused = !steps.back().second.taken;
    }
  }
  // Only steps with something to do: a lane that had nothing to do here
  // may be gone by now.
  for (auto& [lane, step] : steps)
    if (step.write || step.writes_done || step.release) lane->perform(step);
  // A new lane whose call was over before it took the file: past the
  // file's deadline, or no server to be had. The file's call failed as a
  // unary one would have, and is retried as one.
  if (refused) {
    const bool late = std::chrono::system_clock::now() >= item->until;
    item_done(std::move(item),
              late ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded")
                   : grpc::Status(grpc::StatusCode::UNAVAILABLE, "the AnalyzeBatch call ended at once"),
              {});
  }
}

void Remote::item_done(std::shared_ptr<BatchItem> item, const grpc::Status& status, v1::AnalyzeResponse&& response) {
  if (retry_unavailable(status.error_code() == grpc::StatusCode::UNAVAILABLE, item->attempt, item->backoff,
                        item->until)) {
    ++item->attempt;
    const auto when = std::chrono::system_clock::now() + item->backoff;
    item->backoff *= 2;
    later(when, [this, item] { send_on_lane(item); });
    return;
  }
  item->done(outcome_of(item->file, status, std::move(response)));
}

void Remote::lane_ended(uint64_t, const grpc::Status& status, bool answered,
                        std::vector<std::shared_ptr<BatchItem>> unanswered) {
  // A server without AnalyzeBatch, or a token that may not call it (it may
  // call Analyze): a call a file from now on.
  if (!answered && (status.error_code() == grpc::StatusCode::UNIMPLEMENTED ||
                    status.error_code() == grpc::StatusCode::PERMISSION_DENIED))
    batch_refused_ = true;
  for (std::shared_ptr<BatchItem>& item : unanswered) {
    if (batch_refused_) {
      send_on_lane(std::move(item));
      continue;
    }
    // A call that ended well has answered everything; one that did not has
    // ended for all its files alike (a server gone: UNAVAILABLE, retried).
    const grpc::Status why = status.ok() ? grpc::Status(grpc::StatusCode::INTERNAL,
                                                        "the server ended the AnalyzeBatch call without answering")
                                         : status;
    item_done(std::move(item), why, {});
  }
  std::lock_guard<std::mutex> lock(lanes_mu_);  // last: the destructor may go on once this is 0
  --lanes_alive_;
  lanes_cv_.notify_all();
}


void Remote::close_lanes() {
  std::vector<std::pair<Lane*, Lane::Step>> steps;
  {
    std::lock_guard<std::mutex> lock(lanes_mu_);
    for (auto& [id, l] : lanes_) steps.emplace_back(l, l->close());
  }
  for (auto& [lane, step] : steps) lane->perform(step);
  std::unique_lock<std::mutex> lock(lanes_mu_);
  lanes_cv_.wait(lock, [&] { return lanes_alive_ == 0; });
}

}  // namespace imgstat::client
