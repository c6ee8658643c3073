// The CLI's two ways to get a result: from a server over gRPC, or in-process
// with the same analyzer and engine (--local).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "core/analyzer.hpp"
#include "imgstat/v1/imgstat.grpc.pb.h"
#include "render.hpp"
#include "sources.hpp"

namespace imgstat::client {

// What to send besides the data.
struct Request {
  v1::Input input;  // kind, raw layout, name; data left empty
  v1::Options options;
  bool force_stream = false;
  // Told of each piece of a streamed upload as it is written (its bytes).
  std::function<void(uint64_t)> on_sent;
};

class Remote {
 public:
  // timeout_seconds bounds each file's calls together (and --info's and
  // --health's); 0: no deadline.
  Remote(const std::string& target, double timeout_seconds);
  Outcome analyze(Source& source, const Request& request);
  // GetServerInfo; false with *error set when the call fails.
  bool info(v1::ServerInfo* out, std::string* error);
  // grpc.health.v1.Health/Check for the whole server: "SERVING", ...; false
  // when the call fails.
  bool health(std::string* status);

 private:
  std::chrono::system_clock::time_point deadline() const;
  bool info(v1::ServerInfo* out, std::string* error, std::chrono::system_clock::time_point until);
  uint64_t message_limit(std::chrono::system_clock::time_point until);

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ImageStats::Stub> stub_;
  double timeout_;
  std::atomic<uint64_t> message_limit_{0};  // asked once; files are analyzed concurrently
};

class Local {
 public:
  Local();
  Outcome analyze(Source& source, const Request& request);

 private:
  std::unique_ptr<Analyzer> analyzer_;
};

}  // namespace imgstat::client
