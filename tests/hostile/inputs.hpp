// Hostile inputs, made in the test: headers that declare far more than their
// files hold, for every format the server decodes.
#pragma once

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace imgstat::testing {

inline void put_be32(std::string& s, uint32_t v) {
  for (int i = 3; i >= 0; --i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}
inline void put_be16(std::string& s, uint32_t v) {
  s += static_cast<char>((v >> 8) & 0xff);
  s += static_cast<char>(v & 0xff);
}
inline void put_le16(std::string& s, uint32_t v) {
  s += static_cast<char>(v & 0xff);
  s += static_cast<char>((v >> 8) & 0xff);
}
inline void put_le32(std::string& s, uint32_t v) {
  put_le16(s, v & 0xffff);
  put_le16(s, v >> 16);
}

inline std::string png_chunk(const char* type, const std::string& data) {
  std::string c;
  put_be32(c, static_cast<uint32_t>(data.size()));
  std::string body = std::string(type, 4) + data;
  c += body;
  put_be32(c, static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(body.data()), body.size())));
  return c;
}

// A PNG of zeros: width x height, colour type and depth as given; the IDAT
// is real deflate data (a whole, valid file), built a row at a time.
inline std::string zero_png(uint32_t width, uint32_t height, int colour, int depth) {
  const int channels = colour == 0 ? 1 : colour == 2 ? 3 : colour == 4 ? 2 : colour == 6 ? 4 : 1;
  const size_t row = 1 + (static_cast<size_t>(width) * channels * depth + 7) / 8;
  std::string ihdr;
  put_be32(ihdr, width);
  put_be32(ihdr, height);
  ihdr += static_cast<char>(depth);
  ihdr += static_cast<char>(colour);
  ihdr += std::string(3, '\0');
  z_stream z{};
  deflateInit(&z, 9);
  std::vector<unsigned char> in(row, 0), out(1 << 20);
  std::string idat;
  for (uint32_t y = 0; y < height; ++y) {
    z.next_in = in.data();
    z.avail_in = static_cast<uInt>(row);
    const int flush = y + 1 == height ? Z_FINISH : Z_NO_FLUSH;
    do {
      z.next_out = out.data();
      z.avail_out = static_cast<uInt>(out.size());
      deflate(&z, flush);
      idat.append(reinterpret_cast<char*>(out.data()), out.size() - z.avail_out);
    } while (z.avail_out == 0);
  }
  deflateEnd(&z);
  return std::string("\x89PNG\r\n\x1a\n", 8) + png_chunk("IHDR", ihdr) + png_chunk("IDAT", idat) + png_chunk("IEND", "");
}

// 35 bytes: a 1x1 logical screen and one 65535x65535 frame.
inline std::string giant_frame_gif(uint32_t w = 65535, uint32_t h = 65535) {
  std::string g = "GIF89a";
  put_le16(g, 1);
  put_le16(g, 1);
  g += std::string("\x80\x00\x00", 3);  // global colour table of 2
  g += std::string("\x00\x00\x00\xff\xff\xff", 6);
  g += '\x2c';
  put_le16(g, 0);
  put_le16(g, 0);
  put_le16(g, w);
  put_le16(g, h);
  g += '\x00';
  g += std::string("\x02\x02\x44\x01\x00\x3b", 6);  // LZW min size 2, one tiny block, trailer
  return g;
}

// An animated GIF on a w x h screen: frames 1x1 frames at (0, 0), each one
// pixel of colour 1, a graphic control block (delay 10 ms) before each;
// giant: frame 1 declares 65535x65535 with one pixel's data; damaged: a
// byte that starts no record follows the frames instead of the trailer.
inline std::string gif_frames(uint32_t frames, uint32_t w = 1, uint32_t h = 1, bool giant = false, bool damaged = false) {
  std::string g = "GIF89a";
  put_le16(g, w);
  put_le16(g, h);
  g += std::string("\x80\x00\x00", 3);  // global colour table of 2
  g += std::string("\x00\x00\x00\xff\xff\xff", 6);
  for (uint32_t f = 0; f < frames; ++f) {
    g += std::string("\x21\xf9\x04\x00\x01\x00\x00\x00", 8);
    g += '\x2c';
    put_le16(g, 0);
    put_le16(g, 0);
    put_le16(g, giant && f == 1 ? 65535 : 1);
    put_le16(g, giant && f == 1 ? 65535 : 1);
    g += '\x00';
    g += std::string("\x02\x02\x4c\x01\x00", 5);  // LZW min size 2: clear, 1, end
  }
  g += damaged ? '\x99' : '\x3b';
  return g;
}

// An APNG of gray 8-bit frames on a w x h canvas: a default image that is
// no frame (a 1x1 IDAT, never read), then `frames` frames of one pixel
// (value 7) at (0, 0) with a delay of 10 ms; giant: frame 1 declares
// 65535x65535; cut: the file ends inside the last frame's data.
inline std::string apng_frames(uint32_t frames, uint32_t w = 1, uint32_t h = 1, bool giant = false, bool cut = false) {
  std::string ihdr;
  put_be32(ihdr, w);
  put_be32(ihdr, h);
  ihdr += std::string("\x08\x00\x00\x00\x00", 5);
  const unsigned char row[2] = {0, 7};
  unsigned char packed[64];
  uLongf n = sizeof packed;
  compress(packed, &n, row, 2);
  const std::string pixel(reinterpret_cast<char*>(packed), n);
  std::string actl;
  put_be32(actl, frames);
  put_be32(actl, 0);
  std::string a = std::string("\x89PNG\r\n\x1a\n", 8) + png_chunk("IHDR", ihdr) + png_chunk("acTL", actl) +
                  png_chunk("IDAT", pixel);
  uint32_t seq = 0;
  for (uint32_t f = 0; f < frames; ++f) {
    std::string fctl;
    put_be32(fctl, seq++);
    put_be32(fctl, giant && f == 1 ? 65535 : 1);
    put_be32(fctl, giant && f == 1 ? 65535 : 1);
    put_be32(fctl, 0);
    put_be32(fctl, 0);
    fctl += std::string("\x00\x01\x00\x64\x00\x00", 6);  // 1/100 s, dispose none, blend source
    std::string fdat;
    put_be32(fdat, seq++);
    a += png_chunk("fcTL", fctl) + png_chunk("fdAT", fdat + pixel);
  }
  if (cut) return a.substr(0, a.size() - 6);
  return a + png_chunk("IEND", "");
}

// OS/2 1.x BMP (12-byte header), 8-bit palette, with its pixel data present
// when with_pixels (rows padded to 4 bytes, bottom-up).
inline std::string os2_bmp(uint32_t w, uint32_t h, bool with_pixels, std::vector<uint8_t>* indices = nullptr) {
  const uint32_t palette = 256 * 3, offset = 14 + 12 + palette;
  const uint32_t row = (w + 3) / 4 * 4;
  std::string b = "BM";
  put_le32(b, with_pixels ? offset + row * h : offset);
  put_le32(b, 0);
  put_le32(b, offset);
  put_le32(b, 12);
  put_le16(b, w);
  put_le16(b, h);
  put_le16(b, 1);
  put_le16(b, 8);
  for (int i = 0; i < 256; ++i) b += std::string(3, static_cast<char>(i));  // grays
  if (with_pixels) {
    for (uint32_t y = 0; y < h; ++y)
      for (uint32_t x = 0; x < row; ++x) {
        const uint8_t v = x < w ? static_cast<uint8_t>((x * 7 + y * 13) & 0xff) : 0;
        b += static_cast<char>(v);
        if (x < w && indices) indices->push_back(v);
      }
  }
  return b;
}

// Little-endian classic TIFF: one IFD with width, height, bits per sample
// (one value), samples per pixel, sample format, and no strips.
inline std::string tiff_declaring(uint32_t w, uint32_t h, uint16_t bits, uint16_t samples, uint16_t format) {
  std::string t = "II*";
  t += '\0';
  put_le32(t, 8);
  struct Entry {
    uint16_t tag, type;
    uint32_t count, value;
  };
  const std::vector<Entry> entries = {{256, 4, 1, w},       {257, 4, 1, h}, {258, 3, 1, bits}, {262, 3, 1, 1},
                                      {277, 3, 1, samples}, {339, 3, 1, format}};
  put_le16(t, static_cast<uint32_t>(entries.size()));
  for (const Entry& e : entries) {
    put_le16(t, e.tag);
    put_le16(t, e.type);
    put_le32(t, e.count);
    put_le32(t, e.value);
  }
  put_le32(t, 0);
  return t;
}

// A TIFF of `pages` 1x1 gray pages sharing one pixel, each directory
// pointing to the next; the last to `last_next` (0: the end; an offset:
// back into the chain, a loop; past the file: a damaged chain). Page
// `big_page`, if below pages, declares w x h float64 RGBA instead.
inline std::string tiff_pages(uint32_t pages, uint32_t last_next = 0, uint32_t big_page = UINT32_MAX,
                              uint32_t w = 32768, uint32_t h = 32768) {
  constexpr uint32_t kIfdBytes = 2 + 9 * 12 + 4;
  std::string t = "II*";
  t += '\0';
  put_le32(t, 12);  // the first directory, after the pixel
  put_le32(t, 0x2a);  // the pixel every page points to, at offset 8
  for (uint32_t p = 0; p < pages; ++p) {
    const bool big = p == big_page;
    const uint32_t next = p + 1 < pages ? 12 + (p + 1) * kIfdBytes : last_next;
    const uint32_t entries[9][4] = {{256, 4, 1, big ? w : 1},     {257, 4, 1, big ? h : 1},
                                    {258, 3, 1, big ? 64u : 8u},  {262, 3, 1, 1},
                                    {273, 4, 1, 8},               {277, 3, 1, big ? 4u : 1u},
                                    {278, 4, 1, 1},               {279, 4, 1, 1},
                                    {339, 3, 1, big ? 3u : 1u}};
    put_le16(t, 9);
    for (const auto& e : entries) {
      put_le16(t, e[0]);
      put_le16(t, e[1]);
      put_le32(t, e[2]);
      put_le32(t, e[3]);
    }
    put_le32(t, next);
  }
  return t;
}

// Headers of every other format, each declaring w x h with almost no data.
inline std::vector<std::pair<std::string, std::string>> huge_headers(uint32_t w, uint32_t h) {
  std::vector<std::pair<std::string, std::string>> out;
  {
    std::string ihdr;
    put_be32(ihdr, w);
    put_be32(ihdr, h);
    ihdr += std::string("\x08\x02\x00\x00\x00", 5);
    out.push_back({"PNG", std::string("\x89PNG\r\n\x1a\n", 8) + png_chunk("IHDR", ihdr) + png_chunk("IEND", "")});
  }
  {
    // A whole small JPEG whose frame header then says w x h (at most 65500,
    // libjpeg's own limit).
    std::vector<uchar> enc;
    cv::imencode(".jpg", cv::Mat(16, 16, CV_8UC1, cv::Scalar(77)), enc);
    std::string j(enc.begin(), enc.end());
    const size_t sof = j.find("\xff\xc0");
    std::string size;
    put_be16(size, h > 65500 ? 65500 : h);
    put_be16(size, w > 65500 ? 65500 : w);
    j.replace(sof + 5, 4, size);
    out.push_back({"JPEG", j});
  }
  out.push_back({"TIFF", tiff_declaring(w, h, 8, 3, 1)});
  {
    std::string b = "BM";
    put_le32(b, 54);
    put_le32(b, 0);
    put_le32(b, 54);
    put_le32(b, 40);
    put_le32(b, w);
    put_le32(b, h);
    put_le16(b, 1);
    put_le16(b, 24);
    b += std::string(24, '\0');
    out.push_back({"BMP", b});
  }
  {
    std::string v = "RIFF";
    put_le32(v, 22);
    v += "WEBPVP8X";
    put_le32(v, 10);
    v += std::string(4, '\0');
    const uint32_t ww = (w > (1u << 24) ? 1u << 24 : w) - 1, hh = (h > (1u << 24) ? 1u << 24 : h) - 1;
    v += std::string{static_cast<char>(ww & 0xff), static_cast<char>((ww >> 8) & 0xff), static_cast<char>(ww >> 16)};
    v += std::string{static_cast<char>(hh & 0xff), static_cast<char>((hh >> 8) & 0xff), static_cast<char>(hh >> 16)};
    out.push_back({"WebP", v});
  }
  out.push_back({"GIF", giant_frame_gif(w > 65535 ? 65535 : w, h > 65535 ? 65535 : h)});
  {
    std::string e("\x76\x2f\x31\x01\x02\x00\x00\x00", 8);
    e += "dataWindow";
    e += '\0';
    e += "box2i";
    e += '\0';
    put_le32(e, 16);
    put_le32(e, 0);
    put_le32(e, 0);
    put_le32(e, w - 1);
    put_le32(e, h - 1);
    e += '\0';
    out.push_back({"EXR", e});
  }
  out.push_back({"HDR", "#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y " + std::to_string(h) + " +X " + std::to_string(w) + "\n"});
  out.push_back({"PNM", "P6\n" + std::to_string(w) + " " + std::to_string(h) + "\n255\n"});
  out.push_back({"PAM", "P7\nWIDTH " + std::to_string(w) + "\nHEIGHT " + std::to_string(h) +
                            "\nDEPTH 4\nMAXVAL 255\nTUPLTYPE RGB_ALPHA\nENDHDR\n"});
  out.push_back({"PFM", "PF\n" + std::to_string(w) + " " + std::to_string(h) + "\n-1.0\n"});
  {
    std::string j("\xff\x4f\xff\x51", 4);
    put_be16(j, 41);
    put_be16(j, 0);
    put_be32(j, w);
    put_be32(j, h);
    put_be32(j, 0);
    put_be32(j, 0);
    put_be32(j, w);
    put_be32(j, h);
    put_be32(j, 0);
    put_be32(j, 0);
    put_be16(j, 3);
    j += std::string("\x07\x01\x01\x07\x01\x01\x07\x01\x01", 9);
    j += std::string("\xff\xd9", 2);
    out.push_back({"JPEG2000", j});
  }
  {
    std::string r("\x59\xa6\x6a\x95", 4);
    put_be32(r, w);
    put_be32(r, h);
    put_be32(r, 24);
    put_be32(r, 0);
    put_be32(r, 1);
    put_be32(r, 0);
    put_be32(r, 0);
    out.push_back({"SunRaster", r});
  }
  return out;
}

}  // namespace imgstat::testing
