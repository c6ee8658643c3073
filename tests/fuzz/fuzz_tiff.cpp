// libFuzzer, differential: any bytes that sniff as TIFF, decoded by imgstat
// (the direct path, or OpenCV where it leaves the file) and by OpenCV's
// imdecode, must answer as tiff_reference.hpp says: OpenCV's pixels,
// libtiff's own beyond OpenCV, or a refusal naming what is not supported.
// Never an OK with other pixels. Seeded also with tests/fuzz/seeds (OME
// and ImageJ stacks, files of several series).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "decode/decode.hpp"
#include "fuzz_support.hpp"
#include "tiff_reference.hpp"

// OpenCV reads its pixel limit once, at its first decode, which may come
// before imgstat's (a file imgstat's plan refuses goes to OpenCV alone).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("OPENCV_IO_MAX_IMAGE_PIXELS", std::to_string(imgstat::fuzz::kMaxPixels).c_str(), 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace imgstat;
  if (size < 8 || !((data[0] == 'I' && data[1] == 'I') || (data[0] == 'M' && data[1] == 'M'))) return 0;
  testing::quiet_library_messages();
  const std::string f(reinterpret_cast<const char*>(data), size);
  DecodeOptions options;
  options.max_pixels = fuzz::kMaxPixels;
  // What the budget would refuse is not decoded, by imgstat or by OpenCV.
  bool pages_as_channels = false;
  try {
    const DecodePlan plan = plan_decode(data, size, options);
    if (plan.memory_bytes > fuzz::kDecodeMemory) return 0;
    pages_as_channels = plan.pages_per_plane > 1;
  } catch (const Error&) {
  }
  // Every plane of a multi-page file, through the streamed decoder into a
  // sink that keeps one band: a clean answer or a clean error, whatever the
  // directories say.
  fuzz::expect_clean([&] {
    const DecodePlan plan = plan_decode(data, size, options);
    fuzz::decode_stack(data, size, plan, options);
    // A file of several series (pages of other kinds, OME images): its last too.
    if (plan.series_count > 1) {
      DecodeOptions last = options;
      last.series = plan.series_count - 1;
      const DecodePlan other = plan_decode(data, size, last);
      if (other.memory_bytes <= fuzz::kDecodeMemory) fuzz::decode_stack(data, size, other, last);
    }
  });
  // The reference is OpenCV's reading: not asked where OpenCV itself would
  // allocate past the harness's limit (its strip buffer follows RowsPerStrip
  // as declared, whatever the image's height).
  if (testing::opencv_reader_bytes(f) > fuzz::kDecodeMemory) return 0;
  // A plane made of C one-channel pages (ImageJ, OME) is not OpenCV's first page.
  if (pages_as_channels) return 0;
  const testing::DecoderAnswer ours = testing::imgstat_answer(f, options), opencv = testing::opencv_answer(f);
  const std::string fault = testing::tiff_answer_fault(f, ours, opencv);
  if (!fault.empty()) {
    std::printf("TIFF answer fault: %s\n", fault.c_str());  // stderr is the library catcher's
    std::fflush(stdout);
    std::abort();
  }
  return 0;
}
