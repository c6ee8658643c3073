#include "decode/tar/tar.hpp"

#include <archive.h>
#include <archive_entry.h>

#include <cstring>
#include <memory>

#include "decode/decode.hpp"
#include "decode/dicom/dicom.hpp"
#include "decode/nifti/nifti.hpp"

namespace imgstat {

// "ustar" at 257 alone is five bytes any file may hold there (a TIFF's strip
// did, and was refused as a damaged tar): the header's checksum must hold too,
// as POSIX defines it (every byte summed, the checksum field as spaces; the
// field octal, ended by NUL or space). Old tars summed signed chars: either.
bool is_tar(const uint8_t* data, size_t size) {
  if (size < 512 || std::memcmp(data + 257, "ustar", 5) != 0) return false;
  uint64_t stored = 0;
  size_t i = 148;
  while (i < 156 && data[i] == ' ') ++i;
  const size_t digits = i;
  for (; i < 156 && data[i] >= '0' && data[i] <= '7'; ++i) stored = stored * 8 + (data[i] - '0');
  if (i == digits || (i < 156 && data[i] != 0 && data[i] != ' ')) return false;
  uint64_t sum = 0;
  int64_t signed_sum = 0;
  for (size_t k = 0; k < 512; ++k) {
    const uint8_t b = k >= 148 && k < 156 ? uint8_t{' '} : data[k];
    sum += b;
    signed_sum += static_cast<int8_t>(b);
  }
  return stored == sum || static_cast<int64_t>(stored) == signed_sum;
}

std::map<std::string, TarSpan> tar_members(const uint8_t* data, size_t size) {
  std::unique_ptr<archive, int (*)(archive*)> a(archive_read_new(), archive_read_free);
  if (!a) fail(ErrorCode::kResourceExhausted, "tar: libarchive could not start");
  archive_read_support_format_tar(a.get());
  if (archive_read_open_memory(a.get(), data, size) != ARCHIVE_OK)
    invalid_data(std::string("tar: not readable (libarchive: ") + archive_error_string(a.get()) + ")");
  std::map<std::string, TarSpan> out;
  archive_entry* e = nullptr;
  for (;;) {
    const int rc = archive_read_next_header(a.get(), &e);
    if (rc == ARCHIVE_EOF) break;
    if (rc < ARCHIVE_WARN) {
      const char* why = archive_error_string(a.get());
      invalid_data(std::string("tar: damaged or truncated (libarchive: ") + (why ? why : "no reason") + ")");
    }
    if (archive_entry_filetype(e) != AE_IFREG) continue;
    if (out.size() >= kMaxTarMembers)
      fail(ErrorCode::kResourceExhausted, "tar: more than " + std::to_string(kMaxTarMembers) + " files");
    std::string name = archive_entry_pathname(e) ? archive_entry_pathname(e) : "";
    while (name.rfind("./", 0) == 0) name.erase(0, 2);
    const la_int64_t declared = archive_entry_size(e);
    const void* block = nullptr;
    size_t got = 0;
    la_int64_t at = 0;
    TarSpan span;
    if (declared > 0) {
      const int r = archive_read_data_block(a.get(), &block, &got, &at);
      // A member of an uncompressed tar in memory comes as one block where it
      // lies (libarchive reads ahead in place): its bytes are not copied.
      const auto* b = static_cast<const uint8_t*>(block);
      if (r != ARCHIVE_OK || at != 0 || got != static_cast<uint64_t>(declared) || b < data || b + got > data + size)
        invalid_data("tar: its member " + name + " is not whole where it lies (a sparse or truncated member)");
      span = TarSpan{b, got};
    }
    out[name] = span;
  }
  return out;
}

namespace {
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
}  // namespace

std::string tar_content(const std::map<std::string, TarSpan>& members) {
  size_t headers = 0, dicom = 0;
  for (const auto& [name, span] : members) {
    const std::string key = "/" + name;
    if (ends_with(key, "/.zarray") || ends_with(key, "/.zgroup") || ends_with(key, "/.zattrs")) return "Zarr";
    if (ends_with(name, ".hdr") && is_nifti(span.data, span.size)) ++headers;
    if (is_dicom(span.data, span.size)) ++dicom;
  }
  if (headers > 0) return "NIfTI";
  if (dicom > 0) return "DICOM";
  invalid_data("the tar holds no Zarr store (.zarray, .zgroup or .zattrs), NIfTI pair or DICOM files: "
               "archives of images are not read yet");
}

}  // namespace imgstat
