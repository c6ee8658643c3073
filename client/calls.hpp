// The CLI's two ways to get a result: from a server over gRPC, or in-process
// with the same analyzer and engine (--local).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <span>
#include <thread>
#include <vector>

#include "core/analyzer.hpp"
#include "imgstat/v1/imgstat.grpc.pb.h"
#include "region_client.hpp"
#include "render.hpp"
#include "sources.hpp"

namespace imgstat::client {

// Files up to this size go in one message; larger ones stream in pieces of
// it. 4 MiB moves 1 GiB over loopback at 2.7-2.8 GB/s; 8, 16 and 32 MiB at
// 2.5, 2.2 and 1.1 GB/s (H100 machine, 2026-11-26).
inline constexpr size_t kStreamChunk = size_t{4} << 20;

// What to send besides the data.
struct Request {
  v1::Input input;  // kind, raw layout, name; data left empty
  v1::Options options;
  // The parts' mask or label image, a file (the options' map Input holds
  // its kind and layout, no data): in the message when both fit, by region
  // to a server on this host, else streamed after the input (map_bytes).
  std::string map_file;
  bool force_stream = false;
  // A folder input is one DICOM series' (or several series') files, sent as
  // one tar; so are dicom_files, the DICOM files named together.
  bool dicom_series = false;
  std::vector<std::string> dicom_files;
  // Told of each piece of a streamed upload as it is written (its bytes).
  std::function<void(uint64_t)> on_sent;
};

// How to reach the server and prove who calls.
struct Connection {
  std::string target = "localhost:50051";
  // TLS when any of these is set, or when the target is not loopback and
  // insecure is false (then with gRPC's default roots).
  std::string tls_ca;           // PEM CAs that signed the server's certificate
  std::string tls_cert;         // PEM certificate chain for mutual TLS
  std::string tls_key;          // its private key
  std::string tls_server_name;  // the name the server's certificate must carry, when not the target's host
  bool insecure = false;        // plaintext, even to an address that is not loopback
  std::string token;            // sent as "authorization: Bearer TOKEN"
  // A server on this host (loopback or unix: target) gets large files in a
  // shared-memory region, not over the socket.
  bool shm = true;
  // Small files go on AnalyzeBatch streams ("lanes"), a few in flight on
  // each, rather than a call each: per file, the client and the server both
  // spend less on gRPC (imgstat-load, 16x16 frames, 2026-11-26: 21 and 37 µs
  // against 53 and 68).
  bool batch = true;
  bool uses_tls() const;
};

class Remote {
 public:
  // timeout_seconds bounds each file's calls together (and --info's and
  // --health's); 0: no deadline. Throws std::runtime_error when a TLS file
  // cannot be read.
  Remote(const Connection& connection, double timeout_seconds);
  ~Remote();  // waits for retries it has scheduled
  Outcome analyze(Source& source, const Request& request);
  // The same without a thread waiting on it where it can: a file small
  // enough for one message is read now and its call runs on gRPC's callback
  // API, done(outcome) coming later on one of gRPC's threads (retries
  // included); a large one (a region, a stream) is analyzed before this
  // returns, done called on this thread.
  void start(Source& source, const Request& request, std::function<void(Outcome)> done);
  // Whether the server reads this object itself (its ServerInfo.fetch_allow
  // covers the name): then the client sends the name, not the bytes.
  bool fetches(const std::string& name);
  // The objects under an s3:// prefix as a server lists them (ListObjects),
  // where its fetch_allow covers the prefix; nullopt where none may (the
  // client lists for itself). Throws InputError with the server's status
  // where it refused or the listing failed.
  std::optional<std::vector<std::string>> list_on_server(const std::string& prefix);
  // The object by its name (Input.url), answered as start() answers.
  void start_fetch(const std::string& name, const Request& request, std::function<void(Outcome)> done);
  // --aggregate's files merged by the server itself (its Aggregate call):
  // the largest file one such call takes whole (within a message), or 0
  // where the server has no Aggregate call.
  uint64_t aggregate_file_limit();
  // Inputs a server's Aggregate call analyzes at once (its batch_window).
  unsigned aggregate_window();
  // A memfd that a server on this host maps, kept by one caller of
  // aggregate() for its calls one after another: its pages are made, and
  // mapped there, once. capacity: the most bytes of files one call takes.
  struct AggregateMemory {
    explicit AggregateMemory(uint64_t capacity) : capacity(capacity) {}
    ~AggregateMemory();
    AggregateMemory(const AggregateMemory&) = delete;
    AggregateMemory& operator=(const AggregateMemory&) = delete;
    const uint64_t capacity;
    int fd = -1;  // -1: not made yet
    bool failed = false;  // cannot be made, or no server takes it: the bytes go in the messages
    char* data = nullptr;
    std::string region_id;  // empty: not (or no longer) registered
  };
  // One Aggregate call over files (sizes: each one's, as listed; each at
  // most aggregate_file_limit()): their bytes read into *memory where a
  // server on this host maps it, else sent in the messages; inputs made
  // like `like` (kind, raw layout), named by their files. A call that ends
  // UNAVAILABLE goes again whole, as a file's would: a partial is all of
  // its inputs or none. The server's answer (a failure's index: its file's
  // place in files), with the files not read here in *unread; else the
  // call's status.
  grpc::Status aggregate(std::span<const std::string> files, std::span<const uint64_t> sizes,
                         const v1::Input& like, const v1::Options& options, AggregateMemory* memory,
                         v1::AggregateResponse* out, std::vector<std::pair<size_t, Outcome>>* unread);
  // The memory's region, unregistered once its calls are done.
  void release(AggregateMemory& memory);
  // Calls in flight that keep the server (every server of a list) busy:
  // four for each of its engine's threads, within its max_concurrent.
  unsigned calls_to_fill();
  // GetServerInfo; false with *error set when the call fails.
  bool info(v1::ServerInfo* out, std::string* error);
  // grpc.health.v1.Health/Check for the whole server: "SERVING", ...; false
  // when the call fails.
  bool health(std::string* status);

 private:
  std::chrono::system_clock::time_point deadline() const;
  Outcome analyze_once(Source& source, const Request& request, std::chrono::system_clock::time_point until);
  // The deadline and the token, on every call.
  void prepare(grpc::ClientContext& ctx, std::chrono::system_clock::time_point until) const;
  bool info(v1::ServerInfo* out, std::string* error, std::chrono::system_clock::time_point until);
  // GetServerInfo, asked once (files are analyzed concurrently); false when
  // the server did not answer.
  bool server_info(std::chrono::system_clock::time_point until, v1::ServerInfo* out);
  uint64_t message_limit(std::chrono::system_clock::time_point until);
  bool in_one_message(const Source& source, const Request& request, std::chrono::system_clock::time_point until);
  // Whether a call that ended UNAVAILABLE (or not) goes again after backoff.
  bool retry_unavailable(bool unavailable, int attempt, std::chrono::milliseconds backoff,
                         std::chrono::system_clock::time_point until);
  // unreachable_, and the channel has not connected again since.
  bool unreachable_now();
  struct UnaryCall;
  void call_unary(std::shared_ptr<UnaryCall> call);
  void unary_started();
  void unary_ended();
  // A request in one message, on a lane's batch stream where the server
  // takes them, else a unary call; fill() gives its input the data or URL.
  void send_in_one_message(const std::string& name, const Request& request,
                           std::chrono::system_clock::time_point until, std::function<void(Outcome)> done,
                           const std::function<void(v1::Input&)>& fill);
  // Lanes: AnalyzeBatch calls that carry small files (calls.cpp says how).
  struct BatchItem;
  class Lane;
  friend class Lane;
  // The file on the least loaded open lane with room, or on a new one.
  void send_on_lane(std::shared_ptr<BatchItem> item);
  // A file's answer on a lane, or its lane's end: retried as a unary call's
  // would be, or done.
  void item_done(std::shared_ptr<BatchItem> item, const grpc::Status& status, v1::AnalyzeResponse&& response);
  // A lane's call is over; its files not answered go again or fail.
  void lane_ended(uint64_t lane, const grpc::Status& status, bool answered,
                  std::vector<std::shared_ptr<BatchItem>> unanswered);
  // Closes every lane and waits until their calls are over.
  void close_lanes();
  // Files a lane carries at once: the server's batch_window.
  size_t lane_capacity(std::chrono::system_clock::time_point until);
  // Runs fn at `when` on the retry thread (started on first need).
  void later(std::chrono::system_clock::time_point when, std::function<void()> fn);
  // A file passed over the region socket and registered; false when it
  // cannot be.
  bool register_file(RegionSocketClient& socket, const std::string& path, std::chrono::system_clock::time_point until,
                     v1::Region* region);
  // Bytes [offset, offset + size) of an open file (fd stays the caller's).
  // pageable: not page-locked by a CUDA server (RegisterRegionRequest.pageable).
  bool register_descriptor(RegionSocketClient& socket, int fd, uint64_t offset, uint64_t size, const std::string& name,
                           std::chrono::system_clock::time_point until, v1::Region* region, bool pageable = false);
  bool register_file(RegionSocketClient& socket, const std::string& path, std::chrono::system_clock::time_point until,
                     std::string* region_id);
  void unregister(const std::vector<std::string>& regions, std::chrono::system_clock::time_point until);
  // The file through a region; false when regions cannot be had (the caller
  // sends it over the socket then).
  // Several files as one tar (Source::is_tar), made in a sealed memfd the server maps.
  bool register_tar(RegionSocketClient& socket, const Source& source, std::chrono::system_clock::time_point until,
                    v1::Region* region);
  bool analyze_in_region(Source& source, const Request& request, std::chrono::system_clock::time_point until,
                         Outcome* out);
  RegionSocketClient* region_socket(std::chrono::system_clock::time_point until);
  // The memory made and registered where it can be; false: the bytes go in the messages.
  bool ready(AggregateMemory& memory, std::chrono::system_clock::time_point until);
  grpc::Status aggregate_once(std::span<const std::string> files, std::span<const uint64_t> sizes,
                              const v1::Input& like, const v1::Options& options, AggregateMemory* memory,
                              std::chrono::system_clock::time_point until, v1::AggregateResponse* out,
                              std::vector<std::pair<size_t, Outcome>>* unread);

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ImageStats::Stub> stub_;
  std::string authorization_;
  double timeout_;
  std::mutex info_mu_;
  bool info_asked_ = false;
  bool info_ok_ = false;
  v1::ServerInfo info_;
  std::unique_ptr<FetchRules> fetch_rules_;  // info_.fetch_allow, once asked
  // Whether the server's rules (fetch_rules_, made once) cover name.
  bool covered(const v1::ServerInfo& info, const std::string& name);
  size_t servers_ = 1;  // addresses the target names
  // A file used all its retries on UNAVAILABLE, and no call has been answered since.
  std::atomic<bool> unreachable_{false};
  bool use_regions_ = false;
  std::mutex region_mu_;
  bool region_tried_ = false;
  std::unique_ptr<RegionSocketClient> region_socket_;
  bool batch_ = true;
  std::atomic<bool> batch_refused_{false};  // the server has no AnalyzeBatch: unary calls
  std::mutex lanes_mu_;
  std::condition_variable lanes_cv_;
  std::map<uint64_t, Lane*> lanes_;  // whose calls have not ended
  uint64_t next_lane_ = 0;
  size_t lanes_alive_ = 0;  // lanes_, and those whose lane_ended() is under way
  std::atomic<uint64_t> next_item_ = 0;
  std::mutex unary_mu_;
  std::condition_variable unary_cv_;
  uint64_t unary_alive_ = 0;  // UnaryCalls not yet destroyed
  std::mutex later_mu_;
  std::condition_variable later_cv_;
  std::multimap<std::chrono::system_clock::time_point, std::function<void()>> later_;
  bool later_stop_ = false;
  std::thread later_thread_;
};

class Local {
 public:
  // kCpu starts in milliseconds; kCuda (and kAuto on a GPU machine) pays
  // CUDA's start, about 0.4 s, before its first answer.
  explicit Local(EngineKind engine = EngineKind::kCpu);
  Outcome analyze(Source& source, const Request& request);

 private:
  std::unique_ptr<Analyzer> analyzer_;
};

}  // namespace imgstat::client
