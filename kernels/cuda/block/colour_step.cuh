// Pixel steps of the 8-bit pass (agent/hist8.cuh): what a thread does with
// one step's 16-byte vectors. RawBytes counts every byte under its channel;
// ColourStep converts each whole pixel in registers into a colour space
// (the integer and float steps of common/colour.hpp, so every byte is the
// CPU engine's) and counts the converted samples, the tables in shared
// memory beside the histograms.
#pragma once

#include <cstdint>

#include "common/colour.hpp"
#include "cuda/block/colour_tables.cuh"

namespace imgstat::cuda {

// A step: 16 pixels' worth of whole 16-byte vectors for C = 3, one vector
// otherwise, so every byte's channel is known at compile time.
template <int C>
struct Hist8Step {
  static constexpr int kVecs = C == 3 ? 3 : 1;
  static constexpr int kBytes = 16 * kVecs;
};

template <int C>
struct RawBytes {
  static constexpr int kChannels = C;  // histograms counted
  struct Shared {};
  struct Params {};
  __device__ RawBytes(const Params&, Shared&) {}

  __device__ __forceinline__ void count(uint32_t* h, const uint4* v) const {
#pragma unroll
    for (int t = 0; t < Hist8Step<C>::kVecs; ++t) {
      const uint32_t w[4] = {v[t].x, v[t].y, v[t].z, v[t].w};
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const int c = (16 * t + j) % C;
        atomicAdd(h + c * 256 + __byte_perm(w[j / 4], 0, 0x4440 | (j % 4)), 1u);
      }
    }
  }
  __device__ void count_tail(uint32_t* h, const uint8_t* tail, uint32_t bytes) const {
    for (uint32_t i = threadIdx.x; i < bytes; i += blockDim.x) atomicAdd(h + (i % C) * 256 + tail[i], 1u);
  }
};

// kOrder: 0 for R, G, B stored in that order, 1 for B, G, R, 2 for any
// other (each read through selects, so the pixel stays in registers).
template <ColourSpace S, int C, int kOrder>
struct ColourStep {
  static constexpr int kOut = S == ColourSpace::kGray ? 1 : 3;
  static constexpr int kChannels = kOut + (C == 4 ? 1 : 0);  // alpha counted as it is
  using Shared = ColourTables;
  struct Params {
    const ColourTables* tables;
    uint32_t r, g, b;
  };
  const ColourTables& t;
  uint32_t r, g, b;
  // Lab's matrix in registers: read from shared memory, the compiler would
  // read it again after every shared atomic (they might alias), nine loads
  // a pixel more.
  int32_t lab[9];

  // Every thread of the block: it loads the tables and waits for them.
  __device__ ColourStep(const Params& p, Shared& shared) : t(shared), r(p.r), g(p.g), b(p.b) {
    load_colour_tables(&shared, p.tables);
#pragma unroll
    for (int i = 0; i < 9; ++i) lab[i] = S == ColourSpace::kLab ? shared.lab[i] : 0;
  }

  __device__ __forceinline__ void convert(int rv, int gv, int bv, uint8_t* o) const {
    if constexpr (S == ColourSpace::kLab)
      rgb_to_lab8(rv, gv, bv, t.gamma, t.cbrt, lab, o);
    else
      convert_rgb8<S>(rv, gv, bv, t, o);
  }

  __device__ __forceinline__ void pixel(uint32_t* h, const uint8_t* px) const {
    auto pick = [](const uint8_t* q, uint32_t c) { return c == 0 ? q[0] : c == 1 ? q[1] : q[2]; };
    uint8_t o[kChannels];
    if constexpr (kOrder == 0)
      convert(px[0], px[1], px[2], o);
    else if constexpr (kOrder == 1)
      convert(px[2], px[1], px[0], o);
    else
      convert(pick(px, r), pick(px, g), pick(px, b), o);
    if constexpr (C == 4) o[kOut] = px[3];
#pragma unroll
    for (int c = 0; c < kChannels; ++c) atomicAdd(h + c * 256 + o[c], 1u);
  }
  __device__ __forceinline__ void count(uint32_t* h, const uint4* v) const {
    union {
      uint4 v[Hist8Step<C>::kVecs];
      uint8_t bytes[Hist8Step<C>::kBytes];
    } u;
#pragma unroll
    for (int j = 0; j < Hist8Step<C>::kVecs; ++j) u.v[j] = v[j];
#pragma unroll
    for (int p = 0; p < Hist8Step<C>::kBytes / C; ++p) pixel(h, u.bytes + p * C);
  }
  __device__ void count_tail(uint32_t* h, const uint8_t* tail, uint32_t bytes) const {
    for (uint32_t i = threadIdx.x; i < bytes / C; i += blockDim.x) {
      uint8_t px[C];
#pragma unroll
      for (int c = 0; c < C; ++c) px[c] = tail[i * C + c];
      pixel(h, px);
    }
  }
};

}  // namespace imgstat::cuda
