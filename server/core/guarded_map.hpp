// A caller's file (a region that is read) mapped read-only, so that a
// decoder reads it where it lies instead of from a copy in the spool, and
// safe against the caller cutting the file short meanwhile: touching a page
// past the file's end raises SIGBUS, which a handler of ours answers by
// putting zero pages over the rest of the mapping and marking it cut; the
// call then fails (kFailedPrecondition) instead of the server.
#pragma once

#include <cstdint>
#include <memory>

namespace imgstat {

class GuardedMap {
 public:
  // [offset, offset + size) of fd, read-only; null when it cannot be mapped
  // (or every guard slot is taken): read it another way.
  static std::unique_ptr<GuardedMap> map(int fd, uint64_t offset, uint64_t size);
  ~GuardedMap();
  GuardedMap(const GuardedMap&) = delete;
  GuardedMap& operator=(const GuardedMap&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  // The bytes [begin, end) are done with for now: their pages leave this
  // process (the file keeps them; they are read again if touched).
  void release(uint64_t begin, uint64_t end) const;
  // Whether the file was cut short: a page past its end was touched (zeros
  // were read there), or it now ends before the mapping does.
  bool cut() const;

 private:
  GuardedMap() = default;
  int fd_ = -1;
  uint8_t* base_ = nullptr;  // page-aligned start of the mapping
  uint64_t length_ = 0;      // of the mapping
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0, end_in_file_ = 0;
  int slot_ = -1;
};

}  // namespace imgstat
