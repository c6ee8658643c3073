// The CPU engine: the analyses (analysis.hpp) on a TBB arena of its
// threads, streams (stream.hpp), parts (parts.hpp), and what its calls
// allocate beside their pixels (Engine::working_bytes).
#include <tbb/task_arena.h>

#include <thread>

#include "common/colour.hpp"
#include "common/luminance.hpp"
#include "common/parts.hpp"
#include "common/background.hpp"
#include "common/hashes.hpp"
#include "common/quality.hpp"
#include "cpu/analysis.hpp"
#include "cpu/counters.hpp"
#include "cpu/joint_counter.hpp"
#include "cpu/parts.hpp"
#include "cpu/stream.hpp"
#include "imgstat/engine.hpp"

namespace imgstat {
namespace cpu {
namespace {

// Counter sets an analysis of `bytes` bytes makes: one a thread that takes
// a piece of it.
uint64_t counter_sets(uint64_t bytes, uint32_t threads) {
  return std::min<uint64_t>(threads, std::max<uint64_t>(1, (bytes + kPieceBytes - 1) / kPieceBytes));
}

// One thread's counters for an analysis of `l` (the measured image).
uint64_t counter_bytes(const Layout& l, const StatsRequest& request) {
  uint64_t bytes = 0;
  if (sample_size(l.type) == 2 && !counts_only(l.type, request))
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
    if (asked.quality) bytes += quality_working_bytes(image, threads);
    if (asked.hashes) bytes += hashes_working_bytes(image);
    bytes += background_working_bytes(image, asked.background, threads);
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
  // A set larger than kMaxPartCountBytes is refused before it is made
  // (check_part_count_bytes, on the labels found): the most this can hold.
  const uint64_t set = std::min(kMaxPartCountBytes, part_count_bytes(static_cast<uint32_t>(std::min<uint64_t>(labels, UINT32_MAX)),
                                                                     l.channels, l.type, request));
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
    arena_.execute([&] { add_host_measures(image, request, result); });
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
