// What every handler needs: errors as gRPC statuses, and the one log line per
// request.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <string>

#include "imgstat/v1/imgstat.pb.h"

namespace imgstat {

// Runs fn; an imgstat::Error becomes its status code, running out of memory
// RESOURCE_EXHAUSTED, anything else INTERNAL.
template <class Fn>
grpc::Status run_guarded(Fn&& fn);

grpc::Status status_of_current_exception();

// One line to stderr: method, peer, input, what it was, engine, times, status.
void log_request(const char* method, const std::string& peer, const v1::Input& input,
                 const v1::AnalyzeResponse* response, const grpc::Status& status,
                 std::chrono::steady_clock::time_point started);

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
