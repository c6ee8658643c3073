// What an encoded input is, from its first bytes (never from a file name),
// and its width and height where the header gives them without decoding, so
// that pixel limits are enforced before any decoder allocates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace imgstat {

struct Probe {
  std::string format;  // "PNG", "JPEG", ...; "unknown" when no signature matches
  bool has_size = false;
  uint64_t width = 0;
  uint64_t height = 0;
};

Probe probe(const uint8_t* data, size_t size);

// Formats this build decodes, as probe() names them.
const std::vector<std::string>& supported_formats();
bool is_supported_format(const std::string& format);

}  // namespace imgstat
