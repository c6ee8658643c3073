// The entropy-coded data of a baseline Huffman JPEG, checked as libjpeg-turbo
// decodes it, in pieces that run in parallel: the same functions serve the
// host (tests, fuzzing) and the GPU (nvjpeg/verify.cu).
//
// The data (stuffing removed, one segment per restart interval) is cut into
// subsequences of kSubsequenceBytes. Each is decoded from a guessed state;
// Huffman codes resynchronize within a few codes (Klein and Wiseman 2003),
// so a decode started from the previous subsequence's exit state soon runs
// into the same code boundaries. Rounds redo every subsequence whose entry
// differs from its predecessor's exit until none does (Weissenberger and
// Schmidt 2021, arXiv 2111.09219); the first subsequence of a segment starts
// from a known state, so the chain is exact from there.
//
// What libjpeg's slow path does, and so what is checked here: a code not in
// the table consumes 17 bits and is warned about ("bad Huffman code"); a
// code or value that needs a bit past the segment's end is "premature end of
// data segment"; a run past coefficient 63 ends the block silently.
#pragma once

#include <cstdint>

#include "imgstat/types.hpp"  // IMGSTAT_HD

namespace imgstat::jpeg {

// Tuning: bytes of entropy-coded data per subsequence (one GPU thread each).
constexpr uint32_t kSubsequenceBytes = 256;
// Bytes decoded before a subsequence's start, from a guessed state, to
// arrive at its start most likely in step with the true decode.
constexpr uint32_t kWarmupBytes = 64;
constexpr int kMaxBlocksInMcu = 10;

// libjpeg's d_derived_tbl, less what its fast path needs.
struct HuffTable {
  int32_t maxcode[18];    // [l]: the largest code of length l, -1 if none; [17] a sentinel
  int32_t valoffset[18];  // huffval index = code + valoffset[l]
  uint16_t lookup[256];   // codes of up to 8 bits by their next 8 bits: (length << 8) | symbol; 0: longer
  uint8_t huffval[256];
};

struct EntropyTables {
  HuffTable dc[2], ac[2];
  uint32_t blocks_in_mcu = 0;
  uint8_t dc_of_block[kMaxBlocksInMcu] = {}, ac_of_block[kMaxBlocksInMcu] = {};
};

// A decoder's state between two codes, in one word so that a GPU thread
// reads it whole: bit position (40 bits), block of the MCU (4), coefficient
// index (7, 0 = the DC code is next), and a flag for a decode that ran out.
using State = uint64_t;
constexpr State kDead = State{1} << 63;
IMGSTAT_HD State make_state(uint64_t bit, uint32_t block, uint32_t k) {
  return bit | (uint64_t{block} << 40) | (uint64_t{k} << 44);
}
IMGSTAT_HD uint64_t state_bit(State s) { return s & ((uint64_t{1} << 40) - 1); }

// One subsequence's decode.
struct Record {
  State entry = 0;
  State exit = 0;             // the first code boundary at or past its end; kDead when the data ran out
  uint32_t mcus = 0;          // MCUs completed in it
  int32_t first_bad = -1;     // MCUs completed before its first bad code, or -1
  int64_t last_mcu_end = -1;  // bit where its last completed MCU ended, or -1
};

// The 32 bits from bit p on, zeros past end_bits (as libjpeg pads).
IMGSTAT_HD uint32_t peek32(const uint8_t* data, uint64_t end_bits, uint64_t p) {
  const uint64_t end_byte = (end_bits + 7) >> 3;
  uint64_t byte = p >> 3;
  uint64_t v = 0;
  for (int i = 0; i < 5; ++i, ++byte) v = (v << 8) | (byte < end_byte ? data[byte] : 0u);
  return static_cast<uint32_t>(v >> (8 - (p & 7)));
}

// Symbol of the code at the top of bits16, its length in *len; -1 with
// *len 17 for a code not in the table (libjpeg's jpeg_huff_decode).
IMGSTAT_HD int decode_symbol(const HuffTable& t, uint32_t bits16, int* len) {
  const uint32_t hit = t.lookup[bits16 >> 8];
  if (hit) {
    *len = static_cast<int>(hit >> 8);
    return static_cast<int>(hit & 0xff);
  }
  for (int l = 9; l <= 16; ++l) {
    const int32_t code = static_cast<int32_t>(bits16 >> (16 - l));
    if (code <= t.maxcode[l]) {
      *len = l;
      return t.huffval[(code + t.valoffset[l]) & 0xff];
    }
  }
  *len = 17;
  return -1;
}

// Decodes from entry while the position is before limit_bits; the segment
// ends at seg_end_bits (a code needing bits past it ran out).
IMGSTAT_HD Record decode_span(const EntropyTables& t, const uint8_t* data, uint64_t seg_end_bits, uint64_t limit_bits,
                              State entry) {
  Record r;
  r.entry = entry;
  if (entry & kDead) {
    r.exit = kDead;
    return r;
  }
  uint64_t p = state_bit(entry);
  uint32_t block = static_cast<uint32_t>((entry >> 40) & 0xf);
  uint32_t k = static_cast<uint32_t>((entry >> 44) & 0x7f);
  if (block >= t.blocks_in_mcu || k > 63) {  // no state a decode can be in
    block = 0;
    k = 0;
  }
  while (p < limit_bits) {
    const uint32_t bits = peek32(data, seg_end_bits, p);
    const HuffTable& h = k == 0 ? t.dc[t.dc_of_block[block]] : t.ac[t.ac_of_block[block]];
    int len = 0;
    int sym = decode_symbol(h, bits >> 16, &len);
    if (sym < 0) {
      if (r.first_bad < 0) r.first_bad = static_cast<int32_t>(r.mcus);
      sym = 0;  // libjpeg's "safest result"
    }
    const uint32_t s = static_cast<uint32_t>(sym) & 15;
    if (p + len + s > seg_end_bits) {
      r.exit = kDead;
      return r;
    }
    p += len + s;
    if (k == 0) {
      k = 1;
    } else if (s != 0) {
      k += (static_cast<uint32_t>(sym) >> 4) + 1;
    } else if ((sym >> 4) == 15) {
      k += 16;
    } else {
      k = 64;
    }
    if (k >= 64) {
      k = 0;
      if (++block == t.blocks_in_mcu) {
        block = 0;
        ++r.mcus;
        r.last_mcu_end = static_cast<int64_t>(p);
      }
    }
  }
  r.exit = make_state(p, block, k);
  return r;
}

// Where subsequence j starts and how far it decodes, given the segment it is
// in: [first_bit, limit_bits) within [seg_start_bits, seg_end_bits).
struct Span {
  uint64_t seg_start_bits, first_bit, limit_bits, seg_end_bits;
  bool first_of_segment;
};

// seg_start[s]: the segment's first byte (of the data without stuffing),
// seg_start[segments] the end; sub_first[s]: its first subsequence index,
// sub_first[segments] the number of subsequences.
IMGSTAT_HD Span span_of(uint64_t j, const uint64_t* seg_start, const uint64_t* sub_first, uint32_t segments) {
  uint32_t lo = 0, hi = segments;  // the last s with sub_first[s] <= j
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (sub_first[mid] <= j) lo = mid; else hi = mid;
  }
  const uint64_t i = j - sub_first[lo];
  const uint64_t start = seg_start[lo] + i * kSubsequenceBytes;
  const uint64_t end = seg_start[lo + 1];
  const bool last = j + 1 == sub_first[lo + 1];
  return Span{seg_start[lo] * 8, start * 8, last ? end * 8 : (start + kSubsequenceBytes) * 8, end * 8, i == 0};
}

// The first decode of a subsequence: a segment starts at a known state;
// elsewhere a warm-up from a guess (the commonest code, a luma AC code)
// before the start gives the entry.
IMGSTAT_HD Record first_decode(const EntropyTables& t, const uint8_t* data, const Span& s) {
  const uint64_t seg_start_bits = s.seg_start_bits;
  State entry = make_state(s.first_bit, 0, 0);
  if (!s.first_of_segment) {
    const uint64_t back = uint64_t{kWarmupBytes} * 8;
    const uint64_t from = s.first_bit - seg_start_bits > back ? s.first_bit - back : seg_start_bits;
    entry = decode_span(t, data, s.seg_end_bits, s.first_bit, make_state(from, 0, 1)).exit;
  }
  return decode_span(t, data, s.seg_end_bits, s.limit_bits, entry);
}

}  // namespace imgstat::jpeg
