// TIFF through libtiff directly, strips and tiles decoded on every core of
// the arena (one libtiff handle a thread, each reading the same bytes in
// place) and handed to a sink a band at a time, without a buffer of the
// whole image.
//
// The pixels are OpenCV's, by the same libtiff calls OpenCV 4.6 makes
// (grfmt_tiff.cpp): 8-bit images through TIFFReadRGBAStrip/Tile (libtiff's
// own conversion of palette, YCbCr, CMYK, MinIsWhite, alpha...), reduced to
// Gray, RGB or RGBA as OpenCV reduces them; 16-bit integers and 32/64-bit
// floats as their samples (TIFFReadEncodedStrip/Tile). Where the samples
// are already what that gives (8-bit MinIsBlack, RGB, RGB with associated
// alpha) they are read raw, with no RGBA step.
//
// Every file is one of three (plan_tiff), decided from its first
// directory's tags before anything is decoded, so that no answer is OK with
// pixels that are not the file's:
// - taken here (above), and also, beyond OpenCV 4.6: 2- and 4-bit gray and
//   palette images, as libtiff's RGBA image of them (0 to 255, as OpenCV
//   reads 1-bit ones), and LogL as libtiff's float luminance (as OpenCV reads
//   LogLuv: float);
// - left to OpenCV, whole: orientations other than top-left, 1- and 10- to
//   14-bit samples, LogLuv, more than a unit's 1 GiB, what libtiff does not
//   open;
// - refused, naming what: what OpenCV 4.6 would answer with pixels that are
//   not the file's, or refuse in words a caller cannot act on. Complex,
//   undefined and 16- or 24-bit float samples, 32- and 64-bit integers, more
//   than 4 samples a pixel, signed samples that libtiff's RGBA conversion
//   reads as unsigned (anything but 8-bit gray and RGB), floats of other
//   photometrics, a missing photometric interpretation; and, once taken
//   here, a file with a strip or tile libtiff cannot read (TiffDecode).
//
// Two answers differ from OpenCV 4.6's, both where OpenCV's is libtiff's or
// its own mistake: planar (separate) 16-bit and float images, of which
// OpenCV reads the first plane's strips as if they held every sample, are
// read plane by plane (planar ones that are left to OpenCV, their
// orientation not top-left, are refused); and libtiff is given the file's
// bytes mapped, as TIFFOpen gives it a file, so that uncompressed 8-bit
// tiles whose size is not a multiple of 1 KiB are decoded (OpenCV's unmapped
// reader makes libtiff 4.5 compare a tile's bytes with a buffer it rounded
// up, and refuse).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "decode/rows.hpp"

namespace imgstat {

// How a file's first directory is read: by decode_tiff, by OpenCV (whole),
// or not at all, from its tags alone.
enum class TiffRoute { kOpenCv, kDirect, kRefused };
struct TiffPlan {
  TiffRoute route = TiffRoute::kOpenCv;
  std::string refusal;  // kRefused: what is not supported, for the caller
  // kDirect: most decode_tiff holds at once, the sink's two bands included.
  // kOpenCv: what OpenCV holds: the image and its strip or tile buffers.
  uint64_t memory_bytes = 0;
  uint32_t band_rows = 0;  // kDirect: rows a band should hold: whole strips or tile rows, every core busy
  uint32_t channels = 0;   // kDirect: of the pixels given to the sink
  SampleType type = SampleType::kUint8;
  // The planes: every full-resolution page, by its directory's offset, in
  // the file's order. Reduced-resolution copies and thumbnails
  // (NewSubfileType bit 0) are no more data: counted, not listed (a file
  // of nothing else is its first page). A file of several planes is read
  // here or refused: OpenCV reads one page.
  std::vector<uint64_t> pages;
  uint64_t reduced_pages = 0;
  // A pyramid's levels (1: none); pages are those of the level chosen.
  uint32_t levels = 1;
  // Pages of different sizes or samples, or an OME-TIFF's images, are
  // series (1: one); pages are those of the series chosen.
  uint32_t series_count = 1, series = 0;
  uint64_t width = 0, height = 0;  // kDirect: of each page
  // The directories ended early at one libtiff could not read: its words.
  std::string warning;
  std::string description;  // the first page's ImageDescription (its first 16 MiB)
};
// Directories past max_pages are refused (kResourceExhausted) as they are
// met; cancelled is polled on the way.
// level: a pyramid's (0: the full-resolution pages); series: which of a
// file's series; one past the file's is refused (kInvalidArgument).
TiffPlan plan_tiff(const uint8_t* data, size_t size, uint64_t max_pages = uint64_t{1} << 20,
                   const std::function<bool()>& cancelled = {}, uint32_t level = 0, uint32_t series = 0);

struct TiffDecode {
  bool taken = false;
  // Not taken because libtiff refused a strip or tile: its words. That is
  // the file's answer: OpenCV, with the same libtiff, would refuse it too, or
  // carry on and answer with whatever its buffer held there.
  std::string libtiff_error;
};

// cancelled is polled between bands; true throws kCancelled. The sink may
// throw. release, if given, hears after each band that the bytes before
// the strips and tiles still to read are done with (DecodeOptions::release).
// pages: the planes to read, one after another (TiffPlan::pages, or some of
// them; empty: the first directory), each of the first one's size and
// samples, the sink told as each after the first begins (RowSink::plane).
TiffDecode decode_tiff(const uint8_t* data, size_t size, const std::function<bool()>& cancelled, const RowSink& sink,
                       const std::function<void(uint64_t, uint64_t)>& release = {},
                       const std::vector<uint64_t>& pages = {});

}  // namespace imgstat
