// imgstat-server: image statistics over gRPC.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <csignal>
#include <sstream>
#include <thread>
#include <pthread.h>
#include <sys/resource.h>

#include "core/abseil_tuning.hpp"
#include "core/malloc_tuning.hpp"
#include "decode/library_messages.hpp"
#include "service/request_log.hpp"
#include "service/server.hpp"

#ifndef IMGSTAT_VERSION
#define IMGSTAT_VERSION "0.0.0"
#endif

int main(int argc, char** argv) {
  imgstat::tune_malloc_for_large_messages();
  imgstat::tune_abseil_for_release();
  // Connections, region descriptors and their tickets are open files: the
  // soft limit (often 1024) raised to the hard one, as network servers do.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  imgstat::ServerOptions options;
  std::string engine = "auto";
  std::string log_level = "info";
  CLI::App app{"imgstat-server " IMGSTAT_VERSION ": per-channel image statistics over gRPC (imgstat.v1)"};
  app.set_version_flag("--version", IMGSTAT_VERSION);
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
  app.add_option("--engine", engine, "auto: CUDA when a GPU is usable, else CPU")
      ->envname("IMGSTAT_ENGINE")->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  app.add_option("--cuda-device", options.cuda_device, "CUDA device ordinal (one GPU; see --cuda-devices)")
      ->envname("IMGSTAT_CUDA_DEVICE");
  std::string cuda_devices;
  app.add_option("--cuda-devices", cuda_devices,
                 "GPUs to compute on: all, or ordinals such as 0,1; each gets an engine and JPEG lanes, and each "
                 "image goes to the least loaded (default: --cuda-device alone)")
      ->envname("IMGSTAT_CUDA_DEVICES");
  app.add_option("--cuda-memory-limit", options.cuda_memory_limit,
                 "GPU memory the engine may hold, in bytes (0: no limit); images beyond it go to the CPU")
      ->envname("IMGSTAT_CUDA_MEMORY_LIMIT")->capture_default_str();
  std::string cuda_wait = "spin";
  app.add_option("--cuda-wait", cuda_wait,
                 "how threads wait for the GPU: spin (soonest answer, a core each), yield (spin, giving the core "
                 "away under load), block (sleep: less CPU per large JPEG, slower small ones)")
      ->envname("IMGSTAT_CUDA_WAIT")->check(CLI::IsMember({"spin", "yield", "block"}))->capture_default_str();
  app.add_option("--region-socket", options.region_socket,
                 "Unix socket where callers on this host pass shared memory (regions); auto: in $XDG_RUNTIME_DIR "
                 "or /tmp; off: no regions")
      ->envname("IMGSTAT_REGION_SOCKET")->capture_default_str();
  imgstat::add_limit_flags(app, options.limits);
  app.add_option("--threads", options.threads, "threads that decode and compute; 0: one per core")
      ->envname("IMGSTAT_THREADS")->capture_default_str();
  app.add_option("--shutdown-grace", options.shutdown_grace_seconds,
                 "seconds calls in progress get to finish after SIGTERM or SIGINT")
      ->envname("IMGSTAT_SHUTDOWN_GRACE")->capture_default_str();
  app.add_option("--gpu-decode", options.gpu_decode,
                 "decode JPEG on the GPU (nvJPEG) when the engine is CUDA and libnvjpeg is installed")
      ->envname("IMGSTAT_GPU_DECODE")->capture_default_str();
  double window_ms = options.gpu_jpeg.batch_window.count() / 1000.0;
  app.add_option("--decode-batch-window", window_ms,
                 "milliseconds a GPU JPEG batch waits for more JPEGs already on their way")
      ->envname("IMGSTAT_DECODE_BATCH_WINDOW")->check(CLI::Range(0.0, 1000.0))->capture_default_str();
  app.add_option("--decode-batch-max", options.gpu_jpeg.batch_max, "most JPEGs decoded in one GPU batch")
      ->envname("IMGSTAT_DECODE_BATCH_MAX")->check(CLI::Range(1u, 1024u))->capture_default_str();
  app.add_option("--decode-lanes", options.gpu_jpeg.lanes,
                 "threads that gather and decode GPU JPEG batches, each with its own nvJPEG state")
      ->envname("IMGSTAT_DECODE_LANES")->check(CLI::Range(1u, 16u))->capture_default_str();
  app.add_option("--log-level", log_level)->envname("IMGSTAT_LOG_LEVEL")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))->capture_default_str();
  std::string log_format = "text";
  app.add_option("--log-format", log_format, "text, or json: one JSON object per line for log shippers")
      ->envname("IMGSTAT_LOG_FORMAT")->check(CLI::IsMember({"text", "json"}))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  imgstat::limit_malloc_arenas(options.threads ? options.threads : std::max(1u, std::thread::hardware_concurrency()));

  imgstat::configure_logging(log_format == "json" ? imgstat::LogFormat::kJson : imgstat::LogFormat::kText, log_level);
  // The logger keeps the real stderr; what libraries print outside a
  // request's decode is logged, escaped, instead of written raw.
  imgstat::catch_library_messages([](const std::string& line) { spdlog::warn("library: {}", line); });
  options.gpu_jpeg.batch_window = std::chrono::microseconds(static_cast<int64_t>(window_ms * 1000));
  if (cuda_devices == "all") {
    options.every_cuda_device = true;
  } else if (!cuda_devices.empty()) {
    std::stringstream list(cuda_devices);
    for (std::string one; std::getline(list, one, ',');) {
      char* end = nullptr;
      const long d = std::strtol(one.c_str(), &end, 10);
      if (one.empty() || *end || d < 0 || d > 63) {
        spdlog::error("--cuda-devices wants all, or GPU ordinals 0 to 63 separated by commas; got \"{}\"", cuda_devices);
        return 2;
      }
      options.cuda_devices.push_back(static_cast<int>(d));
    }
  }
  options.engine = engine == "cpu" ? imgstat::EngineKind::kCpu
                   : engine == "cuda" ? imgstat::EngineKind::kCuda
                                      : imgstat::EngineKind::kAuto;
  options.cuda_wait = cuda_wait == "yield"   ? imgstat::CudaWait::kYield
                      : cuda_wait == "block" ? imgstat::CudaWait::kBlock
                                             : imgstat::CudaWait::kSpin;

  // Every thread inherits this mask; the signals are taken by sigwait below,
  // never in the middle of a gRPC or engine call.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  try {
    std::string note;
    bool gpu_absent = false;
    auto engine_ptr = imgstat::choose_engine(options, &note, &gpu_absent);
    if (!note.empty()) spdlog::log(gpu_absent ? spdlog::level::info : spdlog::level::warn, "{}", note);
    const imgstat::EngineInfo info = engine_ptr->info();
    if (info.kind == "cuda" && engine_ptr->placement())
      for (const imgstat::GpuStatus& g : engine_ptr->placement()->status())
        spdlog::info("engine cuda: GPU {}: {} ({} MiB, compute capability {})", g.device, g.name,
                     g.memory_bytes >> 20, g.compute_capability);
    else if (info.kind == "cuda")
      spdlog::info("engine cuda: {} ({} MiB, compute capability {})", info.device_name,
                   info.device_memory_bytes >> 20, info.compute_capability);
    else
      spdlog::info("engine cpu: {} threads", info.threads);
    std::string decode_note;
    auto gpu_jpeg = imgstat::choose_gpu_jpeg(options, *engine_ptr, &decode_note);
    if (!decode_note.empty()) spdlog::info("{}", decode_note);
    imgstat::Server server(options, std::move(engine_ptr), std::move(gpu_jpeg));
    server.start();
    const std::string& transport = server.security_note();
    if (transport.rfind("WARNING: ", 0) == 0) spdlog::warn("{}", transport.substr(9));
    else spdlog::info("{}", transport);
    if (!options.security.auth_token_file.empty())
      spdlog::info("tokens required (health open): {}", server.reload());
    const std::string spool = server.analyzer().spool().startup_note();
    if (spool.rfind("WARNING: ", 0) == 0) spdlog::warn("{}", spool.substr(9));
    else spdlog::info("{}", spool);
    const std::string host = options.listen.substr(0, options.listen.rfind(':'));
    spdlog::info("imgstat-server {} listening on {}:{}", IMGSTAT_VERSION, host, server.port());
    if (server.health_port())
      spdlog::info("health only, plaintext, on {}:{}",
                   options.health_listen.substr(0, options.health_listen.rfind(':')), server.health_port());
    if (!server.analyzer().server_info().region_socket().empty())
      spdlog::info("regions: descriptors on {}", server.analyzer().server_info().region_socket());
    if (server.metrics_port())
      spdlog::info("metrics on http://{}:{}/metrics",
                   options.metrics_listen.substr(0, options.metrics_listen.rfind(':')), server.metrics_port());
    int sig = 0;
    for (;;) {
      sigwait(&signals, &sig);
      if (sig != SIGHUP) break;
      try {
        spdlog::info("SIGHUP: {}", server.reload());
      } catch (const std::exception& e) {
        spdlog::error("SIGHUP: {}; the tokens in use are kept", e.what());
      }
    }
    spdlog::info("{} received: finishing in-flight calls (up to {} s)", sig == SIGTERM ? "SIGTERM" : "SIGINT",
                 options.shutdown_grace_seconds);
    server.shutdown();
    spdlog::info("stopped");
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
  return 0;
}
