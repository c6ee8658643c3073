// imgstat-server: image statistics over gRPC.
#include <spdlog/spdlog.h>

#include <csignal>
#include <thread>
#include <pthread.h>
#include <sys/resource.h>

#include "core/abseil_tuning.hpp"
#include "core/malloc_tuning.hpp"
#include "decode/library_messages.hpp"
#include "service/flags.hpp"
#include "service/operations/request_log.hpp"
#include "service/server.hpp"

#ifndef IMGSTAT_VERSION
#define IMGSTAT_VERSION "0.0.0"
#endif

namespace {

// Connections, region descriptors and their tickets are open files: the soft
// limit (often 1024) raised to the hard one, as network servers do.
void raise_open_file_limit() {
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
}

// A note the server hands over, logged as a warning when it starts with
// "WARNING: ", else as information.
void log_note(const std::string& note) {
  if (note.rfind("WARNING: ", 0) == 0) spdlog::warn("{}", note.substr(9));
  else spdlog::info("{}", note);
}

std::string host_of(const std::string& address) { return address.substr(0, address.rfind(':')); }

std::shared_ptr<imgstat::Engine> start_engine(const imgstat::ServerOptions& options) {
  std::string note;
  bool gpu_absent = false;
  auto engine = imgstat::choose_engine(options, &note, &gpu_absent);
  if (!note.empty()) spdlog::log(gpu_absent ? spdlog::level::info : spdlog::level::warn, "{}", note);
  const imgstat::EngineInfo info = engine->info();
  if (info.kind == "cuda" && engine->placement())
    for (const imgstat::GpuStatus& g : engine->placement()->status())
      spdlog::info("engine cuda: GPU {}: {} ({} MiB, compute capability {})", g.device, g.name,
                   g.memory_bytes >> 20, g.compute_capability);
  else if (info.kind == "cuda")
    spdlog::info("engine cuda: {} ({} MiB, compute capability {})", info.device_name,
                 info.device_memory_bytes >> 20, info.compute_capability);
  else
    spdlog::info("engine cpu: {} threads", info.threads);
  return engine;
}

void log_listening(imgstat::Server& server, const imgstat::ServerOptions& options) {
  log_note(server.security_note());
  if (!options.security.auth_token_file.empty())
    spdlog::info("tokens required (health open): {}", server.reload());
  log_note(server.analyzer().spool().startup_note());
  spdlog::info("imgstat-server {} listening on {}:{}", IMGSTAT_VERSION, host_of(options.listen), server.port());
  if (server.health_port())
    spdlog::info("health only, plaintext, on {}:{}", host_of(options.health_listen), server.health_port());
  if (!server.analyzer().server_info().region_socket().empty())
    spdlog::info("regions: descriptors on {}", server.analyzer().server_info().region_socket());
  if (server.metrics_port())
    spdlog::info("metrics on http://{}:{}/metrics", host_of(options.metrics_listen), server.metrics_port());
}

// SIGHUP re-reads the tokens; SIGTERM or SIGINT is returned.
int serve_until_stopped(imgstat::Server& server, const sigset_t& signals) {
  int sig = 0;
  for (;;) {
    sigwait(&signals, &sig);
    if (sig != SIGHUP) return sig;
    try {
      spdlog::info("SIGHUP: {}", server.reload());
    } catch (const std::exception& e) {
      spdlog::error("SIGHUP: {}; the tokens in use are kept", e.what());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  imgstat::tune_malloc_for_large_messages();
  imgstat::tune_abseil_for_release();
  raise_open_file_limit();
  imgstat::ServerOptions options;
  imgstat::LogOptions log;
  std::string usage_error;
  if (const int exit = imgstat::parse_server_flags(argc, argv, IMGSTAT_VERSION, options, log, &usage_error); exit >= 0)
    return exit;
  imgstat::limit_malloc_arenas(options.threads ? options.threads : std::max(1u, std::thread::hardware_concurrency()));
  imgstat::configure_logging(log.format, log.level);
  // The logger keeps the real stderr; what libraries print outside a
  // request's decode is logged, escaped, instead of written raw.
  imgstat::catch_library_messages([](const std::string& line) { spdlog::warn("library: {}", line); });
  if (!usage_error.empty()) {
    spdlog::error("{}", usage_error);
    return 2;
  }

  // Every thread inherits this mask; the signals are taken by sigwait,
  // never in the middle of a gRPC or engine call.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  try {
    auto engine = start_engine(options);
    std::string decode_note;
    auto gpu_jpeg = imgstat::choose_gpu_jpeg(options, *engine, &decode_note);
    if (!decode_note.empty()) spdlog::info("{}", decode_note);
    imgstat::Server server(options, std::move(engine), std::move(gpu_jpeg));
    if (server.decode_waiting_threads())
      spdlog::info("{} threads more for calls whose small JPEG the GPU decodes (--decode-waiting-threads)",
                   server.decode_waiting_threads());
    server.start();
    log_listening(server, options);
    const int sig = serve_until_stopped(server, signals);
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
