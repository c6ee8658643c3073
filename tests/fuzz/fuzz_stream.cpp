// libFuzzer: the AnalyzeStream protocol: the bytes are cut into messages
// (a length byte, then that many bytes parsed as an AnalyzeStreamRequest),
// fed in order, then the stream is ended; after a message whose length byte
// is odd the stream pauses, as it does while its client is awaited. Headers
// may declare anything.
#include <cstddef>
#include <cstdint>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace imgstat;
  StreamAssembler stream(fuzz::analyzer());
  fuzz::expect_clean([&] {
    size_t at = 0;
    while (at < size) {
      const size_t n = std::min<size_t>(data[at], size - at - 1);
      v1::AnalyzeStreamRequest message;
      if (!message.ParseFromArray(data + at + 1, static_cast<int>(n))) message.set_chunk(data + at + 1, n);
      const bool pause = data[at] & 1;
      at += 1 + n;
      stream.take(message);
      if (pause) stream.pause();
    }
    stream.end({});
  });
  return 0;
}
