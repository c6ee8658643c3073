// The service's work without its transport: a request in, a response out.
// The gRPC handlers and the CLI's --local mode both run through here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "imgstat/engine.hpp"
#include "imgstat/v1/imgstat.pb.h"

namespace imgstat {

struct Limits {
  uint64_t max_message_bytes = uint64_t{64} << 20;
  uint64_t max_pixels = uint64_t{1} << 30;        // decoded images
  uint64_t max_input_bytes = uint64_t{16} << 30;  // AnalyzeStream uploads
};

// One streamed upload: data chunks in order, then finish().
class Upload {
 public:
  virtual ~Upload() = default;
  virtual void add(const std::string& chunk) = 0;
  virtual v1::AnalyzeResponse finish() = 0;
};

class Analyzer {
 public:
  Analyzer(std::shared_ptr<Engine> engine, Limits limits);

  // Each throws imgstat::Error naming what is wrong with the request.
  v1::AnalyzeResponse analyze(const v1::AnalyzeRequest& request) const;
  std::unique_ptr<Upload> begin_upload(const v1::StreamHeader& header) const;

  v1::ServerInfo server_info() const;
  const Limits& limits() const { return limits_; }

 private:
  std::shared_ptr<Engine> engine_;
  Limits limits_;
};

}  // namespace imgstat
