// Large encoded uploads (PNG, TIFF) are written to an unlinked file as they
// arrive, as web servers spool request bodies (nginx's
// client_body_temp_path). The decoder reads the file through a mapping and
// drops the pages it is done with: a call holds what is in flight, not the
// whole file, and the whole file is still there should the decode have to
// start over with OpenCV. The files' pages are the kernel's page cache,
// written to disk under memory pressure, freed when the call ends.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "core/budget.hpp"

namespace imgstat {

class SpoolFile;

class Spool {
 public:
  // dir: where the files go; "" keeps uploads in memory. capacity: bytes
  // all files may hold together (--max-spool-bytes).
  Spool(std::string dir, uint64_t capacity);
  bool enabled() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }
  uint64_t capacity() const { return budget_.capacity(); }
  uint64_t in_use() const { return budget_.in_use(); }
  // For the server's start: where uploads go, and "WARNING: " first where
  // that is memory after all (a tmpfs) or cannot be written.
  std::string startup_note() const;
  // A file for an upload of `total` bytes; null where none can be made
  // (logged once): the upload stays in memory.
  std::shared_ptr<SpoolFile> open(uint64_t total);

 private:
  friend class SpoolFile;
  const std::string dir_;
  MemoryBudget budget_;
  std::atomic<bool> warned_{false};
};

class SpoolFile {
 public:
  ~SpoolFile();
  SpoolFile(const SpoolFile&) = delete;
  SpoolFile& operator=(const SpoolFile&) = delete;

  // Writes the next bytes. Throws kInvalidArgument past the total,
  // kResourceExhausted when the spool (--max-spool-bytes) or its disk is full.
  void append(const uint8_t* p, size_t n);
  // The whole file, mapped: bytes past received() are not there yet.
  const uint8_t* data() const { return map_; }
  uint64_t size() const { return total_; }
  uint64_t received() const { return received_.load(std::memory_order_acquire); }
  // Blocks until bytes [0, end) are written; how many are. Throws the
  // reason given to abort(), should it come first.
  uint64_t wait_for(uint64_t end);
  // Wakes and fails every wait, now and later: the upload ended short, or the call ended.
  void abort(ErrorCode code, std::string why);
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  // The mapping's whole pages in [begin, end) go back (read again from the
  // file should they be needed).
  void release(uint64_t begin, uint64_t end);

 private:
  friend class Spool;
  SpoolFile(Spool& spool, int fd, uint8_t* map, uint64_t total) : spool_(spool), fd_(fd), map_(map), total_(total) {}

  Spool& spool_;
  const int fd_;
  uint8_t* const map_;
  const uint64_t total_;
  MemoryBudget::Lease lease_;  // of the spool's capacity: the bytes written
  std::atomic<uint64_t> received_{0};
  std::atomic<bool> aborted_{false};
  std::mutex mu_;
  std::condition_variable arrived_;
  ErrorCode abort_code_ = ErrorCode::kCancelled;
  std::string abort_why_;
};

}  // namespace imgstat
