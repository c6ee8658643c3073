#include "service/call_support.hpp"

#include <optional>

#include <spdlog/spdlog.h>

#include <new>

#include "core/address.hpp"
#include "core/limits.hpp"
#include "core/status_name.hpp"
#include "core/text.hpp"
#include "core/validate.hpp"
#include "imgstat/error.hpp"
#include "imgstat/trace.hpp"

namespace imgstat {

CallContext call_context(grpc::CallbackServerContext* ctx, const Authenticator* auth) {
  CallContext c;
  c.caller = caller_of(ctx, auth);
  c.same_host = is_loopback(ctx->peer());
  const auto deadline = ctx->deadline();
  const auto now = std::chrono::system_clock::now();
  // gRPC reports "no deadline" as the far future.
  if (deadline < now + std::chrono::hours(24 * 365))
    c.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(deadline - now);
  c.cancelled = [ctx] { return ctx->IsCancelled(); };
  return c;
}

grpc::Status Admission::enter() {
  if (closed_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down");
  if (active_.fetch_add(1) >= max_) {
    active_.fetch_sub(1);
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "the server is busy: " + std::to_string(max_) + " calls in progress (--max-concurrent)");
  }
  return grpc::Status::OK;
}

void Admission::leave() { active_.fetch_sub(1); }

IdleWatch::IdleWatch(double timeout_seconds)
    : timeout_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds))) {
  thread_ = std::thread([this] { loop(); });
}

IdleWatch::~IdleWatch() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

void IdleWatch::add(Target* t) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  targets_.insert(t);
}

void IdleWatch::remove(Target* t) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  targets_.erase(t);
}

void IdleWatch::loop() {
  const auto period = std::clamp<Clock::duration>(timeout_ / 4, std::chrono::milliseconds(5), std::chrono::seconds(1));
  std::unique_lock<std::mutex> stop(stop_mu_);
  while (!stop_cv_.wait_for(stop, period, [this] { return stopping_; })) {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    const auto now = Clock::now();
    // A copy: a target that ends itself may leave the set meanwhile.
    const std::vector<Target*> targets(targets_.begin(), targets_.end());
    for (Target* t : targets)
      if (targets_.count(t)) t->check_idle(now, timeout_);
  }
}

bool CallEnv::submit(const CallContext& call, std::function<void(const grpc::Status&, Clock::duration)> fn) {
  const auto queued = Clock::now();
  const auto patience = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limits.queue_timeout_seconds));
  return queue.submit([call, fn = std::move(fn), queued, patience] {
    const Clock::duration waited = Clock::now() - queued;
    grpc::Status why_not = run_guarded([&] { call.check("while queued"); });
    if (why_not.ok() && waited > patience)
      why_not = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "the server is overloaded: waited longer than "
                                                                   "the queue timeout for a worker");
    fn(why_not, waited);
  });
}

bool CallEnv::submit_request(const CallContext& call, v1::AnalyzeRequest* request,
                             std::function<void(const grpc::Status&, Clock::duration, v1::AnalyzeResponse*)> fn) {
  if (request->input().url().empty() || !fetch_queue)
    return submit(call, [fn = std::move(fn)](const grpc::Status& why_not, Clock::duration waited) { fn(why_not, waited, nullptr); });
  const auto queued = Clock::now();
  return fetch_queue->submit([this, call, request, fn = std::move(fn), queued] {
    auto lease = std::make_shared<MemoryBudget::Lease>();
    std::optional<v1::AnalyzeResponse> answered;
    grpc::Status status = run_guarded([&] {
      call.check("while waiting to fetch");
      Analyzer::Fetched fetched = analyzer.fetch_object(request->input(), call, request);
      if (fetched.answered) {
        answered = std::move(fetched.answered);
        return;
      }
      request->mutable_input()->clear_url();
      request->mutable_input()->clear_url_range();
      request->mutable_input()->set_data(std::move(fetched.bytes));
      *lease = std::move(fetched.lease);
    });
    if (!status.ok()) return fn(status, Clock::now() - queued, nullptr);
    if (answered) return fn(status, Clock::now() - queued, &*answered);
    if (!submit(call, [lease, fn](const grpc::Status& why_not, Clock::duration waited) { fn(why_not, waited, nullptr); }))
      fn(queue_full_status(queue), Clock::now() - queued, nullptr);
  });
}

double to_ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }
double ms_since(Clock::time_point t) { return to_ms(Clock::now() - t); }

void CallEnv::record(const RequestRecord& r) const {
  TraceRange range("request log and metrics");
  log_request(r);
  if (metrics) metrics->image(r.method, r.status.error_code(), r.input_bytes, r.queue_ms / 1e3, r.response);
}

void CallEnv::call_ended(const char* method, const grpc::Status& status, Clock::time_point started) const {
  if (metrics) metrics->call_ended(method, status.error_code(), ms_since(started) / 1e3);
}

std::string seconds_text(double seconds) { return fmt::format("{:g}", seconds); }

grpc::Status queue_full_status(const WorkQueue& queue) {
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                      "the server is overloaded: " + std::to_string(queue.waiting()) + " pieces of work wait (--max-queue)");
}

grpc::Status status_of_current_exception() {
  try {
    throw;
  } catch (const Error& e) {
    return grpc::Status(static_cast<grpc::StatusCode>(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::exception& e) {
    return grpc::Status(grpc::StatusCode::INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "internal error");
  }
}

}  // namespace imgstat
