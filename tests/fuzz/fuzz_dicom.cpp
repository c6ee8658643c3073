// libFuzzer: any bytes that sniff as DICOM (DICM at 128), planned and
// decoded by GDCM as imgstat drives it: the attributes, the modality
// values, padding and MONOCHROME1, every frame through the streamed decoder into a
// sink that keeps one band; as the input picks, read as a map over an image
// of a few planes (a SEG placed on them). A clean answer or a clean error, whatever the
// headers declare; no allocation past the decode memory (scripts/sanitize's
// -malloc_limit_mb). Seeded with tests/fuzz/seeds' DICOM files.
#include "decode/decode.hpp"
#include "decode/dicom/dicom.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace imgstat;
  if (!is_dicom(data, size)) return 0;
  DecodeOptions options;
  options.max_pixels = fuzz::kMaxPixels;
  options.max_planes = 64;
  options.stored_values = data[size - 1] & 1;  // either reading, as the input picks
  if (data[size - 1] & 2) {
    auto places = std::make_shared<std::vector<DicomPlace>>(4);
    for (size_t k = 0; k < places->size(); ++k) {
      (*places)[k].sop_instance = "1.2.3." + std::to_string(k % 2);
      (*places)[k].frame = k / 2 + 1;
      (*places)[k].has_position = k != 3;
      (*places)[k].position[2] = static_cast<double>(k);
    }
    options.map = data[size - 1] & 4 ? DecodeOptions::Map::kMask : DecodeOptions::Map::kLabels;
    options.dicom_places = places;
  }
  fuzz::decode_every_series(data, size, options);
  return 0;
}
