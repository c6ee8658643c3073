// libFuzzer, differential: a JPEG with restart markers decodes in runs on
// several cores, and must answer exactly as one pass does (pixels, warnings,
// error). Inputs that are not a JPEG drive a generator instead: the first
// bytes choose a size, subsampling, restart interval and quality (libjpeg
// writes the file), the rest are (offset, xor) pairs that damage it, so the
// fuzzer reaches files whose restart structure holds or almost holds.
#include <tbb/task_arena.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "decode/decode.hpp"
#include "fuzz_support.hpp"
#include "../jpeg_samples.hpp"

namespace {

std::string outcome(const std::string& f, std::vector<uint8_t>* pixels) {
  using namespace imgstat;
  try {
    DecodeOptions o;
    o.max_pixels = uint64_t{1} << 22;
    DecodedImage d = decode_image(reinterpret_cast<const uint8_t*>(f.data()), f.size(), o);
    const Layout& l = d.view.layout;
    for (uint64_t y = 0; y < l.height; ++y) {
      const uint8_t* row = static_cast<const uint8_t*>(d.view.data) + y * l.stride();
      pixels->insert(pixels->end(), row, row + l.width * l.channels);
    }
    std::string s = d.decoder;
    for (const std::string& w : d.warnings) s += " [" + w + "]";
    return s;
  } catch (const Error& e) {
    return "error: " + std::string(e.what());
  }
}

std::string generated(const uint8_t* data, size_t size) {
  using namespace imgstat::testing;
  const JpegSampling& s = jpeg_samplings()[data[0] % jpeg_samplings().size()];
  const int w = 1 + (data[1] | (data[2] & 1) << 8), h = 1 + (data[3] | (data[2] & 2) << 7);
  const int restart = data[4] % 40;
  std::string f = write_jpeg(w, h, s, restart, 30 + data[5] % 70, data[6]);
  for (size_t i = 7; i + 3 <= size; i += 3) {
    const size_t at = (size_t{data[i]} << 8 | data[i + 1]) * f.size() / 65536;
    f[at] = static_cast<char>(f[at] ^ data[i + 2]);
  }
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 7) return 0;
  const bool jpeg = data[0] == 0xff && data[1] == 0xd8;
  const std::string f = jpeg ? std::string(reinterpret_cast<const char*>(data), size) : generated(data, size);
  static tbb::task_arena one(1), four(4);
  imgstat::fuzz::expect_clean([&] {
    std::vector<uint8_t> a, b;
    const std::string want = one.execute([&] { return outcome(f, &a); });
    const std::string got = four.execute([&] { return outcome(f, &b); });
    if (want != got || a != b) {
      std::fprintf(stderr, "in one pass: \"%s\"; in runs: \"%s\"%s\n", want.c_str(), got.c_str(),
                   a != b ? " (pixels differ)" : "");
      std::abort();
    }
  });
  return 0;
}
