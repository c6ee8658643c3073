// A library's decode run in a process of its own: cfitsio's tile decoders
// and GDCM's codecs trust the compressed bytes they are given (the fuzzers
// found reads past them that fault), so what they decode is decoded in a
// child (fork) writing into memory it shares with the caller. A fault
// there is that file's error, never the server's end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <shared_mutex>
#include <string>

namespace imgstat {

// Memory shared with the child, and what it holds once the child is done.
class IsolatedOutput {
 public:
  IsolatedOutput() = default;
  IsolatedOutput(IsolatedOutput&&) noexcept;
  IsolatedOutput& operator=(IsolatedOutput&&) noexcept;
  ~IsolatedOutput();
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  friend IsolatedOutput run_isolated(uint64_t, std::shared_mutex&, const std::function<std::string(uint8_t*)>&,
                                     const std::function<bool()>&, const std::string&);
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

// Runs decode(out) in a child with `bytes` of shared memory at out, its
// heap and CPU time bounded (isolated.cpp's tuning): a decoder that loops or
// allocates what a damaged file declares is ended. It
// returns "" when done, else its words for the error. `library`: held
// shared by every other use of the library, taken whole as the child is
// made, so that no thread is inside it (holding its locks) then. Throws
// kInvalidArgument naming `what` when the child fails or faults,
// kCancelled (the child killed), kResourceExhausted without memory.
IsolatedOutput run_isolated(uint64_t bytes, std::shared_mutex& library,
                            const std::function<std::string(uint8_t* out)>& decode,
                            const std::function<bool()>& cancelled, const std::string& what);

// Set in the child: code that would otherwise jump back into the caller's
// frames (an assertion handler) must end the child instead.
bool in_isolated_child();

}  // namespace imgstat
