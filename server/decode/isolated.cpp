#include "decode/isolated.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "imgstat/error.hpp"

namespace imgstat {
namespace {
bool g_child = false;
constexpr size_t kWordsBytes = 4096;  // the child's verdict in words, before its output
// Tuning: the heap a decoder's process may grow by (its output is in the
// shared memory, not its heap): a tile or a frame's codec state.
constexpr unsigned long long kChildHeapBytes = 512ull << 20;
// Tuning: the CPU time a decoder's process may take: this, and a second for
// each kChildBytesPerSecond of output (codecs give hundreds of MB/s).
constexpr uint64_t kChildBaseSeconds = 5;
constexpr uint64_t kChildBytesPerSecond = uint64_t{20} << 20;
}  // namespace

bool in_isolated_child() { return g_child; }

IsolatedOutput::IsolatedOutput(IsolatedOutput&& o) noexcept { *this = std::move(o); }
IsolatedOutput& IsolatedOutput::operator=(IsolatedOutput&& o) noexcept {
  std::swap(map_, o.map_);
  std::swap(map_bytes_, o.map_bytes_);
  std::swap(data_, o.data_);
  std::swap(size_, o.size_);
  return *this;
}
IsolatedOutput::~IsolatedOutput() {
  if (map_) munmap(map_, map_bytes_);
}

IsolatedOutput run_isolated(uint64_t bytes, std::shared_mutex& library,
                            const std::function<std::string(uint8_t* out)>& decode,
                            const std::function<bool()>& cancelled, const std::string& what) {
  IsolatedOutput out;
  out.map_bytes_ = kWordsBytes + bytes;
  out.map_ = mmap(nullptr, out.map_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (out.map_ == MAP_FAILED) {
    out.map_ = nullptr;
    fail(ErrorCode::kResourceExhausted, what + ": no memory for what its decoder gives");
  }
  char* words = static_cast<char*>(out.map_);
  out.data_ = static_cast<uint8_t*>(out.map_) + kWordsBytes;
  out.size_ = bytes;
  pid_t pid;
  {
    std::unique_lock<std::shared_mutex> lock(library);
    pid = fork();
  }
  if (pid < 0) fail(ErrorCode::kResourceExhausted, what + ": cannot start its decoder's process (fork failed)");
  if (pid == 0) {
    g_child = true;
    // What the decoder says as it fails (a sanitizer's report included) is
    // not the server's to log: its verdict comes back in `words`.
    const int quiet = open("/dev/null", O_WRONLY);
    if (quiet >= 0) dup2(quiet, 2);
    // A decoder that loops on damaged data (fuzz_fits: cfitsio on a tile)
    // is ended by its CPU time: a few seconds, and more for more output
    // than any decoder takes to give it.
    const rlim_t seconds = static_cast<rlim_t>(kChildBaseSeconds + bytes / kChildBytesPerSecond);
    const rlimit cpu{seconds, seconds + 1};
    setrlimit(RLIMIT_CPU, &cpu);
    // What a decoder may allocate beyond what the child inherited: a length
    // a damaged file declares fails to allocate instead of being taken.
    if (FILE* status = std::fopen("/proc/self/status", "r")) {
      char line[256];
      unsigned long long data_kb = 0;
      while (std::fgets(line, sizeof line, status))
        if (std::sscanf(line, "VmData: %llu kB", &data_kb) == 1) break;
      std::fclose(status);
      if (data_kb) {
        const rlim_t limit = static_cast<rlim_t>(data_kb * 1024 + kChildHeapBytes);
        const rlimit r{limit, limit};
        setrlimit(RLIMIT_DATA, &r);
      }
    }
    std::string verdict;
    try {
      verdict = decode(out.data_);
    } catch (const std::exception& e) {
      verdict = e.what();
    } catch (...) {
      verdict = "its decoder failed";
    }
    if (!verdict.empty()) std::snprintf(words, kWordsBytes, "%s", verdict.c_str());
    _exit(verdict.empty() ? 0 : 1);
  }
  int status = 0;
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR) fail(ErrorCode::kInternal, what + ": lost its decoder's process");
    if (cancelled && cancelled()) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      fail(ErrorCode::kCancelled, "cancelled while decoding");
    }
    usleep(100);
  }
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGXCPU)
    fail(ErrorCode::kInvalidArgument, what + ": its decoder ran past its CPU time on it (it loops on damaged data)");
  if (WIFSIGNALED(status))
    fail(ErrorCode::kInvalidArgument, what + ": its decoder faulted on it (signal " + std::to_string(WTERMSIG(status)) +
                                          ", in a process of its own): corrupt data");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail(ErrorCode::kInvalidArgument,
         what + ": " + (words[0] ? std::string(words, strnlen(words, kWordsBytes)) : std::string("its decoder gave up")));
  return out;
}

}  // namespace imgstat
