// FITS images as astropy.io.fits gives their values, tile-compressed ones
// decompressed by cfitsio (Debian's libcfitsio). The headers are read here,
// card by card (cfitsio allocates and divides by header values as it opens
// an HDU: the fuzzer found both), and cfitsio runs only in the tile
// decoder's process (decode/isolated). Every image HDU with data is a series (a primary HDU
// without data is skipped, a tile-compressed image is its uncompressed
// image), NAXIS1 x NAXIS2 its planes' size, NAXIS3 and higher its planes.
//
// Values are the physical ones, BZERO + BSCALE * stored, as the standard
// says; cfitsio applies them. The type answered keeps them exact:
// - BITPIX 8 and 16 with no scaling, or with the offsets that make them the
//   other signedness (BZERO -128: int8; BZERO 32768: uint16), keep their
//   integer type;
// - BITPIX 32 and 64 (no engine type holds them), and every other scaling,
//   are float64; 32-bit integers are exact there, 64-bit ones up to 2^53;
// - BLANK: integer pixels equal to it are missing, and given as NaN, so that
//   they are left out of every statistic and counted apart (nan_count), as
//   astropy gives them; the type is then float32 for 8- and 16-bit data with
//   no scaling other than a signedness offset (exact), float64 otherwise;
// - BITPIX -32 and -64 are float32 and float64 (NaN is missing as always).
// Rows are in the file's order (NAXIS2 ascending, as numpy's rows), not
// flipped to the display's bottom-up.
//
// A gzip-compressed file is inflated first (within a bound); tile
// compression (Rice, GZIP, HCOMPRESS, PLIO, with quantization and
// dithering) is cfitsio's. Everything in a header is untrusted: sizes are
// checked against the file before anything is read, and a compressed
// image's tiles against a bound before cfitsio allocates one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "decode/rows.hpp"
#include "imgstat/engine.hpp"

namespace imgstat {

struct FitsImage {
  int hdu = 0;                 // cfitsio's number, from 1 (the primary HDU)
  std::vector<uint64_t> axes;  // NAXIS1 .. NAXISn
  int bitpix = 0;              // as stored (a compressed image's ZBITPIX)
  double bzero = 0, bscale = 1;
  bool has_blank = false;
  long long blank = 0;
  bool compressed = false;
  uint64_t data_start = 0, data_end = 0;  // uncompressed: where its data lies in the file, as its header says
  // Compressed: what cfitsio holds as it decodes (a tile, its buffers), in
  // the tile decoder's process; 0 for an uncompressed image (no cfitsio).
  uint64_t decoder_bytes = 0;
  SampleType type = SampleType::kUint8;  // the values' type, as above
  // Header facts: OBJECT, TELESCOP, INSTRUME, FILTER, EXPTIME, DATE-OBS,
  // BUNIT, EXTNAME where given, and BITPIX, BZERO, BSCALE, BLANK.
  std::vector<std::pair<std::string, std::string>> keywords;
  std::string warning;
  uint64_t width() const { return axes.empty() ? 0 : axes[0]; }
  uint64_t height() const { return axes.size() < 2 ? 1 : axes[1]; }
  uint64_t planes() const;  // the product of NAXIS3 and higher (checked when planned)
};

struct FitsPlan {
  std::vector<FitsImage> images;
  std::string warning;  // the HDUs ended early, or some are not read: why
};

constexpr uint32_t kMaxFitsAxes = 9;
constexpr uint64_t kFitsRecordBytes = 2880;  // headers and data come in whole records of this
// Tuning: bytes a band of FITS rows should hold. Reading is a byte swap,
// far faster than 4 MiB bands can be handed on: larger bands spread it over
// every core and amortize each band's hand-over (H200: 2.0 GB/s at 4 MiB).
constexpr uint64_t kFitsBandBytes = uint64_t{32} << 20;
// A compressed image's tile is decoded whole by cfitsio: tiles larger than
// this are refused before it allocates one.
constexpr uint64_t kMaxFitsTileBytes = uint64_t{256} << 20;

bool is_fits(const uint8_t* data, size_t size);  // "SIMPLE  =" at the start

// The file's image HDUs, from their headers; a file of none, or whose
// first HDU's framing is not valid, is refused (kInvalidArgument).
// content: the file's own bytes when `size` holds it padded to whole
// records (0: all of them); every HDU's data must lie within them. Images past max_images, and one of
// more than max_planes planes, are refused (kResourceExhausted).
FitsPlan plan_fits(const uint8_t* data, size_t size, uint64_t max_images, uint64_t max_planes,
                   const std::function<bool()>& cancelled = {}, size_t content = 0);

// planes: which of the image's planes (indices over NAXIS3 and higher,
// NAXIS3 fastest), one after another, in the sink's bands (the sink told
// as each after the first begins), each band's rows read on every core: an
// uncompressed image straight from the file's bytes (big-endian samples
// swapped, scaled and BLANK-checked as cfitsio does it, exact to the bit),
// a compressed one by cfitsio in a process of its own (its decoders trust
// the compressed bytes), into memory shared with it: every chosen plane.
// Throws kInvalidArgument with cfitsio's words for data it cannot read,
// kCancelled.
void decode_fits(const uint8_t* data, size_t size, const FitsImage& image, const std::vector<uint64_t>& planes,
                 const std::function<bool()>& cancelled, const RowSink& sink);

}  // namespace imgstat
