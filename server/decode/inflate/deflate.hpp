// A strict deflate (RFC 1951) block decoder that can start at any block
// boundary without the window before it: a back reference that reaches
// before the start comes out as a marker naming the byte it needs, resolved
// once the window is known (inflate/parallel_inflate.hpp). Strict: it accepts only
// what zlib's inflate accepts, and less where zlib's answer would depend on
// how its caller sizes the output (distances past the window the zlib header
// names) or on codes it decodes lazily (incomplete codes beyond zlib's one
// allowed case are refused at once). What it refuses is decoded by zlib
// itself, so a caller's answer never depends on this decoder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace imgstat::deflate {

// Markers: a symbol >= kMarkerBase is the byte `back` positions before the
// decode's start (1 = the last byte before it), symbol = kMarkerBase + 32768 - back.
constexpr uint32_t kMarkerBase = 256;
constexpr uint32_t kMaxWindow = 32768;

// Arrays straight from the kernel (mmap), given back whole when freed:
// runs are decoded on every core at once, and their megabytes would
// otherwise stay in each thread's malloc arena (the server raises glibc's
// mmap and trim thresholds for its messages).
struct Unmap {
  size_t bytes = 0;
  void operator()(void* p) const;
};
template <class T>
using Mapped = std::unique_ptr<T[], Unmap>;
void* map_bytes(size_t bytes);  // zero pages (huge where given), touched as written; throws std::bad_alloc
template <class T>
Mapped<T> map_array(size_t n) {
  return Mapped<T>(static_cast<T*>(map_bytes(n * sizeof(T))), Unmap{n * sizeof(T)});
}

// One run of blocks decoded from a block boundary.
struct Run {
  uint64_t start_bit = 0;
  uint64_t end_bit = 0;       // the bit after the last block decoded
  bool final = false;         // the last block was the stream's final one
  bool ok = false;            // false: not vouched for (zlib decides)
  // The output: marked[] (symbols, markers among them), then bytes[]; the
  // two together are the run's output in order.
  Mapped<uint16_t> marked;
  uint64_t marked_count = 0;
  Mapped<uint8_t> bytes;
  uint64_t bytes_from = 0;  // where the output's bytes start in bytes[] (a window given before them)
  uint64_t byte_count = 0;
  const uint8_t* output_bytes() const { return bytes.get() + bytes_from; }
  uint32_t max_back = 0;      // the farthest a marker reaches before the start
  uint64_t blocks = 0;
  uint64_t size() const { return marked_count + byte_count; }
};

// Decodes whole blocks of data[0, size) from start_bit until a block ends at
// or past stop_bit, or the final block ends. window: the zlib header's
// window size (distances beyond it are refused). With `known_start` the run
// begins the stream (no byte before it: a reference before it is refused).
// `max_output` bounds the run's output (more is refused); `size_hint`, what
// it is likely to be, sizes the buffer at once.
// `buffer` and `marked`, if given, are the bytes' and the marked symbols'
// buffers to start with (one run's after another's: their pages already
// there); a run that fails hands them back in its bytes and marked.
// `before` (with known_start): the output before the start, up to its last
// 32 KiB, when it is known: references into it are bytes, not markers.
struct Before {
  const uint8_t* data = nullptr;
  size_t size = 0;
};
Run decode_run(const uint8_t* data, size_t size, uint64_t start_bit, uint64_t stop_bit, uint32_t window,
               bool known_start, uint64_t max_output, uint64_t size_hint = 0, Mapped<uint8_t> buffer = {},
               Mapped<uint16_t> marked = {}, Before before = {});

// Whether a dynamic or stored block header at `bit` parses as zlib would
// take it (code lengths forming valid codes, a stored block's lengths
// agreeing), without decoding its data: the block finder's first filter.
bool plausible_block_start(const uint8_t* data, size_t size, uint64_t bit);

}  // namespace imgstat::deflate
