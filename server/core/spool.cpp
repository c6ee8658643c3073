#include "core/spool.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/limits.hpp"
#include "imgstat/error.hpp"

namespace imgstat {
namespace {

// An unlinked file in dir: gone with its last descriptor, whatever happens.
int unlinked_file(const std::string& dir) {
#ifdef O_TMPFILE
  const int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_EXCL | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
#endif
  std::string path = dir + "/imgstat-upload-XXXXXX";
  const int named = ::mkostemp(path.data(), O_CLOEXEC);  // file systems without O_TMPFILE (overlayfs)
  if (named >= 0) ::unlink(path.c_str());
  return named;
}

}  // namespace

Spool::Spool(std::string dir, uint64_t capacity) : dir_(std::move(dir)), budget_(capacity, 0) {}

std::string Spool::startup_note() const {
  if (!enabled()) return "uploads: held in memory (--spool-dir none)";
  const int fd = unlinked_file(dir_);
  if (fd < 0)
    return "WARNING: uploads are held in memory: the spool directory " + dir_ + " cannot be written (" +
           std::strerror(errno) + "); set --spool-dir";
  ::close(fd);
  struct statfs fs {};
  if (::statfs(dir_.c_str(), &fs) == 0 && fs.f_type == TMPFS_MAGIC)
    return "WARNING: the spool directory " + dir_ + " is a tmpfs: spooled uploads take memory; set --spool-dir "
           "to a directory on disk";
  return "uploads: PNG and TIFF from " + std::to_string(kSpoolFromBytes >> 20) + " MiB spool to " + dir_ +
         " (up to " + std::to_string(capacity() >> 20) + " MiB)";
}

std::shared_ptr<SpoolFile> Spool::open(uint64_t total) {
  if (!enabled() || total == 0) return nullptr;
  auto refuse = [&](const char* what) -> std::shared_ptr<SpoolFile> {
    const int err = errno;
    if (!warned_.exchange(true))
      spdlog::warn("uploads stay in memory: {} in the spool directory {} failed ({}); set --spool-dir to a writable "
                   "directory on disk, or none",
                   what, dir_, std::strerror(err));
    return nullptr;
  };
  const int fd = unlinked_file(dir_);
  if (fd < 0) return refuse("creating a file");
  if (::ftruncate(fd, static_cast<off_t>(total)) != 0) {
    ::close(fd);
    return refuse("sizing a file");
  }
  void* map = ::mmap(nullptr, total, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    ::close(fd);
    return refuse("mapping a file");
  }
  return std::shared_ptr<SpoolFile>(new SpoolFile(*this, fd, static_cast<uint8_t*>(map), total));
}

SpoolFile::~SpoolFile() {
  ::munmap(map_, total_);
  ::close(fd_);
}

void SpoolFile::append(const uint8_t* p, size_t n) {
  const uint64_t at = received();
  if (n > total_ - at)
    fail(ErrorCode::kInvalidArgument, "chunks carry more than the header's total_bytes (" + std::to_string(total_) + ")");
  if (at + n > lease_.bytes()) {
    constexpr uint64_t kStep = uint64_t{16} << 20;
    const uint64_t want = std::min(total_, (at + n + kStep - 1) / kStep * kStep);
    if (!spool_.budget_.try_grow(lease_, want - lease_.bytes()))
      fail(ErrorCode::kResourceExhausted,
           "uploads in progress hold " + std::to_string(spool_.budget_.in_use() >> 20) + " of " +
               std::to_string(spool_.budget_.capacity() >> 20) + " MiB of spool (--max-spool-bytes): try again later");
  }
  for (size_t done = 0; done < n;) {
    const ssize_t w = ::pwrite(fd_, p + done, n - done, static_cast<off_t>(at + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : ENOSPC;
      fail(err == ENOSPC || err == EDQUOT ? ErrorCode::kResourceExhausted : ErrorCode::kInternal,
           "writing the upload to the spool directory " + spool_.dir() + " failed: " + std::strerror(err));
    }
    done += static_cast<size_t>(w);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    received_.store(at + n, std::memory_order_release);
  }
  arrived_.notify_all();
}

uint64_t SpoolFile::wait_for(uint64_t end) {
  end = std::min(end, total_);
  if (const uint64_t have = received(); have >= end) return have;
  std::unique_lock<std::mutex> lock(mu_);
  arrived_.wait(lock, [&] { return received() >= end || aborted(); });
  if (received() < end) fail(abort_code_, abort_why_);
  return received();
}

void SpoolFile::abort(ErrorCode code, std::string why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted()) return;
    abort_code_ = code;
    abort_why_ = std::move(why);
    aborted_.store(true, std::memory_order_release);
  }
  arrived_.notify_all();
}

void SpoolFile::release(uint64_t begin, uint64_t end) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  begin = (begin + page - 1) / page * page;
  end = std::min(end, total_) / page * page;
  if (end > begin) ::madvise(map_ + begin, end - begin, MADV_DONTNEED);
}

}  // namespace imgstat
