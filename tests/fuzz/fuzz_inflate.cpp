// libFuzzer, differential: the parallel inflater against zlib. The input is
// data and a few settings: the data is compressed by zlib as the settings
// say, then damaged as they say, and inflated both ways; whatever the
// parallel inflater answers must be zlib's (the same bytes, and no stream
// zlib refuses taken), or it aborts like a crash.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "decode/inflate/parallel_inflate.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* input, size_t size) {
  if (size < 8) return -1;
  const uint8_t level = input[0] % 10, strategy = input[1] % 5, window = 9 + input[2] % 7;
  const uint32_t chunk = 64u << (input[3] % 10), tasks = 1 + input[4] % 4;
  const uint32_t flips = input[5] % 4, where = input[6] | uint32_t{input[7]} << 8;
  const uint8_t* data = input + 8;
  const size_t n = size - 8;
  // Compressed by zlib as the settings say.
  z_stream z{};
  if (deflateInit2(&z, level, Z_DEFLATED, window, 8, strategy) != Z_OK) return 0;
  std::vector<uint8_t> packed(deflateBound(&z, n) + 64);
  z.next_in = const_cast<Bytef*>(data);
  z.avail_in = static_cast<uInt>(n);
  z.next_out = packed.data();
  z.avail_out = static_cast<uInt>(packed.size());
  const int r = ::deflate(&z, Z_FINISH);
  packed.resize(z.total_out);
  deflateEnd(&z);
  if (r != Z_STREAM_END) return 0;
  // Damaged as they say.
  for (uint32_t i = 0; i < flips && !packed.empty(); ++i)
    packed[(where * (i + 1) * 2654435761u) % packed.size()] ^= static_cast<uint8_t>(1u << ((where >> (3 * i)) & 7));
  // zlib's answer, in one call.
  std::vector<uint8_t> want(n + 1);
  z_stream u{};
  inflateInit2(&u, 0);
  u.next_in = packed.data();
  u.avail_in = static_cast<uInt>(packed.size());
  u.next_out = want.data();
  u.avail_out = static_cast<uInt>(want.size());
  const bool zlib_ok = inflate(&u, Z_FINISH) == Z_STREAM_END && u.avail_in == 0 && u.total_out == n;
  want.resize(u.total_out);
  inflateEnd(&u);
  // The parallel inflater's.
  std::vector<uint8_t> got;
  imgstat::ParallelInflateOptions o;
  o.chunk_bytes = chunk;
  o.tasks = tasks;
  const bool ours = imgstat::parallel_inflate(packed.data(), packed.size(), n, [&](const uint8_t* p, size_t k) {
    got.insert(got.end(), p, p + k);
    return true;
  }, o);
  if (ours && (!zlib_ok || got != want)) {
    std::fprintf(stderr, "parallel_inflate took what zlib %s\n", zlib_ok ? "inflates differently" : "refuses");
    std::abort();
  }
  // As a PNG arriving: the stream in pieces found as they are asked for,
  // and zlib first, handing over at the end of its k-th block (k from the
  // settings; 0: none) with its window, size and checksum.
  const size_t piece = 1 + (where & 0xfff) * 7;
  const uint32_t hand_over_at = (where >> 12) % 4;
  std::vector<uint8_t> got2;
  auto sink = [&](const uint8_t* p, size_t k) {
    got2.insert(got2.end(), p, p + k);
    return true;
  };
  z_stream v{};
  inflateInit2(&v, 0);
  std::vector<uint8_t> head(n + 1);
  v.next_in = packed.data();
  v.avail_in = static_cast<uInt>(packed.size());
  uint32_t blocks = 0;
  bool handed = false, zlib_failed = false;
  uint8_t dictionary[32768];
  uInt window_size = 0;
  imgstat::InflateResume resume;
  while (hand_over_at > 0 && !handed && !zlib_failed) {
    v.next_out = head.data() + v.total_out;
    v.avail_out = static_cast<uInt>(head.size() - v.total_out);
    const int r = inflate(&v, Z_BLOCK);
    if (r != Z_OK) {
      zlib_failed = true;  // its end, or damage: nothing to hand over
      break;
    }
    if ((v.data_type & 128) && !(v.data_type & 64) && v.total_in > 2 && ++blocks == hand_over_at) {
      window_size = sizeof dictionary;
      if (inflateGetDictionary(&v, dictionary, &window_size) != Z_OK) abort();
      resume = {v.total_in * 8 - static_cast<uint64_t>(v.data_type & 7), v.total_out, static_cast<uint32_t>(v.adler),
                dictionary, window_size};
      handed = true;
    }
    if (v.avail_in == 0 && !handed) zlib_failed = true;
  }
  inflateEnd(&v);
  if (hand_over_at > 0 && !handed) return 0;
  got2.assign(head.begin(), head.begin() + static_cast<std::ptrdiff_t>(handed ? resume.total : 0));
  size_t given = 0;
  auto more = [&](imgstat::StreamPiece* p) {
    if (given >= packed.size()) return false;
    const size_t k = std::min(piece, packed.size() - given);
    *p = imgstat::StreamPiece{packed.data() + given, k};
    given += k;
    return true;
  };
  imgstat::ParallelInflateOptions o2 = o;
  o2.resume = handed ? &resume : nullptr;
  o2.size_hint = packed.size();
  const bool ours2 = imgstat::parallel_inflate({}, more, n, sink, o2);
  if (ours2 && (!zlib_ok || got2 != want)) {
    std::fprintf(stderr, "parallel_inflate in pieces%s took what zlib %s\n", handed ? ", resumed," : "",
                 zlib_ok ? "inflates differently" : "refuses");
    std::abort();
  }
  if (zlib_ok && !handed && !ours2 && ours) {
    std::fprintf(stderr, "parallel_inflate in pieces refused what it took whole\n");
    std::abort();
  }
  return 0;
}
