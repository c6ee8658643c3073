// Uploads: the AnalyzeStream protocol without its transport. A header,
// then the input's bytes in chunks (and a mask or label image's after them,
// StreamHeader.map_bytes), held, spooled or fed to the engine as they come
// (Analyzer::begin_upload picks which).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/call_context.hpp"
#include "imgstat/v1/imgstat.pb.h"

namespace imgstat {

// One streamed upload: data chunks in order, then finish().
class Upload {
 public:
  virtual ~Upload() = default;
  virtual void add(std::string_view chunk) = 0;
  // The client has not sent the next chunk yet: give back what other calls
  // could use while it is awaited (StreamAnalysis::pause()).
  virtual void pause() {}
  virtual v1::AnalyzeResponse finish(const CallContext& call) = 0;
  // Bytes read from a region the header named (RegionUpload), once finished.
  virtual uint64_t region_bytes() const { return 0; }
  // The parts' mask or label image, sent after the input (StreamHeader.map_bytes):
  // given before finish(). Uploads that take no parts refuse it.
  virtual void set_map_data(std::string data);
};

class Analyzer;

// The AnalyzeStream protocol without its transport: a header first, then
// data chunks, in order. take() throws imgstat::Error naming what is wrong
// (no header, a second header, too many bytes, ...); end() finishes the upload.
class StreamAssembler {
 public:
  // call: the stream's, for the decode that may run while chunks arrive
  // (its deadline and caller; it ends when this does).
  explicit StreamAssembler(const Analyzer& analyzer, CallContext call = {})
      : analyzer_(analyzer), call_(std::move(call)) {}
  void take(const v1::AnalyzeStreamRequest& message);
  // A chunk message's bytes where they lie (a raw method's slices, in order).
  void take_chunk(const std::vector<std::string_view>& pieces);
  // Called when the next message is not yet there.
  void pause();
  v1::AnalyzeResponse end(const CallContext& call);
  // The bytes of a region the header named, once end() has read them.
  uint64_t region_bytes() const { return region_bytes_; }

 private:
  const Analyzer& analyzer_;
  const CallContext call_;
  std::unique_ptr<Upload> upload_;
  uint64_t region_bytes_ = 0;
};

}  // namespace imgstat
