// Writes an image (any format imgstat decodes) as a TIFF of a chosen layout,
// with libtiff: the files the TIFF figures are measured on, made the same way
// on any machine (the GPU machine has no vips or tiffcp). Usage:
//   imgstat-make-tiff IN OUT [--compression none|lzw|deflate|zstd|packbits]
//                     [--rows-per-strip N | --tile N] [--predictor N] [--16bit]
// --16bit writes each 8-bit sample v as v * 257.
#include <tiffio.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "decode/decode.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s IN OUT [--compression C] [--rows-per-strip N | --tile N] [--predictor N] [--16bit]\n",
                 argv[0]);
    return 2;
  }
  uint16_t compression = COMPRESSION_ADOBE_DEFLATE, predictor = 2;
  uint32_t rows_per_strip = 16, tile = 0;
  bool wide = false;
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--compression") {
      const std::string c = v;
      compression = c == "none" ? COMPRESSION_NONE : c == "lzw" ? COMPRESSION_LZW : c == "zstd" ? COMPRESSION_ZSTD
                  : c == "packbits" ? COMPRESSION_PACKBITS : COMPRESSION_ADOBE_DEFLATE;
      ++i;
    } else if (a == "--rows-per-strip") {
      rows_per_strip = static_cast<uint32_t>(std::atoi(v)), ++i;
    } else if (a == "--tile") {
      tile = static_cast<uint32_t>(std::atoi(v)), ++i;
    } else if (a == "--predictor") {
      predictor = static_cast<uint16_t>(std::atoi(v)), ++i;
    } else if (a == "--16bit") {
      wide = true;
    }
  }
  std::ifstream in(argv[1], std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  imgstat::DecodedImage d;
  try {
    d = imgstat::decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), imgstat::DecodeOptions{});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argv[1], e.what());
    return 1;
  }
  if (d.pixels.depth() != CV_8U) {
    std::fprintf(stderr, "%s: 8-bit images only\n", argv[1]);
    return 1;
  }
  const uint32_t w = static_cast<uint32_t>(d.pixels.cols), h = static_cast<uint32_t>(d.pixels.rows);
  const uint32_t c = static_cast<uint32_t>(d.pixels.channels());
  const uint32_t sb = wide ? 2 : 1;
  // Samples in the reported order (R,G,B(,A)), one row at a time.
  auto row_of = [&](uint32_t y, uint8_t* out) {
    const uint8_t* p = d.pixels.ptr<uint8_t>(static_cast<int>(y));
    for (uint32_t x = 0; x < w; ++x)
      for (uint32_t k = 0; k < c; ++k) {
        const uint8_t v = p[size_t{x} * c + d.channel_order[k]];
        if (wide) {
          const uint16_t v16 = static_cast<uint16_t>(v * 257);
          std::memcpy(out + (size_t{x} * c + k) * 2, &v16, 2);
        } else {
          out[size_t{x} * c + k] = v;
        }
      }
  };
  TIFF* t = TIFFOpen(argv[2], "w");
  if (!t) return 1;
  TIFFSetField(t, TIFFTAG_IMAGEWIDTH, w);
  TIFFSetField(t, TIFFTAG_IMAGELENGTH, h);
  TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, wide ? 16 : 8);
  TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, c);
  TIFFSetField(t, TIFFTAG_PHOTOMETRIC, c >= 3 ? PHOTOMETRIC_RGB : PHOTOMETRIC_MINISBLACK);
  TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
  TIFFSetField(t, TIFFTAG_COMPRESSION, compression);
  if (c == 2 || c == 4) {
    const uint16_t alpha = EXTRASAMPLE_UNASSALPHA;
    TIFFSetField(t, TIFFTAG_EXTRASAMPLES, 1, &alpha);
  }
  if (compression != COMPRESSION_NONE && compression != COMPRESSION_PACKBITS && predictor != 1)
    TIFFSetField(t, TIFFTAG_PREDICTOR, predictor);
  const size_t row_bytes = size_t{w} * c * sb;
  bool ok = true;
  if (tile) {
    TIFFSetField(t, TIFFTAG_TILEWIDTH, tile);
    TIFFSetField(t, TIFFTAG_TILELENGTH, tile);
    std::vector<uint8_t> rows(row_bytes * tile), unit(size_t{tile} * tile * c * sb);
    for (uint32_t y0 = 0; y0 < h && ok; y0 += tile) {
      std::fill(rows.begin(), rows.end(), 0);
      for (uint32_t y = y0; y < std::min(h, y0 + tile); ++y) row_of(y, rows.data() + (y - y0) * row_bytes);
      for (uint32_t x0 = 0; x0 < w && ok; x0 += tile) {
        std::fill(unit.begin(), unit.end(), 0);
        const size_t pixel = size_t{c} * sb, cols = std::min(tile, w - x0);
        for (uint32_t y = 0; y < tile; ++y)
          std::memcpy(unit.data() + y * size_t{tile} * pixel, rows.data() + y * row_bytes + x0 * pixel, cols * pixel);
        ok = TIFFWriteEncodedTile(t, TIFFComputeTile(t, x0, y0, 0, 0), unit.data(), static_cast<tmsize_t>(unit.size())) >= 0;
      }
    }
  } else {
    TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, rows_per_strip);
    std::vector<uint8_t> strip(row_bytes * rows_per_strip);
    for (uint32_t s = 0; s * rows_per_strip < h && ok; ++s) {
      const uint32_t y0 = s * rows_per_strip, n = std::min(rows_per_strip, h - y0);
      for (uint32_t y = 0; y < n; ++y) row_of(y0 + y, strip.data() + y * row_bytes);
      ok = TIFFWriteEncodedStrip(t, s, strip.data(), static_cast<tmsize_t>(n * row_bytes)) >= 0;
    }
  }
  TIFFClose(t);
  return ok ? 0 : 1;
}
