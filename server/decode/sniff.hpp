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
  uint64_t width = 0;  // of what will be decoded: a GIF's first frame, not its screen
  uint64_t height = 0;
  // Most bytes a pixel may take while it is decoded: the decoded samples plus
  // what the decoder holds beside them. An upper bound where the header does
  // not say (4 channels of the widest sample the format has).
  uint64_t bytes_per_pixel = 4;
  // Fewest bytes of file that could hold the declared image, where the
  // compression has a known ceiling (deflate's 1032:1, GIF's LZW); 0: none.
  uint64_t least_bytes = 0;
  // A header the library would read past the file's end, allocating what
  // it declares first: why it is refused. Empty: none seen.
  std::string corrupt;
};

Probe probe(const uint8_t* data, size_t size);

// Formats this build decodes, as probe() names them.
const std::vector<std::string>& supported_formats();
bool is_supported_format(const std::string& format);

}  // namespace imgstat
