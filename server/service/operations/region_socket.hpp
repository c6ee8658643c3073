// The region socket: a Unix stream socket beside the gRPC port where
// callers on this host pass memfds (SCM_RIGHTS). gRPC cannot carry a file
// descriptor, and a name (a POSIX shared-memory object) can be cut short
// under the server's mapping; a passed, sealed memfd cannot.
//
// Protocol: the caller sends one byte with one descriptor attached; the
// server answers one line, "ok TICKET" or "error MESSAGE", and the caller
// registers the ticket with RegisterRegion. A byte without a descriptor gets
// the connection's own ticket, which registers GPU memory (CUDA IPC). The connection is the regions'
// lifetime: when it closes (the caller exits, say), the regions registered
// with its tickets go. One thread serves every connection without blocking:
// a caller that never reads its answers is disconnected.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "core/regions.hpp"

namespace imgstat {

class RegionSocket {
 public:
  // Listens on path, replacing a socket left there by a server that died;
  // any local user may connect (the socket is mode 0666: it takes
  // descriptors and hands out tickets, which RegisterRegion checks like any
  // call). Throws imgstat::Error (kUnavailable) when it cannot listen.
  RegionSocket(std::string path, std::shared_ptr<RegionTable> table);
  // Closes every connection (their regions go once no call holds them) and
  // removes the socket file.
  ~RegionSocket();
  RegionSocket(const RegionSocket&) = delete;
  RegionSocket& operator=(const RegionSocket&) = delete;

  const std::string& path() const { return path_; }

 private:
  void loop();

  const std::string path_;
  std::shared_ptr<RegionTable> table_;
  int listener_ = -1;
  int wake_[2] = {-1, -1};
  std::thread thread_;
};

// Where the server puts its region socket by default: $XDG_RUNTIME_DIR (or
// /tmp) / imgstat-PID-regions.sock.
std::string default_region_socket_path();

}  // namespace imgstat
