// How the CLI shows a result: a table and a histogram drawing per channel,
// one JSON object per line, or CSV rows.
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
// RFC 4180 CSV: the header, then a row per channel (one row for a failed
// input), each line ending in a newline.
std::string render_csv_header();
std::string render_csv(const Outcome& o);

}  // namespace imgstat::client
