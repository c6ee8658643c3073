// Warp lanes in groups of C: every lane of a group reads the same 16 pixels
// (C 16-byte vectors) and keeps only its own channel's 16 bytes, packed into
// four words. The byte permutes take a per-lane selector, so all lanes run one
// instruction stream whatever their channel.
#pragma once

#include <cstdint>

namespace imgstat::cuda {

template <int C>
struct ChannelSelect;

template <>
struct ChannelSelect<1> {
  __device__ explicit ChannelSelect(int) {}
  __device__ void operator()(const uint4* v, uint32_t w[4]) const {
    w[0] = v[0].x;
    w[1] = v[0].y;
    w[2] = v[0].z;
    w[3] = v[0].w;
  }
};

// Each word holds R,G,R,G: bytes ch and ch + 2 of two words.
template <>
struct ChannelSelect<2> {
  uint32_t sel;
  __device__ explicit ChannelSelect(int ch)
      : sel(static_cast<uint32_t>(ch | (ch + 2) << 4 | (ch + 4) << 8 | (ch + 6) << 12)) {}
  __device__ void operator()(const uint4* v, uint32_t w[4]) const {
    w[0] = __byte_perm(v[0].x, v[0].y, sel);
    w[1] = __byte_perm(v[0].z, v[0].w, sel);
    w[2] = __byte_perm(v[1].x, v[1].y, sel);
    w[3] = __byte_perm(v[1].z, v[1].w, sel);
  }
};

// Four 12-byte windows of RGBRGBRGBRGB; channel ch sits at ch, ch+3, ch+6,
// ch+9 of each: the first permute takes those below 8, the second the rest
// from the window's third word.
template <>
struct ChannelSelect<3> {
  uint32_t s1 = 0, s2 = 0;
  __device__ explicit ChannelSelect(int ch) {
    for (int j = 0; j < 4; ++j) {
      const int p = ch + 3 * j;
      if (p < 8) {
        s1 |= static_cast<uint32_t>(p) << (4 * j);
        s2 |= static_cast<uint32_t>(j) << (4 * j);
      } else {
        s2 |= static_cast<uint32_t>(4 + p - 8) << (4 * j);
      }
    }
  }
  __device__ void operator()(const uint4* v, uint32_t w[4]) const {
    const uint32_t a[12] = {v[0].x, v[0].y, v[0].z, v[0].w, v[1].x, v[1].y,
                            v[1].z, v[1].w, v[2].x, v[2].y, v[2].z, v[2].w};
#pragma unroll
    for (int k = 0; k < 4; ++k) w[k] = __byte_perm(__byte_perm(a[3 * k], a[3 * k + 1], s1), a[3 * k + 2], s2);
  }
};

// One pixel per word: byte ch of four words, two at a time.
template <>
struct ChannelSelect<4> {
  uint32_t sel;
  __device__ explicit ChannelSelect(int ch) : sel(static_cast<uint32_t>(ch | (ch + 4) << 4)) {}
  __device__ void operator()(const uint4* v, uint32_t w[4]) const {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t lo = __byte_perm(v[k].x, v[k].y, sel);
      const uint32_t hi = __byte_perm(v[k].z, v[k].w, sel);
      w[k] = __byte_perm(lo, hi, 0x5410);
    }
  }
};

}  // namespace imgstat::cuda
