// The one error type every layer throws; the server maps code to a gRPC status.
#pragma once

#include <stdexcept>
#include <string>

namespace imgstat {

// Values are those of google.rpc.Code, so the mapping to gRPC is a cast.
enum class ErrorCode : int {
  kCancelled = 1,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

[[noreturn]] inline void fail(ErrorCode code, const std::string& message) {
  throw Error(code, message);
}

// A request past one of its limits (more parts than allowed, an answer
// larger than a message): every engine refuses it alike, so it is never
// retried on another GPU or on the CPU.
class LimitError : public Error {
 public:
  using Error::Error;
};

[[noreturn]] inline void fail_limit(const std::string& message) {
  throw LimitError(ErrorCode::kResourceExhausted, message);
}

}  // namespace imgstat
