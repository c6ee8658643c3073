// The CPU engine: one pass of counting for integer samples (everything else
// follows exactly from the counts), two for floats. Work is cut into pieces of
// about a megabyte and spread over the engine's threads with TBB.
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <array>
#include <memory>
#include <optional>
#include <thread>

#include "common/moments.hpp"
#include "common/partial.hpp"
#include "common/pieces.hpp"
#include "cpu/counters.hpp"
#include "cpu/float_passes.hpp"
#include "imgstat/engine.hpp"

namespace imgstat {
namespace cpu {
namespace {

constexpr uint64_t kPieceBytes = uint64_t{1} << 20;

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

// One image's statistics being accumulated, piece by piece, in any order.
class Analysis {
 public:
  virtual ~Analysis() = default;
  virtual void add(const std::vector<Piece>& pieces) = 0;
  // Floats with an automatic histogram range: the bins need min and max first.
  virtual bool wants_second_pass() const { return false; }
  virtual void add_second_pass(const std::vector<Piece>&) {}
  // Everything added so far; empty while a second pass is still owed.
  virtual std::optional<Partial> partial() = 0;
  virtual std::vector<ChannelStats> finish() = 0;
};

// 8-bit and 16-bit samples: counts per value.
template <class Counter, uint32_t C>
class ValueAnalysis final : public Analysis {
 public:
  ValueAnalysis(SampleType type, const StatsRequest& request) : type_(type), request_(request) {}

  void add(const std::vector<Piece>& pieces) override { count_pieces(counters_, pieces); }

  std::optional<Partial> partial() override {
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
      out.channels.push_back(partial_of_values(counts.data(), type_, request_));
    }
    return out;
  }

  std::vector<ChannelStats> finish() override { return finalize(*partial(), request_); }

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
        explicit_(request.histogram && request.hist.explicit_range) {
    if (explicit_)
      for (auto& b : binners_) b = RangeBinner::make(request.hist.lo, request.hist.hi, request.hist.bins);
    pass1_ = std::make_unique<tbb::enumerable_thread_specific<Counter>>(
        [this] { return Counter(explicit_ ? binners_ : nullptr, explicit_, request_.hist.bins, true); });
  }

  void add(const std::vector<Piece>& pieces) override { count_pieces(*pass1_, pieces); }

  bool wants_second_pass() const override { return request_.histogram && !explicit_; }

  void add_second_pass(const std::vector<Piece>& pieces) override {
    const std::array<FloatMoments, C> moments = pass1_moments();
    for (uint32_t c = 0; c < C; ++c) binners_[c] = RangeBinner::make(moments[c].min, moments[c].max, request_.hist.bins);
    pass2_ = std::make_unique<tbb::enumerable_thread_specific<Counter>>(
        [this] { return Counter(binners_, false, request_.hist.bins, false); });
    count_pieces(*pass2_, pieces);
  }

  std::optional<Partial> partial() override {
    if (wants_second_pass() && !pass2_) return std::nullopt;
    const std::array<FloatMoments, C> moments = pass1_moments();
    Partial out = empty_partial(type_, C, request_);
    for (uint32_t c = 0; c < C; ++c) {
      ChannelPartial& p = out.channels[c];
      p.floats = moments[c];
      if (!request_.histogram) continue;
      Histogram& h = p.histogram;
      if (auto* bins_from = explicit_ ? pass1_.get() : pass2_.get())
        for (Counter& counter : *bins_from) {
          const Bins& b = counter.bins(c);
          for (size_t i = 0; i < b.counts.size(); ++i) h.counts[i] += b.counts[i];
          h.underflow += b.underflow;
          h.overflow += b.overflow;
        }
    }
    return out;
  }

  std::vector<ChannelStats> finish() override { return finalize(*partial(), request_); }

 private:
  using Counter = FloatCounter<T, C>;

  std::array<FloatMoments, C> pass1_moments() {
    std::array<FloatMoments, C> m{};
    for (Counter& counter : *pass1_)
      for (uint32_t c = 0; c < C; ++c) merge(m[c], counter.moments(c));
    return m;
  }

  SampleType type_;
  StatsRequest request_;
  bool explicit_;
  RangeBinner binners_[C];
  std::unique_ptr<tbb::enumerable_thread_specific<Counter>> pass1_;
  std::unique_ptr<tbb::enumerable_thread_specific<Counter>> pass2_;
};

template <uint32_t C>
std::unique_ptr<Analysis> make_analysis_c(SampleType type, const StatsRequest& request) {
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

std::unique_ptr<Analysis> make_analysis(const Layout& layout, const StatsRequest& request) {
  switch (layout.channels) {
    case 1: return make_analysis_c<1>(layout.type, request);
    case 2: return make_analysis_c<2>(layout.type, request);
    case 3: return make_analysis_c<3>(layout.type, request);
    case 4: return make_analysis_c<4>(layout.type, request);
  }
  fail(ErrorCode::kInvalidArgument, "channels must be 1 to 4");
}

std::vector<Piece> pieces_of(const ImageView& image) {
  const Pieces pieces(image, kPieceBytes);
  std::vector<Piece> out;
  out.reserve(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) out.push_back(pieces[i]);
  return out;
}

class CpuStream final : public CheckpointStream {
 public:
  CpuStream(const Layout& layout, const StatsRequest& request, tbb::task_arena& arena)
      : layout_(layout), destrider_(layout), analysis_(make_analysis(layout, request)), arena_(arena) {
    if (analysis_->wants_second_pass()) kept_.reserve(layout.pixels() * layout.pixel_bytes());
  }

  void feed(const void* data, size_t bytes) override {
    if (destrider_.consumed() + bytes > layout_.stride() * layout_.height)
      fail(ErrorCode::kInvalidArgument, "more data than the layout holds");
    const bool keep = analysis_->wants_second_pass();
    const uint64_t pixel_bytes = layout_.pixel_bytes();
    std::vector<Piece> runs;
    destrider_.feed(static_cast<const uint8_t*>(data), bytes, [&](const uint8_t* p, uint64_t pixels, bool transient) {
      if (keep) kept_.insert(kept_.end(), p, p + pixels * pixel_bytes);
      if (transient) {
        analysis_->add({Piece{p, 1, 0, pixels}});
        return;
      }
      const ImageView run{p, Layout{pixels, 1, layout_.channels, layout_.type, 0}};
      for (const Piece& pc : pieces_of(run)) runs.push_back(pc);
    });
    if (!runs.empty()) arena_.execute([&] { analysis_->add(runs); });
  }

  Result finish() override {
    if (!destrider_.complete())
      fail(ErrorCode::kInvalidArgument,
           "stream ended after " + std::to_string(destrider_.consumed()) + " bytes; the layout needs " +
               std::to_string(layout_.min_bytes()));
    if (analysis_->wants_second_pass()) {
      const ImageView all{kept_.data(), Layout{layout_.pixels(), 1, layout_.channels, layout_.type, 0}};
      const std::vector<Piece> pieces = pieces_of(all);
      arena_.execute([&] { analysis_->add_second_pass(pieces); });
    }
    return Result{analysis_->finish(), "cpu"};
  }

  std::optional<Partial> partial() override { return analysis_->partial(); }

 private:
  Layout layout_;
  Destrider destrider_;
  std::unique_ptr<Analysis> analysis_;
  tbb::task_arena& arena_;
  std::vector<uint8_t> kept_;
};

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
      analysis->add(pieces);
      if (analysis->wants_second_pass()) analysis->add_second_pass(pieces);
    });
    return Result{analysis->finish(), "cpu"};
  }

  std::unique_ptr<StreamAnalysis> open_stream(const Layout& layout, const StatsRequest& request) override {
    validate(layout, request);
    return std::make_unique<CpuStream>(layout, request, arena_);
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
