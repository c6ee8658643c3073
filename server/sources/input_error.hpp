// An input that cannot be read (a file, an archive's member, an object),
// with the gRPC status name that says why: one type wherever bytes come from.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace imgstat {

class InputError : public std::runtime_error {
 public:
  InputError(std::string code, const std::string& what) : std::runtime_error(what), code_(std::move(code)) {}
  const std::string& code() const { return code_; }

 private:
  std::string code_;
};

}  // namespace imgstat
