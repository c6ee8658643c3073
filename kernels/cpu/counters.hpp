// Per-thread counting loops of the CPU engine. Each add() takes a run of
// whole pixels starting at channel 0.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace imgstat::cpu {

// Counts of each byte value per channel, for 8-bit samples. Counting into K
// tables by byte position (K a multiple of the channel count) breaks the
// store-to-load dependency between neighbouring equal bytes, which otherwise
// serialises constant images; a 64-bit load feeds eight of them.
template <uint32_t C>
class ByteCounter {
 public:
  static constexpr uint32_t K = C == 3 ? 24 : 8;
  static constexpr uint64_t kFlushBytes = uint64_t{1} << 31;

  ByteCounter() { std::memset(tables_, 0, sizeof(tables_)); }

  void add(const uint8_t* p, uint64_t pixels) {
    uint64_t bytes = pixels * C;
    while (bytes > 0) {
      // Split so that no table entry can pass 2^32 between flushes; a split
      // at a multiple of K keeps the position-to-channel mapping.
      uint64_t n = std::min<uint64_t>(bytes, kFlushBytes - pending_);
      if (n < bytes) n -= n % K;
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

  // Adds the counts so far to totals[channel * 256 + value] and resets.
  void flush_into(uint64_t* totals) {
    for (uint32_t k = 0; k < K; ++k) {
      uint64_t* out = totals + (k % C) * 256;
      for (uint32_t v = 0; v < 256; ++v) out[v] += tables_[k][v];
    }
    std::memset(tables_, 0, sizeof(tables_));
    pending_ = 0;
  }

  std::vector<uint64_t>& totals() { return totals_; }
  void flush() { flush_into(totals_.data()); }

 private:
  void count(const uint8_t* p, uint64_t n) {
    const uint8_t* const end = p + n - n % K;
    for (; p < end; p += K) {
      for (uint32_t j = 0; j < K / 8; ++j) {
        uint64_t w;
        std::memcpy(&w, p + 8 * j, 8);
        uint32_t* t = &tables_[8 * j][0];
        ++t[0 * 256 + (w & 0xff)];
        ++t[1 * 256 + ((w >> 8) & 0xff)];
        ++t[2 * 256 + ((w >> 16) & 0xff)];
        ++t[3 * 256 + ((w >> 24) & 0xff)];
        ++t[4 * 256 + ((w >> 32) & 0xff)];
        ++t[5 * 256 + ((w >> 40) & 0xff)];
        ++t[6 * 256 + ((w >> 48) & 0xff)];
        ++t[7 * 256 + (w >> 56)];
      }
    }
    for (uint32_t k = 0; k < n % K; ++k) ++tables_[k][p[k]];
  }

  alignas(64) uint32_t tables_[K][256];
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
