// gRPC status codes by name ("INVALID_ARGUMENT"), for the server's log and
// the CLI's output alike.
#pragma once

#include <string>

namespace imgstat {

std::string status_code_name(int code);

}  // namespace imgstat
