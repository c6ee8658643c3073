// The two passes over float samples: moments (and, with an explicit range,
// the histogram in the same sweep), then the histogram over [min, max].
//
// Float moments are rounded sums, so their last bits depend on the order the
// samples are added in. That order is fixed here by the pixels' row-major
// index alone, never by how they arrive (pieces, threads, bands of a decoder,
// chunks of a stream, a region read in slices): the same image gives the same
// bits on every path and every run. Blocks are kBlockPixels pixels at
// multiples of the index, each block's sums plain double sums of (v - shift)^k
// in index order, shift its first finite sample; a group (kGroupPixels at
// multiples of the index) folds its blocks in order by Chan's and Pebay's
// formulas; the image folds its groups in order. Groups are the unit of
// parallel work: one thread adds a group's pixels, in order.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "common/moments.hpp"
#include "common/pieces.hpp"
#include "cpu/float_bins.hpp"
#include "imgstat/binning.hpp"

namespace imgstat::cpu {

// Blocks bound the error of the plain double sums inside them (2048 samples:
// a relative error below 2048 * 2^-53 of each block's sum of magnitudes).
inline constexpr uint64_t kFloatBlockPixels = 2048;
inline constexpr uint64_t kFloatGroupPixels = 32 * kFloatBlockPixels;
// At most this many finite samples in a channel, fine bins are found by
// listing each sample's bin and sorting (n log n) rather than by counting
// into all kFineBins bins per thread (zeroed, added and scanned whatever n
// is): a label's or tile's few samples cost their own number, not 65536.
inline constexpr uint64_t kListedFineSamples = 16384;

// The moments of one group's pixels, given in index order (gaps allowed:
// a mask's pixels) by one thread at a time.
template <class T, uint32_t C>
class GroupMoments {
 public:
  // Pixels [first, first + n) of the image, all in this group, after every
  // pixel given before.
  void add(const uint8_t* p, uint64_t first, uint64_t n) {
    while (n > 0) {
      const uint64_t block = first / kFloatBlockPixels;
      if (block != block_) {
        close_block();
        block_ = block;
      }
      const uint64_t m = std::min(n, (block + 1) * kFloatBlockPixels - first);
      for (uint32_t c = 0; c < C; ++c) open_[c].add(p + c * sizeof(T), m);
      p += m * C * sizeof(T);
      first += m;
      n -= m;
    }
  }

  // The moments of the pixels given so far; more may follow.
  FloatMoments moments(uint32_t c) const {
    FloatMoments m = group_[c];
    merge(m, open_[c].moments());
    return m;
  }

 private:
  struct Open {
    bool any = false;  // a finite sample seen: shift is set
    double shift = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, sum = 0;
    double min = std::numeric_limits<double>::infinity();
    double max = -std::numeric_limits<double>::infinity();
    uint64_t n = 0, nan = 0, posinf = 0, neginf = 0;

    // m samples of one channel, C apart. The sums are kept in locals: the
    // samples are read through a byte pointer, which may alias members, so
    // members would be stored and loaded again each sample (3x slower).
    void add(const uint8_t* p, uint64_t m) {
      bool any_ = any;
      double shift_ = shift, s1_ = s1, s2_ = s2, s3_ = s3, s4_ = s4, sum_ = sum, min_ = min, max_ = max;
      uint64_t n_ = n, nan_ = nan, posinf_ = posinf, neginf_ = neginf;
      for (uint64_t i = 0; i < m; ++i) {
        T t;
        std::memcpy(&t, p + i * C * sizeof(T), sizeof(T));
        const double v = static_cast<double>(t);
        if (std::isfinite(v)) {
          if (!any_) {
            shift_ = v;
            any_ = true;
          }
          ++n_;
          sum_ += v;
          const double d = v - shift_;
          const double d2 = d * d;
          s1_ += d;
          s2_ += d2;
          s3_ += d2 * d;
          s4_ += d2 * d2;
          min_ = v < min_ ? v : min_;
          max_ = v > max_ ? v : max_;
        } else if (std::isnan(v)) {
          ++nan_;
        } else if (v > 0) {
          ++posinf_;
        } else {
          ++neginf_;
        }
      }
      any = any_, shift = shift_, s1 = s1_, s2 = s2_, s3 = s3_, s4 = s4_, sum = sum_, min = min_, max = max_;
      n = n_, nan = nan_, posinf = posinf_, neginf = neginf_;
    }

    FloatMoments moments() const {
      FloatMoments b = moments_from_shifted(n, shift, s1, s2, s3, s4, min, max, sum);
      b.nan = nan;
      b.posinf = posinf;
      b.neginf = neginf;
      return b;
    }
  };

  void close_block() {
    for (uint32_t c = 0; c < C; ++c) {
      merge(group_[c], open_[c].moments());
      open_[c] = Open{};
    }
  }

  uint64_t block_ = UINT64_MAX;
  Open open_[C];
  FloatMoments group_[C];
};

// One group's share of some pieces: single-row runs in index order.
struct GroupRuns {
  uint64_t group = 0;
  std::vector<Piece> runs;  // rows == 1
};

// The pieces' pixels cut at group boundaries and sorted into groups, each
// group's runs in index order. Pieces must not overlap.
std::vector<GroupRuns> group_runs(const std::vector<Piece>& pieces, uint64_t pixel_bytes);

// Per-channel bins of one thread, with explicit-range underflow and overflow.
struct Bins {
  std::vector<uint64_t> counts;
  uint64_t underflow = 0;
  uint64_t overflow = 0;
};

// The bin of each finite sample of channel c that `keep` keeps, to `to`.
template <class T, uint32_t C, class Keep, class To>
void each_bin(const RangeBinner& binner, const uint8_t* p, uint64_t pixels, uint32_t c, Keep&& keep, To&& to) {
  const bool wide = binner.wide();  // float64 data spanning more than a double
  for (uint64_t i = 0; i < pixels; ++i) {
    T t;
    std::memcpy(&t, p + (i * C + c) * sizeof(T), sizeof(T));
    const double v = static_cast<double>(t);
    if (!std::isfinite(v) || !keep(v)) continue;
    to(wide ? binner.exact_wide(v) : binner(v));
  }
}

// Bins of finite samples, by one thread in any order.
template <class T, uint32_t C>
class BinCounter {
 public:
  // binners: one per channel; explicit_range: out-of-range samples go to
  // underflow and overflow (else every sample is within the binner's range).
  BinCounter(const RangeBinner* binners, bool explicit_range, uint32_t bins)
      : binners_(binners), explicit_(explicit_range) {
    for (auto& b : bins_) b.counts.assign(bins, 0);
  }

  void add(const uint8_t* p, uint64_t pixels) {
    for (uint32_t c = 0; c < C; ++c) {
      if (explicit_)
        add_channel<true>(p, pixels, c);
      else
        add_channel<false>(p, pixels, c);
    }
  }

  Bins& bins(uint32_t c) { return bins_[c]; }

 private:
  // Samples of real data fall in few bins, so that consecutive ones add to
  // the same count, each add waiting for the last one's store: spread over
  // kLanes copies of the counts in turn (few bins: folded after each run).
  static constexpr uint32_t kLanes = kFloatBinLanes;
  static constexpr uint32_t kLaneMaxBins = 4096;
  static constexpr uint64_t kLaneMinPixels = 8192;

  template <bool kExplicit>
  void add_channel(const uint8_t* p, uint64_t pixels, uint32_t c) {
    const RangeBinner binner = binners_[c];  // a copy: the counts' stores cannot change it
    Bins& out = bins_[c];
    uint64_t under = 0, over = 0;
    auto keep = [&](double v) {
      if constexpr (kExplicit) {
        if (v < binner.lo) return ++under, false;
        if (v >= binner.hi) return ++over, false;
      }
      return true;
    };
    const uint32_t bins = static_cast<uint32_t>(out.counts.size());
    if (bins <= kLaneMaxBins && pixels >= kLaneMinPixels) {
      lanes_.assign(static_cast<size_t>(kLanes) * bins, 0);
      uint64_t* lanes = lanes_.data();
      bool binned = false;  // four at a time where it can be (float_bins.hpp)
      if constexpr (std::is_same_v<T, float> && C == 1) {
        if (!binner.wide()) {
          float_bins(p, pixels, binner, kExplicit, lanes, &under, &over);
          binned = true;
        }
      }
      if (!binned) {
        uint32_t lane = 0;
        each_bin<T, C>(binner, p, pixels, c, keep, [&](uint32_t bin) {
          ++lanes[lane + bin * kLanes];
          lane = (lane + 1) % kLanes;
        });
      }
      uint64_t* counts = out.counts.data();
      for (uint32_t b = 0; b < bins; ++b)
        for (uint32_t k = 0; k < kLanes; ++k) counts[b] += lanes[b * kLanes + k];
    } else {
      uint64_t* counts = out.counts.data();
      each_bin<T, C>(binner, p, pixels, c, keep, [&](uint32_t bin) { ++counts[bin]; });
    }
    out.underflow += under;
    out.overflow += over;
  }

  const RangeBinner* binners_;
  bool explicit_;
  Bins bins_[C];
  std::vector<uint64_t> lanes_;
};

// The bin of every finite sample, listed by one thread in any order (few
// samples: kListedFineSamples).
template <class T, uint32_t C>
class BinList {
 public:
  explicit BinList(const RangeBinner* binners) : binners_(binners) {}

  void add(const uint8_t* p, uint64_t pixels) {
    for (uint32_t c = 0; c < C; ++c)
      each_bin<T, C>(binners_[c], p, pixels, c, [](double) { return true; },
                     [&](uint32_t bin) { bins_[c].push_back(bin); });
  }

  std::vector<uint32_t>& bins(uint32_t c) { return bins_[c]; }

 private:
  const RangeBinner* binners_;
  std::vector<uint32_t> bins_[C];
};

}  // namespace imgstat::cpu
