// Files that come gzip-compressed (.fits.gz, .nii.gz) and DICOM's deflated
// data sets: inflated whole before their reader plans them, within a bound,
// by zlib.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace imgstat {

bool is_gzip(const uint8_t* data, size_t size);
// The first `want` inflated bytes of a gzip file (fewer where it holds
// fewer or they are damaged): enough to sniff what it holds.
std::vector<uint8_t> gzip_head(const uint8_t* data, size_t size, size_t want);
// A gzip file's bytes inflated (its first member); more than max_bytes are
// refused (kResourceExhausted), damaged data too (kInvalidArgument), both
// naming `what`.
std::vector<uint8_t> inflate_gzip(const uint8_t* data, size_t size, uint64_t max_bytes, const std::string& what);
// The same for a raw deflate stream (RFC 1951: a DICOM deflated data set).
std::vector<uint8_t> inflate_raw(const uint8_t* data, size_t size, uint64_t max_bytes, const std::string& what);

}  // namespace imgstat
