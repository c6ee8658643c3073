// Per-thread counting of a joint histogram (StatsRequest::joint) over runs
// of whole pixels of the measured image.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "common/partial.hpp"
#include "common/pieces.hpp"
#include "imgstat/binning.hpp"
#include "imgstat/engine.hpp"

namespace imgstat::cpu {

// An axis' contribution to a pixel's flat bin: integer samples look their
// offset up in a table (bin times the axis' stride, or kJointOutside);
// floats go through the range binner.
constexpr int32_t kJointOutside = -(int32_t{1} << 29);  // three of them stay negative
// Per-thread 32-bit counts up to this many bins (4 MiB a thread); above,
// one table of 64-bit counters shared by all threads.
constexpr uint64_t kJointPrivateBins = uint64_t{1} << 20;

struct JointPlan {
  JointSpec spec;  // ranges explicit (measured_request())
  SampleType type = SampleType::kUint8;
  uint32_t axes = 0;
  uint32_t channel[kMaxJointAxes] = {};
  uint64_t stride[kMaxJointAxes] = {};
  std::vector<int32_t> table[kMaxJointAxes];  // integer samples: by offset from type_lo
  RangeBinner binner[kMaxJointAxes];

  JointPlan(const JointSpec& j, SampleType t) : spec(j), type(t), axes(j.axes) {
    uint64_t s = 1;
    for (uint32_t a = axes; a-- > 0;) {
      channel[a] = j.channels[a];
      stride[a] = s;
      s *= j.bins[a];
      binner[a] = RangeBinner::make(j.lo[a], j.hi[a], j.bins[a]);
      if (is_float(t)) continue;
      const size_t values = size_t{1} << type_bits(t);
      table[a].resize(values);
      for (size_t i = 0; i < values; ++i) {
        const double v = static_cast<double>(type_lo(t) + static_cast<int64_t>(i));
        table[a][i] = v < j.lo[a] || v >= j.hi[a] ? kJointOutside : static_cast<int32_t>(binner[a](v) * stride[a]);
      }
    }
  }
  uint64_t bins() const { return spec.total_bins(); }
};

template <class T>
T load_sample(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <class T, uint32_t C>
class JointCounter {
 public:
  JointCounter(const JointPlan& plan, std::atomic<uint64_t>* shared) : plan_(plan), shared_(shared) {
    if (!shared_) counts_.assign(plan.bins() + 1, 0);  // the last: pixels outside
  }

  void add(const Piece& pc) {
    for (uint64_t r = 0; r < pc.rows; ++r) {
      const uint8_t* run = pc.base + r * pc.stride;
      if constexpr (sizeof(T) == 1) {
        if (!shared_) {
          if (plan_.axes == 2)
            add_run8<2>(run, pc.pixels);
          else
            add_run8<3>(run, pc.pixels);
          continue;
        }
      }
      add_run(run, pc.pixels);
    }
  }

  // Adds this thread's counts to the partial's.
  void add_to(Partial& p) {
    flush();
    if (p.joint.empty()) p.joint.assign(plan_.bins(), 0);
    for (size_t i = 0; i < totals_.size(); ++i) p.joint[i] += totals_[i];
    p.joint_outside += outside_;
    totals_.clear();
    outside_ = 0;
  }

 private:
  int64_t flat(const uint8_t* px) const {
    int64_t idx = 0;
    for (uint32_t a = 0; a < plan_.axes; ++a) {
      const T v = load_sample<T>(px + plan_.channel[a] * sizeof(T));
      if constexpr (std::is_floating_point_v<T>) {
        const double d = static_cast<double>(v);
        if (!(d >= plan_.spec.lo[a] && d < plan_.spec.hi[a])) return -1;
        idx += static_cast<int64_t>(plan_.binner[a](d) * plan_.stride[a]);
      } else {
        idx += plan_.table[a][static_cast<uint32_t>(static_cast<int64_t>(v) - type_lo(plan_.type))];
      }
    }
    return idx;
  }

  // 8-bit samples into private counters: table lookups and one increment
  // a pixel, no branch; outside pixels land in the extra last counter.
  template <uint32_t A>
  void add_run8(const uint8_t* p, uint64_t pixels) {
    const int32_t* t0 = plan_.table[0].data();
    const int32_t* t1 = plan_.table[1].data();
    const int32_t* t2 = A == 3 ? plan_.table[2].data() : nullptr;
    const uint32_t c0 = plan_.channel[0], c1 = plan_.channel[1], c2 = A == 3 ? plan_.channel[2] : 0;
    const int32_t sink = static_cast<int32_t>(plan_.bins());
    // Tables index by v - type_lo: int8's raw byte with its sign bit flipped.
    constexpr uint8_t kFlip = std::is_signed_v<T> ? 0x80 : 0;
    uint32_t* counts = counts_.data();
    while (pixels > 0) {
      // Counters are 32-bit: flushed before any could wrap.
      const uint64_t n = std::min<uint64_t>(pixels, UINT32_MAX - pending_);
      for (uint64_t i = 0; i < n; ++i) {
        const uint8_t* px = p + i * C;
        int32_t idx = t0[px[c0] ^ kFlip] + t1[px[c1] ^ kFlip];
        if constexpr (A == 3) idx += t2[px[c2] ^ kFlip];
        ++counts[idx < 0 ? sink : idx];
      }
      pending_ += n;
      p += n * C;
      pixels -= n;
      if (pending_ == UINT32_MAX) flush();
    }
  }

  void add_run(const uint8_t* p, uint64_t pixels) {
    constexpr uint64_t kPixel = C * sizeof(T);
    for (uint64_t i = 0; i < pixels; ++i) {
      const int64_t idx = flat(p + i * kPixel);
      if (idx < 0) {
        ++outside_;
      } else if (shared_) {
        shared_[idx].fetch_add(1, std::memory_order_relaxed);
      } else {
        ++counts_[idx];
      }
      if (++pending_ == UINT32_MAX) flush();
    }
  }

  // Private counters into the 64-bit totals (the last one: pixels outside).
  void flush() {
    pending_ = 0;
    if (shared_) return;
    if (totals_.empty()) totals_.assign(plan_.bins(), 0);
    for (size_t i = 0; i + 1 < counts_.size(); ++i) totals_[i] += counts_[i];
    outside_ += counts_.back();
    std::fill(counts_.begin(), counts_.end(), 0);
  }

  const JointPlan& plan_;
  std::atomic<uint64_t>* shared_;
  std::vector<uint32_t> counts_;
  std::vector<uint64_t> totals_;
  uint64_t outside_ = 0;
  uint64_t pending_ = 0;  // pixels counted since the last flush
};

}  // namespace imgstat::cpu
