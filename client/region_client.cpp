#include "region_client.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace imgstat::client {
namespace {

std::runtime_error system_error(const std::string& what) { return std::runtime_error(what + ": " + strerror(errno)); }

}  // namespace

int connect_unix_socket(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) throw std::runtime_error("no region socket path");
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) throw system_error("socket");
  if (connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const auto e = system_error(path);
    close(s);
    throw e;
  }
  return s;
}

ssize_t send_descriptors(int socket, const int* fds, size_t count) {
  constexpr size_t kMost = 4;
  if (count > kMost) throw std::invalid_argument("at most 4 descriptors");
  char byte = 'R';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(kMost * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (count > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(count * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(count * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds, count * sizeof(int));
  }
  ssize_t sent;
  do sent = sendmsg(socket, &msg, MSG_NOSIGNAL);
  while (sent < 0 && errno == EINTR);
  return sent;
}

RegionSocketClient::RegionSocketClient(const std::string& path) : socket_(connect_unix_socket(path)) {}

RegionSocketClient::~RegionSocketClient() { close(socket_); }

std::string RegionSocketClient::pass(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  const ssize_t sent = send_descriptors(socket_, &fd, fd >= 0 ? 1 : 0);
  if (sent != 1) throw system_error("passing the descriptor");
  std::string line;
  char ch;
  while (line.size() < 4096) {
    const ssize_t n = recv(socket_, &ch, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error("the region socket closed without an answer");
    if (ch == '\n') break;
    line += ch;
  }
  if (line.rfind("ok ", 0) == 0) return line.substr(3);
  throw std::runtime_error(line.rfind("error ", 0) == 0 ? line.substr(6) : "the region socket answered \"" + line + "\"");
}

}  // namespace imgstat::client
