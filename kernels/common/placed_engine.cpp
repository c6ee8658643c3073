// Several GPUs' engines as one (make_placed_engine in engine.hpp). Each call
// holds its slot's share of the load while it runs; a stream holds it from
// open to finish. A fault that leaves a slot's engine unusable takes the
// slot out and the call moves to the next least loaded slot; other faults
// (out of memory, busy workspaces) move the call on without taking anything
// out. Bad input is not retried: every GPU would refuse it the same way.
#include <optional>
#include <type_traits>

#include "common/partial.hpp"
#include "imgstat/engine.hpp"

namespace imgstat {
namespace {

class PlacedEngine;

// A stream on one slot: holds the slot's share while it computes (not
// while it waits for its client: the next call is placed as if it were not
// there) and says when the slot's engine failed under it, so that the slot
// is taken out. What carries the stream on elsewhere is the FallbackEngine
// above, from its checkpoint.
class PlacedStream final : public CheckpointStream {
 public:
  PlacedStream(PlacedEngine& owner, Placement::Hold hold, std::unique_ptr<StreamAnalysis> inner)
      : owner_(owner), slot_(hold.slot()), hold_(std::move(hold)), inner_(std::move(inner)) {}
  void feed(const void* data, size_t bytes) override {
    guarded([&] { inner_->feed(data, bytes); });
  }
  void pause() override {
    guarded([&] { inner_->pause(); });
    hold_ = {};
  }
  Result finish() override {
    Result r;
    guarded([&] { r = inner_->finish(); });
    tag(r);
    hold_ = {};  // its share of the GPU's load ends with its work
    ended_ = true;
    return r;
  }
  std::optional<Partial> partial() override {
    auto* cp = dynamic_cast<CheckpointStream*>(inner_.get());
    std::optional<Partial> p;
    if (cp) guarded([&] { p = cp->partial(); });
    return p;
  }

 private:
  template <class Fn>
  void guarded(Fn&& fn);
  void tag(Result& r);
  PlacedEngine& owner_;
  size_t slot_;
  Placement::Hold hold_;  // while it computes
  bool ended_ = false;    // finished, or failed here
  std::unique_ptr<StreamAnalysis> inner_;
};

class PlacedEngine final : public Engine {
 public:
  PlacedEngine(std::vector<std::unique_ptr<Engine>> engines, std::shared_ptr<Placement> placement)
      : engines_(std::move(engines)), placement_(std::move(placement)) {
    if (engines_.empty() || engines_.size() != placement_->size())
      fail(ErrorCode::kInternal, "a placed engine needs one engine per slot");
  }

  EngineInfo info() const override {
    // The first slot in service speaks for the kind and the threads; the
    // name counts the GPUs and memory adds up.
    EngineInfo first;
    std::string name;
    uint64_t memory = 0;
    size_t serving = 0;
    bool same = true;
    for (size_t i = 0; i < engines_.size(); ++i) {
      if (!placement_->in_service(i)) continue;
      const EngineInfo e = engines_[i]->info();
      if (serving++ == 0) {
        first = e;
        name = e.device_name;
      } else {
        same &= e.device_name == name;
        name += ", " + e.device_name;
      }
      memory += e.device_memory_bytes;
    }
    if (serving == 0) return engines_.front()->info();
    if (serving > 1 && same) name = std::to_string(serving) + " x " + first.device_name;
    first.device_name = name;
    first.device_memory_bytes = memory;
    return first;
  }

  bool usable() const override {
    for (size_t i = 0; i < engines_.size(); ++i)
      if (placement_->in_service(i) && engines_[i]->usable()) return true;
    return false;
  }

  EngineUsage usage() const override {
    EngineUsage u;
    u.gpu_lost = true;
    for (size_t i = 0; i < engines_.size(); ++i) {
      if (!placement_->in_service(i)) continue;
      const EngineUsage e = engines_[i]->usage();
      u.device_bytes_held += e.device_bytes_held;
      u.device_bytes_free += e.device_bytes_free;
      u.device_bytes_total += e.device_bytes_total;
      u.gpu_lost = u.gpu_lost && e.gpu_lost;
    }
    return u;
  }

  Result analyze(const ImageView& image, const StatsRequest& request) override {
    return computed({}, [&](Engine& e) { return e.analyze(image, request); });
  }

  Result analyze_parts(const ImageView& image, const Parts& parts, const StatsRequest& request) override {
    return computed({}, [&](Engine& e) { return e.analyze_parts(image, parts, request); });
  }

  Result analyze_read(const Layout& layout, const StatsRequest& request, const ByteReader& read) override {
    WatchedReader watched(read);
    return computed({}, [&](Engine& e) { return e.analyze_read(layout, request, watched.reader()); },
                    [&] { return watched.failed(); });
  }

  // The pixels are on one GPU: only its slots can read them.
  Result analyze_device(const DeviceImageView& image, const StatsRequest& request) override {
    const int device = image.device >= 0 ? image.device : first_device();
    return computed([&](size_t slot) { return placement_->device(slot) == device; },
                    [&](Engine& e) { return e.analyze_device(image, request); });
  }

  Result analyze_parts_device(const DeviceImageView& image, const Parts& parts, const StatsRequest& request) override {
    const int device = image.device >= 0 ? image.device : first_device();
    return computed([&](size_t slot) { return placement_->device(slot) == device; },
                    [&](Engine& e) { return e.analyze_parts_device(image, parts, request); });
  }

  std::unique_ptr<StreamAnalysis> open_stream(const Layout& layout, const StatsRequest& request) override {
    return on_a_slot({}, [&](size_t slot, Placement::Hold hold) -> std::unique_ptr<StreamAnalysis> {
      return std::make_unique<PlacedStream>(*this, std::move(hold), engines_[slot]->open_stream(layout, request));
    });
  }

  bool takes_device_images() const override {
    for (size_t i = 0; i < engines_.size(); ++i)
      if (placement_->in_service(i) && engines_[i]->takes_device_images()) return true;
    return false;
  }

  bool measures_on_device(const Layout& layout, const StatsRequest& request) const override {
    bool any = false;
    for (size_t i = 0; i < engines_.size(); ++i)
      if (placement_->in_service(i)) {
        if (!engines_[i]->measures_on_device(layout, request)) return false;
        any = true;
      }
    return any;
  }

  // Page-locked memory is "portable": every GPU of the process reads it at
  // the pinned rate, whichever slot registered it.
  std::shared_ptr<void> pin_host_memory(const void* data, size_t bytes) override {
    const size_t slot = first_slot();
    return slot < engines_.size() ? engines_[slot]->pin_host_memory(data, bytes) : nullptr;
  }

  // Opened on the first GPU in service, and read there (analyze_device with
  // device -1), through peer access when the memory is on another GPU.
  std::shared_ptr<void> open_ipc_memory(const std::string& handle, uint64_t bytes) override {
    const size_t slot = first_slot();
    if (slot == engines_.size()) fail(ErrorCode::kUnavailable, "no GPU is in service");
    return engines_[slot]->open_ipc_memory(handle, bytes);
  }

  std::shared_ptr<Placement> placement() const override { return placement_; }

  // A call may go to any of them.
  uint64_t working_bytes(const Layout& layout, const StatsRequest& request, const Parts* parts) const override {
    uint64_t most = 0;
    for (const auto& e : engines_) most = std::max(most, e->working_bytes(layout, request, parts));
    return most;
  }
  uint64_t stream_bytes(const Layout& layout, const StatsRequest& request) const override {
    uint64_t most = 0;
    for (const auto& e : engines_) most = std::max(most, e->stream_bytes(layout, request));
    return most;
  }

  // A slot's engine failed: taken out when it can no longer compute.
  void failed(size_t slot, const Error& e) {
    if (!engines_[slot]->usable()) placement_->take_out(slot, e.what());
  }
  void served(size_t slot, Result& r) {
    r.device = placement_->device(slot);
    placement_->count_image(slot);
  }

 private:
  size_t first_slot() const {
    for (size_t i = 0; i < engines_.size(); ++i)
      if (placement_->in_service(i)) return i;
    return engines_.size();
  }
  int first_device() const {
    const size_t slot = first_slot();
    return slot < engines_.size() ? placement_->device(slot) : -1;
  }

  // fn(slot, its hold) on the least loaded slot that `allowed` accepts,
  // then on the next one after each failure but bad input and a failure of
  // the input's source (source_failed()).
  template <class Fn>
  std::invoke_result_t<Fn&, size_t, Placement::Hold> on_a_slot(const std::function<bool(size_t)>& allowed, Fn&& fn,
                                                               const std::function<bool()>& source_failed = {}) {
    std::optional<Error> last;
    std::vector<bool> tried(engines_.size(), false);
    for (;;) {
      Placement::Hold hold = placement_->take([&](size_t s) { return !tried[s] && (!allowed || allowed(s)); });
      if (!hold) break;
      const size_t slot = hold.slot();
      tried[slot] = true;
      try {
        return fn(slot, std::move(hold));
      } catch (const LimitError&) {
        throw;
      } catch (const Error& e) {
        if (e.code() == ErrorCode::kInvalidArgument || e.code() == ErrorCode::kUnimplemented) throw;
        if (source_failed && source_failed()) throw;
        failed(slot, e);
        last = e;
      }
    }
    if (last) throw *last;
    fail(ErrorCode::kUnavailable, "no GPU is in service");
  }

  // A whole image on a slot, held while it computes.
  template <class Fn>
  Result computed(const std::function<bool(size_t)>& allowed, Fn&& fn, const std::function<bool()>& source_failed = {}) {
    return on_a_slot(
        allowed,
        [&](size_t slot, Placement::Hold) {
          Result r = fn(*engines_[slot]);
          served(slot, r);
          return r;
        },
        source_failed);
  }

  std::vector<std::unique_ptr<Engine>> engines_;
  std::shared_ptr<Placement> placement_;
};

template <class Fn>
void PlacedStream::guarded(Fn&& fn) {
  if (ended_) fail(ErrorCode::kInternal, "a stream used after its end");
  if (!hold_) hold_ = owner_.placement()->hold(slot_);  // computing again after a pause
  try {
    fn();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument) {
      owner_.failed(slot_, e);
      hold_ = {};  // a stream that failed here goes on elsewhere, if at all
      ended_ = true;
    }
    throw;
  }
}

void PlacedStream::tag(Result& r) { owner_.served(slot_, r); }

}  // namespace

std::unique_ptr<Engine> make_placed_engine(std::vector<std::unique_ptr<Engine>> engines,
                                           std::shared_ptr<Placement> placement) {
  return std::make_unique<PlacedEngine>(std::move(engines), std::move(placement));
}

}  // namespace imgstat
