// The CPU engine: one pass of counting for integer samples (everything else
// follows exactly from the counts), two for floats. Work is cut into pieces of
// about a megabyte and spread over the engine's threads with TBB.
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <array>
#include <atomic>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <memory>
#include <optional>
#include <thread>

#include "common/moments.hpp"
#include "common/partial.hpp"
#include "common/pieces.hpp"
#include "common/luminance.hpp"
#include "cpu/counters.hpp"
#include "cpu/extras.hpp"
#include "cpu/part_counter.hpp"
#include "cpu/joint_counter.hpp"
#include "common/colour.hpp"
#include "common/parts.hpp"
#include "cpu/float_passes.hpp"
#include "imgstat/engine.hpp"

namespace imgstat {
namespace cpu {
namespace {

constexpr uint64_t kPieceBytes = uint64_t{1} << 20;
// A stream's feeds smaller than this are gathered until they add up to it:
// each feed is a round of tasks across the arena, and a raw AnalyzeStream
// feeds a chunk as gRPC's slices (a few KiB each; 1 GiB over loopback went
// from 0.45 to 0.70 s fed so).
constexpr uint64_t kStreamGatherBytes = kPieceBytes;

template <class Counter>
void count_pieces(tbb::enumerable_thread_specific<Counter>& counters,
                  const std::vector<Piece>& pieces) {
  auto body = [&](size_t i) {
    Counter& counter = counters.local();
    const Piece& pc = pieces[i];
    for (uint64_t r = 0; r < pc.rows; ++r) counter.add(pc.base + r * pc.stride, pc.pixels);
  };
  if (pieces.size() == 1)
    body(0);
  else
    tbb::parallel_for(size_t{0}, pieces.size(), body);
}

// Positions and colours, counted beside the main pass.
class Extras {
 public:
  virtual ~Extras() = default;
  virtual void add(const std::vector<Piece>& pieces) = 0;
  virtual void add_to(Partial& partial) = 0;
};

template <class T, uint32_t C>
class ExtrasOf final : public Extras {
 public:
  explicit ExtrasOf(const StatsRequest& request)
      : counters_([request] { return ExtrasCounter<T, C>(request.positions, request.unique_colors && sizeof(T) == 1); }) {}

  void add(const std::vector<Piece>& pieces) override {
    auto body = [&](size_t i) { counters_.local().add(pieces[i]); };
    if (pieces.size() == 1)
      body(0);
    else
      tbb::parallel_for(size_t{0}, pieces.size(), body);
  }

  void add_to(Partial& partial) override {
    for (ExtrasCounter<T, C>& counter : counters_) {
      for (uint32_t c = 0; c < C; ++c) merge(partial.channels[c].extremes, counter.extremes(c));
      const std::vector<uint64_t>& colors = counter.colors();
      if (colors.empty()) continue;
      if (partial.colors.empty()) partial.colors.assign(colors.size(), 0);
      for (size_t i = 0; i < colors.size(); ++i) partial.colors[i] |= colors[i];
    }
  }

 private:
  tbb::enumerable_thread_specific<ExtrasCounter<T, C>> counters_;
};

template <uint32_t C>
std::unique_ptr<Extras> make_extras_c(SampleType type, const StatsRequest& request) {
  switch (type) {
    case SampleType::kUint8: return std::make_unique<ExtrasOf<uint8_t, C>>(request);
    case SampleType::kInt8: return std::make_unique<ExtrasOf<int8_t, C>>(request);
    case SampleType::kUint16: return std::make_unique<ExtrasOf<uint16_t, C>>(request);
    case SampleType::kInt16: return std::make_unique<ExtrasOf<int16_t, C>>(request);
    case SampleType::kFloat32: return std::make_unique<ExtrasOf<float, C>>(request);
    case SampleType::kFloat64: return std::make_unique<ExtrasOf<double, C>>(request);
  }
  return nullptr;
}

std::unique_ptr<Extras> make_extras(const Layout& layout, const StatsRequest& request) {
  if (!request.positions && !(request.unique_colors && sample_size(layout.type) == 1)) return nullptr;
  switch (layout.channels) {
    case 1: return make_extras_c<1>(layout.type, request);
    case 2: return make_extras_c<2>(layout.type, request);
    case 3: return make_extras_c<3>(layout.type, request);
    case 4: return make_extras_c<4>(layout.type, request);
  }
  return nullptr;
}

template <class T, uint32_t C>
class JointExtras final : public Extras {
 public:
  JointExtras(const JointSpec& spec, SampleType type) : plan_(spec, type) {
    if (plan_.bins() > kJointPrivateBins) {
      shared_ = std::make_unique<std::atomic<uint64_t>[]>(plan_.bins());
      for (uint64_t i = 0; i < plan_.bins(); ++i) shared_[i].store(0, std::memory_order_relaxed);
    }
    counters_ = std::make_unique<tbb::enumerable_thread_specific<JointCounter<T, C>>>(
        [this] { return JointCounter<T, C>(plan_, shared_.get()); });
  }

  void add(const std::vector<Piece>& pieces) override {
    auto body = [&](size_t i) { counters_->local().add(pieces[i]); };
    if (pieces.size() == 1)
      body(0);
    else
      tbb::parallel_for(size_t{0}, pieces.size(), body);
  }

  void add_to(Partial& partial) override {
    partial.joint.assign(plan_.bins(), 0);
    for (JointCounter<T, C>& counter : *counters_) counter.add_to(partial);
    if (shared_)
      for (uint64_t i = 0; i < plan_.bins(); ++i) partial.joint[i] += shared_[i].load(std::memory_order_relaxed);
  }

 private:
  JointPlan plan_;
  std::unique_ptr<std::atomic<uint64_t>[]> shared_;
  std::unique_ptr<tbb::enumerable_thread_specific<JointCounter<T, C>>> counters_;
};

template <uint32_t C>
std::unique_ptr<Extras> make_joint_c(SampleType type, const JointSpec& spec) {
  switch (type) {
    case SampleType::kUint8: return std::make_unique<JointExtras<uint8_t, C>>(spec, type);
    case SampleType::kInt8: return std::make_unique<JointExtras<int8_t, C>>(spec, type);
    case SampleType::kUint16: return std::make_unique<JointExtras<uint16_t, C>>(spec, type);
    case SampleType::kInt16: return std::make_unique<JointExtras<int16_t, C>>(spec, type);
    case SampleType::kFloat32: return std::make_unique<JointExtras<float, C>>(spec, type);
    case SampleType::kFloat64: return std::make_unique<JointExtras<double, C>>(spec, type);
  }
  return nullptr;
}

// request: measured_request()'s, its ranges filled in.
std::unique_ptr<Extras> make_joint(const Layout& layout, const StatsRequest& request) {
  if (!request.joint.axes) return nullptr;
  switch (layout.channels) {
    case 1: return make_joint_c<1>(layout.type, request.joint);
    case 2: return make_joint_c<2>(layout.type, request.joint);
    case 3: return make_joint_c<3>(layout.type, request.joint);
    default: return make_joint_c<4>(layout.type, request.joint);
  }
}

// One image's statistics being accumulated, piece by piece, in any order.
class Analysis {
 public:
  virtual ~Analysis() = default;
  virtual void add(const std::vector<Piece>& pieces) = 0;
  // Floats with an automatic histogram range or a distribution: the bins
  // need min and max first.
  virtual bool wants_second_pass() const { return false; }
  virtual void add_second_pass(const std::vector<Piece>&) {}
  // What add() counted so far; empty while a second pass is still owed.
  // Called once before add_second_pass() is called from several threads.
  virtual void begin_second_pass() {}
  virtual std::optional<Partial> counted() = 0;
  virtual const StatsRequest& request() const = 0;

  void add_extras(std::unique_ptr<Extras> extras) {
    if (extras) extras_.push_back(std::move(extras));
  }
  virtual void add_all(const std::vector<Piece>& pieces) {
    add(pieces);
    for (auto& e : extras_) e->add(pieces);
  }
  virtual std::optional<Partial> partial() {
    std::optional<Partial> p = counted();
    if (p)
      for (auto& e : extras_) e->add_to(*p);
    return p;
  }
  Result finish() { return result_of(*partial(), request(), "cpu"); }

 private:
  std::vector<std::unique_ptr<Extras>> extras_;
};

// 8-bit and 16-bit samples: counts per value.
template <class Counter, uint32_t C>
class ValueAnalysis final : public Analysis {
 public:
  ValueAnalysis(SampleType type, const StatsRequest& request) : type_(type), request_(request) {}

  void add(const std::vector<Piece>& pieces) override { count_pieces(counters_, pieces); }

  const StatsRequest& request() const override { return request_; }

  std::optional<Partial> counted() override {
    const size_t values = size_t{1} << type_bits(type_);
    std::vector<uint64_t> raw(C * values, 0);
    for (Counter& counter : counters_) {
      counter.flush();
      const std::vector<uint64_t>& t = counter.totals();
      for (size_t i = 0; i < raw.size(); ++i) raw[i] += t[i];
    }
    // Counters index by the sample's bits; signed types flip the sign bit to
    // index by v - type_lo.
    const size_t flip = type_lo(type_) < 0 ? values / 2 : 0;
    std::vector<uint64_t> counts(values);
    Partial out;
    out.type = type_;
    for (uint32_t c = 0; c < C; ++c) {
      for (size_t i = 0; i < values; ++i) counts[i ^ flip] = raw[c * values + i];
      out.channels.push_back(partial_of_values(counts.data(), type_, request_, c));
    }
    return out;
  }

 private:
  SampleType type_;
  StatsRequest request_;
  tbb::enumerable_thread_specific<Counter> counters_;
};

template <class T, uint32_t C>
class FloatAnalysis final : public Analysis {
 public:
  FloatAnalysis(SampleType type, const StatsRequest& request)
      : type_(type),
        request_(request),
        explicit_(request.histogram && hist_of(request, 0).explicit_range) {
    if (explicit_) {
      for (uint32_t c = 0; c < C; ++c) {
        const HistogramSpec& h = hist_of(request, c);
        binners_[c] = RangeBinner::make(h.lo, h.hi, h.bins);
      }
      pass1_bins_ = std::make_unique<tbb::enumerable_thread_specific<Counter>>(
          [this] { return Counter(binners_, true, request_.hist.bins); });
    }
  }

  // Each group's runs on one thread, in index order (float_passes.hpp).
  void add(const std::vector<Piece>& pieces) override {
    const std::vector<GroupRuns> groups = group_runs(pieces, kPixelBytes);
    auto body = [&](size_t i) {
      const GroupRuns& g = groups[i];
      GroupMoments<T, C>& moments = group(g.group);
      Counter* bins = pass1_bins_ ? &pass1_bins_->local() : nullptr;
      for (const Piece& run : g.runs) {
        moments.add(run.base, run.first, run.pixels);
        if (bins) bins->add(run.base, run.pixels);
      }
    };
    if (groups.size() == 1)
      body(0);
    else
      tbb::parallel_for(size_t{0}, groups.size(), body);
  }

  bool wants_second_pass() const override { return (request_.histogram && !explicit_) || request_.distribution; }

  const StatsRequest& request() const override { return request_; }

  void begin_second_pass() override {
    const std::array<FloatMoments, C>& moments = pass1_moments();
    if (request_.histogram && !explicit_) {
      for (uint32_t c = 0; c < C; ++c)
        binners_[c] = RangeBinner::make(moments[c].min, moments[c].max, request_.hist.bins);
      pass2_ = std::make_unique<tbb::enumerable_thread_specific<Counter>>(
          [this] { return Counter(binners_, false, request_.hist.bins); });
    }
    if (request_.distribution) {
      for (uint32_t c = 0; c < C; ++c) fine_binners_[c] = RangeBinner::make(moments[c].min, moments[c].max, kFineBins);
      fine_ = std::make_unique<tbb::enumerable_thread_specific<Counter>>(
          [this] { return Counter(fine_binners_, false, kFineBins); });
    }
    second_begun_ = true;
  }

  void add_second_pass(const std::vector<Piece>& pieces) override {
    if (!second_begun_) begin_second_pass();
    auto body = [&](size_t i) {
      const Piece& pc = pieces[i];
      Counter* bins = pass2_ ? &pass2_->local() : nullptr;
      Counter* fine = fine_ ? &fine_->local() : nullptr;
      for (uint64_t r = 0; r < pc.rows; ++r) {
        if (bins) bins->add(pc.base + r * pc.stride, pc.pixels);
        if (fine) fine->add(pc.base + r * pc.stride, pc.pixels);
      }
    };
    if (pieces.size() == 1)
      body(0);
    else
      tbb::parallel_for(size_t{0}, pieces.size(), body);
    second_done_ = true;
  }

  std::optional<Partial> counted() override {
    if (wants_second_pass() && !second_done_) return std::nullopt;
    const std::array<FloatMoments, C> moments = pass1_moments();
    Partial out = empty_partial(type_, C, request_);
    for (uint32_t c = 0; c < C; ++c) {
      ChannelPartial& p = out.channels[c];
      p.floats = moments[c];
      if (fine_) {
        p.fine.assign(kFineBins, 0);
        for (Counter& counter : *fine_) {
          const Bins& b = counter.bins(c);
          for (size_t i = 0; i < b.counts.size(); ++i) p.fine[i] += b.counts[i];
        }
      }
      if (!request_.histogram) continue;
      Histogram& h = p.histogram;
      if (auto* bins_from = explicit_ ? pass1_bins_.get() : pass2_.get())
        for (Counter& counter : *bins_from) {
          const Bins& b = counter.bins(c);
          for (size_t i = 0; i < b.counts.size(); ++i) h.counts[i] += b.counts[i];
          h.underflow += b.underflow;
          h.overflow += b.overflow;
        }
    }
    return out;
  }

 private:
  using Counter = BinCounter<T, C>;
  static constexpr uint64_t kPixelBytes = uint64_t{C} * sizeof(T);

  GroupMoments<T, C>& group(uint64_t g) {
    std::lock_guard<std::mutex> lock(groups_mu_);
    std::unique_ptr<GroupMoments<T, C>>& m = groups_[g];
    if (!m) m = std::make_unique<GroupMoments<T, C>>();
    folded_ = false;
    return *m;
  }

  // The groups so far folded in index order (a stream's checkpoint may ask
  // part way; its groups carry on).
  const std::array<FloatMoments, C>& pass1_moments() {
    std::lock_guard<std::mutex> lock(groups_mu_);
    if (folded_) return moments_;
    moments_ = {};
    for (const auto& [g, m] : groups_)
      for (uint32_t c = 0; c < C; ++c) merge(moments_[c], m->moments(c));
    folded_ = true;
    return moments_;
  }

  SampleType type_;
  StatsRequest request_;
  bool explicit_;
  RangeBinner binners_[C];
  RangeBinner fine_binners_[C];
  bool second_begun_ = false;
  bool second_done_ = false;
  std::mutex groups_mu_;
  std::map<uint64_t, std::unique_ptr<GroupMoments<T, C>>> groups_;  // by index
  std::array<FloatMoments, C> moments_{};
  bool folded_ = true;
  std::unique_ptr<tbb::enumerable_thread_specific<Counter>> pass1_bins_;
  std::unique_ptr<tbb::enumerable_thread_specific<Counter>> pass2_;
  std::unique_ptr<tbb::enumerable_thread_specific<Counter>> fine_;
};

// Integer samples when no statistic of a channel's values is asked for (a
// joint histogram alone, say): the count of pixels is all there is to know,
// and counting every value would cost as much as the joint histogram.
class CountAnalysis final : public Analysis {
 public:
  CountAnalysis(SampleType type, uint32_t channels, const StatsRequest& request)
      : type_(type), channels_(channels), request_(request) {}

  void add(const std::vector<Piece>& pieces) override {
    uint64_t n = 0;
    for (const Piece& p : pieces) n += p.rows * p.pixels;
    pixels_.fetch_add(n, std::memory_order_relaxed);
  }
  const StatsRequest& request() const override { return request_; }
  std::optional<Partial> counted() override {
    Partial out = empty_partial(type_, channels_, request_);
    for (ChannelPartial& c : out.channels) c.ints.n = pixels_.load(std::memory_order_relaxed);
    return out;
  }

  static bool enough(SampleType type, const StatsRequest& r) {
    return !is_float(type) && !r.min_max && !r.sum && !r.stddev && !r.histogram && !r.distribution && !r.shape &&
           !r.merge_state && !r.summary;
  }

 private:
  SampleType type_;
  uint32_t channels_;
  StatsRequest request_;
  std::atomic<uint64_t> pixels_{0};
};

template <uint32_t C>
std::unique_ptr<Analysis> make_analysis_c(SampleType type, const StatsRequest& request) {
  if (CountAnalysis::enough(type, request)) return std::make_unique<CountAnalysis>(type, C, request);
  switch (type) {
    case SampleType::kUint8:
    case SampleType::kInt8:
      return std::make_unique<ValueAnalysis<ByteCounter<C>, C>>(type, request);
    case SampleType::kUint16:
    case SampleType::kInt16:
      return std::make_unique<ValueAnalysis<WordCounter<C>, C>>(type, request);
    case SampleType::kFloat32:
      return std::make_unique<FloatAnalysis<float, C>>(type, request);
    case SampleType::kFloat64:
      return std::make_unique<FloatAnalysis<double, C>>(type, request);
  }
  fail(ErrorCode::kInvalidArgument, "unknown sample type");
}

std::unique_ptr<Analysis> make_analysis_of(const Layout& layout, const StatsRequest& request) {
  switch (layout.channels) {
    case 1: return make_analysis_c<1>(layout.type, request);
    case 2: return make_analysis_c<2>(layout.type, request);
    case 3: return make_analysis_c<3>(layout.type, request);
    case 4: return make_analysis_c<4>(layout.type, request);
  }
  fail(ErrorCode::kInvalidArgument, "channels must be 1 to 4");
}

std::unique_ptr<Analysis> make_analysis(const Layout& layout, const StatsRequest& request);

// A colour space: each piece converted into a buffer of the calling
// thread and counted there at once, while it is in cache, by the analysis
// of the converted image (the space's channels, alpha last).
class ColourAnalysis final : public Analysis {
 public:
  ColourAnalysis(const Layout& layout, const StatsRequest& request)
      : layout_(layout),
        measured_(measured_layout(layout, request)),
        space_(request.colour_space),
        inner_(make_analysis(measured_, measured_request(request, layout))) {
    for (int i = 0; i < 3; ++i) rgb_[i] = request.rgb[i];
  }

  void add(const std::vector<Piece>& pieces) override { each_converted(pieces, [&](const Piece& p) { inner_->add_all({p}); }); }
  void add_all(const std::vector<Piece>& pieces) override { add(pieces); }
  bool wants_second_pass() const override { return inner_->wants_second_pass(); }
  void add_second_pass(const std::vector<Piece>& pieces) override {
    if (!second_begun_) inner_->begin_second_pass();
    second_begun_ = true;
    each_converted(pieces, [&](const Piece& p) { inner_->add_second_pass({p}); });
  }
  std::optional<Partial> counted() override { return inner_->partial(); }
  std::optional<Partial> partial() override { return inner_->partial(); }
  const StatsRequest& request() const override { return inner_->request(); }

 private:
  // Runs of at most this many pixels are converted and counted at once,
  // so that what was converted is still in the core's cache when counted.
  static constexpr uint64_t kRunPixels = 8192;

  // A group's runs on one thread, in index order: the measured image may be
  // float (float_passes.hpp).
  template <class F>
  void each_converted(const std::vector<Piece>& pieces, F&& f) {
    const std::vector<GroupRuns> groups = group_runs(pieces, layout_.pixel_bytes());
    auto body = [&](size_t i) {
      std::vector<uint8_t>& buf = buffers_.local();
      if (buf.size() < kRunPixels * measured_.pixel_bytes()) buf.resize(kRunPixels * measured_.pixel_bytes());
      for (const Piece& run : groups[i].runs)
        for (uint64_t at = 0; at < run.pixels; at += kRunPixels) {
          const uint64_t n = std::min(kRunPixels, run.pixels - at);
          convert_pixels(space_, layout_.type, run.base + at * layout_.pixel_bytes(), n, layout_.channels, rgb_,
                         buf.data());
          f(Piece{buf.data(), 1, n * measured_.pixel_bytes(), n, run.first + at, n});
        }
    };
    if (groups.size() == 1)
      body(0);
    else
      tbb::parallel_for(size_t{0}, groups.size(), body);
  }

  Layout layout_;
  Layout measured_;
  ColourSpace space_;
  uint32_t rgb_[3];
  std::unique_ptr<Analysis> inner_;
  bool second_begun_ = false;
  tbb::enumerable_thread_specific<std::vector<uint8_t>> buffers_;
};

std::unique_ptr<Analysis> make_analysis(const Layout& layout, const StatsRequest& request) {
  if (request.colour_space != ColourSpace::kNone) return std::make_unique<ColourAnalysis>(layout, request);
  const StatsRequest measured = measured_request(request, layout);
  std::unique_ptr<Analysis> a = make_analysis_of(layout, measured);
  a->add_extras(make_extras(layout, measured));
  a->add_extras(make_joint(layout, measured));
  return a;
}

// first: the image's pixel index of the view's first pixel.
std::vector<Piece> pieces_of(const ImageView& image, uint64_t first = 0) {
  const Pieces pieces(image, kPieceBytes);
  std::vector<Piece> out;
  out.reserve(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    out.push_back(pieces[i]);
    out.back().first += first;
  }
  return out;
}

class CpuStream final : public CheckpointStream {
 public:
  // reread: where the image can be read again for a second pass, so that
  // none of it is kept; null: what a second pass needs is kept as it comes.
  CpuStream(const Layout& layout, const StatsRequest& request, tbb::task_arena& arena,
            const ByteReader* reread = nullptr)
      : layout_(layout), destrider_(layout), analysis_(make_analysis(layout, request)), arena_(arena), reread_(reread) {}

  void feed(const void* data, size_t bytes) override {
    if (destrider_.consumed() + gathered_.size() + bytes > layout_.stride() * layout_.height)
      fail(ErrorCode::kInvalidArgument, "more data than the layout holds");
    if (bytes >= kStreamGatherBytes) {
      flush();
      take(data, bytes);
      return;
    }
    const auto* p = static_cast<const uint8_t*>(data);
    gathered_.insert(gathered_.end(), p, p + bytes);
    if (gathered_.size() >= kStreamGatherBytes) flush();
  }

  Result finish() override {
    flush();
    if (!destrider_.complete())
      fail(ErrorCode::kInvalidArgument,
           "stream ended after " + std::to_string(destrider_.consumed()) + " bytes; the layout needs " +
               std::to_string(layout_.min_bytes()));
    if (analysis_->wants_second_pass() && reread_) {
      second_pass_from(*reread_);
    } else if (analysis_->wants_second_pass()) {
      std::vector<Piece> pieces;
      for (const std::vector<uint8_t>& k : kept_) {
        const ImageView part{k.data(), Layout{k.size() / layout_.pixel_bytes(), 1, layout_.channels, layout_.type, 0}};
        for (const Piece& pc : pieces_of(part)) pieces.push_back(pc);
      }
      arena_.execute([&] { analysis_->add_second_pass(pieces); });
    }
    return analysis_->finish();
  }

  std::optional<Partial> partial() override {
    flush();
    return analysis_->partial();
  }

 private:
  void flush() {
    if (gathered_.empty()) return;
    take(gathered_.data(), gathered_.size());
    gathered_.clear();
  }

  // The image read again, a chunk at a time, for the second pass.
  void second_pass_from(const ByteReader& read) {
    Destrider again(layout_);
    const uint64_t total = layout_.min_bytes(), pixel_bytes = layout_.pixel_bytes();
    std::vector<uint8_t> chunk;
    for (uint64_t at = 0; at < total; at += kReadChunkBytes) {
      chunk.resize(static_cast<size_t>(std::min(kReadChunkBytes, total - at)));
      read_in_pieces(read, at, chunk.size(), chunk.data(), kReadPieceBytes);
      std::vector<Piece> runs;
      std::deque<std::array<uint8_t, 32>> split;  // pixels cut by a chunk's edge, whole again
      again.feed(chunk.data(), chunk.size(), [&](const uint8_t* p, uint64_t pixels, bool transient) {
        if (transient) {
          split.emplace_back();
          std::memcpy(split.back().data(), p, pixel_bytes);
          p = split.back().data();
        }
        runs.push_back(Piece{p, 1, 0, pixels, 0, pixels});
      });
      arena_.execute([&] { analysis_->add_second_pass(runs); });
    }
  }

  // Counts the bytes now: the pieces have read them when this returns.
  void take(const void* data, size_t bytes) {
    const bool keep = analysis_->wants_second_pass() && !reread_;
    const uint64_t pixel_bytes = layout_.pixel_bytes();
    std::vector<Piece> runs;
    destrider_.feed(static_cast<const uint8_t*>(data), bytes, [&](const uint8_t* p, uint64_t pixels, bool transient) {
      if (keep) this->keep(p, pixels * pixel_bytes);
      const uint64_t first = fed_pixels_;
      fed_pixels_ += pixels;
      if (transient) {
        analysis_->add_all({Piece{p, 1, 0, pixels, first, pixels}});
        return;
      }
      const ImageView run{p, Layout{pixels, 1, layout_.channels, layout_.type, 0}};
      for (const Piece& pc : pieces_of(run, first)) runs.push_back(pc);
    });
    if (!runs.empty()) arena_.execute([&] { analysis_->add_all(runs); });
  }

  // Pixels for the second pass, in buffers of kKeptBytes: what is kept grows
  // with what was fed (never with what the layout declares), and never by a
  // copy of all of it into a larger buffer.
  void keep(const uint8_t* p, uint64_t bytes) {
    const uint64_t room = kKeptBytes / layout_.pixel_bytes() * layout_.pixel_bytes();
    while (bytes > 0) {
      if (kept_.empty() || kept_.back().size() >= room) {
        kept_.emplace_back();
        kept_.back().reserve(room);
      }
      std::vector<uint8_t>& k = kept_.back();
      const uint64_t n = std::min<uint64_t>(bytes, room - k.size());
      k.insert(k.end(), p, p + n);
      p += n;
      bytes -= n;
    }
  }

  static constexpr uint64_t kKeptBytes = uint64_t{16} << 20;

  Layout layout_;
  uint64_t fed_pixels_ = 0;
  Destrider destrider_;
  std::unique_ptr<Analysis> analysis_;
  tbb::task_arena& arena_;
  const ByteReader* reread_;
  std::vector<std::vector<uint8_t>> kept_;
  std::vector<uint8_t> gathered_;  // small feeds, not yet counted
};

// A request as each part answers it: its channels only.
StatsRequest per_part_request(StatsRequest request) {
  request.unique_colors = false;
  request.summary = false;
  request.luminance = false;
  return request;
}

// One view, analyzed whole on the calling thread's arena.
Result analyze_view(const ImageView& view, const StatsRequest& request) {
  auto analysis = make_analysis(view.layout, request);
  const std::vector<Piece> pieces = pieces_of(view);
  analysis->add_all(pieces);
  if (analysis->wants_second_pass()) analysis->add_second_pass(pieces);
  return analysis->finish();
}

// Rectangles and tiles: each a view of the image, analyzed as a whole image
// is (so each answer is the whole-image answer for its pixels), in parallel.
Result analyze_rects(const ImageView& image, const Parts& parts, const StatsRequest& request) {
  const Layout& l = image.layout;
  const uint32_t n = parts.kind == PartsKind::kTiles ? parts.columns * parts.rows
                                                     : static_cast<uint32_t>(parts.rects.size());
  const StatsRequest per_part = per_part_request(request);
  Result r;
  r.engine = "cpu";
  r.parts.resize(n);
  tbb::parallel_for(uint32_t{0}, n, [&](uint32_t i) {
    PartStats s = part_key(parts, nullptr, l, i);
    Result whole = analyze_view(rect_view(image, s.roi), per_part);
    s.channels = std::move(whole.channels);
    s.has_joint = whole.has_joint;
    s.joint = std::move(whole.joint);
    to_image_positions(s.channels, s.roi, l.width);
    r.parts[i] = std::move(s);
  });
  return r;
}

// A mask over integer samples: the runs of selected pixels go to one
// analysis as pieces, exactly as a whole image's pieces do.
Result analyze_masked_runs(const ImageView& image, const PartIndex& index, const PartMapView& map,
                           const StatsRequest& request) {
  const Layout& l = image.layout;
  auto analysis = make_analysis(l, request);
  const uint64_t blocks = (l.height + kPartRowsPerBlock - 1) / kPartRowsPerBlock;
  // A one-channel byte mask (the usual kind) is scanned as it is; others
  // through the index.
  const bool bytes = map.type == MapType::kUint8 && map.channels == 1;
  tbb::parallel_for(uint64_t{0}, blocks, [&](uint64_t b) {
    std::vector<uint32_t> part(bytes ? 0 : l.width);
    std::vector<Piece> runs;
    for (uint64_t y = b * kPartRowsPerBlock; y < std::min(l.height, (b + 1) * kPartRowsPerBlock); ++y) {
      const uint8_t* m = static_cast<const uint8_t*>(map.data) + y * map.stride();
      if (!bytes) index.row(y, 0, l.width, part.data());
      auto in = [&](uint64_t x) { return bytes ? m[x] != 0 : part[x] != kNoPart; };
      const uint8_t* row = static_cast<const uint8_t*>(image.data) + y * l.stride();
      for (uint64_t x = 0; x < l.width;) {
        if (!in(x)) {
          ++x;
          continue;
        }
        uint64_t end = x + 1;
        while (end < l.width && in(end)) ++end;
        runs.push_back(Piece{row + x * l.pixel_bytes(), 1, l.stride(), end - x, y * l.width + x, l.width});
        x = end;
      }
    }
    if (!runs.empty()) analysis->add_all(runs);
  });
  return analysis->finish();
}

// Float samples of a mask, labels or tiles: each part's pixels gathered in
// row-major order, then analyzed as a 1 x n image (so as a whole image of
// those pixels is); positions map back through the gathered indices.
Result analyze_gathered(const ImageView& image, const PartIndex& index, const Parts& parts,
                        const StatsRequest& request) {
  const Layout& l = image.layout;
  const uint64_t pb = l.pixel_bytes();
  const uint32_t n = index.count();
  std::vector<uint64_t> offset(size_t{n} + 1, 0);
  std::vector<uint32_t> part(l.width);
  for (uint64_t y = 0; y < l.height; ++y) {
    index.row(y, 0, l.width, part.data());
    for (uint64_t x = 0; x < l.width; ++x)
      if (part[x] != kNoPart) ++offset[part[x] + 1];
  }
  for (uint32_t p = 0; p < n; ++p) offset[p + 1] += offset[p];
  std::vector<uint8_t> pixels(offset[n] * pb);
  std::vector<uint64_t> at(request.positions ? offset[n] : 0);
  std::vector<uint64_t> next(offset.begin(), offset.end() - 1);
  for (uint64_t y = 0; y < l.height; ++y) {
    index.row(y, 0, l.width, part.data());
    const uint8_t* row = static_cast<const uint8_t*>(image.data) + y * l.stride();
    for (uint64_t x = 0; x < l.width; ++x) {
      const uint32_t p = part[x];
      if (p == kNoPart) continue;
      const uint64_t to = next[p]++;
      std::memcpy(&pixels[to * pb], row + x * pb, pb);
      if (!at.empty()) at[to] = y * l.width + x;
    }
  }
  const bool mask = parts.kind == PartsKind::kMask;
  StatsRequest per_part = mask ? request : per_part_request(request);
  per_part.unique_colors = false;
  per_part.luminance = false;
  auto analyze_part = [&](uint32_t p) {
    const uint64_t count = offset[p + 1] - offset[p];
    Result res = count == 0 ? result_of(empty_partial(l.type, l.channels, per_part), per_part, "cpu")
                            : analyze_view(ImageView{&pixels[offset[p] * pb], Layout{count, 1, l.channels, l.type, 0}},
                                           per_part);
    for (ChannelStats& c : res.channels)
      if (c.has_positions) {
        c.min_at = at[offset[p] + c.min_at];
        c.max_at = at[offset[p] + c.max_at];
      }
    return res;
  };
  if (mask) {
    Result r = analyze_part(0);
    r.engine = "cpu";
    return r;
  }
  Result r;
  r.engine = "cpu";
  r.parts.resize(n);
  tbb::parallel_for(uint32_t{0}, n, [&](uint32_t p) {
    PartStats s = part_key(parts, &index, l, p);
    Result whole = analyze_part(p);
    s.channels = std::move(whole.channels);
    s.has_joint = whole.has_joint;
    s.joint = std::move(whole.joint);
    r.parts[p] = std::move(s);
  });
  return r;
}

template <uint32_t C>
PartCounts count_parts_c(const ImageView& image, const PartIndex& index, const StatsRequest& request) {
  switch (image.layout.type) {
    case SampleType::kUint8: return PartCounter<uint8_t, C>(image, index, request).count();
    case SampleType::kInt8: return PartCounter<int8_t, C>(image, index, request).count();
    case SampleType::kUint16: return PartCounter<uint16_t, C>(image, index, request).count();
    case SampleType::kInt16: return PartCounter<int16_t, C>(image, index, request).count();
    default: fail(ErrorCode::kInternal, "part counts are for integer samples");
  }
}

PartCounts count_parts(const ImageView& image, const PartIndex& index, const StatsRequest& request) {
  switch (image.layout.channels) {
    case 1: return count_parts_c<1>(image, index, request);
    case 2: return count_parts_c<2>(image, index, request);
    case 3: return count_parts_c<3>(image, index, request);
    default: return count_parts_c<4>(image, index, request);
  }
}


}  // namespace

Result analyze_parts_on_cpu(const ImageView& image, const Parts& parts, const StatsRequest& request) {
  if (request.colour_space != ColourSpace::kNone) {
    // Parts of a colour space: the image converted whole, then measured as
    // any other (a mask of its own alpha still reads the original).
    const Layout measured = measured_layout(image.layout, request);
    std::vector<uint8_t> converted(measured.pixels() * measured.pixel_bytes());
    const uint64_t row_out = measured.row_bytes();
    tbb::parallel_for(uint64_t{0}, image.layout.height, [&](uint64_t y) {
      convert_pixels(request.colour_space, image.layout.type,
                     static_cast<const uint8_t*>(image.data) + y * image.layout.stride(), image.layout.width,
                     image.layout.channels, request.rgb, converted.data() + y * row_out);
    });
    return analyze_parts_on_cpu(ImageView{converted.data(), measured}, parts, measured_request(request, image.layout));
  }
  const Layout& l = image.layout;
  switch (parts.kind) {
    case PartsKind::kRects:
    case PartsKind::kTiles:
      check_answer_bytes(parts.kind == PartsKind::kTiles ? uint64_t{parts.columns} * parts.rows : parts.rects.size(), l,
                   parts, request);
      return analyze_rects(image, parts, request);
    default: break;
  }
  const PartIndex index(l, parts);
  if (parts.kind == PartsKind::kLabels) check_answer_bytes(index.count(), l, parts, request);
  // Joint histograms per label come with each label's pixels gathered.
  if (is_float(l.type) || (request.joint.axes && parts.kind == PartsKind::kLabels))
    return analyze_gathered(image, index, parts, measured_request(request, l));
  if (parts.kind == PartsKind::kMask) {
    StatsRequest masked = request;
    masked.unique_colors = false;
    masked.luminance = false;
    return analyze_masked_runs(image, index, parts.map, masked);
  }
  check_part_count_bytes(index.count(), l.channels, l.type, request);
  return result_of_parts(count_parts(image, index, request), index, parts, l, request, "cpu");
}

namespace {

// Counter sets an analysis of `bytes` bytes makes: one a thread that takes
// a piece of it.
uint64_t counter_sets(uint64_t bytes, uint32_t threads) {
  return std::min<uint64_t>(threads, std::max<uint64_t>(1, (bytes + kPieceBytes - 1) / kPieceBytes));
}

// One thread's counters for an analysis of `l` (the measured image).
uint64_t counter_bytes(const Layout& l, const StatsRequest& request) {
  uint64_t bytes = 0;
  if (sample_size(l.type) == 2 && !CountAnalysis::enough(l.type, request))
    bytes += uint64_t{l.channels} * (WordCounter<1>::T * 4 + 8) * 65536;  // WordCounter's tables and totals
  if (is_float(l.type))
    bytes += uint64_t{l.channels} * 8 * ((request.histogram ? request.hist.bins : 0) + (request.distribution ? kFineBins : 0));
  if (request.joint.axes && request.joint.total_bins() <= kJointPrivateBins) bytes += (request.joint.total_bins() + 1) * 8;
  return bytes;
}

// What analyze() and analyze_parts() allocate beyond their input, per
// Engine::working_bytes.
uint64_t cpu_working_bytes(const Layout& image, const StatsRequest& asked, const Parts* parts, uint32_t threads) {
  const Layout l = measured_layout(image, asked);
  const StatsRequest request = measured_request(asked, image);
  const uint64_t image_bytes = l.pixels() * l.pixel_bytes();
  uint64_t bytes = counter_sets(image_bytes, threads) * counter_bytes(l, request);
  // A joint histogram past a thread's private counters: one shared set; and
  // the counts as the partial and as the result hold them.
  const uint64_t joint_bins = request.joint.axes ? request.joint.total_bins() : 0;
  bytes += joint_bins * 8 * (joint_bins > kJointPrivateBins ? 3 : 2);
  if (!parts || parts->kind == PartsKind::kWhole) {
    if (has_luminance(image, asked)) {
      const Layout y{image.width, image.height, 1, luminance_type(image.type), 0};
      bytes += y.pixels() * y.pixel_bytes() + counter_sets(y.pixels(), threads) * counter_bytes(y, request);
    }
    return bytes;
  }
  if (asked.colour_space != ColourSpace::kNone) bytes += image_bytes;  // the image converted whole
  if (parts->kind == PartsKind::kRects || parts->kind == PartsKind::kTiles) return bytes;
  if (is_float(l.type) || (request.joint.axes && parts->kind == PartsKind::kLabels))  // analyze_gathered
    return bytes + l.pixels() * (l.pixel_bytes() + (request.positions ? 8 : 0)) + 16 * (parts->max_parts + 1);
  // Part counters: one set a thread while they fit, else one (PartCounter).
  uint64_t labels = 1;
  if (parts->kind == PartsKind::kLabels) {
    const size_t bits = map_sample_size(parts->map.type) * 8;
    labels = std::min<uint64_t>(parts->max_parts, bits <= 16 ? uint64_t{1} << bits : l.pixels());
  }
  const uint64_t set = part_count_bytes(static_cast<uint32_t>(std::min<uint64_t>(labels, UINT32_MAX)), l.channels, l.type,
                                        request);
  return bytes + (set * (threads + 1) > kMaxPartCountBytes ? set : set * (threads + 1));
}

class CpuEngine final : public Engine {
 public:
  explicit CpuEngine(uint32_t threads)
      : threads_(threads ? threads : std::max(1u, std::thread::hardware_concurrency())),
        arena_(static_cast<int>(threads_)) {}

  EngineInfo info() const override {
    EngineInfo i;
    i.kind = "cpu";
    i.threads = threads_;
    return i;
  }

  Result analyze(const ImageView& image, const StatsRequest& request) override {
    validate(image.layout, request);
    if (!image.data) fail(ErrorCode::kInvalidArgument, "image data is null");
    auto analysis = make_analysis(image.layout, request);
    const std::vector<Piece> pieces = pieces_of(image);
    arena_.execute([&] {
      analysis->add_all(pieces);
      if (analysis->wants_second_pass()) analysis->add_second_pass(pieces);
    });
    Result result = analysis->finish();
    add_luminance(*this, image, request, result);
    return result;
  }

  std::unique_ptr<StreamAnalysis> open_stream(const Layout& layout, const StatsRequest& request) override {
    validate(layout, request);
    return std::make_unique<CpuStream>(layout, request, arena_);
  }

  // A second pass reads the image again rather than keeping a copy of it.
  Result analyze_read(const Layout& layout, const StatsRequest& request, const ByteReader& read) override {
    validate(layout, request);
    CpuStream stream(layout, request, arena_, &read);
    return read_into(stream, layout, read);
  }

  uint64_t working_bytes(const Layout& layout, const StatsRequest& request, const Parts* parts) const override {
    return cpu_working_bytes(layout, request, parts, threads_);
  }

  uint64_t stream_bytes(const Layout& layout, const StatsRequest& request) const override {
    return make_analysis(layout, request)->wants_second_pass() ? layout.pixels() * layout.pixel_bytes() : 0;
  }

  Result analyze_parts(const ImageView& image, const Parts& parts, const StatsRequest& request) override {
    if (parts.kind == PartsKind::kWhole) return analyze(image, request);
    validate(image.layout, request);
    if (!image.data) fail(ErrorCode::kInvalidArgument, "image data is null");
    validate(image.layout, parts);
    Result r;
    arena_.execute([&] { r = analyze_parts_on_cpu(image, parts, request); });
    return r;
  }

 private:
  uint32_t threads_;
  tbb::task_arena arena_;
};

}  // namespace
}  // namespace cpu

std::unique_ptr<Engine> make_cpu_engine(uint32_t threads) {
  return std::make_unique<cpu::CpuEngine>(threads);
}

}  // namespace imgstat
