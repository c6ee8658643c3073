// What every handler needs: the call's context for the core, admission (the
// bound on calls in progress), the idle watch for streaming calls, errors as
// gRPC statuses, and what each request leaves behind: its log line and its
// metrics.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "core/analyzer.hpp"
#include "core/call_context.hpp"
#include "core/work_queue.hpp"
#include "imgstat/v1/imgstat.pb.h"
#include "service/operations/metrics.hpp"
#include "service/operations/request_log.hpp"

namespace imgstat {

using Clock = std::chrono::steady_clock;

// The caller's deadline and cancellation, as the core sees them.
CallContext call_context(grpc::CallbackServerContext* ctx, const Authenticator* auth);

// At most `max` calls in progress; none once closed (shutting down).
class Admission {
 public:
  explicit Admission(uint32_t max) : max_(max) {}
  // OK, or the status to refuse the call with; OK must be paired with leave().
  grpc::Status enter();
  void leave();
  void close() { closed_ = true; }
  uint32_t active() const { return active_; }

 private:
  const uint32_t max_;
  std::atomic<uint32_t> active_{0};
  std::atomic<bool> closed_{false};
};

// Streaming calls that wait on their client. A thread looks at each every
// so often; one that has waited past the timeout ends itself.
class IdleWatch {
 public:
  class Target {
   public:
    virtual ~Target() = default;
    // Called under the watch's lock: the target cannot be deleted meanwhile.
    virtual void check_idle(Clock::time_point now, Clock::duration timeout) = 0;
  };

  explicit IdleWatch(double timeout_seconds);
  ~IdleWatch();
  void add(Target* t);
  void remove(Target* t);

 private:
  void loop();

  const Clock::duration timeout_;
  // Recursive: a target that ends itself may be removed on the same thread.
  std::recursive_mutex mu_;
  std::set<Target*> targets_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

// Everything a reactor reaches, owned by the service.
struct CallEnv {
  const Analyzer& analyzer;
  WorkQueue& queue;
  Admission& admission;
  IdleWatch& idle;
  const Limits& limits;
  Metrics* metrics;           // null: none kept
  const Authenticator* auth;  // names callers in the log
  WorkQueue* fetch_queue = nullptr;  // null: the server fetches nothing (no --fetch-allow)

  // Queues fn for a worker. fn receives OK, or why it must not run: the
  // call ended while it waited, or it waited past the queue timeout; and
  // how long it waited. False when the queue is full (fn is not called).
  bool submit(const CallContext& call, std::function<void(const grpc::Status&, Clock::duration waited)> fn);
  // The same for a request that may name an object (Input.url): fetched
  // first on fetch_queue's threads, its bytes then put in *request as its
  // data (held in the decode memory until fn has run), and fn queued for a
  // worker; a fetch that fails is fn's status. An object larger than the
  // first request is analyzed there as it arrives (an upload of its
  // ranges): fn then gets its answer in `answered` (else null) and runs on
  // that thread. *request outlives fn.
  bool submit_request(const CallContext& call, v1::AnalyzeRequest* request,
                      std::function<void(const grpc::Status&, Clock::duration waited, v1::AnalyzeResponse* answered)> fn);

  // One image answered: its log line and its metrics.
  void record(const RequestRecord& r) const;
  // A call ended (for AnalyzeBatch, after its images).
  void call_ended(const char* method, const grpc::Status& status, Clock::time_point started) const;
};

double ms_since(Clock::time_point t);
double to_ms(Clock::duration d);

// Runs fn; an imgstat::Error becomes its status code, running out of memory
// RESOURCE_EXHAUSTED, anything else INTERNAL.
template <class Fn>
grpc::Status run_guarded(Fn&& fn);

grpc::Status status_of_current_exception();
// 30 -> "30", 0.25 -> "0.25": seconds as people write them, for messages.
std::string seconds_text(double seconds);
grpc::Status queue_full_status(const WorkQueue& queue);

template <class Fn>
grpc::Status run_guarded(Fn&& fn) {
  try {
    fn();
    return grpc::Status::OK;
  } catch (...) {
    return status_of_current_exception();
  }
}

}  // namespace imgstat
