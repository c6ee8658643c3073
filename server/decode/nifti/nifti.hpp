// NIfTI-1 and NIfTI-2 volumes (.nii, .nii.gz): their headers as libnifti's
// structs and codes define them (nifti1.h, nifti2.h; field by field, either
// byte order, every number checked here), their voxels, as nibabel gives
// them:
// - dim[1] x dim[2] is a plane, dim[3] (z) and dim[4..7] (t, ...) are the
//   planes, z fastest; a 4-D file's volumes are its t points (a stack's
//   z and t axes, StackAxes "NIfTI");
// - scl_slope and scl_inter as the standard says: a slope of 0 (or not
//   finite) means none; with one, values are slope * stored + inter, in
//   float64; without, the stored type is kept: uint8, int8, uint16, int16,
//   float32, float64; int32, uint32, int64 and uint64 (no engine type holds
//   them) are float64, exact to 2^53; RGB24 and RGBA32 are 3 and 4 uint8
//   channels (never scaled). Complex, float128 and 1-bit data are refused by
//   name.
// A pair (.hdr/.img, magic "ni1") comes as a tar of its two files (the
// client's making): the header from the .hdr, the voxels from the .img (or
// .img.gz); a .hdr alone has no voxels of its own and is refused. Every header number is untrusted: the voxels must lie in
// the file, sizes are checked before anything is read.
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

struct NiftiVolume {
  int version = 1;             // NIfTI-1 or -2
  uint64_t dims[8] = {0};      // dim[0] (the rank) .. dim[7], each at least 1
  int datatype = 0;            // NIFTI_TYPE_*
  uint32_t stored_bytes = 0;   // bytes a voxel takes in the file
  bool swap = false;           // the file's byte order is not this machine's
  bool scaled = false;
  double slope = 1, inter = 0;
  uint64_t offset = 0;         // vox_offset: where the voxels start in their file
  // Where that file lies in the input: all of it for a .nii; a pair's .img
  // member in its tar.
  uint64_t voxels_at = 0, voxels_size = 0;
  uint32_t channels = 1;
  SampleType type = SampleType::kUint8;  // the values' (as above)
  std::vector<std::pair<std::string, std::string>> keywords;
  uint64_t width() const { return dims[1]; }
  uint64_t height() const { return dims[2]; }
  uint64_t planes() const;  // dim[3] x ... x dim[7]
};

bool is_nifti(const uint8_t* data, size_t size);  // NIfTI-1 or -2, either byte order
// Throws kInvalidArgument for what is not a volume this reads, naming why;
// kResourceExhausted for planes past max_planes. header_only: `data` is
// the start of an inflated .nii.gz, its voxels still to come (checked as
// they are inflated). pair_voxel_bytes: `data` is a pair's .hdr, and its
// .img holds that many bytes (-1: not a pair).
NiftiVolume plan_nifti(const uint8_t* data, size_t size, uint64_t max_planes, bool header_only = false,
                       int64_t pair_voxel_bytes = -1);
// A tar's .hdr (NIfTI-1 or -2, pair magic) and the .img (or .img.gz) of the
// same name. Throws kInvalidArgument naming what is missing or too many.
struct NiftiPair {
  TarSpan header, voxels;
};
NiftiPair nifti_pair(const std::map<std::string, TarSpan>& members);
// The chosen planes (indices over dim[3] and higher, ascending), one after
// another in the sink's bands, converted on every core. A .nii.gz (gzip)
// is inflated as it goes, band by band, never whole: the sink computes one
// band while zlib inflates the next.
void decode_nifti(const uint8_t* data, size_t size, const NiftiVolume& volume, const std::vector<uint64_t>& planes,
                  const std::function<bool()>& cancelled, const RowSink& sink);

}  // namespace imgstat
