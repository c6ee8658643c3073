// One zlib stream (RFC 1950) inflated on every core, as rapidgzip (Knespel
// and Brunst, HPDC 2023) and pugz do it for gzip: each task takes a chunk of
// the compressed bytes, finds the first place in it where a block starts
// (a dynamic block whose codes are valid, or a stored block whose lengths
// agree, that then decodes to the chunk's end), and decodes from there with
// markers for the window it does not know (inflate/deflate.hpp). In order, each
// chunk's start is confirmed by the chunk before it ending exactly there; a
// start that is not confirmed is decoded again from where the chunk before
// really ended. Markers are resolved from the window once it is known, and
// the Adler-32 is checked over the whole output.
//
// The answer is zlib's, bytes and verdict: a run is taken only where zlib's
// inflate would give the same bytes (deflate.hpp's decoder is strict);
// from the first chunk that cannot be vouched for (damage, a distance past
// the header's window, a code zlib decodes lazily, a chunk whose output
// passes the ratio below) zlib itself inflates the rest, primed at that
// block boundary with the window before it, as it would have met it
// inflating from the start.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace imgstat {

// Where a caller's own inflate of the stream stopped, at the end of a
// block that is not the last, for parallel_inflate to go on from: the bit
// offset in the stream (its zlib header included) and the output so far:
// its size, Adler-32 and last 32 KiB or less (zlib's inflateGetDictionary).
struct InflateResume {
  uint64_t bit = 0;
  uint64_t total = 0;
  uint32_t adler = 1;
  const uint8_t* window = nullptr;
  size_t window_size = 0;
};

struct ParallelInflateOptions {
  uint64_t chunk_bytes = 1 << 20;  // compressed bytes a task takes
  uint32_t tasks = 0;              // chunks decoded at once; 0: the arena's threads
  // A chunk's output beyond this many times its compressed bytes is not
  // kept (zlib inflates the rest of such a stream): what the chunks in
  // flight hold stays within tasks * chunk_bytes * this.
  uint32_t max_ratio = 32;
  // Compressed bytes a run may read past its chunk to finish its last
  // block (each task copies its chunk and these from the stream's pieces).
  uint64_t slack_bytes = 256 << 10;
  // After each group of chunks has gone to the sink: the stream's bytes
  // before this offset will not be read again (unless zlib takes over).
  std::function<void(uint64_t offset)> consumed;
  // The stream's size, roughly, where its pieces are still to come (more):
  // sizes the output buffers without walking them all first.
  uint64_t size_hint = 0;
  // Not null: the output before resume->bit went elsewhere; the sink gets
  // the rest, and `expected` counts the whole stream's.
  const InflateResume* resume = nullptr;
};

// A stream in pieces: a PNG's IDAT chunks, read in place.
struct StreamPiece {
  const uint8_t* data;
  size_t size;
};

// Memory parallel_inflate holds at most with these options: the chunks in
// flight, their outputs and their copies of the stream.
uint64_t parallel_inflate_memory_bytes(const ParallelInflateOptions& options);

// Inflates the zlib stream data[0, size), which must inflate to exactly
// `expected` bytes, end there with its checksum right and nothing after it,
// handing the output on in order: sink(bytes, n); false from the sink
// stops (and returns false). True: all of that, every byte given, as zlib
// gives them. False: zlib refuses the stream, or it is longer or shorter,
// or bytes follow it; the sink may have had part of the output.
bool parallel_inflate(const uint8_t* data, size_t size, uint64_t expected,
                      const std::function<bool(const uint8_t*, size_t)>& sink,
                      const ParallelInflateOptions& options = {});
// The same for a stream in pieces.
bool parallel_inflate(const std::vector<StreamPiece>& pieces, uint64_t expected,
                      const std::function<bool(const uint8_t*, size_t)>& sink,
                      const ParallelInflateOptions& options = {});
// The same for a stream whose pieces after `pieces` are found as they are
// needed (a PNG's IDAT chunks, walked as the file arrives): more(&piece)
// gives the next, or false when there are none. It is called between
// groups of chunks, on the caller's thread, only as far as the next group
// reads (and to the end, to see that nothing follows the stream).
bool parallel_inflate(const std::vector<StreamPiece>& pieces, const std::function<bool(StreamPiece*)>& more,
                      uint64_t expected, const std::function<bool(const uint8_t*, size_t)>& sink,
                      const ParallelInflateOptions& options = {});

}  // namespace imgstat
