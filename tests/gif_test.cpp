// The animation decoder's LZW (decode/gif/lzw.hpp) against giflib's own on
// the same code streams, written by giflib's encoder: every colour table
// size (1 to 8 bits), odd sizes, noise, runs and constant frames, read a
// row at a time and in pieces that cut strings; then damaged streams, which
// fail cleanly. Frame compositing is checked against Pillow in tests/planes.
#include <gif_lib.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "decode/gif/lzw.hpp"

namespace imgstat {
namespace {

int put(GifFileType* g, const GifByteType* buf, int n) {
  static_cast<std::string*>(g->UserData)->append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
  return n;
}

struct Source {
  const std::string& s;
  size_t pos = 0;
};
int get(GifFileType* g, GifByteType* buf, int n) {
  auto* src = static_cast<Source*>(g->UserData);
  const size_t k = std::min<size_t>(static_cast<size_t>(n), src->s.size() - src->pos);
  std::memcpy(buf, src->s.data() + src->pos, k);
  src->pos += k;
  return static_cast<int>(k);
}

// A one-frame GIF of these indices, written by giflib.
std::string encode(const std::vector<uint8_t>& idx, int w, int h, int bits) {
  std::string out;
  int err = 0;
  GifFileType* g = EGifOpen(&out, put, &err);
  EXPECT_NE(g, nullptr);
  ColorMapObject* map = GifMakeMapObject(1 << bits, nullptr);
  EGifPutScreenDesc(g, w, h, bits, 0, map);
  EGifPutImageDesc(g, 0, 0, w, h, false, nullptr);
  for (int y = 0; y < h; ++y) EGifPutLine(g, const_cast<uint8_t*>(&idx[size_t(y) * w]), w);
  GifFreeMapObject(map);
  EGifCloseFile(g, &err);
  return out;
}

// The frame's code size and joined sub-blocks, as the animation decoder takes them.
std::vector<uint8_t> codes_of(const std::string& file, int* code_size) {
  Source src{file};
  int err = 0;
  GifFileType* g = DGifOpen(&src, get, &err);
  std::vector<uint8_t> codes;
  GifRecordType type;
  while (DGifGetRecordType(g, &type) == GIF_OK && type != IMAGE_DESC_RECORD_TYPE) {
  }
  DGifGetImageDesc(g);
  GifByteType* block = nullptr;
  DGifGetCode(g, code_size, &block);
  while (block) {
    codes.insert(codes.end(), block + 1, block + 1 + block[0]);
    DGifGetCodeNext(g, &block);
  }
  DGifCloseFile(g, &err);
  return codes;
}

// giflib's DGifGetLine of the whole frame.
std::vector<uint8_t> giflib_indices(const std::string& file, int w, int h) {
  Source src{file};
  int err = 0;
  GifFileType* g = DGifOpen(&src, get, &err);
  GifRecordType type;
  while (DGifGetRecordType(g, &type) == GIF_OK && type != IMAGE_DESC_RECORD_TYPE) {
  }
  DGifGetImageDesc(g);
  std::vector<uint8_t> idx(size_t(w) * h);
  for (int y = 0; y < h; ++y) EXPECT_EQ(DGifGetLine(g, &idx[size_t(y) * w], w), GIF_OK);
  DGifCloseFile(g, &err);
  return idx;
}

TEST(GifLzw, EqualsGiflibForEveryCodeSizeShapeAndContent) {
  std::mt19937 rng(53);
  int frames = 0;
  for (int bits = 1; bits <= 8; ++bits)
    for (auto [w, h] : {std::pair{1, 1}, {7, 3}, {61, 37}, {640, 97}, {3, 1000}})
      for (int content = 0; content < 3; ++content) {
        std::vector<uint8_t> idx(size_t(w) * h);
        const int colours = 1 << bits;
        for (size_t i = 0; i < idx.size(); ++i)
          idx[i] = content == 0   ? uint8_t(rng() % colours)           // noise: the table fills and is cleared
                   : content == 1 ? uint8_t((i / 23 + i % 5) % colours)  // runs: long strings
                                  : uint8_t(colours - 1);                // constant: the longest strings
        const std::string file = encode(idx, w, h, bits);
        const std::vector<uint8_t> want = giflib_indices(file, w, h);
        ASSERT_EQ(want, idx) << "giflib's own round trip";
        int code_size = 0;
        const std::vector<uint8_t> codes = codes_of(file, &code_size);
        SCOPED_TRACE(std::to_string(bits) + " bits, " + std::to_string(w) + "x" + std::to_string(h) + ", content " +
                     std::to_string(content));
        {  // a row at a time, as the decoder reads
          GifLzw lzw(codes.data(), codes.size(), code_size);
          std::vector<uint8_t> got(idx.size());
          for (int y = 0; y < h; ++y) ASSERT_TRUE(lzw.read(&got[size_t(y) * w], size_t(w))) << lzw.error();
          EXPECT_EQ(got, want);
        }
        {  // in pieces of 1 to 5000 that cut strings anywhere
          GifLzw lzw(codes.data(), codes.size(), code_size);
          std::vector<uint8_t> got(idx.size());
          for (size_t at = 0; at < got.size();) {
            const size_t n = std::min<size_t>(got.size() - at, 1 + rng() % 5000);
            ASSERT_TRUE(lzw.read(&got[at], n)) << lzw.error();
            at += n;
          }
          EXPECT_EQ(got, want);
          uint8_t more;
          EXPECT_FALSE(lzw.read(&more, 1)) << "pixels past the end of the data";
        }
        ++frames;
      }
  EXPECT_EQ(frames, 8 * 5 * 3);
}

TEST(GifLzw, DamagedStreamsFailCleanly) {
  std::mt19937 rng(59);
  std::vector<uint8_t> idx(size_t(200) * 150);
  for (auto& v : idx) v = uint8_t(rng() % 256);
  int code_size = 0;
  const std::vector<uint8_t> codes = codes_of(encode(idx, 200, 150, 8), &code_size);
  std::vector<uint8_t> out(idx.size());
  {  // cut short
    GifLzw lzw(codes.data(), codes.size() / 2, code_size);
    EXPECT_FALSE(lzw.read(out.data(), out.size()));
    EXPECT_NE(lzw.error().find("ends before"), std::string::npos) << lzw.error();
  }
  // A code past the table, right after a clear: 9-bit codes, clear (256) then 300.
  const uint8_t past[] = {0x00, 0x59, 0x02};  // bits: 100000000 (256), 100101100 (300)
  GifLzw bad(past, sizeof past, 8);
  EXPECT_FALSE(bad.read(out.data(), 4));
  EXPECT_NE(bad.error().find("LZW code"), std::string::npos) << bad.error();
  // Random bytes: any verdict, never a read outside the data or the table (ASan).
  int refused = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<uint8_t> junk(1 + rng() % 300);
    for (auto& b : junk) b = uint8_t(rng());
    GifLzw lzw(junk.data(), junk.size(), 1 + int(rng() % 8));
    refused += !lzw.read(out.data(), 1 + rng() % out.size());
  }
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace imgstat
