// The caller's side of shared-memory regions (imgstat.v1 RegisterRegion): a
// memfd sealed so that the server can map it safely, and the region socket
// connection that passes it. The CLI and the C++ example use these.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

namespace imgstat::client {

// A memfd holding the file's bytes (copied by the kernel, not through this
// process), sealed against shrinking, growing and writing. Throws
// std::runtime_error. The caller closes it.
int sealed_memfd_of_file(const std::string& path, uint64_t size);

// A connection to the server's region socket (ServerInfo.region_socket).
// The regions registered with its tickets live until it closes.
class RegionSocketClient {
 public:
  // Throws std::runtime_error when the socket cannot be reached.
  explicit RegionSocketClient(const std::string& path);
  ~RegionSocketClient();
  RegionSocketClient(const RegionSocketClient&) = delete;
  RegionSocketClient& operator=(const RegionSocketClient&) = delete;

  // Passes fd (the server keeps its own copy) and returns the ticket for
  // RegisterRegion; throws std::runtime_error with the server's reason. A
  // negative fd sends the byte alone.
  std::string pass(int fd);
  // The connection's own ticket, for GPU regions (RegisterRegionRequest.cuda).
  std::string connection_ticket() { return pass(-1); }

 private:
  int socket_ = -1;
  std::mutex mu_;  // one question and its answer at a time
};

}  // namespace imgstat::client
