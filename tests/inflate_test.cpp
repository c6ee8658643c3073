// The parallel inflater against zlib: every stream zlib's deflate writes
// (levels 0-9, every strategy, every window, flushes that leave stored and
// empty blocks) inflates to the same bytes, cut into chunks of any size and
// decoded by any number of tasks; and nothing zlib refuses, nor anything
// whose answer zlib would make depend on its caller, is ever vouched for.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "decode/inflate/deflate.hpp"
#include "decode/inflate/parallel_inflate.hpp"

namespace imgstat {
namespace {

using Bytes = std::vector<uint8_t>;

// Data of several kinds: noise, PNG-like rows (smooth with noise), text-like
// symbols, long runs, and a mix; n bytes.
Bytes make_data(int kind, size_t n, std::mt19937& rng) {
  Bytes d(n);
  switch (kind) {
    case 0:
      for (auto& b : d) b = static_cast<uint8_t>(rng());
      break;
    case 1:
      for (size_t i = 0; i < n; ++i) d[i] = static_cast<uint8_t>((i % 997) / 7 + (rng() % 5));
      break;
    case 2: {
      const char* words[] = {"inflate ", "deflate ", "window ", "marker ", "block ", "huffman ", "zlib "};
      std::string s;
      while (s.size() < n) s += words[rng() % 7];
      std::memcpy(d.data(), s.data(), n);
      break;
    }
    case 3:
      for (size_t i = 0; i < n; ++i) d[i] = static_cast<uint8_t>((i / 4096) % 3 == 0 ? 0 : (i / 4096) & 0xff);
      break;
    default:
      for (size_t i = 0; i < n; ++i) d[i] = static_cast<uint8_t>(i % 3 == 0 ? rng() : (i / 31) & 0xff);
  }
  return d;
}

Bytes compress(const Bytes& in, int level, int strategy, int window_bits, int flush_every, std::mt19937& rng) {
  z_stream z{};
  const int init = deflateInit2(&z, level, Z_DEFLATED, window_bits, 8, strategy);
  EXPECT_EQ(init, Z_OK);
  Bytes out;
  uint8_t buf[1 << 16];
  auto drain = [&](int flush) {
    do {
      z.next_out = buf;
      z.avail_out = sizeof buf;
      EXPECT_NE(::deflate(&z, flush), Z_STREAM_ERROR);
      out.insert(out.end(), buf, buf + (sizeof buf - z.avail_out));
    } while (z.avail_out == 0);
  };
  size_t at = 0;
  do {
    const size_t step = flush_every ? 1 + rng() % flush_every : in.size();
    const size_t k = std::min(step, in.size() - at);
    z.next_in = const_cast<Bytef*>(in.data() + at);
    z.avail_in = static_cast<uInt>(k);
    at += k;
    drain(at == in.size() ? Z_FINISH : flush_every ? (rng() % 2 ? Z_SYNC_FLUSH : Z_FULL_FLUSH) : Z_NO_FLUSH);
  } while (at < in.size());
  deflateEnd(&z);
  return out;
}

// zlib's own answer, in one call with room for more than expected.
struct ZlibAnswer {
  bool ended = false;
  Bytes out;
  bool rest_unread = false;
};
ZlibAnswer zlib_inflate(const Bytes& in, size_t expected) {
  ZlibAnswer a;
  z_stream z{};
  inflateInit2(&z, 0);
  a.out.resize(expected + 1);
  z.next_in = const_cast<Bytef*>(in.data());
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = a.out.data();
  z.avail_out = static_cast<uInt>(a.out.size());
  a.ended = inflate(&z, Z_FINISH) == Z_STREAM_END;
  a.rest_unread = z.avail_in != 0;
  a.out.resize(z.total_out);
  inflateEnd(&z);
  return a;
}

struct Ours {
  bool vouched = false;
  Bytes out;
};
Ours ours(const Bytes& in, uint64_t expected, uint64_t chunk, uint32_t tasks, uint32_t ratio = 1 << 20) {
  Ours o;
  ParallelInflateOptions opt;
  opt.chunk_bytes = chunk;
  opt.tasks = tasks;
  opt.max_ratio = ratio;
  o.vouched = parallel_inflate(in.data(), in.size(), expected, [&](const uint8_t* p, size_t n) {
    o.out.insert(o.out.end(), p, p + n);
    return true;
  }, opt);
  return o;
}

TEST(ParallelInflate, EveryStreamZlibWritesInflatesToItsBytes) {
  std::mt19937 rng(5);
  const int strategies[] = {Z_DEFAULT_STRATEGY, Z_FILTERED, Z_HUFFMAN_ONLY, Z_RLE, Z_FIXED};
  int streams = 0;
  for (int kind = 0; kind < 5; ++kind)
    for (int level = 0; level <= 9; ++level)
      for (int strategy : strategies) {
        if (level == 0 && strategy != Z_DEFAULT_STRATEGY) continue;
        const size_t n = 20000 + rng() % 80000;
        const Bytes data = make_data(kind, n, rng);
        const int window_bits = 9 + static_cast<int>(rng() % 7);
        const int flush_every = rng() % 3 == 0 ? static_cast<int>(1000 + rng() % 30000) : 0;
        const Bytes z = compress(data, level, strategy, window_bits, flush_every, rng);
        ASSERT_TRUE(zlib_inflate(z, data.size()).out == data);
        for (uint64_t chunk : {uint64_t{1024}, uint64_t{3001}, uint64_t{65536}})
          for (uint32_t tasks : {1u, 3u, 8u}) {
            SCOPED_TRACE("kind " + std::to_string(kind) + " level " + std::to_string(level) + " strategy " +
                         std::to_string(strategy) + " window " + std::to_string(window_bits) + " flush " +
                         std::to_string(flush_every) + " chunk " + std::to_string(chunk) + " tasks " +
                         std::to_string(tasks) + ", " + std::to_string(z.size()) + " compressed bytes");
            const Ours o = ours(z, data.size(), chunk, tasks);
            ASSERT_TRUE(o.vouched);
            ASSERT_TRUE(o.out == data);
          }
        ++streams;
      }
  EXPECT_GT(streams, 200);
}

// A flush before any data (an empty stored block first: the fuzzer's find),
// and rows that repeat the row before with a little noise, as an unfiltered
// photo does: every reference reaches a row back, so a run that starts
// without its window stays marked to its end and is resolved whole.
TEST(ParallelInflate, EmptyFirstBlocksAndRunsMarkedToTheirEnd) {
  std::mt19937 rng(17);
  const size_t row = 24001, rows = 120;
  Bytes data(row * rows);
  for (size_t i = 0; i < row; ++i) data[i] = static_cast<uint8_t>(rng());
  for (size_t i = row; i < data.size(); ++i) data[i] = static_cast<uint8_t>(data[i - row] + (rng() % 16 == 0 ? 1 : 0));
  for (int level : {1, 6, 9}) {
    z_stream z{};
    ASSERT_EQ(deflateInit(&z, level), Z_OK);
    Bytes out(deflateBound(&z, data.size()) + 64);
    z.next_out = out.data();
    z.avail_out = static_cast<uInt>(out.size());
    ASSERT_EQ(::deflate(&z, Z_SYNC_FLUSH), Z_OK);  // nothing in yet: an empty stored block
    z.next_in = data.data();
    z.avail_in = static_cast<uInt>(data.size());
    ASSERT_EQ(::deflate(&z, Z_FINISH), Z_STREAM_END);
    out.resize(z.total_out);
    deflateEnd(&z);
    ASSERT_TRUE(zlib_inflate(out, data.size()).out == data);
    for (uint32_t tasks : {1u, 2u, 7u}) {
      SCOPED_TRACE("level " + std::to_string(level) + " tasks " + std::to_string(tasks));
      const Ours o = ours(out, data.size(), 16 << 10, tasks);
      ASSERT_TRUE(o.vouched);
      ASSERT_TRUE(o.out == data);
    }
  }
}

TEST(ParallelInflate, TheWholeOutputOrNothingElse) {
  std::mt19937 rng(7);
  const Bytes data = make_data(1, 300000, rng);
  const Bytes z = compress(data, 6, Z_DEFAULT_STRATEGY, 15, 0, rng);
  EXPECT_TRUE(ours(z, data.size(), 4096, 4).vouched);
  EXPECT_FALSE(ours(z, data.size() - 1, 4096, 4).vouched);  // more output than expected
  EXPECT_FALSE(ours(z, data.size() + 1, 4096, 4).vouched);  // less
  Bytes trailing = z;
  trailing.push_back(0);
  EXPECT_FALSE(ours(trailing, data.size(), 4096, 4).vouched);  // bytes after the stream
  Bytes bad_sum = z;
  bad_sum.back() ^= 1;
  EXPECT_FALSE(ours(bad_sum, data.size(), 4096, 4).vouched);  // Adler-32
  Bytes preset = z;
  preset[1] |= 0x20;  // FDICT, the header check then wrong too
  EXPECT_FALSE(ours(preset, data.size(), 4096, 4).vouched);
  // A header naming a smaller window than the data's distances use: the
  // parallel decoder refuses it, and zlib answers from the first block on.
  Bytes small_window = z;
  small_window[0] = static_cast<uint8_t>((small_window[0] & 0x0f) | (1 << 4));  // 512 bytes
  small_window[1] = static_cast<uint8_t>(small_window[1] & 0xe0);
  small_window[1] = static_cast<uint8_t>(small_window[1] + (31 - (small_window[0] * 256 + small_window[1]) % 31) % 31);
  const Ours sw = ours(small_window, data.size(), 4096, 4);
  const ZlibAnswer zw = zlib_inflate(small_window, data.size());
  EXPECT_EQ(sw.vouched, zw.ended && !zw.rest_unread && zw.out.size() == data.size());
  if (sw.vouched) EXPECT_TRUE(sw.out == zw.out);
  // A chunk's output beyond its ratio: zlib inflates the rest, from where
  // the parallel decoder stopped (the first chunk here), to the same bytes.
  const Bytes zeros(1 << 20, 0);
  const Bytes zz = compress(zeros, 9, Z_DEFAULT_STRATEGY, 15, 0, rng);
  for (uint32_t ratio : {32u, 1u << 20}) {
    const Ours o = ours(zz, zeros.size(), 1024, 2, ratio);
    EXPECT_TRUE(o.vouched);
    EXPECT_TRUE(o.out == zeros);
  }
  // Damage in the middle of a long stream: the chunks before it go out,
  // zlib takes over at the last block boundary before it and refuses.
  const Bytes big = make_data(4, 2000000, rng);
  Bytes bz = compress(big, 6, Z_DEFAULT_STRATEGY, 15, 0, rng);
  bz[bz.size() * 2 / 3] ^= 0x55;
  const Ours broken = ours(bz, big.size(), 16384, 4);
  const ZlibAnswer zb = zlib_inflate(bz, big.size());
  EXPECT_FALSE(broken.vouched);
  EXPECT_FALSE(zb.ended && zb.out == big);
  EXPECT_GT(broken.out.size(), big.size() / 2);  // what came before the damage went out
  EXPECT_TRUE(std::equal(broken.out.begin(), broken.out.begin() + static_cast<long>(big.size() / 2), big.begin()));
}

// Damage anywhere: whatever is vouched for, zlib inflates to the same bytes,
// ends the stream there and reads nothing after it; and what zlib takes in
// one call, this takes (its own decoder and zlib's continuation together).
TEST(ParallelInflate, NothingZlibRefusesIsVouchedFor) {
  std::mt19937 rng(11);
  int vouched = 0, refused = 0, zlib_took = 0;
  for (int i = 0; i < 1500; ++i) {
    const Bytes data = make_data(static_cast<int>(rng() % 5), 2000 + rng() % 40000, rng);
    Bytes z = compress(data, static_cast<int>(rng() % 10), rng() % 4 == 0 ? Z_FIXED : Z_DEFAULT_STRATEGY,
                       9 + static_cast<int>(rng() % 7), rng() % 2 ? 3000 : 0, rng);
    switch (rng() % 4) {
      case 0: z[2 + rng() % (z.size() - 2)] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
      case 1: z.resize(2 + rng() % (z.size() - 2)); break;
      case 2:
        for (int k = 0; k < 8; ++k) z[rng() % z.size()] = static_cast<uint8_t>(rng());
        break;
      default: z[2 + rng() % std::min<size_t>(z.size() - 2, 40)] ^= static_cast<uint8_t>(rng());  // headers
    }
    const uint64_t expected = data.size();
    const Ours o = ours(z, expected, 512 + rng() % 8000, 1 + rng() % 6);
    const ZlibAnswer a = zlib_inflate(z, expected);
    if (a.ended && !a.rest_unread && a.out.size() == expected) ++zlib_took;
    if (o.vouched) {
      ++vouched;
      ASSERT_TRUE(a.ended && !a.rest_unread) << "vouched for a stream zlib refuses, case " << i;
      ASSERT_TRUE(a.out == o.out) << "case " << i;
      ASSERT_EQ(o.out.size(), expected);
    } else {
      ++refused;
    }
  }
  EXPECT_GT(refused, 1000);  // most damage is refused
  EXPECT_EQ(vouched, zlib_took);
}

TEST(Deflate, RunsFromAnyBlockStartResolveFromTheWindow) {
  std::mt19937 rng(13);
  const Bytes data = make_data(4, 400000, rng);
  const Bytes z = compress(data, 6, Z_DEFAULT_STRATEGY, 15, 0, rng);
  // The block boundaries, from a run from the start.
  std::vector<uint64_t> starts;
  uint64_t bit = 16;
  deflate::Run whole;
  for (;;) {
    deflate::Run r = deflate::decode_run(z.data(), z.size() - 4, bit, bit + 1, 32768, bit == 16, data.size());
    ASSERT_TRUE(r.ok);
    starts.push_back(bit);
    bit = r.end_bit;
    if (r.final) break;
  }
  ASSERT_GT(starts.size(), 3u);
  // From a later block: markers stand for the bytes before it, and the
  // farthest one reaches no further than the window.
  const uint64_t from = starts[starts.size() / 2];
  const deflate::Run r = deflate::decode_run(z.data(), z.size() - 4, from, ~uint64_t{0}, 32768, false, data.size());
  ASSERT_TRUE(r.ok && r.final);
  EXPECT_GT(r.max_back, 0u);
  EXPECT_LE(r.max_back, 32768u);
  const size_t before = data.size() - r.size();
  for (size_t i = 0; i < r.marked_count; ++i) {
    const uint16_t v = r.marked[i];
    const uint8_t want = data[before + i];
    if (v < deflate::kMarkerBase)
      ASSERT_EQ(v, want) << i;
    else
      ASSERT_EQ(data[before - (deflate::kMaxWindow - (v - deflate::kMarkerBase))], want) << i;
  }
  EXPECT_TRUE(std::equal(r.bytes.get(), r.bytes.get() + r.byte_count, data.begin() + static_cast<long>(before + r.marked_count)));
  EXPECT_TRUE(deflate::plausible_block_start(z.data(), z.size() - 4, from));
}

}  // namespace
}  // namespace imgstat
