#include "service/operations/region_socket.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "imgstat/error.hpp"

namespace imgstat {
namespace {

// Descriptors one message may carry before the rest are closed unread.
constexpr int kMaxDescriptorsPerMessage = 4;

void close_all(const std::vector<int>& fds) {
  for (int fd : fds) close(fd);
}

// One byte and the descriptors that came with it; 0 when the peer closed, -1
// when nothing is ready (or an error ends the connection: *broken).
int receive(int fd, std::vector<int>* fds, bool* truncated, bool* broken) {
  char byte;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxDescriptorsPerMessage)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) {
    *broken = errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
    return -1;
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int passed;
        std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds->push_back(passed);
      }
    }
  *truncated = (msg.msg_flags & MSG_CTRUNC) != 0;
  return static_cast<int>(n);
}

// False when the answer cannot go out at once: the caller does not read.
bool answer(int fd, const std::string& line) {
  const ssize_t n = send(fd, line.data(), line.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  return n == static_cast<ssize_t>(line.size());
}

}  // namespace

std::string default_region_socket_path() {
  const char* dir = std::getenv("XDG_RUNTIME_DIR");
  std::string base = dir && *dir ? dir : "/tmp";
  return base + "/imgstat-" + std::to_string(getpid()) + "-regions.sock";
}

RegionSocket::RegionSocket(std::string path, std::shared_ptr<RegionTable> table)
    : path_(std::move(path)), table_(std::move(table)) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path_.empty() || path_.size() >= sizeof(addr.sun_path))
    fail(ErrorCode::kInvalidArgument, "--region-socket: a path of 1 to " + std::to_string(sizeof(addr.sun_path) - 1) +
                                          " bytes, not \"" + path_ + "\"");
  std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
  listener_ = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listener_ < 0) fail(ErrorCode::kUnavailable, std::string("region socket: ") + strerror(errno));
  struct stat st;
  if (lstat(path_.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) unlink(path_.c_str());  // a dead server's
  if (bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(listener_, 64) != 0) {
    const std::string why = strerror(errno);
    close(listener_);
    fail(ErrorCode::kUnavailable, "cannot listen on the region socket " + path_ + ": " + why);
  }
  chmod(path_.c_str(), 0666);
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    close(listener_);
    unlink(path_.c_str());
    fail(ErrorCode::kUnavailable, std::string("region socket: ") + strerror(errno));
  }
  thread_ = std::thread([this] { loop(); });
}

RegionSocket::~RegionSocket() {
  const char stop = 1;
  if (write(wake_[1], &stop, 1) < 0) {
  }
  thread_.join();
  close(listener_);
  close(wake_[0]);
  close(wake_[1]);
  unlink(path_.c_str());
}

void RegionSocket::loop() {
  std::map<int, uint64_t> sessions;  // connection -> its session in the table
  auto hang_up = [&](int fd) {
    table_->close_session(sessions[fd]);
    sessions.erase(fd);
    close(fd);
  };
  for (;;) {
    std::vector<pollfd> polled{{wake_[0], POLLIN, 0}, {listener_, POLLIN, 0}};
    for (const auto& [fd, _] : sessions) polled.push_back({fd, POLLIN, 0});
    if (poll(polled.data(), polled.size(), -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("region socket: poll: {}", strerror(errno));
      break;
    }
    if (polled[0].revents) break;
    if (polled[1].revents & POLLIN) {
      const int fd = accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        try {
          sessions[fd] = table_->open_session();
        } catch (const Error& e) {
          answer(fd, std::string("error ") + e.what() + "\n");
          sessions.erase(fd);
          close(fd);
        }
      }
    }
    for (size_t i = 2; i < polled.size(); ++i) {
      const int fd = polled[i].fd;
      if (!polled[i].revents) continue;
      std::vector<int> fds;
      bool truncated = false, broken = false;
      const int n = receive(fd, &fds, &truncated, &broken);
      if (n == 0 || broken) {
        close_all(fds);
        hang_up(fd);
        continue;
      }
      if (n < 0) continue;
      std::string line;
      if (fds.size() > 1 || truncated) {
        close_all(fds);
        line = "error send one descriptor (SCM_RIGHTS) with each byte, not several\n";
      } else {
        try {
          // A descriptor: a ticket for it. None: the connection's own ticket (GPU regions).
          line = "ok " + (fds.empty() ? table_->session_ticket(sessions[fd]) : table_->deposit(sessions[fd], fds[0])) + "\n";
        } catch (const Error& e) {
          line = std::string("error ") + e.what() + "\n";
        }
      }
      if (!answer(fd, line)) hang_up(fd);
    }
  }
  for (const auto& [fd, session] : sessions) {
    table_->close_session(session);
    close(fd);
  }
}

}  // namespace imgstat
