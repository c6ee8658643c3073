// --aggregate merged by the servers themselves: the files go on a few
// Aggregate calls at once, each a contiguous slice of them, and each call's
// partial is merged here in input order. Neither side pays a call and an
// answer a file, and this process neither parses nor merges each file's
// answer. Taken where nothing here needs each file's answer (calls.hpp's
// Remote::aggregate carries one slice).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "calls.hpp"

namespace imgstat::client {

// Each input's size where it is a plain file, which the pass reads as it
// lies; kNotPlainFile for the rest (standard input, an object, a shard's
// member, a folder, a NIfTI pair's header: each read its own way). One stat
// a file.
constexpr uint64_t kNotPlainFile = ~uint64_t{0};
std::vector<uint64_t> plain_file_sizes(const std::vector<std::string>& inputs);

// The pass in runs, in input order: plain files of at most limit bytes each
// go on the servers' Aggregate calls, all of them or runs of at least
// kAggregateRunFiles among other inputs; every other input (and a shorter
// run among them, which would not fill a slice) goes a call a file.
struct OnServerRun {
  size_t first = 0, count = 0;
  bool on_server = false;
};
std::vector<OnServerRun> on_server_runs(const std::vector<uint64_t>& sizes, uint64_t limit);

// A slice's answer: the server's partial of the files it merged, and the
// files that failed (here or there) in input order.
struct OnServerSlice {
  size_t first = 0;  // its first file's place among the inputs
  size_t count = 0;
  v1::Partial partial;
  std::vector<Outcome> failed;
  // The server refused the call (one of a list without it, or whose token
  // may not make it): nothing merged, its files to go a call a file.
  bool refused = false;
};

struct OnServerOptions {
  unsigned jobs = 16;                            // inputs analyzed at once, over all the calls
  uint64_t bytes_in_flight = uint64_t{256} << 20;  // files' bytes read and not yet merged, all calls together
};

// Runs the pass over files (a run of them): merge(slice) on this thread for
// each slice in input order, tick(files answered) every 200 ms and after
// each slice. False, having merged nothing, where the server refused the
// call itself on the first slice (a server without it, a token not allowed
// it): then these files go a call a file. A later slice refused (another
// server of a list) comes to merge marked so.
bool aggregate_on_server(Remote& remote, std::span<const std::string> files, std::span<const uint64_t> sizes,
                         const v1::Input& like, const v1::Options& options, const OnServerOptions& tuning,
                         const std::function<void(OnServerSlice&)>& merge, const std::function<void(size_t)>& tick);

}  // namespace imgstat::client
