// What the CLI's calls share (remote.cpp, lanes.cpp, local.cpp): the
// constants they are tuned by, the mask or label image that travels beside
// an input, and an outcome from a call's status.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "calls.hpp"

namespace imgstat::client {


// Room for the request's other fields inside the server's message limit.
constexpr uint64_t kEnvelope = 64 << 10;
// Files this large go through a region to a server on this host: below it,
// the two region calls cost more than the socket saves.
constexpr uint64_t kRegionMinBytes = uint64_t{1} << 20;
// Keep-alive pings on idle and busy connections alike: a server whose host
// vanished (no FIN, no RST) is noticed within ping interval + timeout. The
// server lets pings come this often (server/core/limits.hpp).
constexpr int kKeepaliveMs = 10000;
// The CLI's own retries of a file whose call ended UNAVAILABLE after gRPC's
// (a server killed with the file's bytes past gRPC's replay buffer): in all,
// at most this many attempts, the first wait doubling each time.
constexpr int kAttempts = 5;
constexpr std::chrono::milliseconds kFirstBackoff{100};
constexpr int kKeepaliveTimeoutMs = 5000;
constexpr int kReconnectMs = 100;
// Lanes (AnalyzeBatch calls carrying small files): at most this many files
// on one at once, within the server's batch_window; an empty lane left this
// long is closed before the next file (the server ends one idle for its
// --stream-idle-timeout, 30 s by default).
constexpr size_t kLaneFiles = 16;
constexpr std::chrono::seconds kLaneIdle{2};
// A lane takes this many files in all, then closes: the lanes after it go
// to whichever server round_robin picks then (lanes opened before every
// server of a list was connected all sit on the first; a restarted server
// gets its share back).
constexpr uint64_t kLaneTurn = 64;
const char* const kUnreachable = "no server reachable: an earlier file used all its retries, and none has answered since";
// calls_to_fill(): calls in flight for each of the server's engine threads,
// and the bounds of the whole (the first when the server does not say).
constexpr unsigned kCallsPerThread = 4;
constexpr uint64_t kDefaultCalls = 16;
constexpr uint64_t kMaxCalls = 256;
// --aggregate on the servers' Aggregate calls (on_server.cpp): at most this
// many calls at once. Their slices shrink as the pass goes, as OpenMP's
// schedule(guided): each takes 1/(kAggregateGuided x calls) of the files
// left, so the calls end together, the last ones a short slice each
// rather than a quarter of a call's share (as fixed slices did). A slice holds at least
// kAggregateSliceWindows of the server's windows and at most
// kAggregateSliceFiles files and kAggregateSliceBytes bytes (a memfd's worth
// at a time to a server on this host). Answers that wait for an earlier
// slice's are held up to 2 x calls of them, or more within
// kAggregateHeldBytes.
constexpr size_t kAggregateCalls = 64;
constexpr size_t kAggregateGuided = 2;
constexpr size_t kAggregateSliceWindows = 2;
constexpr size_t kAggregateSliceFiles = 1024;
constexpr uint64_t kAggregateSliceBytes = uint64_t{64} << 20;
constexpr uint64_t kAggregateHeldBytes = uint64_t{64} << 20;
// Plain files in a row, at least, that go on those calls among inputs that
// go a call a file (a shard's members, large files): each such run waits
// for the one before it, and a shorter run would fill no call's windows.
constexpr size_t kAggregateRunFiles = 32;
// round_robin over every address of the target, and gRPC's own retries for
// unary calls that never reached a server (UNAVAILABLE before any answer);
// retry_unavailable() below covers the rest. Streaming calls get no retry
// policy: a lane that ends hands its unanswered files back to be sent again
// (lane_ended), and an upload starts over, so gRPC's replay of a stream's
// buffered messages on another server is only a second path. In one
// fresh-clone CI run a lane opened about when a server was killed sat 30 s
// with two files the live server never answered; that replay is the one
// path there that is not ours.
constexpr const char* kServiceConfig = R"({
  "loadBalancingConfig": [{"round_robin": {}}],
  "methodConfig": [{
    "name": [{"service": "imgstat.v1.ImageStats", "method": "Analyze"},
             {"service": "imgstat.v1.ImageStats", "method": "GetServerInfo"},
             {"service": "imgstat.v1.ImageStats", "method": "RegisterRegion"},
             {"service": "imgstat.v1.ImageStats", "method": "ListRegions"},
             {"service": "imgstat.v1.ImageStats", "method": "UnregisterRegion"}],
    "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.05s", "maxBackoff": "1s",
                    "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
  }]
})";


// The mask or label image the parts name, if any.
v1::Input* map_input_of(v1::Options& options);
// Bytes of the request's map file (0: none).
uint64_t map_size(const Request& request);
// The options with the map's bytes in place, for one message.
v1::Options options_with_map(const Request& request);

// A file on a unary call: its attempts and the contexts they used.
struct Remote::UnaryCall {
  explicit UnaryCall(Remote* r) : alive{r} { r->unary_started(); }
  // Declared first, so gone last: after the contexts, which gRPC's callback
  // thread destroys after done() has run (the Remote, its channel and
  // gRPC itself must outlive them: ~Remote waits for every call's end).
  struct Alive {
    Remote* remote;
    ~Alive() { remote->unary_ended(); }
  } alive;
  std::string file;
  std::chrono::system_clock::time_point until;
  std::function<void(Outcome)> done;
  v1::AnalyzeRequest request;
  v1::AnalyzeResponse response;
  // One context an attempt, kept until the file is answered: an attempt's
  // call may still be winding down on gRPC's thread when the next begins.
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  int attempt = 1;
  std::chrono::milliseconds backoff = kFirstBackoff;
};

// A file on a lane.
struct Remote::BatchItem {
  std::string file;
  std::chrono::system_clock::time_point until;
  std::function<void(Outcome)> done;
  v1::BatchRequest request;  // its id unique in this process
  int attempt = 1;
  std::chrono::milliseconds backoff = kFirstBackoff;
};

Outcome failure(const std::string& file, const std::string& code, const std::string& error);
Outcome outcome_of(const std::string& file, const grpc::Status& status, v1::AnalyzeResponse&& response);

}  // namespace imgstat::client
