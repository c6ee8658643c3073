// The caller's side of shared-memory regions (imgstat.v1 RegisterRegion):
// the region socket connection that passes descriptors (a sealed memfd the
// server maps, or any file it reads). The CLI and the C++ example use it.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

namespace imgstat::client {

// A connected Unix stream socket at path (close-on-exec); throws
// std::runtime_error when it cannot be reached.
int connect_unix_socket(const std::string& path);

// The protocol's question: one byte carrying `count` descriptors (0: the
// byte alone; at most 4) as SCM_RIGHTS. sendmsg's result, EINTR retried.
ssize_t send_descriptors(int socket, const int* fds, size_t count);

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
