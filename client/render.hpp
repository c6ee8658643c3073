// How the CLI shows a result: a table and a histogram drawing per channel, or
// one JSON object per line.
#pragma once

#include <string>

#include "imgstat/v1/imgstat.pb.h"

namespace imgstat::client {

struct Outcome {
  std::string file;
  bool ok = false;
  v1::AnalyzeResponse response;
  std::string code;  // gRPC status name on failure
  std::string error;
};

std::string render_table(const Outcome& o, bool color);
std::string render_json(const Outcome& o);  // one line, no newline

}  // namespace imgstat::client
