// Every limit of the service, its default and its flag, in one place. A limit
// protects the server from what one caller sends: sizes read from a request
// or a file header are checked against these before anything is allocated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "imgstat/engine.hpp"

namespace CLI {
class App;
}

namespace imgstat {

// Fixed by the engines and the contract, not configurable: kMaxBins
// (imgstat/engine.hpp).
// Untrusted strings (an input's name) are cut to this many bytes in the log.
inline constexpr uint32_t kMaxLoggedNameBytes = 200;
// Encoded uploads from this size on are spooled (Limits::spool_dir); the
// CLI streams files from 4 MiB on.
inline constexpr uint64_t kSpoolFromBytes = uint64_t{1} << 20;
// Inputs one AggregateRequest may carry (its message size bounds their bytes).
inline constexpr uint32_t kAggregateInputsPerMessage = 1024;
// --decode-waiting-threads at most.
inline constexpr uint32_t kMaxDecodeWaitingThreads = 1024;
// JPEGs up to this size give their thread's place up while the GPU decodes
// them (a thumbnail's rate is bound by calls in flight); larger ones keep it,
// so that the memory of decodes in flight (nvJPEG's pinned bitstreams, the
// pixels) still grows with --threads only.
inline constexpr uint64_t kStepAsideJpegBytes = uint64_t{256} << 10;

struct Limits {
  // --max-message-bytes: largest gRPC message; larger inputs use AnalyzeStream.
  uint64_t max_message_bytes = uint64_t{64} << 20;
  // --max-pixels: largest decoded image, checked against the file's header.
  uint64_t max_pixels = uint64_t{1} << 30;
  // --max-input-bytes: largest AnalyzeStream upload (or file region). What
  // an upload holds is bounded apart: raw pixels stream through the engine,
  // encoded files go to the spool (--max-spool-bytes) or the decode memory;
  // so this only stops what no file is (a 20 GB BigTIFF passes).
  uint64_t max_input_bytes = uint64_t{1} << 40;
  // --max-decode-memory: bytes all decodes in progress may hold together; a
  // decode waits for room (see queue_timeout) or is refused when it alone is
  // larger. 0: half of the machine's (or the container's) memory.
  uint64_t max_decode_memory = 0;
  // --idle-decode-buffers: bytes of freed large pixel buffers (32 MiB and
  // more: an image decoded whole, a map, a converted copy) kept for the next
  // image, each for at most 10 s (decode/large_buffers.hpp); outside the
  // decode memory, which counts buffers in use. 0: none kept.
  uint64_t idle_decode_buffers = uint64_t{512} << 20;
  // --max-concurrent: calls of imgstat.v1 in progress at once; more are
  // refused with RESOURCE_EXHAUSTED. 0: 64 per worker thread.
  uint32_t max_concurrent = 0;
  // --max-queue: pieces of work waiting for a worker thread; more are refused.
  uint32_t max_queue = 1024;
  // --queue-timeout: seconds a piece of work may wait for a worker or for
  // decode memory when the call has no deadline of its own (a call's
  // deadline always applies).
  double queue_timeout_seconds = 60;
  // --stream-idle-timeout: an AnalyzeStream or AnalyzeBatch call that sends
  // nothing for this long is ended (DEADLINE_EXCEEDED).
  double stream_idle_timeout_seconds = 30;
  // --batch-window: AnalyzeBatch requests of one call held at once, counted
  // until their answer is written: a client that never reads holds no more.
  uint32_t batch_window = 8;  // Aggregate: inputs of one call analyzed or queued at once
  // Shared-memory regions (RegisterRegion), per caller: --max-regions held
  // at once, --max-region-bytes spanned together. The memory is the
  // caller's; these bound what the server maps and keeps.
  uint32_t max_regions = 64;
  // --max-parts: rectangles, labels or tiles one request may ask for
  // (Options.parts); a label image with more distinct labels is refused.
  // Each part's answer is also bounded by --max-message-bytes.
  uint64_t max_parts = 65536;
  // --max-planes: pages a file may have (a multi-page TIFF's directories,
  // counted as they are read, before anything is allocated for them).
  uint64_t max_planes = uint64_t{1} << 20;
  uint64_t max_region_bytes = uint64_t{64} << 30;
  // --spool-dir: where AnalyzeStream uploads of PNG and TIFF files of
  // kSpoolFromBytes or more are written while they arrive (core/spool.hpp),
  // so that memory holds what is being decoded, not the file. "": $TMPDIR,
  // else /tmp; "none": uploads stay in memory (in the decode memory).
  // Give it a directory on disk: on a tmpfs the files are memory again.
  std::string spool_dir;
  // --max-spool-bytes: bytes all spooled uploads may hold together; more
  // are refused with RESOURCE_EXHAUSTED. 0: half of the spool file system's
  // free space at start.
  uint64_t max_spool_bytes = 0;
  // The region socket: --max-region-connections open at once, and
  // --max-region-tickets descriptors one connection may pass that are not
  // registered yet.
  uint32_t max_region_connections = 256;
  uint32_t max_region_tickets = 16;
  // --max-connection-age: seconds after which a connection is asked to go
  // (GOAWAY; its calls get --shutdown-grace to finish), so that clients
  // resolving a name again spread over servers added since (Kubernetes
  // scaling out). 0: connections stay.
  double max_connection_age_seconds = 0;
  // --fetch-allow: prefixes of the objects this server reads itself when a
  // request names one (Input.url): "s3://bucket-a/,https://data.example.org/images/".
  // Empty: it fetches nothing. Its S3 credentials, region and endpoint are
  // its own environment's (sources/objects.hpp), never a caller's; an
  // https:// host must be at a public address unless its rule names the
  // address; redirects are checked against the rules again.
  std::vector<std::string> fetch_allow;
  // --fetch-threads: objects fetched at once, on threads of their own
  // (a fetch waits on the store, never on a worker that decodes).
  uint32_t fetch_threads = 32;
};

// Keep-alive, fixed: callers may ping this often (imgstat-client pings every
// 10 s to notice a server gone without a word; gRPC's default answers pings
// more often than every 5 minutes with GOAWAY), and the server pings quiet
// callers to drop the connections of hosts that vanished.
inline constexpr int kMinClientPingIntervalMs = 5000;
inline constexpr int kServerPingIntervalMs = 60000;
inline constexpr int kServerPingTimeoutMs = 20000;

// Fills the defaults that depend on the machine (0 above).
Limits resolve(Limits limits, unsigned worker_threads);

// Half of physical memory, or of the cgroup's memory.max when lower.
uint64_t default_decode_memory();

// Adds the flags above (and their IMGSTAT_* environment variables) to app.
void add_limit_flags(CLI::App& app, Limits& limits);

}  // namespace imgstat
