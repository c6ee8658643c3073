// What both engines share about parts of an image: where each tile lies,
// which part each pixel belongs to (a mask, the distinct labels of a label
// image, a grid), and the step from per-part integer counts to statistics.
// The engines count; the answer is made here, so theirs agree to the bit
// wherever their counts do.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/moments.hpp"
#include "common/partial.hpp"
#include "imgstat/engine.hpp"

namespace imgstat {

constexpr uint32_t kNoPart = UINT32_MAX;

// Samples of type T from bytes at any address (a raw buffer's, a region's
// offset): copied out, as unaligned reads must be (a plain load where the
// machine allows it).
template <class T>
struct Samples {
  const uint8_t* base;
  T operator[](uint64_t i) const {
    T v;
    std::memcpy(&v, base + i * sizeof(T), sizeof(T));
    return v;
  }
};

// The end of the run of samples equal to sample x among n packed samples
// of type T from `row` (x < n). Label maps hold long runs: 8- and 16-bit
// samples are compared sixteen bytes at a time.
template <class T>
uint64_t run_end(const uint8_t* row, uint64_t x, uint64_t n) {
  const Samples<T> p{row};
  const T v = p[x];
  uint64_t i = x + 1;
#if defined(__SSE2__)
  if constexpr (sizeof(T) <= 2) {
    constexpr uint64_t kLanes = 16 / sizeof(T);
    const __m128i want = sizeof(T) == 1 ? _mm_set1_epi8(static_cast<char>(v)) : _mm_set1_epi16(static_cast<short>(v));
    for (; i + kLanes <= n; i += kLanes) {
      const __m128i got = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i * sizeof(T)));
      const int same = _mm_movemask_epi8(sizeof(T) == 1 ? _mm_cmpeq_epi8(got, want) : _mm_cmpeq_epi16(got, want));
      if (same != 0xFFFF) return i + static_cast<uint64_t>(__builtin_ctz(~same & 0xFFFF)) / sizeof(T);
    }
  }
#endif
  while (i < n && p[i] == v) ++i;
  return i;
}

// [floor(i * extent / count), floor((i + 1) * extent / count)).
inline uint64_t tile_edge(uint64_t i, uint64_t extent, uint64_t count) {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(i) * extent / count);
}
Rect tile_rect(const Parts& parts, const Layout& layout, uint32_t column, uint32_t row);

// A position found in the view of `roi` (row-major within it) as a
// position in the image of width `width`.
inline uint64_t image_position(uint64_t at, const Rect& roi, uint64_t width) {
  return (roi.y + at / roi.width) * width + roi.x + at % roi.width;
}

// The pixels of `roi` as an image of their own (rows the image's stride apart).
ImageView rect_view(const ImageView& image, const Rect& roi);
// The positions in channels found in rect_view(image, roi), as the image's.
void to_image_positions(std::vector<ChannelStats>& channels, const Rect& roi, uint64_t width);

// A request as each part answers it: its channels only.
StatsRequest per_part_request(StatsRequest request);
// Rectangles and tiles: each a view of the image, analyzed as a whole image
// is by `analyze` (so each answer is the whole-image answer for its pixels),
// in parallel where `parallel`, its positions made the image's.
Result analyze_each_rect(const ImageView& image, const Parts& parts, const StatsRequest& request, const char* engine,
                         bool parallel, const std::function<Result(const ImageView&, const StatsRequest&)>& analyze);

// The part of every pixel for a mask, labels or tiles: kNoPart for pixels
// in none (outside the mask, the ignored label).
class PartIndex {
 public:
  // Labels: finds the distinct labels (every thread of the caller's TBB
  // arena may be used), refusing more than parts.max_parts before going on.
  PartIndex(const Layout& layout, const Parts& parts);

  uint32_t count() const { return count_; }
  // Labels: the label of each part, ascending.
  const std::vector<int64_t>& labels() const { return labels_; }
  // 8- and 16-bit labels: the part of each label value (value - type_lo),
  // kNoPart for those absent or ignored; empty for other kinds.
  const std::vector<uint32_t>& table() const { return table_; }
  // Tiles: the column of every x and the row of every y.
  const std::vector<uint32_t>& columns_of() const { return column_of_; }
  const std::vector<uint32_t>& rows_of() const { return row_of_; }
  // The part of pixels [x0, x0 + n) of row y into out[0, n).
  void row(uint64_t y, uint64_t x0, uint64_t n, uint32_t* out) const;
  // Whether this index is the one PartIndex(layout, parts) would build: the
  // same labels map, read the same way, over an image of the same size.
  bool serves(const Layout& layout, const Parts& parts) const;

 private:
  Parts parts_;
  Layout layout_;
  uint32_t count_ = 0;
  std::vector<int64_t> labels_;
  std::vector<uint32_t> table_;
  std::vector<uint32_t> column_of_;
  std::vector<uint32_t> row_of_;
};

// parts.index where it serves (layout, parts), else an index built into
// `built`.
const PartIndex& index_of(const Layout& layout, const Parts& parts, std::optional<PartIndex>& built);

// Exact integer counts per part and channel, as both engines produce them
// for integer samples: index [part * channels + channel].
struct PartCounts {
  uint32_t parts = 0;
  uint32_t channels = 0;
  std::vector<IntMoments> moments;
  bool positions = false;
  std::vector<uint64_t> min_at;  // first min, row-major pixel index in the image
  std::vector<uint64_t> max_at;
  // Histograms binned as they are counted (bins per part and channel, and
  // under/overflow), unless value counts are kept.
  uint32_t bins = 0;
  std::vector<uint64_t> binned;
  std::vector<uint64_t> underflow;
  std::vector<uint64_t> overflow;
  // The count of every value (2^bits per part and channel), when the
  // distribution, shape or merge state is asked for.
  uint32_t values = 0;
  std::vector<uint64_t> value_counts;

  // What an engine counts for `request` over `parts` parts of `type`.
  static PartCounts shaped(uint32_t parts, uint32_t channels, SampleType type, const StatsRequest& request);
  uint64_t bytes() const;
  void add(const PartCounts& other);
};

// Throws LimitError when the answer for `parts` parts is estimated larger
// than spec.max_answer_bytes (answer_bytes()).
void check_answer_bytes(uint64_t parts, const Layout& layout, const Parts& spec, const StatsRequest& request);

// Bytes of counts one PartCounts set of this shape holds. A call's sets
// together stay within kMaxPartCountBytes (the CPU engine counts with one
// set per thread only while they fit, else with one set).
uint64_t part_count_bytes(uint32_t parts, uint32_t channels, SampleType type, const StatsRequest& request);
constexpr uint64_t kMaxPartCountBytes = uint64_t{256} << 20;
// Throws kResourceExhausted when one set is larger than kMaxPartCountBytes.
void check_part_count_bytes(uint32_t parts, uint32_t channels, SampleType type, const StatsRequest& request);

// The bin of each integer value (value - type_lo) for the requested
// histogram: kUnderflowBin, kOverflowBin or 0..bins-1, as bin_values() bins.
constexpr int32_t kUnderflowBin = -1;
constexpr int32_t kOverflowBin = -2;
std::vector<int32_t> bin_table(SampleType type, const HistogramSpec& spec);

// Statistics of one part from its counts.
Partial partial_of_part(const PartCounts& counts, uint32_t part, SampleType type, const StatsRequest& request);
// Every part's answer, labelled or tiled as `parts` says (mask: one part,
// returned as the result's channels).
Result result_of_parts(const PartCounts& counts, const PartIndex& index, const Parts& parts, const Layout& layout,
                       const StatsRequest& request, const char* engine);
// A part's PartStats key (rectangle, label or tile) without its channels.
PartStats part_key(const Parts& parts, const PartIndex* index, const Layout& layout, uint32_t part);

}  // namespace imgstat
