#include "pass.hpp"

#include "shards.hpp"

#include <algorithm>
#include <chrono>

namespace imgstat::client {

Pass::Pass(Remote* remote, Local* local, const std::vector<std::string>& inputs, MakeRequest make,
           PassOptions options)
    : remote_(remote), local_(local), inputs_(inputs), make_(std::move(make)), options_(options) {
  options_.jobs = std::max(1u, options_.jobs);
  // In-process analyses hold their reader: one reader per analysis at once.
  const unsigned readers = local_ ? options_.jobs : std::clamp(options_.readers, 1u, options_.jobs);
  for (unsigned k = 0; k < std::min<size_t>(readers, inputs_.size()); ++k) readers_.emplace_back([this] { read_loop(); });
}

Pass::~Pass() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = true;
    window_.notify_all();
    slot_.notify_all();
    // Calls started on gRPC's threads end with finish(): wait for them.
    answered_.wait(lock, [&] { return in_flight_ == 0; });
  }
  for (std::thread& t : readers_) t.join();
}

void Pass::read_loop() {
  for (;;) {
    size_t i;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Not too far ahead of what the caller has taken: answers waiting for
      // an earlier one are held in memory.
      window_.wait(lock, [&] { return stopping_ || taken_ < handed_ + options_.reorder_window; });
      if (stopping_ || taken_ == inputs_.size()) return;
      i = taken_++;
      waiting_.resize(std::max(waiting_.size(), i - handed_ + 1));
    }
    // Until a slot is taken, a failure is the file's answer; after, finish() gives the slot back.
    Outcome failed;
    failed.file = inputs_[i];
    failed.code = "NOT_FOUND";
    bool made = false;
    try {
      Request request = make_(i);
      made = true;
      request.input.set_name(inputs_[i]);
      // An object the server fetches itself: its name goes, not its bytes.
      if (remote_ && !local_ && remote_->fetches(inputs_[i])) {
        {
          std::unique_lock<std::mutex> lock(mu_);
          slot_.wait(lock, [&] { return stopping_ || in_flight_ < options_.jobs; });
          if (stopping_) return;
          ++in_flight_;
        }
        remote_->start_fetch(inputs_[i], request, [this, i](Outcome o) { finish(i, std::move(o), 0); });
        continue;
      }
      Source source(inputs_[i], request.dicom_series, request.dicom_files);
      // Opened before a slot is taken, read on this thread once one is. What
      // a file sent in one message holds is counted against the bytes in
      // flight; larger files go as regions or streams, whose memory is
      // their own (a piece or two), so they never hold the small ones back.
      const uint64_t bytes = source.size() <= kStreamChunk ? source.size() : 0;
      {
        std::unique_lock<std::mutex> lock(mu_);
        slot_.wait(lock, [&] {
          return stopping_ ||
                 (in_flight_ < options_.jobs && (in_flight_ == 0 || bytes_ + bytes <= options_.bytes_in_flight));
        });
        if (stopping_) return;
        ++in_flight_;
        bytes_ += bytes;
      }
      try {
        if (local_)
          finish(i, local_->analyze(source, request), bytes);
        else
          remote_->start(source, request, [this, i, bytes](Outcome o) { finish(i, std::move(o), bytes); });
      } catch (const std::exception& e) {  // thrown before its answer came (the file could not be read)
        if (const auto* input = dynamic_cast<const InputError*>(&e)) failed.code = input->code();
        failed.error = std::string("cannot read: ") + e.what();
        finish(i, std::move(failed), bytes);
      }
    } catch (const std::exception& e) {
      if (const auto* input = dynamic_cast<const InputError*>(&e)) failed.code = input->code();
      failed.error = made ? std::string("cannot read: ") + e.what() : e.what();
      if (options_.prepare) options_.prepare(failed);
      std::lock_guard<std::mutex> lock(mu_);
      waiting_[i - handed_] = std::move(failed);
      ++finished_;
      answered_.notify_one();
    }
  }
}

void Pass::finish(size_t i, Outcome o, uint64_t bytes) {
  if (options_.prepare) options_.prepare(o);
  std::lock_guard<std::mutex> lock(mu_);
  waiting_[i - handed_] = std::move(o);
  ++finished_;
  --in_flight_;
  bytes_ -= bytes;
  // One slot freed: one reader to take it (every reader woken on every
  // answer costs a thread switch each on a small machine).
  slot_.notify_one();
  answered_.notify_one();
}

bool Pass::next_ready() {
  std::lock_guard<std::mutex> lock(mu_);
  return !waiting_.empty() && waiting_.front();
}

void Pass::poke() {
  std::lock_guard<std::mutex> lock(mu_);
  ++pokes_;
  answered_.notify_all();
}

Outcome Pass::next(const std::function<void(size_t)>& tick) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (!waiting_.empty() && waiting_.front()) break;
    const size_t seen = finished_;
    const uint64_t poked = pokes_;
    if (tick) {
      lock.unlock();
      tick(seen);
      lock.lock();
    }
    answered_.wait_for(lock, std::chrono::milliseconds(200),
                       [&] { return (!waiting_.empty() && waiting_.front()) || finished_ != seen || pokes_ != poked; });
  }
  Outcome o = std::move(*waiting_.front());
  waiting_.pop_front();
  ++handed_;
  window_.notify_one();
  return o;
}

}  // namespace imgstat::client
