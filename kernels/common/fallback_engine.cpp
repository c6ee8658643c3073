#include "common/fallback_engine.hpp"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "common/partial.hpp"
#include "common/pieces.hpp"

namespace imgstat {

FallbackEngine::FallbackEngine(std::unique_ptr<Engine> primary, std::unique_ptr<Engine> backup,
                               std::function<void(const std::string&)> on_fallback, FallbackTuning tuning)
    : primary_(std::move(primary)),
      backup_(std::move(backup)),
      on_fallback_(std::move(on_fallback)),
      tuning_(tuning) {}

EngineInfo FallbackEngine::info() const {
  EngineInfo i = lost_ ? backup_->info() : primary_->info();
  i.threads = backup_->info().threads;
  return i;
}

EngineUsage FallbackEngine::usage() const {
  EngineUsage u = primary_->usage();
  u.cpu_fallbacks = fallbacks_;
  u.gpu_lost = lost_;
  return u;
}

void FallbackEngine::primary_failed(const Error& e) {
  ++fallbacks_;
  if (!primary_->usable() && !lost_.exchange(true)) {
    if (on_fallback_) on_fallback_(std::string("the GPU is no longer usable (") + e.what() + "): the CPU engine takes every image from now on");
  } else if (on_fallback_) {
    on_fallback_(std::string("GPU could not take this image (") + e.what() + "): computed on the CPU");
  }
}

bool FallbackEngine::try_retain(uint64_t bytes) {
  uint64_t now = retained_.load();
  do {
    if (now + bytes > tuning_.retain_limit) return false;
  } while (!retained_.compare_exchange_weak(now, now + bytes));
  return true;
}

KeptBuffer FallbackEngine::take_buffer() {
  std::lock_guard<std::mutex> lock(spare_mu_);
  if (spare_.empty()) return {};
  KeptBuffer b = std::move(spare_.back());
  spare_.pop_back();
  spare_held_ -= b.capacity();
  return b;
}

void FallbackEngine::give_buffer(KeptBuffer buffer) {
  buffer.clear();
  std::lock_guard<std::mutex> lock(spare_mu_);
  if (buffer.capacity() == 0 || spare_held_ + buffer.capacity() > tuning_.spare_bytes) return;  // freed here
  spare_held_ += buffer.capacity();
  spare_.push_back(std::move(buffer));
}

template <class Fn>
auto FallbackEngine::either(Fn&& fn, const std::function<bool()>& source_failed) {
  if (!lost_) {
    try {
      return fn(*primary_);
    } catch (const LimitError&) {
      throw;
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kInvalidArgument || (source_failed && source_failed())) throw;
      // What the GPU does not compute (float parts) is the CPU's work, not a fault.
      if (e.code() != ErrorCode::kUnimplemented) primary_failed(e);
    }
  }
  return fn(*backup_);
}

Result FallbackEngine::analyze(const ImageView& image, const StatsRequest& request) {
  return either([&](Engine& e) { return e.analyze(image, request); });
}

Result FallbackEngine::analyze_parts(const ImageView& image, const Parts& parts, const StatsRequest& request) {
  return either([&](Engine& e) { return e.analyze_parts(image, parts, request); });
}

Result FallbackEngine::analyze_read(const Layout& layout, const StatsRequest& request, const ByteReader& read) {
  WatchedReader watched(read);
  return either([&](Engine& e) {
    return &e == primary_.get() ? e.analyze_read(layout, request, watched.reader()) : e.analyze_read(layout, request, read);
  }, [&] { return watched.failed(); });
}

Result FallbackEngine::analyze_device(const DeviceImageView& image, const StatsRequest& request) {
  try {
    return primary_->analyze_device(image, request);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kInvalidArgument) throw;
    if (e.code() != ErrorCode::kUnimplemented) primary_failed(e);
    fail(ErrorCode::kUnavailable, std::string("the GPU could not analyze the decoded image (") + e.what() + ")");
  }
}

Result FallbackEngine::analyze_parts_device(const DeviceImageView& image, const Parts& parts,
                                            const StatsRequest& request) {
  try {
    return primary_->analyze_parts_device(image, parts, request);
  } catch (const Error& e) {
    // Limits (kResourceExhausted) and bad parts are the request's, as on the host.
    if (e.code() == ErrorCode::kInvalidArgument || e.code() == ErrorCode::kResourceExhausted) throw;
    if (e.code() != ErrorCode::kUnimplemented) primary_failed(e);
    fail(ErrorCode::kUnavailable, std::string("the GPU could not analyze the decoded image's parts (") + e.what() + ")");
  }
}

namespace {

// A feed may carry the kept pixels past checkpoint_bytes by its own size
// before the checkpoint empties them; gRPC messages are at most a few MiB.
constexpr uint64_t kKeptSlack = uint64_t{4} << 20;

// The primary's stream, with what the backup needs to take over: the last
// checkpoint and the pixels since. Both engines see packed whole pixels (the
// row padding is dropped here), so the backup can start at any pixel.
class FallbackStream final : public StreamAnalysis {
 public:
  FallbackStream(FallbackEngine& owner, const Layout& layout, const StatsRequest& request,
                 std::unique_ptr<StreamAnalysis> primary)
      : owner_(owner),
        layout_(layout),
        request_(request),
        destrider_(layout),
        pixel_bytes_(layout.pixel_bytes()),
        primary_(std::move(primary)),
        checkpoint_(empty_partial(layout.type, measured_layout(layout, request).channels,
                                  measured_request(request, layout))) {}

  ~FallbackStream() override { drop_retained(); }

  void feed(const void* data, size_t bytes) override {
    if (destrider_.consumed() + bytes > layout_.stride() * layout_.height)
      fail(ErrorCode::kInvalidArgument, "more data than the layout holds");
    // In pieces of at most kKeptSlack: what is kept passes checkpoint_bytes
    // by no more than that whatever a feed's size.
    const uint64_t most = std::max<uint64_t>(1, kKeptSlack / pixel_bytes_);
    destrider_.feed(static_cast<const uint8_t*>(data), bytes, [&](const uint8_t* p, uint64_t pixels, bool) {
      for (uint64_t done = 0; done < pixels;) {
        const uint64_t n = std::min(most, pixels - done);
        take(p + done * pixel_bytes_, n);
        done += n;
      }
    });
  }

  // What the GPU counted comes to the host as it pauses: a checkpoint then
  // costs a copy, and the pixels kept since the last one go, so a stream
  // waiting on its client holds no more than the CPU engine's would.
  void pause() override {
    if (!primary_) {
      if (backup_) backup_->pause();
      return;
    }
    try {
      primary_->pause();
    } catch (const Error& e) {
      take_over(e);
      return;
    }
    if (can_checkpoint_ && !kept_.empty()) checkpoint();
    if (can_checkpoint_) owner_.give_buffer(std::exchange(kept_, {}));
  }

  Result finish() override {
    if (!destrider_.complete())
      fail(ErrorCode::kInvalidArgument, "stream ended after " + std::to_string(destrider_.consumed()) +
                                            " bytes; the layout needs " + std::to_string(layout_.min_bytes()));
    if (primary_) {
      try {
        return primary_->finish();
      } catch (const Error& e) {
        take_over(e);
      }
    }
    if (!checkpointed_) return backup_->finish();
    if (backup_) {  // else the checkpoint covers every pixel
      auto* rest = dynamic_cast<CheckpointStream*>(backup_.get());
      std::optional<Partial> part = rest ? rest->partial() : std::nullopt;
      if (!part) fail(ErrorCode::kInternal, "the CPU engine gave no partial result to finish a checkpointed stream");
      offset_positions(*part, checkpoint_pixels_);
      merge(checkpoint_, *part);
    }
    return result_of(checkpoint_, measured_request(request_, layout_), "cpu");
  }

 private:
  static Layout packed(const Layout& l, uint64_t pixels) { return Layout{pixels, 1, l.channels, l.type, 0}; }

  void take(const uint8_t* p, uint64_t pixels) {
    const uint64_t bytes = pixels * pixel_bytes_;
    if (!primary_) {
      backup_->feed(p, bytes);
      return;
    }
    keep(p, bytes);
    try {
      primary_->feed(p, bytes);
    } catch (const Error& e) {
      take_over(e);
      return;
    }
    fed_ += pixels;
    if (can_checkpoint_ && kept_.size() >= owner_.tuning().checkpoint_bytes) checkpoint();
  }

  void keep(const uint8_t* p, uint64_t bytes) {
    if (!keeping_) return;
    // One allocation per stream (again after a pause) rather than a chain of doublings.
    if (kept_.capacity() == 0) {
      kept_ = owner_.take_buffer();
      kept_.reserve(std::min(owner_.tuning().checkpoint_bytes + kKeptSlack, layout_.pixels() * pixel_bytes_));
    }
    if (!can_checkpoint_) {
      if (!owner_.try_retain(bytes)) {
        drop_retained();
        keeping_ = false;
        return;
      }
      charged_ += bytes;
    }
    // On every core: one thread copies a few GB/s, the GPU takes tens.
    const size_t at = kept_.size();
    kept_.resize(at + bytes);
    constexpr uint64_t kPiece = uint64_t{1} << 20;
    if (bytes < 2 * kPiece) {
      std::memcpy(kept_.data() + at, p, bytes);
    } else {
      tbb::parallel_for(uint64_t{0}, (bytes + kPiece - 1) / kPiece, [&](uint64_t i) {
        std::memcpy(kept_.data() + at + i * kPiece, p + i * kPiece, std::min(kPiece, bytes - i * kPiece));
      });
    }
  }

  void drop_retained() {
    owner_.unretain(charged_);
    charged_ = 0;
    owner_.give_buffer(std::exchange(kept_, {}));
  }

  void checkpoint() {
    std::optional<Partial> now;
    try {
      if (auto* cp = dynamic_cast<CheckpointStream*>(primary_.get())) now = cp->partial();
    } catch (const Error& e) {
      take_over(e);
      return;
    }
    if (!now) {  // from here on every pixel is kept, within the engine's limit
      can_checkpoint_ = false;
      if (!owner_.try_retain(kept_.size())) {
        drop_retained();
        keeping_ = false;
      } else {
        charged_ = kept_.size();
      }
      return;
    }
    checkpoint_ = std::move(*now);
    checkpointed_ = true;
    checkpoint_pixels_ = fed_;
    kept_.clear();
  }

  // The primary failed: the backup carries on from the last checkpoint with
  // the pixels kept since, which include the ones the primary failed on.
  void take_over(const Error& e) {
    if (e.code() == ErrorCode::kInvalidArgument) throw e;
    if (!keeping_)
      fail(e.code(), std::string(e.what()) + "; this stream's pixels were too many to keep for the CPU engine (" +
                         std::to_string(owner_.tuning().retain_limit >> 20) + " MiB for all streams)");
    owner_.primary_failed(e);
    primary_.reset();
    const uint64_t from = checkpointed_ ? checkpoint_pixels_ : 0;
    if (from < layout_.pixels()) {
      backup_ = owner_.backup().open_stream(packed(layout_, layout_.pixels() - from), request_);
      if (!kept_.empty()) backup_->feed(kept_.data(), kept_.size());
    }
    drop_retained();
  }

  FallbackEngine& owner_;
  Layout layout_;
  StatsRequest request_;
  Destrider destrider_;
  uint64_t pixel_bytes_;
  std::unique_ptr<StreamAnalysis> primary_;  // null once it has failed
  std::unique_ptr<StreamAnalysis> backup_;   // then carries on from the checkpoint
  Partial checkpoint_;
  bool checkpointed_ = false;
  uint64_t checkpoint_pixels_ = 0;  // pixels the checkpoint covers
  uint64_t fed_ = 0;                // pixels the primary has taken
  bool can_checkpoint_ = true;
  bool keeping_ = true;
  KeptBuffer kept_;  // pixels since the checkpoint
  uint64_t charged_ = 0;       // of kept_, counted against retain_limit
};

}  // namespace

std::unique_ptr<StreamAnalysis> FallbackEngine::open_stream(const Layout& layout, const StatsRequest& request) {
  validate(layout, request);
  const Layout packed{layout.pixels(), 1, layout.channels, layout.type, 0};
  if (!lost_) {
    try {
      return std::make_unique<FallbackStream>(*this, layout, request, primary_->open_stream(packed, request));
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kInvalidArgument) throw;
      if (e.code() != ErrorCode::kUnimplemented) primary_failed(e);
    }
  }
  return backup_->open_stream(layout, request);
}

}  // namespace imgstat
