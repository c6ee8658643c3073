// The JPEG integrity check without libjpeg, for the files the GPU decodes:
// baseline Huffman, 8-bit, one scan holding every component, gray or YCbCr.
// The host reads the headers and removes the byte stuffing (no Huffman work);
// the entropy-coded data is then checked in parallel (jpeg_entropy.hpp), on
// the GPU (nvjpeg/verify.cu) or, for tests and fuzzing, here. The verdict is
// libjpeg's (check_jpeg's), or kNotCovered where this check cannot vouch for
// that: then libjpeg's check decides.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "decode/jpeg/check.hpp"
#include "decode/jpeg/entropy.hpp"

namespace imgstat {

struct JpegScan {
  bool covered = false;
  std::string why_not;  // when !covered
  uint32_t width = 0, height = 0, components = 0;
  uint32_t h[3] = {}, v[3] = {};  // sampling factors
  uint32_t restart_interval = 0;  // MCUs
  uint64_t mcus = 0;
  size_t data_offset = 0;  // first byte of the entropy-coded data
  jpeg::EntropyTables tables;
};

// Reads the headers up to the first scan. Never throws: a file it does not
// cover says why.
JpegScan parse_jpeg_scan(const uint8_t* data, size_t size);

// The entropy-coded data without stuffing, cut into restart segments.
struct JpegSegments {
  std::vector<uint64_t> start;  // segment s is bytes [start[s], start[s+1]) of the data
  std::vector<int> marker;      // the marker ending segment s; -1: the file ended first
  std::vector<uint64_t> sub_first;  // first subsequence of each segment; the last entry is the total
  uint64_t bytes = 0;
};

// Writes the data into out (room for size bytes) and returns its segments:
// as many as the scan needs and the marker after them.
JpegSegments unstuff_jpeg_scan(const JpegScan& scan, const uint8_t* data, size_t size, uint8_t* out);

// libjpeg's verdict from the synchronized records; kNotCovered also when the
// records are not yet synchronized (*synchronized false: run more rounds).
JpegCheck jpeg_verdict(const JpegScan& scan, const JpegSegments& segments, const jpeg::Record* records,
                       bool* covered, bool* synchronized);

// The whole check on the host, by the same rounds the GPU runs. *covered
// false: libjpeg must decide.
JpegCheck verify_jpeg_on_host(const uint8_t* data, size_t size, bool* covered, int* rounds = nullptr);

}  // namespace imgstat
