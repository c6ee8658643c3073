// The CPU engine's analyses: one image's statistics accumulated piece by
// piece, in any order, on the engine's TBB arena. One pass of counting for
// integer samples (everything else follows exactly from the counts), two for
// floats (float_passes.hpp). Work is cut into pieces of about a megabyte.
#pragma once

#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>

#include <memory>
#include <optional>
#include <vector>

#include "common/partial.hpp"
#include "common/pieces.hpp"
#include "imgstat/engine.hpp"

namespace imgstat::cpu {

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

// Positions, colours and joint histograms, counted beside the main pass.
class Extras {
 public:
  virtual ~Extras() = default;
  virtual void add(const std::vector<Piece>& pieces) = 0;
  virtual void add_to(Partial& partial) = 0;
};
// Null when the request asks for none.
std::unique_ptr<Extras> make_extras(const Layout& layout, const StatsRequest& request);
std::unique_ptr<Extras> make_joint(const Layout& layout, const StatsRequest& request);

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

// The analysis of an image of `layout` for `request` (a colour space's too).
std::unique_ptr<Analysis> make_analysis(const Layout& layout, const StatsRequest& request);
// Whether integer samples need no statistic of their values (a joint
// histogram alone): the pixels are only counted.
bool counts_only(SampleType type, const StatsRequest& request);
// first: the image's pixel index of the view's first pixel.
std::vector<Piece> pieces_of(const ImageView& image, uint64_t first = 0, uint64_t target_bytes = kPieceBytes);

}  // namespace imgstat::cpu
