#include "on_server.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "call_support.hpp"
#include "core/status_name.hpp"
#include "shards.hpp"
#include "slices.hpp"
#include "sources/objects.hpp"

namespace imgstat::client {

std::vector<uint64_t> plain_file_sizes(const std::vector<std::string>& inputs) {
  std::vector<uint64_t> sizes;
  sizes.reserve(inputs.size());
  for (const std::string& name : inputs) {
    const bool header = name.size() > 4 && name.compare(name.size() - 4, 4, ".hdr") == 0;
    struct stat st {};
    const bool plain = name != "-" && !header && !is_object_name(name) && !is_shard_member(name) &&
                       ::stat(name.c_str(), &st) == 0 && S_ISREG(st.st_mode);
    sizes.push_back(plain ? static_cast<uint64_t>(st.st_size) : kNotPlainFile);
  }
  return sizes;
}

std::vector<OnServerRun> on_server_runs(const std::vector<uint64_t>& sizes, uint64_t limit) {
  std::vector<OnServerRun> runs;
  auto add = [&](size_t first, size_t count, bool on_server) {
    if (count == 0) return;
    if (!runs.empty() && runs.back().on_server == on_server)
      runs.back().count += count;
    else
      runs.push_back({first, count, on_server});
  };
  size_t i = 0;
  while (i < sizes.size()) {
    size_t end = i;
    while (end < sizes.size() && limit > 0 && sizes[end] <= limit) ++end;
    if (end > i) {  // a run the calls may take
      add(i, end - i, end - i >= kAggregateRunFiles || end - i == sizes.size());
      i = end;
    } else {
      add(i, 1, false);
      ++i;
    }
  }
  return runs;
}

namespace {

struct Answer {
  grpc::Status status;
  v1::AggregateResponse response;
  std::vector<std::pair<size_t, Outcome>> unread;
};

}  // namespace

bool aggregate_on_server(Remote& remote, std::span<const std::string> files, std::span<const uint64_t> sizes,
                         const v1::Input& like, const v1::Options& options, const OnServerOptions& tuning,
                         const std::function<void(OnServerSlice&)>& merge, const std::function<void(size_t)>& tick) {
  // As many calls as keep `jobs` inputs in the servers' hands (each call
  // analyzes its window at once).
  const unsigned window = remote.aggregate_window();
  const size_t calls = std::clamp<size_t>((std::max(1u, tuning.jobs) + window - 1) / window, 1, kAggregateCalls);
  const uint64_t largest = sizes.empty() ? 0 : *std::max_element(sizes.begin(), sizes.end());
  const uint64_t slice_bytes = std::max(largest, std::min(kAggregateSliceBytes, tuning.bytes_in_flight / calls));
  const std::vector<FileSlice> slices =
      guided_slices(sizes, {kAggregateGuided * calls, kAggregateSliceWindows * window, kAggregateSliceFiles, slice_bytes});

  std::mutex mu;
  std::condition_variable ready, room;
  std::vector<std::optional<Answer>> answers(slices.size());
  std::vector<uint64_t> answers_bytes(slices.size());
  size_t next = 0, merged = 0;
  uint64_t held = 0;  // bytes of the answers that wait for an earlier slice's
  bool stop = false;
  auto work = [&] {
    Remote::AggregateMemory memory(slice_bytes);
    struct Release {
      Remote& remote;
      Remote::AggregateMemory& memory;
      ~Release() { remote.release(memory); }
    } release{remote, memory};
    for (;;) {
      size_t k;
      {
        std::unique_lock<std::mutex> lock(mu);
        // Not far ahead of the merge: answers waiting for an earlier slice are held.
        room.wait(lock, [&] {
          return stop || next >= slices.size() || next < merged + 2 * calls || held < kAggregateHeldBytes;
        });
        if (stop || next >= slices.size()) return;
        k = next++;
      }
      const FileSlice& s = slices[k];
      Answer a;
      a.status = remote.aggregate(files.subspan(s.first, s.count), sizes.subspan(s.first, s.count), like, options,
                                  &memory, &a.response, &a.unread);
      const uint64_t bytes = a.response.ByteSizeLong();
      std::lock_guard<std::mutex> lock(mu);
      answers[k] = std::move(a);
      answers_bytes[k] = bytes;
      held += bytes;
      ready.notify_all();
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 0; t < std::min(calls, slices.size()); ++t) threads.emplace_back(work);
  auto end = [&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
      room.notify_all();
    }
    for (std::thread& t : threads) t.join();
  };

  size_t answered = 0;
  for (size_t k = 0; k < slices.size(); ++k) {
    Answer a;
    {
      std::unique_lock<std::mutex> lock(mu);
      while (!answers[k]) {
        if (!ready.wait_for(lock, std::chrono::milliseconds(200), [&] { return answers[k].has_value(); })) {
          lock.unlock();
          if (tick) tick(answered);
          lock.lock();
        }
      }
      a = std::move(*answers[k]);
      answers[k].reset();
      held -= answers_bytes[k];
      merged = k + 1;
      room.notify_all();
    }
    const grpc::StatusCode code = a.status.error_code();
    const bool refused = code == grpc::StatusCode::UNIMPLEMENTED || code == grpc::StatusCode::PERMISSION_DENIED;
    if (k == 0 && refused) {
      end();
      return false;
    }
    const FileSlice& s = slices[k];
    OnServerSlice slice;
    slice.first = s.first;
    slice.count = s.count;
    slice.refused = refused;
    if (a.status.ok()) {
      slice.partial = std::move(*a.response.mutable_partial());
      std::vector<std::pair<size_t, Outcome>> failed = std::move(a.unread);
      for (const v1::AggregateFailure& f : a.response.failures())
        failed.emplace_back(f.index(), failure(files[s.first + f.index()], status_code_name(f.error().code()),
                                               f.error().message()));
      std::stable_sort(failed.begin(), failed.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
      for (auto& [i, o] : failed) slice.failed.push_back(std::move(o));
    } else if (!refused) {  // the call failed whole: each of its files with it, as a call of its own would
      for (size_t i = 0; i < s.count; ++i)
        slice.failed.push_back(failure(files[s.first + i], status_code_name(code), a.status.error_message()));
    }
    merge(slice);
    answered += s.count;
    if (tick) tick(answered);
  }
  end();
  return true;
}

}  // namespace imgstat::client
