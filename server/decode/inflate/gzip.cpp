#include "decode/inflate/gzip.hpp"

#include <zlib.h>

#include <algorithm>
#include <memory>

#include "imgstat/error.hpp"

namespace imgstat {

bool is_gzip(const uint8_t* data, size_t size) { return size >= 18 && data[0] == 0x1f && data[1] == 0x8b && data[2] == 8; }

namespace {

// zlib's inflate of a whole stream (gzip or raw deflate by window_bits) into
// memory grown as it comes, never past max_bytes.
std::vector<uint8_t> inflate_bounded(const uint8_t* data, size_t size, int window_bits, uint64_t reserve,
                                     uint64_t max_bytes, const std::string& what, const std::string& kind) {
  z_stream z{};
  if (inflateInit2(&z, window_bits) != Z_OK) fail(ErrorCode::kResourceExhausted, what + ": zlib could not start");
  std::unique_ptr<z_stream, int (*)(z_stream*)> end(&z, inflateEnd);
  std::vector<uint8_t> out;
  // Deflate expands at most 1032:1: a size said past that is a lie, not reserved.
  out.reserve(std::min<uint64_t>({reserve, max_bytes, uint64_t{size} * 1032}));
  constexpr size_t kStep = size_t{1} << 20;
  const uint8_t* in = data;
  size_t left = size;
  for (;;) {
    if (out.size() >= max_bytes)
      fail(ErrorCode::kResourceExhausted, what + ": inflates to more than " + std::to_string(max_bytes >> 20) +
                                              " MiB, the decode memory limit (--max-decode-memory)");
    const size_t at = out.size();
    const size_t grow = static_cast<size_t>(std::min<uint64_t>(kStep, max_bytes - at));
    // Grown by doubling, never past the bound (a size said may lie).
    if (at + grow > out.capacity())
      out.reserve(static_cast<size_t>(std::min<uint64_t>(std::max<uint64_t>(2 * out.capacity(), at + grow), max_bytes)));
    out.resize(at + grow);
    const size_t feed = std::min<size_t>(left, size_t{1} << 30);
    z.next_in = const_cast<Bytef*>(in);
    z.avail_in = static_cast<uInt>(feed);
    z.next_out = out.data() + at;
    z.avail_out = static_cast<uInt>(grow);
    const int rc = inflate(&z, Z_NO_FLUSH);
    const size_t used = feed - z.avail_in;
    in += used;
    left -= used;
    out.resize(at + grow - z.avail_out);
    if (rc == Z_STREAM_END) break;  // what follows (a second gzip member, padding) is not read
    if (rc != Z_OK && rc != Z_BUF_ERROR)
      fail(ErrorCode::kInvalidArgument, what + ": its " + kind + " is damaged (" + (z.msg ? z.msg : "zlib error " + std::to_string(rc)) + ")");
    if (rc == Z_BUF_ERROR && left == 0) fail(ErrorCode::kInvalidArgument, what + ": its " + kind + " ends early (truncated)");
  }
  return out;
}

}  // namespace

std::vector<uint8_t> inflate_gzip(const uint8_t* data, size_t size, uint64_t max_bytes, const std::string& what) {
  // ISIZE (the size mod 2^32) says how much to reserve; what comes is checked as it comes.
  const uint64_t said = size < 4 ? 0 : uint64_t{data[size - 4]} | uint64_t{data[size - 3]} << 8 |
                                           uint64_t{data[size - 2]} << 16 | uint64_t{data[size - 1]} << 24;
  return inflate_bounded(data, size, 15 + 16, said, max_bytes, what, "gzip data");
}

std::vector<uint8_t> inflate_raw(const uint8_t* data, size_t size, uint64_t max_bytes, const std::string& what) {
  return inflate_bounded(data, size, -15, 4 * uint64_t{size}, max_bytes, what, "deflated data");
}

std::vector<uint8_t> gzip_head(const uint8_t* data, size_t size, size_t want) {
  std::vector<uint8_t> out;
  if (!is_gzip(data, size)) return out;
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) return out;
  out.resize(want);
  z.next_in = const_cast<Bytef*>(data);
  z.avail_in = static_cast<uInt>(std::min<size_t>(size, 1 << 20));
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(want);
  inflate(&z, Z_SYNC_FLUSH);
  out.resize(want - z.avail_out);
  inflateEnd(&z);
  return out;
}

}  // namespace imgstat
