// Colour conversion of whole pixels into the measured space, per chunk:
// convert8 for uint8, convert_f for float32. C channels (R, G, B at rgb[],
// alpha at 3) into the space's channels (alpha appended), written packed
// for the passes that follow; the same integer and float steps as the CPU
// engine (common/colour.hpp), so every value is equal. Counting the
// converted 8-bit samples without writing them is the 8-bit pass's pixel
// step (block/colour_step.cuh); joint histograms are agent/joint.cuh.
#pragma once

#include <cstdint>

#include "cuda/tuning/launch.hpp"
#include "common/colour.hpp"
#include "cuda/block/colour_tables.cuh"

namespace imgstat::cuda {


template <ColourSpace S, int C>
__global__ void __launch_bounds__(kColourThreads)
    convert8(const uint8_t* __restrict__ in, uint64_t pixels, uint32_t r, uint32_t g, uint32_t b,
             const ColourTables* __restrict__ tables, uint8_t* __restrict__ out) {
  __shared__ ColourTables t;
  load_colour_tables(&t, tables);
  constexpr int kOut = S == ColourSpace::kGray ? 1 : 3;
  constexpr int kStep = kOut + (C == 4 ? 1 : 0);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  // Selects rather than an indexed array, so the pixel stays in registers.
  auto pick = [](const uint8_t* px, uint32_t c) { return c == 0 ? px[0] : c == 1 ? px[1] : px[2]; };
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pixels; i += stride) {
    uint8_t px[C];
#pragma unroll
    for (int c = 0; c < C; ++c) px[c] = in[i * C + c];
    uint8_t o[kStep];
    convert_rgb8<S>(pick(px, r), pick(px, g), pick(px, b), t, o);
    if constexpr (C == 4) o[kOut] = px[3];
#pragma unroll
    for (int c = 0; c < kStep; ++c) out[i * kStep + c] = o[c];
  }
}

// Float32 pixels into the space's channels, float32, alpha appended.
// lab: the float Lab table on the device (kLab only).
template <ColourSpace S, int C>
__global__ void __launch_bounds__(kColourThreads)
    convert_f(const float* __restrict__ in, uint64_t pixels, uint32_t r, uint32_t g, uint32_t b,
              const int16_t* __restrict__ lab, float* __restrict__ out) {
  constexpr int kOut = S == ColourSpace::kGray ? 1 : 3;
  constexpr int kStep = kOut + (C == 4 ? 1 : 0);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pixels; i += stride) {
    float px[C];
#pragma unroll
    for (int c = 0; c < C; ++c) px[c] = in[i * C + c];
    auto pick = [&](uint32_t c) { return c == 0 ? px[0] : c == 1 ? px[1] : px[2]; };
    float o[kStep];
    convert_rgb_f<S>(pick(r), pick(g), pick(b), lab, o);
    if constexpr (C == 4) o[kOut] = px[3];
#pragma unroll
    for (int c = 0; c < kStep; ++c) out[i * kStep + c] = o[c];
  }
}

}  // namespace imgstat::cuda
