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
// What it does not take is decoded by OpenCV, whole, as before: any strip or
// tile libtiff refuses (OpenCV then gives its own verdict on the file, as
// before), orientations other than top-left, 1/2/4/10/12/14-bit samples,
// 32-bit integers, more than 4 samples a pixel, units (strips or tiles) whose
// buffer OpenCV refuses (1 GiB).
//
// Two answers differ from OpenCV 4.6's, both where OpenCV's is libtiff's or
// its own mistake: planar (separate) 16-bit and float images, of which
// OpenCV reads the first plane's strips as if they held every sample, are
// read plane by plane; and libtiff is given the file's bytes mapped, as
// TIFFOpen gives it a file, so that uncompressed 8-bit tiles whose size is
// not a multiple of 1 KiB are decoded (OpenCV's unmapped reader makes
// libtiff 4.5 compare a tile's bytes with a buffer it rounded up, and refuse).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "decode/rows.hpp"

namespace imgstat {

// How decode_tiff will take a file, from its first directory.
struct TiffBands {
  bool taken = false;
  uint64_t memory_bytes = 0;  // most it holds at once, the sink's two bands included
  uint32_t band_rows = 0;     // rows a band should hold: whole strips or tile rows, every core busy
  uint32_t channels = 0;      // of the pixels given to the sink
  SampleType type = SampleType::kUint8;
};
TiffBands plan_tiff(const uint8_t* data, size_t size);

struct TiffDecode {
  bool taken = false;
  // Not taken because libtiff refused a strip or tile: its words, for the
  // error should OpenCV refuse the file too.
  std::string libtiff_error;
};

// cancelled is polled between bands; true throws kCancelled. The sink may
// throw. release, if given, hears after each band that the bytes before
// the strips and tiles still to read are done with (DecodeOptions::release).
TiffDecode decode_tiff(const uint8_t* data, size_t size, const std::function<bool()>& cancelled, const RowSink& sink,
                       const std::function<void(uint64_t, uint64_t)>& release = {});

}  // namespace imgstat
