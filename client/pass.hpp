// One pass of the CLI over its inputs: files read ahead on a few threads, at
// most `jobs` calls in flight (gRPC's callback API for small files, so a
// call in flight costs no thread), answers handed back in input order on the
// caller's thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "calls.hpp"

namespace imgstat::client {

struct PassOptions {
  // Calls in flight (against a server) or analyses at once (--local).
  unsigned jobs = 16;
  // Threads that read files ahead and start their calls; a large upload
  // (a region or a stream) keeps its reader until it is answered.
  unsigned readers = 4;
  // Answers that finished before an earlier file's may wait for it, at most
  // this many: memory stays bounded when one file is slow.
  size_t reorder_window = 4096;
  // Bytes of small files read and not yet answered, together (at least one file always).
  uint64_t bytes_in_flight = uint64_t{256} << 20;
  // Runs on the thread an answer comes in on, before next() hands it back
  // (rendering it: many threads share that work, one would print).
  std::function<void(Outcome&)> prepare;
};

class Pass {
 public:
  // File i's request; throws std::exception, whose message becomes the file's
  // error (NOT_FOUND), when it cannot be made.
  using MakeRequest = std::function<Request(size_t i)>;
  // Exactly one of remote and local.
  Pass(Remote* remote, Local* local, const std::vector<std::string>& inputs, MakeRequest make, PassOptions options);
  ~Pass();  // waits for every call in flight
  Pass(const Pass&) = delete;
  Pass& operator=(const Pass&) = delete;

  // The next input's answer, in input order; blocks. tick(finished) runs on
  // this thread every 200 ms while it waits and whenever another answer
  // comes in (a progress bar); finished counts answers in, in any order.
  Outcome next(const std::function<void(size_t finished)>& tick);
  // Whether next() would return at once.
  bool next_ready();
  // Makes a waiting next() tick now (an upload began: the bar shows its bytes).
  void poke();

 private:
  void read_loop();
  void finish(size_t i, Outcome o, uint64_t bytes);

  Remote* remote_;
  Local* local_;
  const std::vector<std::string>& inputs_;
  MakeRequest make_;
  PassOptions options_;

  std::mutex mu_;
  std::condition_variable answered_;  // the caller waits here
  std::condition_variable window_;    // readers wait here for the reorder window
  std::condition_variable slot_;      // and here for a call's slot
  size_t taken_ = 0;                  // inputs a reader has taken
  size_t handed_ = 0;                 // inputs next() has returned
  size_t finished_ = 0;
  uint64_t pokes_ = 0;
  unsigned in_flight_ = 0;
  uint64_t bytes_ = 0;
  bool stopping_ = false;
  std::deque<std::optional<Outcome>> waiting_;  // answers of inputs handed_.. in order
  std::vector<std::thread> readers_;
};

}  // namespace imgstat::client
