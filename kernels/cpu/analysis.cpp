#include "cpu/analysis.hpp"

#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_sort.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>

#include "common/colour.hpp"
#include "common/moments.hpp"
#include "cpu/counters.hpp"
#include "cpu/float_passes.hpp"

namespace imgstat::cpu {

bool counts_only(SampleType type, const StatsRequest& r) {
  return !is_float(type) && !r.min_max && !r.sum && !r.stddev && !r.histogram && !r.distribution && !r.shape &&
         !r.merge_state && !r.robust && !r.summary;
}

namespace {

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

  bool wants_second_pass() const override {
    return (request_.histogram && !explicit_) || request_.distribution || request_.robust;
  }

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
      uint64_t most = 0;
      for (uint32_t c = 0; c < C; ++c) {
        fine_binners_[c] = RangeBinner::make(moments[c].min, moments[c].max, kFineBins);
        most = std::max(most, moments[c].n);
      }
      if (most <= kListedFineSamples)
        fine_list_ = std::make_unique<tbb::enumerable_thread_specific<BinList<T, C>>>(
            [this] { return BinList<T, C>(fine_binners_); });
      else
        fine_ = std::make_unique<tbb::enumerable_thread_specific<Counter>>(
            [this] { return Counter(fine_binners_, false, kFineBins); });
    }
    // Sigma clipping needs every finite sample (sorted in counted()).
    if (request_.robust) samples_ = std::make_unique<tbb::enumerable_thread_specific<std::array<std::vector<double>, C>>>();
    second_begun_ = true;
  }

  void add_second_pass(const std::vector<Piece>& pieces) override {
    if (!second_begun_) begin_second_pass();
    auto body = [&](size_t i) {
      const Piece& pc = pieces[i];
      Counter* bins = pass2_ ? &pass2_->local() : nullptr;
      Counter* fine = fine_ ? &fine_->local() : nullptr;
      BinList<T, C>* listed = fine_list_ ? &fine_list_->local() : nullptr;
      std::array<std::vector<double>, C>* samples = samples_ ? &samples_->local() : nullptr;
      for (uint64_t r = 0; r < pc.rows; ++r) {
        if (bins) bins->add(pc.base + r * pc.stride, pc.pixels);
        if (fine) fine->add(pc.base + r * pc.stride, pc.pixels);
        if (listed) listed->add(pc.base + r * pc.stride, pc.pixels);
        if (samples) {
          const uint8_t* p = pc.base + r * pc.stride;
          for (uint64_t i = 0; i < pc.pixels; ++i)
            for (uint32_t c = 0; c < C; ++c) {
              T v;
              std::memcpy(&v, p + (i * C + c) * sizeof(T), sizeof v);
              if (std::isfinite(v)) (*samples)[c].push_back(static_cast<double>(v));
            }
        }
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
        std::vector<uint64_t> dense(kFineBins, 0);
        for (Counter& counter : *fine_) {
          const Bins& b = counter.bins(c);
          for (size_t i = 0; i < b.counts.size(); ++i) dense[i] += b.counts[i];
        }
        p.fine = fine_bins_of(dense.data(), kFineBins);
      }
      if (fine_list_) p.fine = listed_fine_bins(c);
      if (samples_) {
        for (std::array<std::vector<double>, C>& local : *samples_)
          p.samples.insert(p.samples.end(), local[c].begin(), local[c].end());
        tbb::parallel_sort(p.samples.begin(), p.samples.end());
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

  std::vector<FineBin> listed_fine_bins(uint32_t c) {
    std::vector<uint32_t> all;
    for (BinList<T, C>& list : *fine_list_) all.insert(all.end(), list.bins(c).begin(), list.bins(c).end());
    std::sort(all.begin(), all.end());
    std::vector<FineBin> out;
    for (uint32_t bin : all)
      if (!out.empty() && out.back().bin == bin)
        ++out.back().count;
      else
        out.push_back(FineBin{bin, 1});
    return out;
  }

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
  std::unique_ptr<tbb::enumerable_thread_specific<BinList<T, C>>> fine_list_;
  std::unique_ptr<tbb::enumerable_thread_specific<std::array<std::vector<double>, C>>> samples_;
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


 private:
  SampleType type_;
  uint32_t channels_;
  StatsRequest request_;
  std::atomic<uint64_t> pixels_{0};
};

template <uint32_t C>
std::unique_ptr<Analysis> make_analysis_c(SampleType type, const StatsRequest& request) {
  if (counts_only(type, request)) return std::make_unique<CountAnalysis>(type, C, request);
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

}  // namespace

std::unique_ptr<Analysis> make_analysis(const Layout& layout, const StatsRequest& request) {
  if (request.colour_space != ColourSpace::kNone) return std::make_unique<ColourAnalysis>(layout, request);
  const StatsRequest measured = measured_request(request, layout);
  std::unique_ptr<Analysis> a = make_analysis_of(layout, measured);
  a->add_extras(make_extras(layout, measured));
  a->add_extras(make_joint(layout, measured));
  return a;
}

std::vector<Piece> pieces_of(const ImageView& image, uint64_t first, uint64_t target_bytes) {
  const Pieces pieces(image, target_bytes);
  std::vector<Piece> out;
  out.reserve(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    out.push_back(pieces[i]);
    out.back().first += first;
  }
  return out;
}

}  // namespace imgstat::cpu
