// libFuzzer, differential: wherever the GPU's JPEG check (its algorithm, run
// on the host) vouches for a file, libjpeg's check must reach the same
// verdict: whole (with the same warnings), truncated, or corrupt for the same
// reason. A disagreement would give a caller a different answer depending on
// which engine served it, so it aborts like a crash.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "decode/jpeg/verify.hpp"
#include "fuzz_support.hpp"
#include "../jpeg_samples.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace imgstat;
  if (size < 4 || data[0] != 0xff || data[1] != 0xd8) return 0;
  const JpegScan scan = parse_jpeg_scan(data, size);
  if (!scan.covered || scan.mcus > (uint64_t{1} << 16)) return -1;  // keep the corpus to files the check covers
  fuzz::expect_clean([&] {
    bool covered = false;
    const JpegCheck ours = verify_jpeg_on_host(data, size, &covered);
    if (!covered) return;
    const JpegCheck lib = check_jpeg(data, size);
    const std::string a = testing::verdict_text(ours), b = testing::verdict_text(lib);
    if (a != b) {
      std::fprintf(stderr, "the GPU's JPEG check says \"%s\", libjpeg says \"%s\"\n", a.c_str(), b.c_str());
      std::abort();
    }
  });
  return 0;
}
