// Integer samples counted per part (labels): exact moments per run of pixels
// of one part, binned histograms or value counts per sample, as PartCounts.
#pragma once

#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <vector>

#include "common/parts.hpp"

namespace imgstat {
namespace cpu {

// Runs are cut at this many pixels so that a run's sums of squares of
// 16-bit samples stay inside 64 bits before they are added to 128-bit ones.
constexpr uint64_t kMaxRun = 65536;
constexpr uint64_t kPartRowsPerBlock = 8;

template <class T, uint32_t C>
class PartCounter {
 public:
  PartCounter(const ImageView& image, const PartIndex& index, const StatsRequest& request)
      : image_(image), index_(index), request_(request) {
    if (!counts_every_value(request) && request.channel_hists.empty() &&
        request.histogram)
      bin_of_ = bin_table(image.layout.type, request.hist);
  }

  PartCounts count() {
    const Layout& l = image_.layout;
    auto make = [&] { return PartCounts::shaped(index_.count(), C, l.type, request_); };
    const uint64_t blocks = (l.height + kPartRowsPerBlock - 1) / kPartRowsPerBlock;
    const uint64_t set_bytes = part_count_bytes(index_.count(), C, l.type, request_);
    const uint64_t threads = static_cast<uint64_t>(tbb::this_task_arena::max_concurrency());
    if (set_bytes * (threads + 1) > kMaxPartCountBytes) {  // one set (and the total), one thread
      PartCounts counts = make();
      std::vector<uint32_t> parts(l.width);
      for (uint64_t b = 0; b < blocks; ++b) count_block(b, counts, parts);
      return counts;
    }
    tbb::enumerable_thread_specific<PartCounts> sets(make);
    tbb::enumerable_thread_specific<std::vector<uint32_t>> rows([&] { return std::vector<uint32_t>(l.width); });
    tbb::parallel_for(uint64_t{0}, blocks, [&](uint64_t b) { count_block(b, sets.local(), rows.local()); });
    PartCounts total = make();
    for (PartCounts& s : sets) total.add(s);
    return total;
  }

 private:
  void count_block(uint64_t b, PartCounts& counts, std::vector<uint32_t>& parts) const {
    const Layout& l = image_.layout;
    const uint64_t stride = l.stride();
    for (uint64_t y = b * kPartRowsPerBlock; y < std::min(l.height, (b + 1) * kPartRowsPerBlock); ++y) {
      index_.row(y, 0, l.width, parts.data());
      const Samples<T> row{static_cast<const uint8_t*>(image_.data) + y * stride};
      uint64_t x = 0;
      while (x < l.width) {
        const uint32_t p = parts[x];
        uint64_t end = x + 1;
        while (end < l.width && parts[end] == p && end - x < kMaxRun) ++end;
        if (p != kNoPart) add_run(counts, p, row, x, end, y * l.width);
        x = end;
      }
    }
  }

  // One run of pixels of part p: all channels in one sweep, kept in
  // registers, then added to the part's moments once.
  void add_run(PartCounts& counts, uint32_t p, const Samples<T>& row, uint64_t x0, uint64_t x1, uint64_t row_first) const {
    const int64_t lo = type_lo(image_.layout.type);
    if (counts.values && !counts.positions) {
      // Value counts hold the moments too (partial_of_part takes them from there).
      uint64_t* vc = &counts.value_counts[size_t{p} * C * counts.values];
      for (uint64_t x = x0; x < x1; ++x)
        for (uint32_t c = 0; c < C; ++c) ++vc[c * counts.values + static_cast<size_t>(row[x * C + c] - lo)];
      counts.moments[size_t{p} * C].n += x1 - x0;  // marks the part as counted
      return;
    }
    int64_t mn[C], mx[C], sum[C] = {};
    uint64_t sq[C] = {}, mn_at[C], mx_at[C];
    for (uint32_t c = 0; c < C; ++c) {
      mn[c] = mx[c] = row[x0 * C + c];
      mn_at[c] = mx_at[c] = x0;
    }
    if (counts.positions) {
      for (uint64_t x = x0; x < x1; ++x)
        for (uint32_t c = 0; c < C; ++c) {
          const int64_t v = row[x * C + c];
          sum[c] += v;
          sq[c] += static_cast<uint64_t>(v * v);
          if (v < mn[c]) {
            mn[c] = v;
            mn_at[c] = x;
          }
          if (v > mx[c]) {
            mx[c] = v;
            mx_at[c] = x;
          }
        }
    } else {
      for (uint64_t x = x0; x < x1; ++x)
        for (uint32_t c = 0; c < C; ++c) {
          const int64_t v = row[x * C + c];
          sum[c] += v;
          sq[c] += static_cast<uint64_t>(v * v);
          mn[c] = std::min(mn[c], v);
          mx[c] = std::max(mx[c], v);
        }
    }
    for (uint32_t c = 0; c < C; ++c) {
      const size_t i = size_t{p} * C + c;
      IntMoments& m = counts.moments[i];
      if (counts.positions) {
        const uint64_t at_min = row_first + mn_at[c], at_max = row_first + mx_at[c];
        if (m.n == 0 || mn[c] < m.min || (mn[c] == m.min && at_min < counts.min_at[i])) counts.min_at[i] = at_min;
        if (m.n == 0 || mx[c] > m.max || (mx[c] == m.max && at_max < counts.max_at[i])) counts.max_at[i] = at_max;
      }
      if (m.n == 0) {
        m.min = mn[c];
        m.max = mx[c];
      } else {
        m.min = std::min(m.min, mn[c]);
        m.max = std::max(m.max, mx[c]);
      }
      m.n += x1 - x0;
      m.sum += sum[c];
      m.sumsq += sq[c];
      if (counts.values) {
        uint64_t* vc = &counts.value_counts[i * counts.values];
        for (uint64_t x = x0; x < x1; ++x) ++vc[row[x * C + c] - lo];
      } else if (!bin_of_.empty()) {
        uint64_t* h = &counts.binned[i * counts.bins];
        for (uint64_t x = x0; x < x1; ++x) {
          const int32_t bin = bin_of_[static_cast<size_t>(row[x * C + c] - lo)];
          if (bin >= 0)
            ++h[bin];
          else if (bin == kUnderflowBin)
            ++counts.underflow[i];
          else
            ++counts.overflow[i];
        }
      }
    }
  }

  ImageView image_;
  const PartIndex& index_;
  StatsRequest request_;
  std::vector<int32_t> bin_of_;
};

}  // namespace cpu
}  // namespace imgstat
