// gRPC status codes by name ("INVALID_ARGUMENT"), for the server's log and
// the CLI's output alike.
#pragma once

#include <string>

namespace imgstat {

std::string status_code_name(int code);
// The code of a name status_code_name gives; UNKNOWN (2) for any other.
int status_code_of(const std::string& name);

}  // namespace imgstat
