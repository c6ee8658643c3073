// XXH3-128 (xxHash 0.8, default secret, seed 0) of an input longer than
// kXxh3LongAfter bytes, cut into pieces that can be summed apart and in any
// order: within each 1,024-byte block of the input, XXH3 only adds to its
// eight accumulators (modulo 2^64); the blocks' scrambles are the one
// sequential part. So an engine with many threads (the GPU) sums every
// block's additions at once (xxh3_piece_add), and the host chains them
// (xxh3_from_adds: a few thousand steps for a photo). The same functions, run one after the other on the host,
// give xxhash's own XXH3_128bits: tests/xxh3_long_test.cpp holds them to it.
//
// The input is read through `read8(offset)`: its eight bytes from `offset`,
// little-endian, so that it need not lie in memory as one run of bytes (the
// pixel hash's header before the samples, samples in another channel order).
#pragma once

#include <cstdint>

#include "imgstat/types.hpp"

namespace imgstat {

constexpr uint64_t kXxh3LongAfter = 240;  // longer inputs take the pieces' way
constexpr uint32_t kXxh3SecretSize = 192;
constexpr uint32_t kXxh3Stripe = 64;
constexpr uint32_t kXxh3StripesPerBlock = (kXxh3SecretSize - kXxh3Stripe) / 8;
constexpr uint32_t kXxh3Block = kXxh3Stripe * kXxh3StripesPerBlock;
constexpr int kXxh3Lanes = 8;

// Pieces of a long input: its full blocks, then one for what follows them
// (the last block's whole stripes and the input's last stripe).
IMGSTAT_HD uint64_t xxh3_full_blocks(uint64_t len) { return (len - 1) / kXxh3Block; }
IMGSTAT_HD uint64_t xxh3_pieces(uint64_t len) { return xxh3_full_blocks(len) + 1; }

IMGSTAT_HD uint64_t xxh3_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

IMGSTAT_HD uint64_t xxh3_init_acc(int lane) {
  constexpr uint64_t kInit[kXxh3Lanes] = {0xC2B2AE3DULL,         0x9E3779B185EBCA87ULL, 0xC2B2AE3D27D4EB4FULL,
                                          0x165667B19E3779F9ULL, 0x85EBCA77C2B2AE63ULL, 0x85EBCA77ULL,
                                          0x27D4EB2F165667C5ULL, 0x9E3779B1ULL};
  return kInit[lane];
}

// What one stripe adds to accumulator `lane`: its own lane's keyed product
// and the neighbouring lane's value (XXH3's accumulate_512).
template <class Read8>
IMGSTAT_HD uint64_t xxh3_stripe_add(const Read8& read8, uint64_t at, const uint8_t* key, int lane) {
  const uint64_t mixed = read8(at + 8 * lane) ^ xxh3_le64(key + 8 * lane);
  return (mixed & 0xFFFFFFFFULL) * (mixed >> 32) + read8(at + 8 * (lane ^ 1));
}

// Piece `piece`'s sum of additions to accumulator `lane`.
template <class Read8>
IMGSTAT_HD uint64_t xxh3_piece_add(const Read8& read8, uint64_t len, const uint8_t* secret, uint64_t piece, int lane) {
  const uint64_t blocks = xxh3_full_blocks(len), at = piece * kXxh3Block;
  const uint32_t stripes =
      piece < blocks ? kXxh3StripesPerBlock : static_cast<uint32_t>((len - 1 - blocks * kXxh3Block) / kXxh3Stripe);
  uint64_t sum = 0;
  for (uint32_t s = 0; s < stripes; ++s) sum += xxh3_stripe_add(read8, at + s * kXxh3Stripe, secret + 8 * s, lane);
  if (piece == blocks)  // the input's last stripe, keyed apart
    sum += xxh3_stripe_add(read8, len - kXxh3Stripe, secret + kXxh3SecretSize - kXxh3Stripe - 7, lane);
  return sum;
}

// Accumulator `lane` after a full block's additions `add`, then its
// scramble with `key` (xxh3_scramble_key); the last piece's are only added.
IMGSTAT_HD uint64_t xxh3_scramble_key(const uint8_t* secret, int lane) {
  return xxh3_le64(secret + kXxh3SecretSize - kXxh3Stripe + 8 * lane);
}
IMGSTAT_HD uint64_t xxh3_chain_step(uint64_t acc, uint64_t add, uint64_t key) {
  acc += add;
  acc ^= acc >> 47;
  acc ^= key;
  return acc * 0x9E3779B1ULL;
}

IMGSTAT_HD uint64_t xxh3_mul_fold(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return (a * b) ^ __umul64hi(a, b);
#else
  const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
#endif
}

IMGSTAT_HD uint64_t xxh3_merge(const uint64_t* acc, const uint8_t* key, uint64_t start) {
  uint64_t h = start;
  for (int i = 0; i < 4; ++i)
    h += xxh3_mul_fold(acc[2 * i] ^ xxh3_le64(key + 16 * i), acc[2 * i + 1] ^ xxh3_le64(key + 16 * i + 8));
  h ^= h >> 37;
  h *= 0x165667919E3779F9ULL;
  return h ^ (h >> 32);
}

// The hash from the chained accumulators: its low and high 64 bits.
IMGSTAT_HD void xxh3_finish(const uint64_t* acc, uint64_t len, const uint8_t* secret, uint64_t* low, uint64_t* high) {
  *low = xxh3_merge(acc, secret + 11, len * 0x9E3779B185EBCA87ULL);
  *high = xxh3_merge(acc, secret + kXxh3SecretSize - 64 - 11, ~(len * 0xC2B2AE3D27D4EB4FULL));
}

// The hash from every piece's additions (xxh3_pieces(len) x kXxh3Lanes,
// piece by piece): each accumulator's chain, then the finish.
inline void xxh3_from_adds(const uint64_t* adds, uint64_t len, const uint8_t* secret, uint64_t* low, uint64_t* high) {
  const uint64_t blocks = xxh3_full_blocks(len);
  uint64_t acc[kXxh3Lanes];
  for (int lane = 0; lane < kXxh3Lanes; ++lane) {
    const uint64_t key = xxh3_scramble_key(secret, lane);
    uint64_t a = xxh3_init_acc(lane);
    for (uint64_t b = 0; b < blocks; ++b) a = xxh3_chain_step(a, adds[b * kXxh3Lanes + lane], key);
    acc[lane] = a + adds[blocks * kXxh3Lanes + lane];
  }
  xxh3_finish(acc, len, secret, low, high);
}

// The pixel hash's input (common/hashes.hpp) for a packed image of 8-bit
// samples, one channel or three: its header, then the samples with the
// channels in the reported order (order[k]: the stored channel reported k-th).
struct PixelHashInput {
  const uint8_t* header = nullptr;
  uint32_t header_bytes = 0;
  const uint8_t* px = nullptr;
  uint64_t sample_bytes = 0;
  uint32_t channels = 1;
  uint32_t order0 = 0, order1 = 1, order2 = 2;

  IMGSTAT_HD uint64_t operator()(uint64_t at) const {
    uint64_t v = 0;
    uint64_t pixel = 0;  // the sample's pixel's first byte and its place in the reported order
    uint32_t k = 0;
    bool in_samples = false;
    for (int j = 0; j < 8; ++j) {
      const uint64_t p = at + j;
      uint8_t b;
      if (p < header_bytes) {
        b = header[p];
      } else {
        if (!in_samples) {
          const uint64_t t = p - header_bytes;
          k = channels == 1 ? 0 : static_cast<uint32_t>(t % 3);
          pixel = t - k, in_samples = true;
        }
        b = channels == 1 ? px[pixel] : px[pixel + (k == 0 ? order0 : k == 1 ? order1 : order2)];
        if (channels == 1 || k == 2)
          pixel += channels, k = 0;
        else
          ++k;
      }
      v |= static_cast<uint64_t>(b) << (8 * j);
    }
    return v;
  }
};

}  // namespace imgstat
