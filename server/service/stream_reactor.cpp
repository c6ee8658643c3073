// AnalyzeStream: a header, then data chunks in order. Every message goes to
// the work queue, one at a time per call and in order (raw pixels and bytes
// are fed to the engine there; an encoded upload is gathered, then decoded),
// while gRPC receives the next: at most kAhead messages wait, so memory grows
// with what the engine has not yet taken, never with what the header declares.
// A call whose client sends nothing for --stream-idle-timeout is ended.
//
// StartRead and Finish may run the next reaction on the calling thread: they
// are decided under the lock and called outside it.
//
// The method is raw (grpc::ByteBuffer in and out): a chunk's bytes go to the
// upload from the slices gRPC received them in, never copied into a parsed
// message first. Only a chunk in protobuf's plain encoding (its one field,
// tag then length then bytes) is read that way; a header, and any other
// encoding of a message (unknown fields, a field repeated), is parsed by
// protobuf as before, so both read the same messages the same way.
#include <grpcpp/support/proto_buffer_reader.h>

#include <deque>
#include <mutex>
#include <string_view>
#include <vector>

#include "service/call_support.hpp"
#include "service/service.hpp"

namespace imgstat {
namespace {

constexpr size_t kAhead = 2;

// One AnalyzeStream message as received: a chunk's bytes in gRPC's slices,
// or the message parsed.
struct StreamMessage {
  bool is_chunk = false;
  std::vector<grpc::Slice> slices;        // holds the bytes `chunk` points into
  std::vector<std::string_view> chunk;    // the chunk's bytes, in order
  v1::AnalyzeStreamRequest parsed;
  uint64_t bytes = 0;                     // the chunk's, or the header's data (for the log)
};

// A chunk field (field 2, length-delimited) is its tag byte, a varint length,
// then the bytes.
constexpr uint8_t kChunkTag = (2 << 3) | 2;

StreamMessage decode(grpc::ByteBuffer& buffer) {
  StreamMessage m;
  std::vector<grpc::Slice> slices;
  if (buffer.Dump(&slices).ok()) {
    // The first bytes, across slices: the tag and up to ten of the varint.
    uint8_t head[11];
    size_t got = 0, total = 0;
    for (const grpc::Slice& s : slices) {
      total += s.size();
      for (size_t i = 0; i < s.size() && got < sizeof head; ++i) head[got++] = s.begin()[i];
    }
    if (got > 0 && head[0] == kChunkTag) {
      uint64_t length = 0;
      size_t at = 1;
      bool ended = false;
      for (int shift = 0; at < got && shift < 64; shift += 7) {
        const uint8_t b = head[at++];
        length |= uint64_t{b & 0x7fu} << shift;
        if (!(b & 0x80)) {
          ended = true;
          break;
        }
      }
      if (ended && length == total - at) {  // the whole message, and nothing else
        m.is_chunk = true;
        m.bytes = length;
        size_t skip = at;
        for (const grpc::Slice& s : slices) {
          const size_t n = s.size();
          if (skip >= n) {
            skip -= n;
            continue;
          }
          m.chunk.emplace_back(reinterpret_cast<const char*>(s.begin()) + skip, n - skip);
          skip = 0;
        }
        m.slices = std::move(slices);
        return m;
      }
    }
  }
  grpc::ProtoBufferReader reader(&buffer);
  if (!m.parsed.ParseFromZeroCopyStream(&reader))
    fail(ErrorCode::kInvalidArgument, "an AnalyzeStream message is not an AnalyzeStreamRequest");
  m.bytes = m.parsed.has_header() ? m.parsed.header().input().data().size() : m.parsed.chunk().size();
  return m;
}

class StreamReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer>, IdleWatch::Target {
 public:
  StreamReactor(grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response, CallEnv& env)
      : ctx_(ctx),
        response_(response),
        env_(env),
        call_(call_context(ctx, env.auth)),
        id_(take_request_id(ctx)),
        assembler_(env.analyzer, call_) {
    env_.idle.add(this);
    StartRead(&message_);
  }

  void OnReadDone(bool ok) override {
    bool read_more = false, start = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      reading_ = false;
      if (finished_) return;
      if (!ok) {
        reads_done_ = true;
      } else {
        pending_.push_back(std::move(message_));
        message_.Clear();  // moved from: empty, ready for the next read
        read_more = reading_ = pending_.size() < kAhead;
        if (reading_) read_started_ = Clock::now();
      }
      start = !working_ && (ok || reads_done_);
      working_ = working_ || start;
    }
    if (start) schedule();
    if (read_more) StartRead(&message_);
  }

  // The reactor outlives OnDone while a task of it still runs on the queue;
  // whichever of the two comes last deletes it.
  void OnDone() override {
    env_.idle.remove(this);
    env_.admission.leave();
    bool gone;
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      gone = !working_;
    }
    if (gone) delete this;
  }

  void check_idle(Clock::time_point now, Clock::duration timeout) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_ || !reading_ || now - read_started_ < timeout) return;
    }
    finish(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                        "AnalyzeStream sent nothing for " + seconds_text(env_.limits.stream_idle_timeout_seconds) +
                            " s (--stream-idle-timeout)"));
  }

 private:
  // One task on the queue works through what is pending, then finishes the
  // call when the client has sent everything.
  void schedule() {
    if (env_.submit(call_, [this](const grpc::Status& why_not, Clock::duration waited) {
          {
            std::lock_guard<std::mutex> lock(mu_);
            waited_ += waited;
          }
          work(why_not);
        }))
      return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      working_ = false;
    }
    finish(queue_full_status(env_.queue));
  }

  void work(grpc::Status status) {
    enum class Next { kStop, kPause, kEnd, kTake };
    for (;;) {
      if (!status.ok()) finish(status);
      grpc::ByteBuffer message;
      Next next;
      bool read_more = false, gone = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!finished_ && pending_.empty() && !reads_done_ && !paused_) {
          // Before the task lets go of the call: the engine gives back what
          // it holds while the client is awaited (a stalled client holds
          // none of it), then looks again.
          next = Next::kPause;
        } else if (finished_ || (pending_.empty() && !reads_done_)) {
          next = Next::kStop;
          working_ = false;
          gone = done_;
        } else if (pending_.empty()) {
          next = Next::kEnd;
        } else {
          next = Next::kTake;
          message = std::move(pending_.front());
          pending_.pop_front();
          if (!reading_ && !reads_done_) {
            read_more = reading_ = true;
            read_started_ = Clock::now();
          }
        }
      }
      if (next == Next::kStop) {
        if (gone) delete this;
        return;
      }
      if (next == Next::kPause) {
        paused_ = true;
        status = run_guarded([&] { assembler_.pause(); });
        continue;
      }
      paused_ = false;
      if (read_more) StartRead(&message_);
      if (next == Next::kEnd) {
        end();
        continue;
      }
      status = run_guarded([&] { take(message); });
    }
  }

  void take(grpc::ByteBuffer& buffer) {
    const StreamMessage message = decode(buffer);
    buffer.Clear();  // the slices live on in message
    if (!message.is_chunk && message.parsed.has_header() && !has_header_) {  // for the log, even when refused
      has_header_ = true;
      std::lock_guard<std::mutex> lock(mu_);
      input_.set_name(message.parsed.header().input().name());
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      input_bytes_ += message.bytes;
    }
    if (message.is_chunk)
      assembler_.take_chunk(message.chunk);
    else
      assembler_.take(message.parsed);
  }

  void end() {
    if (ctx_->IsCancelled()) return finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
    const grpc::Status status = run_guarded([&] { answer_ = assembler_.end(call_); });
    {
      std::lock_guard<std::mutex> lock(mu_);
      input_bytes_ += assembler_.region_bytes();
    }
    finish(status);
  }

  // The first call wins; later ones (a late idle check, a failing chunk) do nothing.
  void finish(const grpc::Status& status) {
    v1::Input input;
    uint64_t bytes;
    Clock::duration waited;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_) return;
      finished_ = true;
      pending_.clear();
      input = input_;
      bytes = input_bytes_;
      waited = waited_;
    }
    env_.record({"AnalyzeStream", id_, ctx_->peer(), caller_of(ctx_, env_.auth), input.name(), bytes, &answer_, status,
                 to_ms(waited), ms_since(started_)});
    env_.call_ended("AnalyzeStream", status, started_);
    grpc::Status sent = status;
    bool own = false;
    if (status.ok()) sent = grpc::SerializationTraits<v1::AnalyzeResponse>::Serialize(answer_, response_, &own);
    Finish(sent);
  }

  grpc::CallbackServerContext* ctx_;
  grpc::ByteBuffer* response_;
  v1::AnalyzeResponse answer_;
  CallEnv& env_;
  const CallContext call_;
  const std::string id_;
  grpc::ByteBuffer message_;  // being read
  std::mutex mu_;
  std::deque<grpc::ByteBuffer> pending_;
  bool reading_ = true;
  bool reads_done_ = false;
  bool working_ = false;  // a task of this call is queued or running
  bool finished_ = false;
  bool done_ = false;  // OnDone has run
  Clock::time_point read_started_ = Clock::now();
  v1::Input input_;  // the header's, for the log
  // For the log and the metrics.
  uint64_t input_bytes_ = 0;
  Clock::duration waited_{};
  // Used by the one task of this call at a time.
  StreamAssembler assembler_;
  bool has_header_ = false;
  bool paused_ = false;  // nothing was taken since the last pause
  const Clock::time_point started_ = Clock::now();
};

}  // namespace

grpc::ServerReadReactor<grpc::ByteBuffer>* make_stream_reactor(grpc::CallbackServerContext* ctx,
                                                              grpc::ByteBuffer* response, CallEnv& env) {
  return new StreamReactor(ctx, response, env);
}

}  // namespace imgstat
