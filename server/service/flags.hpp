// imgstat-server's command line and IMGSTAT_* environment, read into the
// options the server is built from.
#pragma once

#include <string>

#include "service/operations/request_log.hpp"
#include "service/server.hpp"

namespace imgstat {

struct LogOptions {
  LogFormat format = LogFormat::kText;
  std::string level = "info";
};

// Fills `options` and `log` from argv and the environment. Returns the exit
// status when CLI11 has answered (--help, --version, a malformed flag), else
// -1, with *usage_error set when a value CLI11 let through is still wrong
// (for the log to say, once configured).
int parse_server_flags(int argc, char** argv, const char* version, ServerOptions& options, LogOptions& log,
                       std::string* usage_error);

}  // namespace imgstat
