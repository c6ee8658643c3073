// PNG in bands, without a buffer of the whole image: libpng reads the header
// and every chunk before the image data (its checks, its warnings, the
// palette and tRNS it keeps: exactly what OpenCV's decode meets); zlib
// inflates the IDAT chunks as libpng would, a band of rows at a time; rows
// are unfiltered with SIMD, converted as
// OpenCV asks libpng to convert them (palette to RGB or RGBA, tRNS to alpha
// for RGB and palette images, gray+alpha to RGBA, 16-bit samples to native
// order) and handed to the sink a band at a time, channels in R,G,B,A order.
//
// What it cannot vouch for gives the same answer as libpng only through
// libpng: interlaced and sub-8-bit gray images, a CRC or zlib stream libpng
// would refuse or warn about, too much or too little image data, palette
// indices past the palette, chunks after the image data. Such files are not
// taken (taken false), and the caller decodes them through OpenCV as before.
// Damage inside the zlib data shows only as it is met: bands may have gone to
// the sink already, and the caller drops them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "decode/rows.hpp"

namespace imgstat {

struct PngDecode {
  bool taken = false;
  std::vector<std::string> warnings;  // libpng's, as OpenCV's decode prints them
  // Where in the image data (zlib stream bytes) the parallel inflater took
  // over: 0 from the start, more where zlib inflated a file arriving until
  // it fell behind; -1: zlib alone.
  int64_t parallel_from = -1;
};

// Memory decode_png holds at once for a plain PNG of this header in a file
// of file_bytes: two chunks of filtered rows, zlib's window or, for image
// data of kParallelPngInflateBytes or more or inflating many times over
// (kHighRatioPngRatio), the parallel inflater's chunks in flight; two bands
// of pixels. 0
// where the file will not be taken (interlaced, gray under 8 bits).
uint64_t png_stream_memory_bytes(uint64_t width, uint64_t height, uint32_t bit_depth, uint32_t colour_type,
                                 bool interlaced, uint64_t file_bytes);

// Image data (IDAT bytes) from which one PNG is inflated on every core of
// the arena (inflate/parallel_inflate.hpp); less goes through zlib on one.
constexpr uint64_t kParallelPngInflateBytes = uint64_t{4} << 20;
// Less image data that inflates to kHighRatioPngRawBytes or more, at
// kHighRatioPngRatio times the file's size or more, is inflated on every
// core too (a label map's long runs: zlib copies them a byte at a time, on
// one core, while the photo beside it decodes on the others), in chunks
// small enough that their outputs in flight stay within
// kHighRatioPngInflateMemory. Below 64 MiB zlib is as quick end to end (on
// the H200 host, 2026-12-04: a 48 MB mask 0.113 s by zlib, 0.126-0.132 s in
// parallel, its fresh output pages and small chunks; a 96 MB 16-bit label
// map 0.197 s by zlib, 0.156 s in parallel).
constexpr uint64_t kHighRatioPngRawBytes = uint64_t{64} << 20;
constexpr uint64_t kHighRatioPngRatio = 32;
constexpr uint64_t kHighRatioPngInflateMemory = uint64_t{256} << 20;
// Rows converted into the sink's band go on every thread of the arena in
// pieces of this size: one thread converting a 96 MB label map's rows took
// 17 ms of its 50 ms decode on the H200 host (2026-12-04), the photo beside
// it 40 ms to decode on the GPU.
constexpr uint64_t kParallelRowsBytes = uint64_t{256} << 10;

// A chunk before IEND, other than IDAT, that declares more than 1 MiB of
// data and more than the rest of the file holds: its type, offset and
// lengths in words, or empty. libpng (1.6.39) refuses such a file when it
// reaches the chunk, but first allocates and zeroes a buffer of the
// declared length (up to 2 GiB, whatever the file's size; IDAT it reads in
// pieces): the caller refuses it before libpng or OpenCV sees it. Smaller
// overruns (a truncated file) are left to libpng, which says what it met.
// release, if given, hears which bytes the walk is done with (DecodeOptions::release).
std::string png_chunk_past_end(const uint8_t* data, size_t size,
                               const std::function<void(uint64_t, uint64_t)>& release = {});

// cancelled is polled between bands; true throws kCancelled. The sink may
// throw. release, if given, hears how far the image data has been read
// (DecodeOptions::release). arrived, if given, says the file is still
// arriving (DecodeOptions::arrived): its chunks are then walked as the
// decode reaches them, not all first, so damage met late gives up rows that
// went out; what arrived throws comes out of decode_png.
PngDecode decode_png(const uint8_t* data, size_t size, const std::function<bool()>& cancelled, const RowSink& sink,
                     const std::function<void(uint64_t, uint64_t)>& release = {},
                     const std::function<uint64_t(uint64_t)>& arrived = {});

// Reverses one row's PNG filter in place (types 0..4; bpp = bytes per
// complete pixel, at least 1; prev = the previous row, already unfiltered,
// or null for the first row). False for an unknown filter type.
bool png_unfilter_row(uint8_t filter, uint8_t* row, const uint8_t* prev, size_t row_bytes, uint32_t bpp);

}  // namespace imgstat
