// libFuzzer: any bytes as an AnalyzeRequest (raw layouts, strides, options,
// encoded data), through the analyzer's one front door on the CPU engine.
// Every outcome must be a response or an imgstat::Error.
#include <cstddef>
#include <cstdint>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  imgstat::v1::AnalyzeRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) {
    // Not a message: analyze the bytes as an encoded file instead.
    request.Clear();
    request.mutable_input()->set_data(data, size);
  }
  imgstat::fuzz::expect_clean([&] { imgstat::fuzz::analyzer().analyze(request); });
  return 0;
}
