#include "decode/inflate/deflate.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

namespace imgstat::deflate {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "bits are read as little-endian words");

// Deflate's bits, least significant first, through a 64-bit buffer refilled
// a word at a time. Reads past the end see zeros and leave over() true.
class Bits {
 public:
  Bits(const uint8_t* d, size_t n, uint64_t pos) : d_(d), n_(n), byte_(pos >> 3) {
    refill();
    consume(static_cast<int>(pos & 7));
  }
  // At least 56 bits in the buffer afterwards.
  void refill() {
    if (byte_ + 8 <= n_) {
      uint64_t w;
      std::memcpy(&w, d_ + byte_, 8);
      buf_ |= w << cnt_;
      byte_ += static_cast<uint64_t>(63 - cnt_) >> 3;
      cnt_ |= 56;
      return;
    }
    while (cnt_ <= 56) {
      const uint64_t b = byte_ < n_ ? d_[byte_] : 0;
      buf_ |= b << cnt_;
      ++byte_;
      cnt_ += 8;
    }
  }
  uint32_t peek() const { return static_cast<uint32_t>(buf_); }  // 32 bits; refill() first
  void consume(int n) {
    buf_ >>= n;
    cnt_ -= n;
  }
  uint32_t take(int n) {  // n <= 24, refill() first
    const uint32_t v = static_cast<uint32_t>(buf_) & ((1u << n) - 1);
    consume(n);
    return v;
  }
  uint32_t get(int n) {  // n <= 24, refilling as needed
    if (cnt_ < n) refill();
    return take(n);
  }
  void skip(int n) { consume(n); }
  uint64_t pos() const { return byte_ * 8 - static_cast<uint64_t>(cnt_); }
  bool over() const { return pos() > uint64_t{n_} * 8; }
  // To the next byte boundary, then the buffer emptied there: bytes are read
  // straight from the data.
  void align() { seek((pos() + 7) & ~uint64_t{7}); }
  void seek(uint64_t bit) {
    byte_ = bit >> 3;
    buf_ = 0;
    cnt_ = 0;
    refill();
    consume(static_cast<int>(bit & 7));
  }
  const uint8_t* bytes_at() const { return d_ + (pos() >> 3); }
  uint64_t bytes_left() const { return pos() >= uint64_t{n_} * 8 ? 0 : n_ - (pos() >> 3); }

 private:
  const uint8_t* d_;
  size_t n_;
  uint64_t byte_;  // the next byte to load
  uint64_t buf_ = 0;
  int cnt_ = 0;  // bits in buf_
};

enum class Kind { kCodeLengths, kLiterals, kDistances };

// A canonical Huffman code decoded by table: codes up to kPrimary bits in
// one lookup, longer ones (up to 15) in a second, from a subtable of their
// kPrimary-bit prefix (as zlib's and libdeflate's tables do).
class Code {
 public:
  static constexpr int kPrimary = 11;

  // zlib's rules (inftrees.c): over-subscribed is refused; incomplete is
  // refused except a literal or distance code of one 1-bit code (zlib then
  // refuses the unused code when it is met, as decode() does: its entry is
  // empty); no code at all only for distances.
  bool build(const uint8_t* lengths, int n, Kind kind) {
    uint16_t count[16] = {};
    for (int i = 0; i < n; ++i) ++count[lengths[i]];
    count[0] = 0;
    int max = 0;
    for (int len = 15; len > 0; --len)
      if (count[len]) {
        max = len;
        break;
      }
    std::memset(table_, 0, sizeof(uint32_t) << kPrimary);
    if (max == 0) return kind == Kind::kDistances;
    int left = 1;
    for (int len = 1; len <= 15; ++len) {
      left <<= 1;
      left -= count[len];
      if (left < 0) return false;
    }
    if (left > 0 && (kind == Kind::kCodeLengths || max != 1)) return false;
    uint16_t offs[16];
    offs[1] = 0;
    for (int len = 1; len < 15; ++len) offs[len + 1] = static_cast<uint16_t>(offs[len] + count[len]);
    uint16_t symbols[320];
    for (int s = 0; s < n; ++s)
      if (lengths[s]) symbols[offs[lengths[s]]++] = static_cast<uint16_t>(s);
    // Codes in canonical order; each entry at its bit-reversed code. The
    // primary table is filled for kPrimary bits whatever the longest code,
    // so that decode() need not mask by it.
    const int sub_bits = max - kPrimary;  // a long code's subtable: this many bits past the prefix
    uint32_t sub_used = 0;
    uint32_t code = 0;
    int index = 0;
    for (int len = 1; len <= max; ++len) {
      for (int k = 0; k < count[len]; ++k, ++index, ++code) {
        uint32_t reversed = 0;
        for (int b = 0; b < len; ++b) reversed |= ((code >> b) & 1u) << (len - 1 - b);
        const uint32_t entry = static_cast<uint32_t>(symbols[index]) << 8 | static_cast<uint32_t>(len);
        if (len <= kPrimary) {
          for (uint32_t i = reversed; i < (1u << kPrimary); i += 1u << len) table_[i] = entry;
          continue;
        }
        const uint32_t prefix = reversed & ((1u << kPrimary) - 1);
        if (!(table_[prefix] & kSub)) {
          table_[prefix] = sub_used << 8 | kSub | static_cast<uint32_t>(sub_bits);
          sub_used += 1u << sub_bits;
        }
        uint32_t* sub = sub_ + (table_[prefix] >> 8);
        for (uint32_t i = reversed >> kPrimary; i < (1u << sub_bits); i += 1u << (len - kPrimary)) sub[i] = entry;
      }
      code <<= 1;
    }
    return true;
  }

  // The next symbol, or -1 where no code matches; 15 bits or more in b.
  int decode(Bits& b) const {
    const uint32_t bits = b.peek();
    uint32_t e = table_[bits & ((1u << kPrimary) - 1)];
    if (e & kSub) e = sub_[(e >> 8) + ((bits >> kPrimary) & ((1u << (e & 15)) - 1))];
    if (!e) return -1;
    b.skip(static_cast<int>(e & 15));
    return static_cast<int>(e >> 8);
  }

 private:
  static constexpr uint32_t kSub = 0x80;
  uint32_t table_[1 << kPrimary];
  // At most one subtable of 2^(15 - kPrimary) entries a long code.
  uint32_t sub_[320 << (15 - kPrimary)];
};

constexpr uint16_t kLengthBase[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                      31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
constexpr uint8_t kLengthExtra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
constexpr uint16_t kDistBase[30] = {1,   2,   3,   4,   5,   7,    9,    13,   17,   25,   33,   49,   65,    97,    129,
                                    193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
constexpr uint8_t kDistExtra[30] = {0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};
constexpr uint8_t kCodeLengthOrder[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};

struct FixedCodes {
  Code lit, dist;
  FixedCodes() {
    uint8_t l[288];
    std::fill(l, l + 144, 8);
    std::fill(l + 144, l + 256, 9);
    std::fill(l + 256, l + 280, 7);
    std::fill(l + 280, l + 288, 8);
    lit.build(l, 288, Kind::kLiterals);
    uint8_t d[32];
    std::fill(d, d + 32, 5);  // 30 and 31 exist, and are refused when met
    dist.build(d, 32, Kind::kDistances);
  }
};
const FixedCodes& fixed_codes() {
  static const FixedCodes codes;
  return codes;
}

// A dynamic block's header into lit and dist, zlib's checks in zlib's order.
bool read_dynamic(Bits& b, Code& lit, Code& dist) {
  const int nlen = static_cast<int>(b.get(5)) + 257, ndist = static_cast<int>(b.get(5)) + 1,
            ncode = static_cast<int>(b.get(4)) + 4;
  if (nlen > 286 || ndist > 30) return false;
  uint8_t lengths[320] = {};
  for (int i = 0; i < ncode; ++i) lengths[kCodeLengthOrder[i]] = static_cast<uint8_t>(b.get(3));
  Code codes;
  if (!codes.build(lengths, 19, Kind::kCodeLengths)) return false;
  std::memset(lengths, 0, sizeof lengths);
  int have = 0;
  while (have < nlen + ndist) {
    b.refill();
    const int sym = codes.decode(b);
    if (sym < 0) return false;
    if (sym < 16) {
      lengths[have++] = static_cast<uint8_t>(sym);
      continue;
    }
    uint8_t value = 0;
    int repeat;
    if (sym == 16) {
      if (have == 0) return false;
      value = lengths[have - 1];
      repeat = 3 + static_cast<int>(b.take(2));
    } else if (sym == 17) {
      repeat = 3 + static_cast<int>(b.take(3));
    } else {
      repeat = 11 + static_cast<int>(b.take(7));
    }
    if (have + repeat > nlen + ndist) return false;
    while (repeat--) lengths[have++] = value;
  }
  if (b.over() || lengths[256] == 0) return false;
  return lit.build(lengths, nlen, Kind::kLiterals) && dist.build(lengths + nlen, ndist, Kind::kDistances);
}

// The run's output: marked symbols until the last `window` of them hold no
// marker, then bytes (a copy of that last window first); buffers grown
// without clearing them.
// A copy of len bytes from d < 8 bytes back (the output repeats with
// period d): as 8-byte words of the pattern where d divides 8 (16-bit
// samples' runs: d = 2), else by memcpy of ever longer stretches already
// repeated (d, 2d, 4d, ...). May write up to 7 bytes past the copy.
inline void copy_short_distance(uint8_t* out, uint32_t d, uint32_t len) {
  const uint8_t* from = out - d;
  if (d == 2 || d == 4) {
    uint64_t v = 0;
    if (d == 2) {
      uint16_t x;
      std::memcpy(&x, from, 2);
      v = x * 0x0001000100010001ULL;
    } else {
      uint32_t x;
      std::memcpy(&x, from, 4);
      v = x * 0x0000000100000001ULL;
    }
    for (uint32_t j = 0; j < len; j += 8) std::memcpy(out + j, &v, 8);
    return;
  }
  uint32_t j = 0, span = d;
  while (j < len) {
    const uint32_t c = std::min(span, len - j);
    std::memcpy(out + j, out + j - span, c);  // span <= j + d: its source is the pattern already there
    j += c;
    span *= 2;
  }
}

class Output {
 public:
  Output(Run& run, uint32_t window, bool known_start, uint64_t max_output, uint64_t hint, Mapped<uint8_t> buffer,
         Mapped<uint16_t> marked, Before before)
      : run_(run), window_(window), max_output_(max_output), hint_(hint), store_(std::move(buffer)),
        mstore_(std::move(marked)) {
    if (known_start) bytes_phase_ = true;
    if (store_) {
      bp_ = store_.get();
      cap_ = store_.get_deleter().bytes;
    }
    if (mstore_) {
      mp_ = mstore_.get();
      mcap_ = mstore_.get_deleter().bytes / sizeof(uint16_t);
    }
    // The known output before the start goes first, not counted as output.
    const size_t keep = known_start ? std::min<size_t>(before.size, kMaxWindow) : 0;
    if (keep) {
      if (cap_ < keep + kSlack) {  // outside the output's limit: not output
        const uint64_t cap = std::max<uint64_t>({keep + hint_, keep + kSlack, 1 << 16});
        store_ = map_array<uint8_t>(cap);
        bp_ = store_.get();
        cap_ = cap;
      }
      std::memcpy(bp_, before.data + before.size - keep, keep);
      n_ = prefix_ = keep;
    }
  }

  bool literal(uint8_t v) {
    if (bytes_phase_) {
      if (n_ == cap_ && !grow(1)) return false;
      if (total() >= max_output_) return false;
      bp_[n_++] = v;
      return true;
    }
    if (mn_ == mcap_ && !grow_marked(1)) return false;
    mp_[mn_++] = v;
    return maybe_switch();
  }

  bool literals(const uint8_t* p, uint32_t len) {
    if (len == 0) return true;  // an empty stored block: no buffer needed yet
    if (bytes_phase_) {
      if (total() + len > max_output_ || (cap_ - n_ < len && !grow(len))) return false;
      std::memcpy(bp_ + n_, p, len);
      n_ += len;
      return true;
    }
    for (uint32_t i = 0; i < len; ++i)
      if (!literal(p[i])) return false;
    return true;
  }

  bool copy(uint32_t len, uint32_t dist) {
    if (dist > window_) return false;
    if (bytes_phase_) {
      if (dist > n_) return false;  // before the stream's start (or, unknown, never: see maybe_switch)
      if (total() + len > max_output_ || (cap_ - n_ < len && !grow(len))) return false;
      uint8_t* to = bp_ + n_;
      const uint8_t* from = to - dist;
      if (dist == 1) {
        std::memset(to, *from, len);
      } else if (dist >= len) {
        std::memcpy(to, from, len);
      } else if (dist >= 8) {
        for (uint32_t j = 0; j < len; j += 8) std::memcpy(to + j, from + j, std::min<uint32_t>(8, len - j));
      } else {
        for (uint32_t j = 0; j < len; ++j) to[j] = from[j];
      }
      n_ += len;
      return true;
    }
    if (mcap_ - mn_ < len && !grow_marked(len)) return false;
    uint16_t* to = mp_ + mn_;
    const int64_t src = static_cast<int64_t>(mn_) - dist;
    uint32_t j = 0;
    if (src < 0) {  // the part before the run's start: markers
      const uint32_t back = static_cast<uint32_t>(-src);
      run_.max_back = std::max(run_.max_back, back);
      for (; j < len && j < back; ++j) to[j] = static_cast<uint16_t>(kMarkerBase + kMaxWindow - (back - j));
      last_marker_end_ = mn_ + j;
    }
    const uint16_t* from = mp_ + (src + j);  // >= mp_: the copy within the run
    if (dist >= len) {
      std::memcpy(to + j, from, (len - j) * sizeof(uint16_t));
    } else {
      for (uint32_t k = j; k < len; ++k) to[k] = from[k - j];
    }
    for (uint32_t k = len; k-- > j;)  // the last marker copied, if any
      if (to[k] >= kMarkerBase) {
        last_marker_end_ = mn_ + k + 1;
        break;
      }
    mn_ += len;
    return maybe_switch();
  }

  bool in_bytes() const { return bytes_phase_; }
  // Whether the fast loops can go on (else a symbol on the generic path).
  bool room() const { return total() + kSlack < max_output_; }

  // The bytes phase's loop: symbols straight into the buffer while room for
  // a longest copy and its word-wide overrun (kSlack) is there and the
  // output limit is a copy or more away; the generic path (exact checks)
  // takes over near the limit. kMore: the generic path goes on.
  enum class Fast { kBlockEnd, kRefused, kMore };
  Fast fast(Bits& b, const Code& lit, const Code& dist) {
    for (;;) {
      // Room for one more symbol past `stop` at least, or the generic path.
      if (cap_ - n_ <= kSlack && !grow(kSlack)) return Fast::kMore;
      if (total() + kSlack >= max_output_) return Fast::kMore;
      uint8_t* const end = bp_ + cap_ - kSlack;
      const uint64_t limit = max_output_ + prefix_ - kSlack - mn_;  // n_ below it: a copy cannot pass max_output_
      uint8_t* out = bp_ + n_;
      uint8_t* const stop = std::min(end, bp_ + limit);
      while (out < stop) {
        b.refill();
        int sym = lit.decode(b);
        if (static_cast<unsigned>(sym) < 256) {
          *out++ = static_cast<uint8_t>(sym);
          // A second literal from the same refill (56 bits: 15 used at most).
          sym = lit.decode(b);
          if (static_cast<unsigned>(sym) < 256) {
            *out++ = static_cast<uint8_t>(sym);
            continue;
          }
        }
        if (sym < 0) return Fast::kRefused;
        if (sym == 256) {
          n_ = static_cast<uint64_t>(out - bp_);
          return b.over() ? Fast::kRefused : Fast::kBlockEnd;
        }
        sym -= 257;
        if (sym >= 29) return Fast::kRefused;  // 286, 287
        b.refill();  // a length's extra bits, a distance and its: 33 bits at most
        const uint32_t len = kLengthBase[sym] + b.take(kLengthExtra[sym]);
        const int ds = dist.decode(b);
        if (ds < 0 || ds >= 30) return Fast::kRefused;
        const uint32_t d = kDistBase[ds] + b.take(kDistExtra[ds]);
        const uint64_t n = static_cast<uint64_t>(out - bp_);
        if (d > window_ || d > n || b.over()) return Fast::kRefused;
        const uint8_t* from = out - d;
        if (d >= 8) {  // whole words, up to 7 bytes past the copy (the slack)
          for (uint32_t j = 0; j < len; j += 8) std::memcpy(out + j, from + j, 8);
        } else if (d == 1) {
          std::memset(out, *from, len);
        } else {
          copy_short_distance(out, d, len);
        }
        out += len;
      }
      n_ = static_cast<uint64_t>(out - bp_);
    }
  }

  // The same for the marked phase: symbols (markers among them) while
  // room is there, until no marker is left in the last window (then the
  // bytes phase: kMore, and in_bytes() is true).
  Fast fast_marked(Bits& b, const Code& lit, const Code& dist) {
    for (;;) {
      if (mcap_ - mn_ <= kSlack && !grow_marked(kSlack)) return Fast::kMore;
      if (total() + kSlack >= max_output_) return Fast::kMore;
      uint16_t* const base = mp_;
      uint16_t* out = base + mn_;
      uint16_t* const stop = std::min(base + mcap_ - kSlack, base + (max_output_ - kSlack - n_));
      while (out < stop) {
        b.refill();
        const int sym = lit.decode(b);
        if (static_cast<unsigned>(sym) < 256) {
          *out++ = static_cast<uint16_t>(sym);
        } else {
          if (sym < 0) return Fast::kRefused;
          if (sym == 256) {
            mn_ = static_cast<uint64_t>(out - base);
            return b.over() ? Fast::kRefused : Fast::kBlockEnd;
          }
          if (sym - 257 >= 29) return Fast::kRefused;  // 286, 287
          const uint32_t len = kLengthBase[sym - 257] + b.take(kLengthExtra[sym - 257]);
          const int ds = dist.decode(b);
          if (ds < 0 || ds >= 30) return Fast::kRefused;
          const uint32_t d = kDistBase[ds] + b.take(kDistExtra[ds]);
          if (d > window_ || b.over()) return Fast::kRefused;
          const uint64_t at = static_cast<uint64_t>(out - base);
          uint32_t j = 0;
          if (d > at) {  // the part before the run's start: markers
            const uint32_t back = static_cast<uint32_t>(d - at);
            run_.max_back = std::max(run_.max_back, back);
            for (; j < len && j < back; ++j) out[j] = static_cast<uint16_t>(kMarkerBase + kMaxWindow - (back - j));
            last_marker_end_ = at + j;
          }
          const uint16_t* from = out - d;
          if (d >= 4) {  // four symbols a word, up to three past the copy (the slack)
            for (uint32_t k = j; k < len; k += 4) std::memcpy(out + k, from + k, 8);
          } else {
            for (uint32_t k = j; k < len; ++k) out[k] = from[k];
          }
          for (uint32_t k = len; k-- > j;)  // the last marker copied, if any
            if (out[k] >= kMarkerBase) {
              last_marker_end_ = at + k + 1;
              break;
            }
          out += len;
        }
        const uint64_t m = static_cast<uint64_t>(out - base);
        if (m >= window_ && m - last_marker_end_ >= window_) {
          mn_ = m;
          maybe_switch();
          return Fast::kMore;
        }
      }
      mn_ = static_cast<uint64_t>(out - base);
    }
  }

  // A run not finished keeps its buffer, empty, for the next try.
  ~Output() {
    if (store_ && !run_.bytes) run_.bytes = std::move(store_);
    if (mstore_ && !run_.marked) run_.marked = std::move(mstore_);
  }
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;

  void finish() {
    run_.marked = std::move(mstore_);
    run_.marked_count = mn_;
    run_.bytes = std::move(store_);
    run_.bytes_from = prefix_;
    run_.byte_count = n_ - prefix_;
  }

 private:
  uint64_t total() const { return mn_ + n_ - prefix_; }
  static constexpr uint64_t kSlack = 258 + 8;

  bool maybe_switch() {
    if (mn_ < window_ || mn_ - last_marker_end_ < window_) return total() <= max_output_;
    // No marker in the last window: nothing later can reach one.
    if (cap_ < window_ && !grow(window_)) return false;
    for (size_t i = 0; i < window_; ++i) bp_[i] = static_cast<uint8_t>(mp_[mn_ - window_ + i]);
    n_ = window_;
    mn_ -= window_;
    bytes_phase_ = true;
    return total() <= max_output_;
  }

  bool grow(uint64_t need) {
    if (total() + need > max_output_ + 258) return false;
    const uint64_t cap = std::max<uint64_t>({cap_ * 2, n_ + need, hint_, 1 << 16});
    Mapped<uint8_t> fresh = map_array<uint8_t>(cap);
    if (n_) std::memcpy(fresh.get(), bp_, n_);
    store_ = std::move(fresh);
    bp_ = store_.get();
    cap_ = cap;
    return true;
  }

  bool grow_marked(uint64_t need) {
    if (total() + need > max_output_ + 258) return false;
    // A run that starts unknown may stay marked to its end (references
    // chained back to before its start): the hint at once.
    const uint64_t cap = std::max<uint64_t>({mcap_ * 2, mn_ + need, hint_, 1 << 16});
    Mapped<uint16_t> fresh = map_array<uint16_t>(cap);
    if (mn_) std::memcpy(fresh.get(), mp_, mn_ * sizeof(uint16_t));
    mstore_ = std::move(fresh);
    mp_ = mstore_.get();
    mcap_ = cap;
    return true;
  }

  Run& run_;
  uint32_t window_;
  uint64_t max_output_;
  uint64_t hint_;
  bool bytes_phase_ = false;
  uint64_t last_marker_end_ = 0;
  Mapped<uint8_t> store_;
  uint8_t* bp_ = nullptr;
  uint64_t n_ = 0, cap_ = 0;
  uint64_t prefix_ = 0;  // bytes before the start given as known (in bp_, not output)
  Mapped<uint16_t> mstore_;
  uint16_t* mp_ = nullptr;
  uint64_t mn_ = 0, mcap_ = 0;
};

bool decode_codes(Bits& b, const Code& lit, const Code& dist, Output& out) {
  for (;;) {
    const Output::Fast f = out.in_bytes() ? out.fast(b, lit, dist) : out.fast_marked(b, lit, dist);
    if (f != Output::Fast::kMore) return f == Output::Fast::kBlockEnd;
    if (out.in_bytes() && out.room()) continue;  // switched: the bytes' loop
    b.refill();  // a literal/length, its extra bits, a distance and its: 48 bits at most
    int sym = lit.decode(b);
    if (sym < 0) return false;
    if (sym < 256) {
      // Past the end the bits read as zeros, which may well be a literal.
      if (b.over() || !out.literal(static_cast<uint8_t>(sym))) return false;
      continue;
    }
    if (sym == 256) return !b.over();
    sym -= 257;
    if (sym >= 29) return false;  // 286, 287
    const uint32_t len = kLengthBase[sym] + b.take(kLengthExtra[sym]);
    const int ds = dist.decode(b);
    if (ds < 0 || ds >= 30) return false;
    const uint32_t d = kDistBase[ds] + b.take(kDistExtra[ds]);
    if (b.over() || !out.copy(len, d)) return false;
  }
}

}  // namespace

void Unmap::operator()(void* p) const {
  if (p) munmap(p, bytes);
}

void* map_bytes(size_t bytes) {
  void* p = mmap(nullptr, std::max<size_t>(bytes, 1), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  // Large arrays are each touched once, front to back: 2 MiB faults where
  // the kernel gives huge pages, not 4 KiB ones (advice: ignored where THP
  // is off, and for arrays under 2 MiB).
#ifdef MADV_HUGEPAGE
  madvise(p, std::max<size_t>(bytes, 1), MADV_HUGEPAGE);
#endif
  return p;
}

bool plausible_block_start(const uint8_t* data, size_t size, uint64_t bit) {
  Bits b(data, size, bit);
  b.skip(1);
  const uint32_t type = b.take(2);
  if (type == 0) {
    b.align();
    if (b.bytes_left() < 4) return false;
    const uint8_t* p = b.bytes_at();
    const uint32_t len = p[0] | uint32_t{p[1]} << 8, nlen = p[2] | uint32_t{p[3]} << 8;
    return len == (~nlen & 0xffffu) && b.bytes_left() - 4 >= len;
  }
  if (type != 2) return false;
  Code lit, dist;
  return read_dynamic(b, lit, dist);
}

Run decode_run(const uint8_t* data, size_t size, uint64_t start_bit, uint64_t stop_bit, uint32_t window,
               bool known_start, uint64_t max_output, uint64_t size_hint, Mapped<uint8_t> buffer,
               Mapped<uint16_t> marked, Before before) {
  Run r;
  r.start_bit = start_bit;
  Bits b(data, size, start_bit);
  Output out(r, std::min(window, kMaxWindow), known_start, max_output, std::min(size_hint, max_output + 258),
             std::move(buffer), std::move(marked), before);
  Code lit, dist;
  for (;;) {
    const bool final = b.get(1) != 0;
    const uint32_t type = b.get(2);
    bool ok = false;
    if (type == 0) {
      b.align();
      if (b.bytes_left() < 4) return r;
      const uint8_t* p = b.bytes_at();
      const uint32_t len = p[0] | uint32_t{p[1]} << 8, nlen = p[2] | uint32_t{p[3]} << 8;
      if (len != (~nlen & 0xffffu) || b.bytes_left() - 4 < len) return r;
      if (!out.literals(p + 4, len)) return r;
      b.seek(b.pos() + (4 + uint64_t{len}) * 8);
      ok = true;
    } else if (type == 1) {
      ok = decode_codes(b, fixed_codes().lit, fixed_codes().dist, out);
    } else if (type == 2) {
      ok = read_dynamic(b, lit, dist) && decode_codes(b, lit, dist, out);
    }
    if (!ok || b.over()) return r;
    ++r.blocks;
    if (final) {
      r.final = true;
      break;
    }
    if (b.pos() >= stop_bit) break;
  }
  out.finish();
  r.end_bit = b.pos();
  r.ok = true;
  return r;
}

}  // namespace imgstat::deflate
