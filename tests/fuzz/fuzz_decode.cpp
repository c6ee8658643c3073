// libFuzzer: any bytes through decoding: the plan (sniffing, declared sizes,
// limits), then every decoder the plan picks (OpenCV, giflib and its
// animations frame by frame, libwebp, the
// OS/2 BMP reader, the libjpeg checks), and our own decoders called directly.
#include <cstddef>
#include <cstdint>

#include "decode/decode.hpp"
#include "decode/facts.hpp"
#include "decode/jpeg/check.hpp"
#include "decode/sniff.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace imgstat;
  DecodeOptions options;
  options.max_pixels = fuzz::kMaxPixels;
  options.allow_truncated = size % 2 == 1;
  options.max_expanded_bytes = fuzz::kDecodeMemory / 2;  // a .fits.gz, as the analyzer bounds it
  fuzz::expect_clean([&] {
    const DecodePlan plan = plan_decode(data, size, options);
    if (plan.memory_bytes > fuzz::kDecodeMemory) return;  // the budget would refuse it
    if (plan.chosen_planes() > 1) return fuzz::decode_stack(data, size, plan, options);  // an animated GIF's frames
    decode_image(data, size, plan, options);
  });
  std::vector<std::string> warnings;
  // Facts never throw; whatever the bytes, they stay within them (ASan).
  const Facts facts = read_facts(data, size);
  if (facts.exif_orientation > 8 || facts.jpeg_quality > 100) __builtin_trap();
  exif_orientation(data, size);
  fuzz::expect_clean([&] { decode_bmp_core(data, size, options); });
  fuzz::expect_clean([&] {
    const Probe p = probe(data, size);
    if (p.format == "GIF" && p.has_size && p.width * p.height <= options.max_pixels &&
        p.width * p.height * p.bytes_per_pixel <= fuzz::kDecodeMemory)
      decode_gif(data, size, options, &warnings);
  });
  fuzz::expect_clean([&] {
    const Probe p = probe(data, size);
    if (p.format == "WebP" && p.has_size && p.width * p.height <= options.max_pixels &&
        p.width * p.height * p.bytes_per_pixel <= fuzz::kDecodeMemory)
      decode_webp_frames(data, size, &warnings);
  });
  fuzz::expect_clean([&] {
    if (size >= 3 && data[0] == 0xff && data[1] == 0xd8) {
      const JpegHeader h = read_jpeg_header(data, size, options.max_pixels);
      if (jpeg_coefficient_bytes(h) < (uint64_t{64} << 20)) check_jpeg(data, size);
    }
  });
  return 0;
}
