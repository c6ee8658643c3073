// Where a streamed decoder (JPEG, PNG) puts its rows: a band at a time, so
// that the engine computes one band while the next decodes and no decode
// needs the whole image in memory at once.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <future>
#include <string>

#include "imgstat/engine.hpp"

namespace imgstat {

struct RowBand {
  uint8_t* rows = nullptr;  // packed: width * channels samples a row
  uint32_t count = 0;       // rows it holds
};

struct RowSink {
  // Before the first row: the image's size and samples (channels in the
  // reported order); returns where the first band goes.
  std::function<RowBand(uint32_t width, uint32_t height, uint32_t channels, SampleType type)> begin;
  // A band is full (the last may hold fewer rows): returns where the next goes.
  // A decoder that meets damage later may still give up (not taken): the
  // caller then drops what it was handed. Or it may start over: begin again,
  // and what was handed before is dropped.
  std::function<RowBand(const uint8_t* rows, uint32_t first_row, uint32_t count)> band;
  // A stack's next plane begins (1, 2, ...: plane 0 begins with begin()):
  // its rows follow, from row 0, in the band given last. No band holds rows
  // of two planes. Unset: a decoder gives one plane.
  std::function<void(uint64_t plane)> plane;
  // band() may be handed rows that lie elsewhere than the band it gave (the
  // input's own bytes, where they are already the pixels), and as many as
  // a plane has left: it must not expect them in its buffer. Such rows stay
  // readable until the decode ends, or, for a decoder that uses the memory
  // again (a Zarr pass buffer), until release() returns.
  bool takes_rows_in_place = false;
  // With takes_rows_in_place: returns once the sink reads no row it was
  // handed in place; throws nothing. Unset: rows in place stay until the end.
  std::function<void()> release;
  // A decoder whose planes are a pure function of its input (an
  // uncompressed FITS image: its bytes converted where they lie) may hand
  // them whole instead of in bands: `planes` planes of `plane`'s packed
  // layout, one below the other, whose bytes [at, at + n) read(at, n, out)
  // gives at any offset, on any thread, as often as asked. An engine then
  // reads them where it wants them (a GPU engine into its pinned slots) and
  // reads floats again for their histogram rather than keeping them. Unset:
  // bands.
  std::function<void(const Layout& plane, uint64_t planes, const ByteReader& read)> read_planes;
};

// An animation's frame, composited whole, handed to sink in the sink's
// bands: plane 0 through begin(), the next through plane(index). Returns
// the band for what follows.
inline RowBand send_plane(const RowSink& sink, RowBand band, const uint8_t* pixels, uint32_t width, uint32_t height,
                          uint32_t channels, SampleType type, uint64_t index, const std::string& format) {
  if (index == 0) {
    band = sink.begin(width, height, channels, type);
  } else {
    if (!sink.plane) fail(ErrorCode::kInternal, format + ": the sink takes one plane");
    sink.plane(index);
  }
  const uint64_t row_bytes = uint64_t{width} * channels * sample_size(type);
  for (uint32_t y = 0; y < height;) {
    if (band.count == 0) fail(ErrorCode::kInternal, format + ": the sink gave a band of no rows");
    const uint32_t n = std::min(band.count, height - y);
    std::memcpy(band.rows, pixels + y * row_bytes, n * row_bytes);
    band = sink.band(band.rows, y, n);
    y += n;
  }
  return band;
}

// What a decoder hands read_planes when each value is converted from its
// stored bytes alone: bytes [at, at + n) of the chosen planes (values of
// out_size bytes, plane_values a plane), value i of plane k converted from
// plane_at(k) + i * in_size by convert(from, to, count). Any range, on any
// thread: a range that cuts a value converts that value apart.
inline void read_converted_planes(uint64_t at, uint64_t n, uint8_t* out, uint64_t planes, uint64_t plane_values,
                                  size_t in_size, size_t out_size,
                                  const std::function<const uint8_t*(uint64_t plane)>& plane_at,
                                  const std::function<void(const uint8_t*, uint8_t*, uint64_t)>& convert,
                                  const std::string& format) {
  while (n > 0) {
    const uint64_t value = at / out_size, k = value / plane_values, in_plane = value % plane_values;
    if (k >= planes) fail(ErrorCode::kInternal, format + ": a read past the chosen planes");
    const uint8_t* from = plane_at(k) + in_plane * in_size;
    uint64_t taken;
    if (at % out_size != 0 || n < out_size) {  // part of one value
      uint8_t one[16];
      if (out_size > sizeof one) fail(ErrorCode::kInternal, format + ": a value wider than 16 bytes");
      convert(from, one, 1);
      taken = std::min<uint64_t>(out_size - at % out_size, n);
      std::memcpy(out, one + at % out_size, static_cast<size_t>(taken));
    } else {
      const uint64_t values = std::min<uint64_t>(n / out_size, plane_values - in_plane);
      convert(from, out, values);
      taken = values * out_size;
    }
    at += taken;
    out += taken;
    n -= taken;
  }
}

// Tuning: a streamed decode hands the engine this much at a time (two such
// bands live: one in the engine while the next decodes). Small enough to stay
// in a large cache, large enough that a band's computation spreads over every
// core.
constexpr uint64_t kBandBytes = uint64_t{4} << 20;
// Rows in a band of an image whose rows are row_bytes long.
uint32_t band_rows(uint64_t row_bytes, uint64_t height);

// Waits for a helper's work (the engine feeding one band, the unfiltering
// of another) when the scope ends, whatever is thrown: no helper outlives
// the buffers it reads or writes.
template <class T>
struct WaitOnExit {
  std::future<T>& f;
  ~WaitOnExit() {
    if (f.valid()) f.wait();
  }
};

}  // namespace imgstat
