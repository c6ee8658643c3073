// One log line per request, as text (key=value) or as a JSON object for log
// shippers, with the request id the caller gave in x-request-id (or a new
// one) and returned to it in the response's metadata.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>
#include <string_view>

#include "imgstat/v1/imgstat.pb.h"

namespace imgstat {

class Authenticator;

enum class LogFormat { kText, kJson };

// Sets up the process's logger: stderr, the format, the level.
void configure_logging(LogFormat format, const std::string& level);

// `given` when it is 1 to 128 bytes of [A-Za-z0-9._:/+=~-] (a UUID, a trace
// id), else a new random id: an untrusted id never reaches the log as sent.
std::string accept_request_id(std::string_view given);

// The caller's id (x-request-id) or a new one, set on the response's
// initial metadata. Call before the call sends its initial metadata.
std::string take_request_id(grpc::CallbackServerContext* ctx);

// Who called, as authenticated: the token's name or the client
// certificate's identity; empty when neither.
std::string caller_of(const grpc::CallbackServerContext* ctx, const Authenticator* auth);

// What one request did.
struct RequestRecord {
  std::string_view method;
  std::string_view id;
  std::string_view peer;
  std::string_view caller;
  std::string_view input_name;  // untrusted: escaped and cut when written
  uint64_t input_bytes = 0;
  const v1::AnalyzeResponse* response = nullptr;  // when it succeeded
  grpc::Status status;
  double queue_ms = 0;
  double total_ms = 0;
  std::string_view item;  // AnalyzeBatch: the request's id within the call
};

void log_request(const RequestRecord& r);

// A call refused before any handler ran (authentication).
void log_refused(std::string_view method, std::string_view id, grpc::StatusCode code, std::string_view message);

}  // namespace imgstat
