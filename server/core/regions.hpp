// Shared memory that callers on the same host register once and then name in
// their inputs, so the bytes reach the decoder or the engine without a copy.
//
// Safety: only a memfd sealed against shrinking (F_SEAL_SHRINK) is mapped
// (read-only, in place). A mapping of a file that shrinks under it raises
// SIGBUS on the next read, and a caller could do that mid-call; the seal
// makes the kernel refuse it instead. Any other regular file is never
// mapped: each use reads it (pread), and a short read is an error. Writing
// into the memory stays possible (a caller reuses its buffers), so a caller
// that writes while a call reads gets statistics of a mix, never a crash. Regions have an owner
// (the caller's name with tokens on, else everyone alike), limits per owner,
// and a session: the region socket connection that passed the descriptor.
// They go when unregistered, when the session ends, or with the table; calls
// that hold one (RegionBytes) keep it mapped until they finish.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/limits.hpp"
#include "imgstat/v1/imgstat.pb.h"

namespace imgstat {

class Region;

// The bytes an input names, mapped while this lives.
struct RegionBytes {
  std::shared_ptr<const Region> region;
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  bool on_device = false;  // data is a device address
  // A region that is read, not mapped: data is null, and the bytes are
  // [offset, offset + size) of this descriptor, read with read_region().
  int fd = -1;
  uint64_t offset = 0;
};

// Reads [at, at + n) of a read region's bytes into out; throws
// kFailedPrecondition when the file has been cut short.
void read_region(const RegionBytes& bytes, uint64_t at, uint64_t n, uint8_t* out);

class RegionTable {
 public:
  // Page-locks a region's memory for an engine (Engine::pin_host_memory);
  // null: nothing to do.
  using Pin = std::function<std::shared_ptr<void>(const void* data, size_t bytes)>;
  // Opens a CUDA IPC handle (Engine::open_ipc_memory); null: no GPU regions.
  using OpenIpc = std::function<std::shared_ptr<void>(const std::string& handle, uint64_t bytes)>;
  explicit RegionTable(const Limits& limits, Pin pin = {}, OpenIpc open_ipc = {});
  ~RegionTable();
  RegionTable(const RegionTable&) = delete;
  RegionTable& operator=(const RegionTable&) = delete;

  // The region socket's side. A session is one connection; each descriptor
  // it passes is checked (a regular file, sealed against shrinking) and
  // kept under a ticket until RegisterRegion takes it or it expires. The
  // table owns fd from the call on, whatever happens. Throws imgstat::Error.
  uint64_t open_session();
  std::string deposit(uint64_t session, int fd);
  // The session's own ticket, for GPU regions: one per session, reusable.
  std::string session_ticket(uint64_t session);
  void close_session(uint64_t session);

  // The RPCs' side; owner is the caller's name ("" without tokens).
  v1::Region register_region(const v1::RegisterRegionRequest& request, const std::string& owner);
  std::vector<v1::Region> list(const std::string& owner) const;
  void unregister(const std::string& region_id, const std::string& owner);
  RegionBytes resolve(const v1::RegionRef& ref, const std::string& owner) const;

  size_t regions() const;
  size_t pending_tickets() const;

 private:
  struct Ticket;
  struct Owner {
    uint32_t regions = 0;
    uint64_t bytes = 0;
  };
  void drop_expired_tickets();
  v1::Region register_device(const v1::RegisterRegionRequest& request, const std::string& owner);
  // Counts the region against its owner's limits and adds it, or throws.
  v1::Region admit(std::shared_ptr<Region> region);
  void check_room(const std::string& owner, uint64_t size) const;

  const Limits limits_;
  const Pin pin_;
  const OpenIpc open_ipc_;
  mutable std::mutex mu_;
  uint64_t next_session_ = 1;
  std::map<uint64_t, std::string> sessions_;  // session -> its own ticket, once asked for
  std::map<std::string, std::unique_ptr<Ticket>> tickets_;
  std::map<std::string, std::shared_ptr<Region>> regions_;
  std::map<std::string, Owner> owners_;
};

}  // namespace imgstat
