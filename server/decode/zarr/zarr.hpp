// Zarr v2 arrays and OME-Zarr images (OME-NGFF 0.1-0.4), as zarr-python
// reads them. A store (a folder) travels as one uncompressed tar of its
// files, the client's own making or the user's (`tar cf`); its members are
// the store's keys, read where they lie in the tar (libarchive indexes it):
// - `.zarray`: shape, chunks, dtype, compressor (Blosc with its inner
//   codecs, zstd, zlib, gzip, lz4 or none), fill_value, order C or F,
//   dimension_separator; filters are refused by name;
// - the last two dimensions are a plane's rows and columns, the dimensions
//   before them its planes (numpy's reshape order, as FITS);
// - a group with OME-NGFF `multiscales`: its levels are the datasets
//   (0 the full resolution, DecodeOptions::level), its axes name the
//   planes (t, c, z: a stack's T, C and Z); a group without them: each
//   array under it is a series, by path;
// - a chunk that is absent is its fill value (NaN for floats: missing, as
//   NaN always is); values keep uint8, int8, uint16, int16, float32, float64;
//   bool is uint8 0/1, float16 float32, (u)int32 and (u)int64 float64
//   (exact to 2^53), as NIfTI's.
// Every number from the metadata is untrusted: sizes are checked before
// anything is allocated, every chunk must inflate to exactly its size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "decode/rows.hpp"
#include "decode/tar/tar.hpp"
#include "imgstat/engine.hpp"

namespace imgstat {

struct ZarrArray {
  std::string path;                 // in the store ("" its root)
  std::vector<uint64_t> shape, chunks;
  std::string dtype;                // as .zarray says it ("<u2")
  char kind = 'u';                  // numpy's kind: b u i f
  uint32_t item_bytes = 1;          // stored
  bool swap = false;                // stored in the other byte order
  bool fortran = false;             // order F
  std::string compressor;           // "" none, else its id (blosc, zstd, zlib, gzip, lz4)
  std::string separator = ".";
  double fill = 0;                  // the fill value, as the values' type holds it
  SampleType type = SampleType::kUint8;
  // Each chunk's bytes in the store, by its index in C order over the chunk
  // grid (empty span: absent, the fill value).
  std::vector<std::pair<const uint8_t*, uint64_t>> chunk_bytes;
  uint64_t height() const { return shape[shape.size() - 2]; }
  uint64_t width() const { return shape.back(); }
  uint64_t planes() const;
  uint64_t chunk_bytes_decoded() const;  // one chunk, inflated
  uint64_t slab_planes() const;          // planes one pass decodes together (zarr.cpp says why)
};

struct ZarrPlan {
  ZarrArray array;
  uint32_t series_count = 1, levels = 1;
  std::string axes;  // the plane axes, slowest first ("tcz"); empty: not named
  std::vector<std::pair<std::string, std::string>> keywords;
  std::vector<std::string> warnings;
};

// Throws kInvalidArgument for a tar that holds no Zarr store, or a store
// or array this does not read, naming why; kResourceExhausted for planes
// past max_planes or chunks past max_chunks.
ZarrPlan plan_zarr(const std::map<std::string, TarSpan>& store, uint32_t series, uint32_t level, uint64_t max_planes);
// Memory a decode holds at once: a pass of planes (two where there are
// several: the next inflates while this one goes to the engine) and a chunk
// a core.
uint64_t zarr_memory_bytes(const ZarrArray& array);
// The chosen planes (ascending), one after another in the sink's bands; the
// chunks of each slab decoded on every core.
void decode_zarr(const ZarrArray& array, const std::vector<uint64_t>& planes, const std::function<bool()>& cancelled,
                 const RowSink& sink);

}  // namespace imgstat
