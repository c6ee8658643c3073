// Real processes for the integration tests: the server in the background
// with its log in a file, the client run to completion with its output.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace imgstat::testing {

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::string temp_path(const std::string& stem) {
  static int n = 0;
  return (std::filesystem::temp_directory_path() /
          (stem + "." + std::to_string(getpid()) + "." + std::to_string(n++)))
      .string();
}

// Starts argv with stdin from in_path (or /dev/null), stdout and stderr to files.
inline pid_t spawn(const std::vector<std::string>& argv, const std::string& out_path, const std::string& err_path,
                   const std::string& in_path = "/dev/null") {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, in_path.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("cannot start " + argv[0]);
  return pid;
}

// Exit status, or -1 after timeout_s (the process is then killed).
inline int wait_exit(pid_t pid, double timeout_s) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int status = 0;
  while (std::chrono::steady_clock::now() < end) {
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

struct ProcessResult {
  int code;
  std::string out;
  std::string err;
};

inline ProcessResult run_process(const std::vector<std::string>& argv, double timeout_s = 60, const std::string& in_path = "/dev/null") {
  const std::string out = temp_path("out"), err = temp_path("err");
  const pid_t pid = spawn(argv, out, err, in_path);
  ProcessResult r{wait_exit(pid, timeout_s), slurp(out), slurp(err)};
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

// The programs under test: the build's, or those named by the environment
// (to run the tests against another build, on another machine).
inline std::string program(const char* env, const char* built) {
  const char* p = std::getenv(env);
  return p && *p ? p : built;
}
inline std::string server_bin() { return program("IMGSTAT_SERVER_BIN", IMGSTAT_SERVER_BIN); }
inline std::string client_bin() { return program("IMGSTAT_CLIENT_BIN", IMGSTAT_CLIENT_BIN); }
// The engine the servers under test use: cpu unless IMGSTAT_TEST_ENGINE says.
inline std::string test_engine() { return program("IMGSTAT_TEST_ENGINE", "cpu"); }

// imgstat-server on a free loopback port.
class ServerProcess {
 public:
  explicit ServerProcess(std::vector<std::string> extra_args) : log_(temp_path("server-log")) {
    std::vector<std::string> argv = {server_bin()};
    if (std::find(extra_args.begin(), extra_args.end(), "--listen") == extra_args.end())
      argv.insert(argv.end(), {"--listen", "127.0.0.1:0"});
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    pid_ = spawn(argv, "/dev/null", log_);
    const std::regex listening(R"(listening on [^\s]+:(\d+))");
    for (int i = 0; i < 1000 && port_ == 0; ++i) {
      std::smatch m;
      const std::string log = slurp(log_);
      if (std::regex_search(log, m, listening)) port_ = std::stoi(m[1]);
      else std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (port_ == 0) throw std::runtime_error("server did not start: " + slurp(log_));
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      // A killed server leaves its region socket (the server's default place).
      const char* dir = std::getenv("XDG_RUNTIME_DIR");
      std::error_code ignored;
      std::filesystem::remove(std::string(dir && *dir ? dir : "/tmp") + "/imgstat-" + std::to_string(pid_) +
                                  "-regions.sock",
                              ignored);
    }
    std::filesystem::remove(log_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  // The port the log names after `what` ("metrics on http://127.0.0.1:"),
  // once it does; 0 when it has not within a few seconds.
  int logged_port(const std::string& what) const {
    for (int i = 0; i < 300; ++i) {
      const std::string text = log();
      const size_t at = text.find(what);
      if (at != std::string::npos) return std::atoi(text.c_str() + at + what.size());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return 0;
  }
  void send_signal(int sig) { kill(pid_, sig); }
  bool alive() const { return pid_ > 0 && kill(pid_, 0) == 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }
  // Resident memory now (VmRSS) and at its peak (VmHWM), in MiB.
  double rss_mib() const { return status_kib("VmRSS:") / 1024.0; }
  double peak_rss_mib() const { return status_kib("VmHWM:") / 1024.0; }
  std::string log() const { return slurp(log_); }
  // SIGTERM, then the exit status (-1 if it did not exit in time).
  int terminate(double timeout_s) {
    kill(pid_, SIGTERM);
    const int code = wait_exit(pid_, timeout_s);
    pid_ = -1;
    return code;
  }
  void signal_term() { kill(pid_, SIGTERM); }
  int wait(double timeout_s) {
    const int code = wait_exit(pid_, timeout_s);
    pid_ = -1;
    return code;
  }

 private:
  uint64_t status_kib(const std::string& key) const {
    std::istringstream in(slurp("/proc/" + std::to_string(pid_) + "/status"));
    std::string line;
    while (std::getline(in, line))
      if (line.rfind(key, 0) == 0) return std::stoull(line.substr(key.size()));
    return 0;
  }

  std::string log_;
  pid_t pid_ = -1;
  int port_ = 0;
};

}  // namespace imgstat::testing
