// JPEGs written by libjpeg-turbo with every chroma subsampling it writes,
// odd sizes and restart intervals, and ways to damage them: for the
// verifier's and the GPU decoder's tests.
#pragma once

#include <jpeglib.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "decode/jpeg/check.hpp"

namespace imgstat::testing {

// A check's verdict in one line, to compare two checks' verdicts whole.
inline std::string verdict_text(const JpegCheck& c) {
  if (!c.ok) return "error: " + c.error;
  if (c.corrupt) return "corrupt: " + c.corrupt_reason;
  if (c.truncated) return "truncated";
  std::string w;
  for (const std::string& s : c.warnings) w += " [" + s + "]";
  return "whole" + w;
}

struct JpegSampling {
  const char* name;
  int components;
  int h, v;  // luma factors; chroma 1x1
};

inline const std::vector<JpegSampling>& jpeg_samplings() {
  static const std::vector<JpegSampling> all = {
      {"4:4:4", 3, 1, 1}, {"4:2:2", 3, 2, 1}, {"4:2:0", 3, 2, 2},
      {"4:4:0", 3, 1, 2}, {"4:1:1", 3, 4, 1}, {"gray", 1, 1, 1}};
  return all;
}

// A photo-like image: smooth gradients with noise, so every code length occurs.
inline std::vector<uint8_t> jpeg_test_pixels(int w, int h, int channels, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * channels);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < channels; ++c) {
        const int base = (x * (3 + c) + y * (5 - c) + static_cast<int>(seed) * 7) % 256;
        const int v = base + static_cast<int>(rng() % 41) - 20;
        px[(static_cast<size_t>(y) * w + x) * channels + c] = static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
      }
  return px;
}

// restart: MCUs per restart interval, 0 for none.
inline std::string write_jpeg(int w, int h, const JpegSampling& s, int restart, int quality, uint32_t seed) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = static_cast<JDIMENSION>(w);
  c.image_height = static_cast<JDIMENSION>(h);
  c.input_components = s.components;
  c.in_color_space = s.components == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  c.comp_info[0].h_samp_factor = s.h;
  c.comp_info[0].v_samp_factor = s.v;
  for (int i = 1; i < s.components; ++i) c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
  c.restart_interval = static_cast<unsigned>(restart);
  jpeg_start_compress(&c, TRUE);
  const std::vector<uint8_t> px = jpeg_test_pixels(w, h, s.components, seed);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(px.data() + static_cast<size_t>(c.next_scanline) * w * s.components);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::string out(reinterpret_cast<const char*>(buf), size);
  std::free(buf);
  return out;
}

// The first byte after the first SOS segment.
inline size_t jpeg_scan_start(const std::string& f) {
  for (size_t i = 2; i + 4 < f.size();) {
    const uint8_t m = static_cast<uint8_t>(f[i + 1]);
    const size_t len = (size_t{static_cast<uint8_t>(f[i + 2])} << 8) | static_cast<uint8_t>(f[i + 3]);
    if (m == 0xda) return i + 2 + len;
    i += 2 + len;
  }
  return f.size();
}

// Damaged versions: cut at 64 offsets and around markers, each with and
// without an end-of-image marker appended, and single bits flipped across
// the entropy-coded data.
inline std::vector<std::string> damaged_jpegs(const std::string& f, uint32_t seed, int flips = 48) {
  std::vector<std::string> out;
  std::vector<size_t> cuts;
  for (int i = 1; i <= 64; ++i) cuts.push_back(f.size() * i / 65);
  std::vector<size_t> markers;
  for (size_t i = 0; i + 1 < f.size(); ++i)
    if (static_cast<uint8_t>(f[i]) == 0xff && static_cast<uint8_t>(f[i + 1]) != 0) markers.push_back(i);
  // Around every marker, or 64 of them spread over a file with restart markers.
  const size_t step = markers.size() > 64 ? markers.size() / 64 : 1;
  for (size_t m = 0; m < markers.size(); m += step)
    for (size_t d : {size_t{0}, size_t{1}, size_t{2}, size_t{3}}) cuts.push_back(markers[m] + d > 0 ? markers[m] + d - 1 : 0);
  for (size_t cut : cuts) {
    if (cut < 4 || cut >= f.size()) continue;
    out.push_back(f.substr(0, cut));
    out.push_back(f.substr(0, cut) + "\xff\xd9");
  }
  const size_t start = jpeg_scan_start(f);
  std::mt19937 rng(seed);
  if (start + 2 < f.size())
    for (int i = 0; i < flips; ++i) {
      std::string g = f;
      const size_t at = start + rng() % (f.size() - 2 - start);
      g[at] = static_cast<char>(g[at] ^ (1 << (rng() % 8)));
      out.push_back(std::move(g));
    }
  return out;
}

// Stray bytes before restart markers and the end marker (`count` of them,
// spread over the file): one pass warns of extraneous data, whether its
// entropy decoder had read them ahead or not.
inline std::vector<std::string> stray_byte_jpegs(const std::string& f, size_t count) {
  std::vector<size_t> markers;
  for (size_t i = 0; i + 1 < f.size(); ++i)
    if (static_cast<uint8_t>(f[i]) == 0xff && static_cast<uint8_t>(f[i + 1]) >= 0xd0 &&
        static_cast<uint8_t>(f[i + 1]) <= 0xd9)
      markers.push_back(i);
  std::vector<std::string> out;
  const size_t step = std::max<size_t>(1, markers.size() / count);
  for (size_t m = 0; m < markers.size(); m += step)
    for (size_t n : {1, 3}) out.push_back(f.substr(0, markers[m]) + std::string(n, '\x5a') + f.substr(markers[m]));
  return out;
}

}  // namespace imgstat::testing
