// XXH3-128 cut into pieces (common/xxh3_long.hpp), as the GPU computes the
// pixel hash: the pieces' additions made in any order, chained and finished,
// equal xxhash's own XXH3_128bits for every length from the first long one
// past several blocks and at random long lengths; and the pixel hash's input
// read through PixelHashInput (a header, then samples in another channel
// order) gives the CPU engine's pixel hash.
#include <gtest/gtest.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "common/hashes.hpp"
#include "common/xxh3_long.hpp"

namespace imgstat {
namespace {

// The GPU's order of work: every piece's additions (here last piece
// first), then the host's chain and finish.
template <class Read8>
XXH128_hash_t by_pieces(const Read8& read8, uint64_t len) {
  const uint8_t* secret = xxh3_default_secret();
  const uint64_t pieces = xxh3_pieces(len);
  std::vector<uint64_t> adds(pieces * kXxh3Lanes);
  for (uint64_t i = adds.size(); i-- > 0;) adds[i] = xxh3_piece_add(read8, len, secret, i / kXxh3Lanes, i % kXxh3Lanes);
  XXH128_hash_t h;
  xxh3_from_adds(adds.data(), len, secret, &h.low64, &h.high64);
  return h;
}

TEST(Xxh3Long, PiecesGiveXxhashsHashAtEveryLength) {
  std::mt19937_64 rng(4242);
  std::vector<uint8_t> bytes(3 * kXxh3Block + 200);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  const auto read8 = [&](uint64_t at) { return xxh3_le64(bytes.data() + at); };
  int wrong = 0;
  for (uint64_t len = kXxh3LongAfter + 1; len <= bytes.size(); ++len) {
    const XXH128_hash_t want = XXH3_128bits(bytes.data(), len), got = by_pieces(read8, len);
    if (want.low64 != got.low64 || want.high64 != got.high64) ++wrong;
  }
  EXPECT_EQ(wrong, 0);
  for (int round = 0; round < 40; ++round) {
    const uint64_t len = kXxh3LongAfter + 1 + rng() % (uint64_t{3} << 20);
    std::vector<uint8_t> big(len);
    for (uint8_t& b : big) b = static_cast<uint8_t>(rng() % (round % 2 ? 256 : 3));
    const auto big8 = [&](uint64_t at) { return xxh3_le64(big.data() + at); };
    const XXH128_hash_t want = XXH3_128bits(big.data(), len), got = by_pieces(big8, len);
    EXPECT_EQ(want.low64, got.low64) << len;
    EXPECT_EQ(want.high64, got.high64) << len;
  }
}

TEST(Xxh3Long, PixelHashInputIsTheCpuEnginesPixelHash) {
  std::mt19937_64 rng(99);
  int checked = 0;
  for (uint32_t c : {1u, 3u})
    for (uint64_t w : {2u, 5u, 17u, 64u, 341u})
      for (uint64_t h : {2u, 3u, 29u, 70u}) {
        std::vector<uint8_t> px(w * h * c);
        for (uint8_t& b : px) b = static_cast<uint8_t>(rng());
        const Layout l{w, h, c, SampleType::kUint8};
        const std::vector<uint8_t> header = pixel_hash_header(l);
        const uint64_t len = header.size() + px.size();
        if (len <= kXxh3LongAfter) continue;
        static const uint32_t kOrders[3][3] = {{0, 1, 2}, {2, 1, 0}, {1, 2, 0}};
        for (const auto& rgb : kOrders) {
          if (c == 1 && rgb[0] != 0) continue;
          SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h) + "x" + std::to_string(c) + " R at " +
                       std::to_string(rgb[0]));
          PixelHashInput in;
          in.header = header.data(), in.header_bytes = static_cast<uint32_t>(header.size());
          in.px = px.data(), in.sample_bytes = px.size(), in.channels = c;
          if (c == 3) in.order0 = rgb[0], in.order1 = rgb[1], in.order2 = rgb[2];
          const XXH128_hash_t got = by_pieces(in, len);
          uint8_t got_bytes[16], want[16];
          pixel_hash_bytes(got.low64, got.high64, got_bytes);
          pixel_hash(ImageView{px.data(), l}, rgb, want);
          EXPECT_EQ(std::memcmp(got_bytes, want, 16), 0);
          ++checked;
        }
      }
  EXPECT_GT(checked, 40);
}

}  // namespace
}  // namespace imgstat
