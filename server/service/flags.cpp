#include "service/flags.hpp"

#include <CLI/CLI.hpp>

#include <sstream>

namespace imgstat {
namespace {

// What the flags hold before they become options: their text forms.
struct FlagText {
  std::string engine = "auto";
  std::string cuda_devices;
  std::string cuda_wait = "spin";
  std::string log_format = "text";
  double window_ms = 0;
  std::string decode_waiting = "0";
};

void add_transport_flags(CLI::App& app, ServerOptions& options) {
  app.add_option("--listen", options.listen,
                 "address to listen on; port 0 picks a free one. Plaintext only on loopback, else TLS or --insecure")
      ->envname("IMGSTAT_LISTEN")->capture_default_str();
  auto& sec = options.security;
  app.add_option("--tls-cert", sec.tls_cert, "PEM certificate chain to serve TLS with (with --tls-key)")
      ->envname("IMGSTAT_TLS_CERT");
  app.add_option("--tls-key", sec.tls_key, "PEM private key of --tls-cert")->envname("IMGSTAT_TLS_KEY");
  app.add_option("--tls-client-ca", sec.tls_client_ca,
                 "PEM CA certificates: mutual TLS, clients must present a certificate one of them signed")
      ->envname("IMGSTAT_TLS_CLIENT_CA");
  app.add_option("--tls-reload-interval", sec.tls_reload_seconds,
                 "seconds between looks at the TLS files: a changed certificate, key or CA is served without a restart")
      ->envname("IMGSTAT_TLS_RELOAD_INTERVAL")->capture_default_str();
  app.add_flag("--insecure", sec.insecure, "serve plaintext on an address that is not loopback (a warning says so)")
      ->envname("IMGSTAT_INSECURE");
  app.add_option("--auth-token-file", sec.auth_token_file,
                 "bearer tokens, one per line: TOKEN [NAME [METHOD,...]]; calls without one are refused "
                 "(health stays open); re-read on SIGHUP")
      ->envname("IMGSTAT_AUTH_TOKEN_FILE");
  app.add_option("--health-listen", options.health_listen,
                 "a second, plaintext address serving grpc.health.v1 only, for probes")
      ->envname("IMGSTAT_HEALTH_LISTEN");
  app.add_option("--metrics-listen", options.metrics_listen,
                 "address to serve Prometheus metrics on (GET /metrics, plain HTTP), e.g. 0.0.0.0:9464")
      ->envname("IMGSTAT_METRICS_LISTEN");
}

void add_engine_flags(CLI::App& app, ServerOptions& options, FlagText& text) {
  app.add_option("--engine", text.engine, "auto: CUDA when a GPU is usable, else CPU")
      ->envname("IMGSTAT_ENGINE")->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  app.add_option("--cuda-device", options.cuda_device, "CUDA device ordinal (one GPU; see --cuda-devices)")
      ->envname("IMGSTAT_CUDA_DEVICE");
  app.add_option("--cuda-devices", text.cuda_devices,
                 "GPUs to compute on: all, or ordinals such as 0,1; each gets an engine and JPEG lanes, and each "
                 "image goes to the least loaded (default: --cuda-device alone)")
      ->envname("IMGSTAT_CUDA_DEVICES");
  app.add_option("--cuda-memory-limit", options.cuda_memory_limit,
                 "GPU memory the engine may hold, in bytes (0: no limit); images beyond it go to the CPU")
      ->envname("IMGSTAT_CUDA_MEMORY_LIMIT")->capture_default_str();
  app.add_option("--cuda-workspaces", options.cuda_workspaces,
                 "images each GPU analyzes at once, each in a workspace of 24 MiB pinned host and 96 MiB GPU "
                 "memory made at start; more wait for one")
      ->envname("IMGSTAT_CUDA_WORKSPACES")->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--cuda-wait", text.cuda_wait,
                 "how threads wait for the GPU: spin (soonest answer, a core each), yield (spin, giving the core "
                 "away under load), block (sleep: less CPU per large JPEG, slower small ones)")
      ->envname("IMGSTAT_CUDA_WAIT")->check(CLI::IsMember({"spin", "yield", "block"}))->capture_default_str();
  app.add_option("--region-socket", options.region_socket,
                 "Unix socket where callers on this host pass shared memory (regions); auto: in $XDG_RUNTIME_DIR "
                 "or /tmp; off: no regions")
      ->envname("IMGSTAT_REGION_SOCKET")->capture_default_str();
  add_limit_flags(app, options.limits);
  app.add_option("--threads", options.threads, "threads that decode and compute; 0: one per core")
      ->envname("IMGSTAT_THREADS")->capture_default_str();
  app.add_option("--shutdown-grace", options.shutdown_grace_seconds,
                 "seconds calls in progress get to finish after SIGTERM or SIGINT")
      ->envname("IMGSTAT_SHUTDOWN_GRACE")->capture_default_str();
}

void add_decode_flags(CLI::App& app, ServerOptions& options, FlagText& text) {
  app.add_option("--gpu-decode", options.gpu_decode,
                 "decode JPEG on the GPU (nvJPEG) when the engine is CUDA and libnvjpeg is installed")
      ->envname("IMGSTAT_GPU_DECODE")->capture_default_str();
  text.window_ms = options.gpu_jpeg.batch_window.count() / 1000.0;
  app.add_option("--decode-batch-window", text.window_ms,
                 "milliseconds a GPU JPEG batch waits for more JPEGs already on their way")
      ->envname("IMGSTAT_DECODE_BATCH_WINDOW")->check(CLI::Range(0.0, 1000.0))->capture_default_str();
  app.add_option("--decode-batch-max", options.gpu_jpeg.batch_max, "most JPEGs decoded in one GPU batch")
      ->envname("IMGSTAT_DECODE_BATCH_MAX")->check(CLI::Range(1u, 1024u))->capture_default_str();
  app.add_option("--decode-waiting-threads", text.decode_waiting,
                 "threads beyond --threads for calls whose JPEG (up to 256 KiB) the GPU decodes: each gives its "
                 "place up while it waits, so that batches fill from more calls; auto: 2 x lanes x batch max on "
                 "each GPU; 0: none")
      ->envname("IMGSTAT_DECODE_WAITING_THREADS")
      ->check(CLI::IsMember({"auto"}) | CLI::Range(0u, kMaxDecodeWaitingThreads))
      ->capture_default_str();
  app.add_option("--decode-lanes", options.gpu_jpeg.lanes,
                 "threads that gather and decode GPU JPEG batches, each with its own nvJPEG state")
      ->envname("IMGSTAT_DECODE_LANES")->check(CLI::Range(1u, 16u))->capture_default_str();
}

void add_log_flags(CLI::App& app, LogOptions& log, FlagText& text) {
  app.add_option("--log-level", log.level)->envname("IMGSTAT_LOG_LEVEL")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))->capture_default_str();
  app.add_option("--log-format", text.log_format, "text, or json: one JSON object per line for log shippers")
      ->envname("IMGSTAT_LOG_FORMAT")->check(CLI::IsMember({"text", "json"}))->capture_default_str();
}

// --cuda-devices: "all", or ordinals separated by commas; false when malformed.
bool parse_device_list(const std::string& list, ServerOptions& options) {
  if (list == "all") {
    options.every_cuda_device = true;
    return true;
  }
  if (list.empty()) return true;
  std::stringstream items(list);
  for (std::string one; std::getline(items, one, ',');) {
    char* end = nullptr;
    const long d = std::strtol(one.c_str(), &end, 10);
    if (one.empty() || *end || d < 0 || d > 63) return false;
    options.cuda_devices.push_back(static_cast<int>(d));
  }
  return true;
}

}  // namespace

int parse_server_flags(int argc, char** argv, const char* version, ServerOptions& options, LogOptions& log,
                       std::string* usage_error) {
  CLI::App app{std::string("imgstat-server ") + version + ": per-channel image statistics over gRPC (imgstat.v1)"};
  app.set_version_flag("--version", version);
  FlagText text;
  add_transport_flags(app, options);
  add_engine_flags(app, options, text);
  add_decode_flags(app, options, text);
  add_log_flags(app, log, text);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!parse_device_list(text.cuda_devices, options))
    *usage_error = "--cuda-devices wants all, or GPU ordinals 0 to 63 separated by commas; got \"" +
                   text.cuda_devices + "\"";
  if (text.decode_waiting == "auto") options.decode_waiting_threads.reset();
  else options.decode_waiting_threads = static_cast<unsigned>(std::stoul(text.decode_waiting));
  options.gpu_jpeg.batch_window = std::chrono::microseconds(static_cast<int64_t>(text.window_ms * 1000));
  options.engine = text.engine == "cpu"    ? EngineKind::kCpu
                   : text.engine == "cuda" ? EngineKind::kCuda
                                           : EngineKind::kAuto;
  options.cuda_wait = text.cuda_wait == "yield"   ? CudaWait::kYield
                      : text.cuda_wait == "block" ? CudaWait::kBlock
                                                  : CudaWait::kSpin;
  log.format = text.log_format == "json" ? LogFormat::kJson : LogFormat::kText;
  return -1;
}

}  // namespace imgstat
