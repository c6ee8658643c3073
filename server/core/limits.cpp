#include "core/limits.hpp"

#include "sources/objects.hpp"

#include <CLI/CLI.hpp>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdlib>

#include <algorithm>
#include <fstream>

namespace imgstat {

uint64_t default_decode_memory() {
  uint64_t memory = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
  std::ifstream cgroup("/sys/fs/cgroup/memory.max");  // a container's own limit
  uint64_t limit = 0;
  if (cgroup >> limit && limit > 0) memory = std::min(memory, limit);
  return std::max<uint64_t>(memory / 2, uint64_t{64} << 20);
}

Limits resolve(Limits l, unsigned worker_threads) {
  if (l.max_decode_memory == 0) l.max_decode_memory = default_decode_memory();
  if (l.max_concurrent == 0) l.max_concurrent = 64 * std::max(1u, worker_threads);
  if (l.spool_dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    l.spool_dir = tmp && *tmp ? tmp : "/tmp";
  }
  if (l.spool_dir != "none" && l.max_spool_bytes == 0) {
    struct statvfs fs {};
    const uint64_t free_bytes =
        ::statvfs(l.spool_dir.c_str(), &fs) == 0 ? uint64_t{fs.f_bavail} * uint64_t{fs.f_frsize} : 0;
    l.max_spool_bytes = std::max<uint64_t>(free_bytes / 2, uint64_t{64} << 20);
  }
  return l;
}

void add_limit_flags(CLI::App& app, Limits& l) {
  app.add_option("--max-message-bytes", l.max_message_bytes, "largest message; larger inputs use AnalyzeStream")
      ->envname("IMGSTAT_MAX_MESSAGE_BYTES")->check(CLI::Range(uint64_t{1024}, uint64_t{INT32_MAX}))->capture_default_str();
  app.add_option("--max-pixels", l.max_pixels, "largest decoded image, in pixels")
      ->envname("IMGSTAT_MAX_PIXELS")->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40))->capture_default_str();
  app.add_option("--max-input-bytes", l.max_input_bytes, "largest AnalyzeStream upload")
      ->envname("IMGSTAT_MAX_INPUT_BYTES")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--max-decode-memory", l.max_decode_memory,
                 "bytes all decodes in progress may hold; 0: half of the machine's memory")
      ->envname("IMGSTAT_MAX_DECODE_MEMORY")->capture_default_str();
  app.add_option("--idle-decode-buffers", l.idle_decode_buffers,
                 "bytes of freed large pixel buffers kept for the next images (each at most 10 s); 0: none")
      ->envname("IMGSTAT_IDLE_DECODE_BUFFERS")->capture_default_str();
  app.add_option("--max-concurrent", l.max_concurrent, "calls in progress at once; 0: 64 per thread")
      ->envname("IMGSTAT_MAX_CONCURRENT")->capture_default_str();
  app.add_option("--max-queue", l.max_queue, "work items waiting for a thread")
      ->envname("IMGSTAT_MAX_QUEUE")->check(CLI::Range(1u, 1u << 20))->capture_default_str();
  app.add_option("--queue-timeout", l.queue_timeout_seconds,
                 "seconds work may wait for a thread or decode memory when the call has no deadline")
      ->envname("IMGSTAT_QUEUE_TIMEOUT")->check(CLI::Range(0.001, 86400.0))->capture_default_str();
  app.add_option("--stream-idle-timeout", l.stream_idle_timeout_seconds,
                 "seconds a streaming call may send nothing before it is ended")
      ->envname("IMGSTAT_STREAM_IDLE_TIMEOUT")->check(CLI::Range(0.01, 86400.0))->capture_default_str();
  app.add_option("--batch-window", l.batch_window, "AnalyzeBatch requests of one call held until answered")
      ->envname("IMGSTAT_BATCH_WINDOW")->check(CLI::Range(1u, 1024u))->capture_default_str();
  app.add_option("--max-parts", l.max_parts,
                 "rectangles, labels or tiles one request may ask for (a label image with more distinct labels is refused)")
      ->envname("IMGSTAT_MAX_PARTS")->check(CLI::Range(uint64_t{1}, uint64_t{1} << 24))->capture_default_str();
  app.add_option("--max-planes", l.max_planes, "pages a file may have (a multi-page TIFF's directories)")
      ->envname("IMGSTAT_MAX_PLANES")->check(CLI::Range(uint64_t{1}, uint64_t{1} << 32))->capture_default_str();
  app.add_option("--max-regions", l.max_regions, "shared-memory regions one caller may hold")
      ->envname("IMGSTAT_MAX_REGIONS")->check(CLI::Range(0u, 1u << 16))->capture_default_str();
  app.add_option("--max-region-bytes", l.max_region_bytes, "bytes all regions of one caller may span")
      ->envname("IMGSTAT_MAX_REGION_BYTES")->capture_default_str();
  app.add_option("--max-region-connections", l.max_region_connections, "region socket connections open at once")
      ->envname("IMGSTAT_MAX_REGION_CONNECTIONS")->check(CLI::Range(1u, 1u << 16))->capture_default_str();
  app.add_option("--max-region-tickets", l.max_region_tickets,
                 "descriptors one region socket connection may pass before registering them")
      ->envname("IMGSTAT_MAX_REGION_TICKETS")->check(CLI::Range(1u, 1024u))->capture_default_str();
  app.add_option("--spool-dir", l.spool_dir,
                 "where large PNG and TIFF uploads are written while they arrive (a directory on disk); "
                 "default $TMPDIR or /tmp; none: kept in memory")
      ->envname("IMGSTAT_SPOOL_DIR");
  app.add_option("--fetch-allow", l.fetch_allow,
                 "prefixes of the objects (s3://bucket/, https://host/path/) this server reads itself when a request "
                 "names one; none: it fetches nothing")
      ->envname("IMGSTAT_FETCH_ALLOW")->delimiter(',')->check([](const std::string& v) -> std::string {
        try {
          FetchRules({v});
          return "";
        } catch (const std::exception& e) {
          return e.what();
        }
      });
  app.add_option("--fetch-threads", l.fetch_threads, "objects a server started with --fetch-allow fetches at once")
      ->envname("IMGSTAT_FETCH_THREADS")->check(CLI::Range(1u, 1024u))->capture_default_str();
  app.add_option("--max-spool-bytes", l.max_spool_bytes,
                 "bytes all spooled uploads may hold; 0: half of the spool's free space")
      ->envname("IMGSTAT_MAX_SPOOL_BYTES")->capture_default_str();
  app.add_option("--max-connection-age", l.max_connection_age_seconds,
                 "seconds after which a connection is asked to go, so that clients re-resolving a name spread "
                 "over new servers; 0: never")
      ->envname("IMGSTAT_MAX_CONNECTION_AGE")->check(CLI::Range(0.0, 1e7))->capture_default_str();
}

}  // namespace imgstat
