// The gRPC server around ImageStatsService: listening port, message limits,
// the standard health and reflection services, graceful shutdown.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/analyzer.hpp"
#include "core/limits.hpp"
#include "imgstat/engine.hpp"
#include "service/operations/security.hpp"

namespace imgstat {

struct ServerOptions {
  // Loopback unless told: another address needs TLS or --insecure.
  std::string listen = "localhost:50051";
  SecurityOptions security;
  // A plaintext port serving only grpc.health.v1 (probes that cannot speak
  // TLS or send tokens); empty: none.
  std::string health_listen;
  // Prometheus metrics over HTTP; empty: none.
  std::string metrics_listen;
  EngineKind engine = EngineKind::kAuto;
  int cuda_device = 0;
  // The GPUs to compute on (--cuda-devices), each with its engine and JPEG
  // lanes; empty: cuda_device alone. every_cuda_device: all of them.
  std::vector<int> cuda_devices;
  bool every_cuda_device = false;
  uint64_t cuda_memory_limit = 0;  // device bytes, per GPU; 0: no limit
  int cuda_workspaces = 4;          // images each GPU analyzes at once
  CudaWait cuda_wait = CudaWait::kSpin;
  Limits limits;
  unsigned threads = 0;  // workers for decoding and computing; 0: one per core
  double shutdown_grace_seconds = 30;  // calls in progress get this long to finish
  bool gpu_decode = true;              // JPEG on the GPU (nvJPEG) when the engine is CUDA
  GpuJpegOptions gpu_jpeg;             // its batching and lanes, on each GPU
  // Workers beyond `threads` for calls whose small JPEG the GPU decodes:
  // such a call gives its place up while it waits (WorkQueue::StepAside),
  // so that the GPU's batches fill from more calls than there are threads.
  // Unset (auto): enough to fill every lane's batch twice over on every GPU
  // (default_decode_waiting_threads). None by default: under the hostile
  // suite on a GPU host they raised the server's peak memory by 67 MiB,
  // over the suite's bound (docs/performance.md).
  std::optional<unsigned> decode_waiting_threads = 0;
  // The Unix socket that takes region descriptors: "auto" (the default) puts
  // it in $XDG_RUNTIME_DIR or /tmp; "off": no regions.
  std::string region_socket = "auto";
};

// nvJPEG for each of the engine's GPUs, when it has any and libnvjpeg
// loads; else null with *note saying why JPEG decodes on the CPU.
std::shared_ptr<GpuJpegDecoder> choose_gpu_jpeg(const ServerOptions& options, const Engine& engine, std::string* note);

// --decode-waiting-threads when unset: two batches of every lane on each of
// `gpus` GPUs (one decoding while the next gathers), at most
// kMaxDecodeWaitingThreads.
unsigned default_decode_waiting_threads(const GpuJpegOptions& jpeg, size_t gpus);

// The engine the options ask for; with kAuto, CUDA when a device is usable,
// else the CPU engine, with *note saying why.
std::shared_ptr<Engine> choose_engine(const ServerOptions& options, std::string* note, bool* gpu_absent = nullptr);

class ImageStatsService;
class WorkQueue;

class ReflectionV1;
class Metrics;
class RegionSocket;

class Server {
 public:
  Server(const ServerOptions& options, std::shared_ptr<Engine> engine,
         std::shared_ptr<GpuJpegDecoder> gpu_jpeg = nullptr);
  ~Server();

  // Binds and starts serving; throws imgstat::Error (kUnavailable) when the
  // address cannot be bound.
  // Throws kInvalidArgument when the security options forbid starting.
  void start();
  int port() const { return port_; }
  int health_port() const { return health_port_; }
  int metrics_port() const;
  // Workers beyond --threads for calls whose small JPEG the GPU decodes.
  unsigned decode_waiting_threads() const { return decode_waiting_threads_; }
  // What the log should say about transport security, once started.
  const std::string& security_note() const { return security_note_; }
  // SIGHUP: re-reads the token file; says what it found.
  std::string reload();
  const Analyzer& analyzer() const { return *analyzer_; }
  // Reports NOT_SERVING, refuses new calls (UNAVAILABLE), lets those in
  // progress finish within the grace period (cancelling what is left then),
  // ends the health service's Watch streams, then returns: at once when
  // nothing is in progress.
  void shutdown();

 private:
  ServerOptions options_;
  unsigned decode_waiting_threads_ = 0;
  std::shared_ptr<Engine> engine_;
  std::unique_ptr<Analyzer> analyzer_;
  std::unique_ptr<WorkQueue> queue_;
  std::unique_ptr<Metrics> metrics_;
  std::shared_ptr<Authenticator> auth_;
  std::unique_ptr<ImageStatsService> service_;
  std::unique_ptr<ReflectionV1> reflection_v1_;
  std::unique_ptr<RegionSocket> region_socket_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  int health_port_ = 0;
  std::string security_note_;
};

}  // namespace imgstat
