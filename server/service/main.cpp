// imgstat-server: image statistics over gRPC.
#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <pthread.h>

#include "decode/library_messages.hpp"
#include "service/server.hpp"

#ifndef IMGSTAT_VERSION
#define IMGSTAT_VERSION "0.0.0"
#endif

int main(int argc, char** argv) {
  imgstat::ServerOptions options;
  std::string engine = "auto";
  std::string log_level = "info";
  CLI::App app{"imgstat-server " IMGSTAT_VERSION ": per-channel image statistics over gRPC (imgstat.v1)"};
  app.set_version_flag("--version", IMGSTAT_VERSION);
  app.add_option("--listen", options.listen, "address to listen on; port 0 picks a free one")
      ->envname("IMGSTAT_LISTEN")->capture_default_str();
  app.add_option("--engine", engine, "auto: CUDA when a GPU is usable, else CPU")
      ->envname("IMGSTAT_ENGINE")->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  app.add_option("--cuda-device", options.cuda_device, "CUDA device ordinal")->envname("IMGSTAT_CUDA_DEVICE");
  app.add_option("--cuda-memory-limit", options.cuda_memory_limit,
                 "GPU memory the engine may hold, in bytes (0: no limit); images beyond it go to the CPU")
      ->envname("IMGSTAT_CUDA_MEMORY_LIMIT")->capture_default_str();
  std::string cuda_wait = "spin";
  app.add_option("--cuda-wait", cuda_wait,
                 "how threads wait for the GPU: spin (soonest answer, a core each), yield (spin, giving the core "
                 "away under load), block (sleep: less CPU per large JPEG, slower small ones)")
      ->envname("IMGSTAT_CUDA_WAIT")->check(CLI::IsMember({"spin", "yield", "block"}))->capture_default_str();
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
  CLI11_PARSE(app, argc, argv);

  auto logger = spdlog::stderr_color_mt("imgstat");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::flush_on(spdlog::level::trace);  // a line per request, written as it happens
  // The logger keeps the real stderr; what libraries print outside a
  // request's decode is logged, escaped, instead of written raw.
  imgstat::catch_library_messages([](const std::string& line) { spdlog::warn("library: {}", line); });
  options.gpu_jpeg.batch_window = std::chrono::microseconds(static_cast<int64_t>(window_ms * 1000));
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
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  try {
    std::string note;
    bool gpu_absent = false;
    auto engine_ptr = imgstat::choose_engine(options, &note, &gpu_absent);
    if (!note.empty()) spdlog::log(gpu_absent ? spdlog::level::info : spdlog::level::warn, "{}", note);
    const imgstat::EngineInfo info = engine_ptr->info();
    if (info.kind == "cuda")
      spdlog::info("engine cuda: {} ({} MiB, compute capability {})", info.device_name,
                   info.device_memory_bytes >> 20, info.compute_capability);
    else
      spdlog::info("engine cpu: {} threads", info.threads);
    std::string decode_note;
    auto gpu_jpeg = imgstat::choose_gpu_jpeg(options, *engine_ptr, &decode_note);
    if (!decode_note.empty()) spdlog::info("{}", decode_note);
    imgstat::Server server(options, std::move(engine_ptr), std::move(gpu_jpeg));
    server.start();
    const std::string host = options.listen.substr(0, options.listen.rfind(':'));
    spdlog::info("imgstat-server {} listening on {}:{}", IMGSTAT_VERSION, host, server.port());
    int sig = 0;
    sigwait(&signals, &sig);
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
