#include "core/status_name.hpp"

namespace imgstat {

namespace {
const char* const kNames[] = {"OK",
                                 "CANCELLED",
                                 "UNKNOWN",
                                 "INVALID_ARGUMENT",
                                 "DEADLINE_EXCEEDED",
                                 "NOT_FOUND",
                                 "ALREADY_EXISTS",
                                 "PERMISSION_DENIED",
                                 "RESOURCE_EXHAUSTED",
                                 "FAILED_PRECONDITION",
                                 "ABORTED",
                                 "OUT_OF_RANGE",
                                 "UNIMPLEMENTED",
                                 "INTERNAL",
                                 "UNAVAILABLE",
                                 "DATA_LOSS",
                                 "UNAUTHENTICATED"};
}  // namespace

std::string status_code_name(int code) { return code >= 0 && code <= 16 ? kNames[code] : "UNKNOWN"; }

int status_code_of(const std::string& name) {
  for (int code = 0; code <= 16; ++code)
    if (name == kNames[code]) return code;
  return 2;
}

}  // namespace imgstat
