// An uncompressed tar (ustar or pax) read where it lies: what several files
// travel as when they are one input (a Zarr store's files, a NIfTI .hdr/.img
// pair, the slices of a DICOM series). libarchive reads the headers; each
// member's bytes are a span of the tar, never copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace imgstat {

struct TarSpan {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
};

// Limits on what a tar may make this hold: members indexed (each a name
// and a span: about 100 MB at the limit, outside the decode memory).
constexpr uint64_t kMaxTarMembers = uint64_t{1} << 20;

// An uncompressed POSIX tar, by its first header's magic.
bool is_tar(const uint8_t* data, size_t size);
// Its regular members by name ("./" left off). Throws kInvalidArgument for
// a damaged or truncated tar, kResourceExhausted past kMaxTarMembers.
std::map<std::string, TarSpan> tar_members(const uint8_t* data, size_t size);

// What a tar of one input holds, from its members: "Zarr" (.zarray, .zgroup
// or .zattrs), "NIfTI" (a .hdr and its .img), "DICOM" (DICOM files); throws
// kInvalidArgument for any other tar.
std::string tar_content(const std::map<std::string, TarSpan>& members);

}  // namespace imgstat
