#include "decode/tiff/tiff.hpp"

#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "decode/tiff/internal.hpp"
#include "imgstat/error.hpp"

namespace imgstat {
namespace {

using tiff::Handle;
using tiff::Read;
using tiff::Shape;

// RGBA pixels (libtiff's raster: R,G,B,A bytes) to the channels, as OpenCV's
// icvCvt_BGRA2* functions reduce them (then reported R,G,B(,A)).
void from_rgba(const uint8_t* rgba, uint8_t* out, uint32_t pixels, uint32_t channels) {
  if (channels == 4) {
    std::memcpy(out, rgba, size_t{pixels} * 4);
  } else if (channels == 3) {
    for (uint32_t i = 0; i < pixels; ++i, rgba += 4, out += 3) {
      out[0] = rgba[0];
      out[1] = rgba[1];
      out[2] = rgba[2];
    }
  } else {
    // OpenCV's gray weights (14 bits), red first as its swap puts it.
    constexpr int kR = 4899, kG = 9617, kB = (1 << 14) - kR - kG;
    for (uint32_t i = 0; i < pixels; ++i, rgba += 4)
      out[i] = static_cast<uint8_t>((rgba[0] * kR + rgba[1] * kG + rgba[2] * kB + (1 << 13)) >> 14);
  }
}

// One strip or tile of a band: decoded (into place where it can be), its rows
// inside [y0, y0 + n) written to band. False: libtiff refused it.
bool decode_unit(Handle& h, const Shape& s, uint32_t unit_row, uint32_t column, uint8_t* band, uint32_t y0,
                 uint32_t n) {
  TIFF* tif = h.tif;
  const uint64_t row_bytes = s.row_bytes();
  const uint32_t r0 = unit_row * s.unit_height;
  const uint32_t rows = std::min(s.unit_height, s.height - r0);  // of the unit, in the image
  const uint32_t x0 = column * s.unit_width;
  const uint32_t cols = std::min(s.unit_width, s.width - x0);
  const uint32_t first = std::max(r0, y0), last = std::min(r0 + rows, y0 + n);  // rows to write
  const size_t pixel_bytes = size_t{s.channels} * s.sample_bytes;
  h.error.clear();  // what libtiff said before (opening the file) is not this unit's
  if (s.read == Read::kRaw && !s.tiled && !s.planar && first == r0 && last == r0 + rows) {
    const tmsize_t want = static_cast<tmsize_t>(uint64_t{rows} * row_bytes);
    return TIFFReadEncodedStrip(tif, unit_row, band + uint64_t{r0 - y0} * row_bytes, want) == want;
  }
  h.buffer.resize(s.unit_buffer_bytes());
  uint8_t* buf = h.buffer.data();
  if (s.read == Read::kRaw && s.planar) {
    // Each plane's unit into its part of the buffer, then interleaved.
    const uint32_t unit_rows = s.tiled ? s.unit_height : rows;
    const size_t plane_row = size_t{s.unit_width} * s.sample_bytes, plane = plane_row * unit_rows;
    const uint32_t strips_per_plane = (s.height + s.unit_height - 1) / s.unit_height;
    for (uint32_t p = 0; p < s.samples; ++p) {
      const tmsize_t want = static_cast<tmsize_t>(plane);
      const tmsize_t got =
          s.tiled ? TIFFReadEncodedTile(tif, TIFFComputeTile(tif, x0, r0, 0, static_cast<uint16_t>(p)), buf + p * plane, want)
                  : TIFFReadEncodedStrip(tif, p * strips_per_plane + unit_row, buf + p * plane, want);
      if (got != want) return false;
    }
    const uint32_t sb = s.sample_bytes;
    for (uint32_t y = first; y < last; ++y) {
      uint8_t* out = band + uint64_t{y - y0} * row_bytes + size_t{x0} * pixel_bytes;
      const uint8_t* in = buf + size_t{y - r0} * plane_row;
      for (uint32_t x = 0; x < cols; ++x)
        for (uint32_t p = 0; p < s.samples; ++p, out += sb) std::memcpy(out, in + p * plane + size_t{x} * sb, sb);
    }
    return true;
  }
  if (s.read == Read::kRaw) {
    const tmsize_t want = static_cast<tmsize_t>(s.tiled ? h.buffer.size() : uint64_t{rows} * row_bytes);
    const tmsize_t got = s.tiled ? TIFFReadEncodedTile(tif, TIFFComputeTile(tif, x0, r0, 0, 0), buf, want)
                                 : TIFFReadEncodedStrip(tif, unit_row, buf, want);
    if (got != want) return false;
    const size_t unit_row_bytes = size_t{s.unit_width} * pixel_bytes;
    for (uint32_t y = first; y < last; ++y)
      std::memcpy(band + uint64_t{y - y0} * row_bytes + size_t{x0} * pixel_bytes, buf + size_t{y - r0} * unit_row_bytes,
                  size_t{cols} * pixel_bytes);
    return true;
  }
  // libtiff's raster runs bottom-up: its row i is the unit's row rows-1-i
  // (a tile's rows start after its unused ones).
  // OpenCV's TIFFReadRGBAStrip/Tile carry on past a unit libtiff cannot
  // read, and answer with whatever the buffer held: here that unit fails
  // (what libtiff says while it reads a unit it then reads is no failure).
  uint32_t* raster = reinterpret_cast<uint32_t*>(buf);
  if (!(s.tiled ? TIFFReadRGBATileExt(tif, x0, r0, raster, 1) : TIFFReadRGBAStripExt(tif, r0, raster, 1))) return false;
  const uint8_t* start = buf + (s.tiled ? size_t{s.unit_height - rows} * s.unit_width * 4 : 0);
  for (uint32_t y = first; y < last; ++y) {
    const uint8_t* src = start + size_t{r0 + rows - 1 - y} * s.unit_width * 4;
    from_rgba(src, band + uint64_t{y - y0} * row_bytes + size_t{x0} * pixel_bytes, cols, s.channels);
  }
  return true;
}

// Where the page's rows [y0, y0 + n) already lie in the file as the pixels
// (uncompressed, in the host's byte order and bit order, strips one after
// another, every one of them whole and aligned with the rows asked): their
// first byte; else null, and they are decoded.
const uint8_t* rows_in_place(TIFF* tif, const Shape& s, const uint8_t* data, size_t size, uint32_t y0, uint32_t n) {
  if (s.read != Read::kRaw || s.tiled || s.planar || s.logl || s.line_by_line || TIFFIsByteSwapped(tif)) return nullptr;
  uint16_t compression = COMPRESSION_NONE, fill = FILLORDER_MSB2LSB;
  TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &compression);
  TIFFGetFieldDefaulted(tif, TIFFTAG_FILLORDER, &fill);
  if (compression != COMPRESSION_NONE || fill != FILLORDER_MSB2LSB) return nullptr;
  const uint32_t unit = s.unit_height;
  if (unit == 0 || y0 % unit != 0 || (n % unit != 0 && y0 + n != s.height)) return nullptr;
  const uint64_t row_bytes = s.row_bytes();
  const uint64_t start = TIFFGetStrileOffset(tif, y0 / unit);
  uint64_t at = start;
  for (uint32_t u = y0 / unit; u <= (y0 + n - 1) / unit; ++u) {
    const uint64_t rows = std::min<uint64_t>(unit, s.height - uint64_t{u} * unit);
    if (TIFFGetStrileOffset(tif, u) != at || TIFFGetStrileByteCount(tif, u) < rows * row_bytes) return nullptr;
    at += rows * row_bytes;
  }
  return at <= size ? data + start : nullptr;
}

}  // namespace

TiffDecode decode_tiff(const uint8_t* data, size_t size, const std::function<bool()>& cancelled, const RowSink& sink,
                       const std::function<void(uint64_t, uint64_t)>& release, const std::vector<uint64_t>& pages) {
  using namespace tiff;
  TiffDecode out;
  const std::unique_ptr<Handle> first = open_handle(data, size);
  if (!first) return out;
  const uint32_t threads = arena_threads();
  tbb::enumerable_thread_specific<std::unique_ptr<Handle>> handles;
  std::mutex error_mutex;
  std::atomic<bool> failed{false};
  auto refused = [&](const std::string& error, const std::string& otherwise) {
    std::lock_guard<std::mutex> lock(error_mutex);
    if (!failed.exchange(true)) out.libtiff_error = error.empty() ? otherwise : error;
  };

  uint64_t released = 0;
  RowBand band;
  Shape s0;  // the first plane's: every plane's size and samples
  const size_t planes = std::max<size_t>(1, pages.size());
  for (size_t plane = 0; plane < planes; ++plane) {
    const std::string which = planes > 1 ? " of page " + std::to_string(plane) : std::string();
    if (!pages.empty() && !select_page(*first, pages[plane])) {
      refused(first->error, "libtiff could not read the directory" + which);
      return out;
    }
    Shape s;
    if (!shape_of(first->tif, tags_of(first->tif), &s)) {
      if (plane == 0) return out;
      fail(ErrorCode::kInvalidArgument, "TIFF: page " + std::to_string(plane) + " is not read as the first is");
    }
    uint32_t ignored_rows;
    uint64_t ignored_memory;
    plan_reading(s, threads, &ignored_rows, &ignored_memory);
    if (plane == 0) {
      s0 = s;
      band = sink.begin(s.width, s.height, s.channels, s.type);
    } else {
      if (s.width != s0.width || s.height != s0.height || s.channels != s0.channels || s.type != s0.type)
        fail(ErrorCode::kInvalidArgument, "TIFF: page " + std::to_string(plane) + " differs from the first in size or samples");
      if (!sink.plane) fail(ErrorCode::kInternal, "TIFF: the sink takes one plane");
      sink.plane(plane);
    }
    const uint64_t page = first->page;

    // Where the units of each unit row and all later ones begin in the file:
    // after a band, the bytes before that are read for the last time.
    std::vector<uint64_t> first_offset;
    uint64_t page_end = 0;  // where this page's last strip or tile ends
    if (release && !s.line_by_line) {
      TIFF* tif = first->tif;
      const uint32_t unit_rows = (s.height + s.unit_height - 1) / s.unit_height, across = s.units_across();
      const uint32_t samples = s.planar ? s.samples : 1;
      first_offset.assign(size_t{unit_rows} + 1, UINT64_MAX);
      for (uint32_t r = unit_rows; r-- > 0;) {
        uint64_t lowest = first_offset[r + 1];
        for (uint32_t p = 0; p < samples; ++p)
          for (uint32_t c = 0; c < across; ++c) {
            const uint32_t unit = s.tiled ? TIFFComputeTile(tif, c * s.unit_width, r * s.unit_height, 0, static_cast<uint16_t>(p))
                                          : p * unit_rows + r;
            const uint64_t at = TIFFGetStrileOffset(tif, unit);
            lowest = std::min<uint64_t>(lowest, at);
            page_end = std::max<uint64_t>(page_end, at + TIFFGetStrileByteCount(tif, unit));
          }
        first_offset[r] = lowest;
      }
    }

    const uint64_t row_bytes = s.row_bytes();
    uint64_t held = UINT64_MAX;  // the rows handed in place last are being read: not released
    for (uint32_t y0 = 0; y0 < s.height;) {
      if (cancelled && cancelled()) fail(ErrorCode::kCancelled, "cancelled while decoding");
      if (band.count == 0 || !band.rows) fail(ErrorCode::kInternal, "TIFF: the sink gave no room for rows");
      // Rows that are already the pixels go as they lie, the rest of the page at once.
      if (const uint8_t* rows = sink.takes_rows_in_place ? rows_in_place(first->tif, s, data, size, y0, s.height - y0)
                                                         : nullptr) {
        held = static_cast<uint64_t>(rows - data);
        band = sink.band(rows, y0, s.height - y0);
        y0 = s.height;
        continue;
      }
      const uint32_t n = std::min(band.count, s.height - y0);
      if (s.line_by_line) {
        for (uint32_t y = y0; y < y0 + n && !failed; ++y)
          if (TIFFReadScanline(first->tif, band.rows + uint64_t{y - y0} * row_bytes, y, 0) < 0)
            refused(first->error, "TIFFReadScanline failed on row " + std::to_string(y) + which);
      } else {
        const uint32_t unit_rows = s.unit_height;
        const uint32_t u0 = y0 / unit_rows, u1 = (y0 + n - 1) / unit_rows;
        const uint32_t across = s.units_across();
        const size_t items = size_t{u1 - u0 + 1} * across;
        auto decode = [&](size_t i) {
          if (failed) return;
          std::unique_ptr<Handle>& h = handles.local();
          if (!h && !(h = open_handle(data, size))) return refused("", "libtiff could not open the file again");
          if (!select_page(*h, page)) return refused(h->error, "libtiff could not read the directory" + which);
          const uint32_t unit_row = u0 + static_cast<uint32_t>(i / across);
          const uint32_t column = static_cast<uint32_t>(i % across);
          if (!decode_unit(*h, s, unit_row, column, band.rows, y0, n))
            refused(h->error, std::string(s.tiled ? "tile" : "strip") + " at row " +
                                  std::to_string(uint64_t{unit_row} * unit_rows) + which +
                                  " holds fewer bytes than its pixels need (the file is cut short, or its byte "
                                  "counts are wrong)");
        };
        if (items > 1 && threads > 1)
          tbb::this_task_arena::isolate([&] { tbb::parallel_for(size_t{0}, items, decode); });
        else
          for (size_t i = 0; i < items; ++i) decode(i);
      }
      if (failed) return out;
      band = sink.band(band.rows, y0, n);
      y0 += n;
      if (!first_offset.empty() && y0 < s.height && y0 % s.unit_height == 0) {
        const uint64_t next = std::min<uint64_t>(first_offset[y0 / s.unit_height], size);
        if (next > released) release(released, next), released = next;
      }
    }
    // A page done: its bytes too (the next page's, written after it as a
    // rule, are read again should they lie before).
    if (planes > 1 && std::min<uint64_t>({page_end, size, held}) > released) {
      const uint64_t next = std::min<uint64_t>({page_end, size, held});
      release(released, next);
      released = next;
    }
  }
  if (release && released < size) release(released, size);
  out.taken = true;
  return out;
}

}  // namespace imgstat
