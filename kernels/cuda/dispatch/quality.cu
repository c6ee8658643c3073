// Launch shapes of the quality measures' and the thumbnails' kernels
// (agent/quality.cuh): persistent grid-stride blocks, fewer for small
// images.
#include <algorithm>

#include "cuda/agent/quality.cuh"
#include "cuda/cuda_check.hpp"
#include "cuda/dispatch/quality.hpp"

namespace imgstat::cuda {
namespace {

unsigned grid_for(uint64_t items, const DeviceInfo& dev) {
  const uint64_t wanted = (items + kPassThreads - 1) / kPassThreads;
  return static_cast<unsigned>(std::clamp<uint64_t>(wanted, 1, static_cast<uint64_t>(dev.sm_count) * kBlocksPerSm));
}

}  // namespace

void launch_quality_counts(const uint8_t* pixels, uint32_t width, uint32_t height, uint32_t channels,
                           const uint32_t* rgb, bool histograms, unsigned long long* counts, const DeviceInfo& dev,
                           cudaStream_t stream) {
  if (width == 0 || height == 0) return;
  const uint3 order = make_uint3(rgb[0], rgb[1], rgb[2]);
  // Strips across, bands down: about kQualityBlocksPerSm blocks an SM, bands
  // of kQualityMinBandRows .. kQualityMaxBandRows rows (taller images: each
  // block takes several bands, grid-stride).
  const uint32_t strips = (width + kQualityStripWidth - 1) / kQualityStripWidth;
  const uint64_t wanted_blocks = static_cast<uint64_t>(dev.sm_count) * kQualityBlocksPerSm;
  const uint64_t bands_wanted = std::max<uint64_t>(1, wanted_blocks / strips);
  const uint32_t band_rows = static_cast<uint32_t>(
      std::clamp<uint64_t>((height + bands_wanted - 1) / bands_wanted, kQualityMinBandRows, kQualityMaxBandRows));
  const uint32_t bands = static_cast<uint32_t>(std::min<uint64_t>((height + band_rows - 1) / band_rows, 65535));
  const dim3 grid(strips, bands);
  if (channels == 3) {
    if (histograms)
      quality_counts<3, true><<<grid, kQualityStripWidth, 0, stream>>>(pixels, width, height, band_rows, order, counts);
    else
      quality_counts<3, false><<<grid, kQualityStripWidth, 0, stream>>>(pixels, width, height, band_rows, order, counts);
  } else {
    if (histograms)
      quality_counts<1, true><<<grid, kQualityStripWidth, 0, stream>>>(pixels, width, height, band_rows, order, counts);
    else
      quality_counts<1, false><<<grid, kQualityStripWidth, 0, stream>>>(pixels, width, height, band_rows, order, counts);
  }
  IMGSTAT_CUDA_LAUNCHED("quality_counts");
}

void launch_wanted_colours(const uint8_t* pixels, uint64_t count, const uint32_t* rgb,
                           const unsigned long long* buckets, const BrightnessRanks& ranks, WantedBuckets* wanted,
                           uint32_t* out, unsigned int* next, const DeviceInfo& dev, cudaStream_t stream) {
  find_wanted<<<1, kWantedThreads, 0, stream>>>(buckets, ranks, wanted);
  IMGSTAT_CUDA_LAUNCHED("find_wanted");
  if (count == 0) return;
  wanted_colours<<<grid_for(count, dev), kPassThreads, 0, stream>>>(pixels, count, make_uint3(rgb[0], rgb[1], rgb[2]),
                                                                     wanted, out, next);
  IMGSTAT_CUDA_LAUNCHED("wanted_colours");
}

void launch_pil_horizontal(const uint8_t* pixels, uint32_t width, uint32_t channels, uint32_t bands,
                           const uint32_t* rgb, int first_row, int rows, int xsize, const int* bounds,
                           const int32_t* k, int ksize, uint8_t* out, const DeviceInfo& dev, cudaStream_t stream) {
  const uint64_t items = static_cast<uint64_t>(rows) * xsize;
  if (items == 0) return;
  const uint3 order = make_uint3(rgb[0], rgb[1], rgb[2]);
  const unsigned grid = grid_for(items, dev);
  if (channels == 3 && bands == 3) {
    pil_horizontal<3, 3><<<grid, kPassThreads, 0, stream>>>(pixels, width, order, first_row, rows, xsize, bounds, k,
                                                             ksize, out);
  } else if (channels == 3) {
    pil_horizontal<3, 1><<<grid, kPassThreads, 0, stream>>>(pixels, width, order, first_row, rows, xsize, bounds, k,
                                                             ksize, out);
  } else {
    pil_horizontal<1, 1><<<grid, kPassThreads, 0, stream>>>(pixels, width, order, first_row, rows, xsize, bounds, k,
                                                             ksize, out);
  }
  IMGSTAT_CUDA_LAUNCHED("pil_horizontal");
}

void launch_pil_vertical(const uint8_t* rows, uint32_t bands, int first_row, int xsize, int ysize, const int* bounds,
                         const int32_t* k, int ksize, uint8_t* out, const DeviceInfo& dev, cudaStream_t stream) {
  const uint64_t items = static_cast<uint64_t>(ysize) * xsize * bands;
  if (items == 0) return;
  if (bands == 3) {
    pil_vertical<3><<<grid_for(items, dev), kPassThreads, 0, stream>>>(rows, first_row, xsize, ysize, bounds, k, ksize,
                                                                        out);
  } else {
    pil_vertical<1><<<grid_for(items, dev), kPassThreads, 0, stream>>>(rows, first_row, xsize, ysize, bounds, k, ksize,
                                                                        out);
  }
  IMGSTAT_CUDA_LAUNCHED("pil_vertical");
}

}  // namespace imgstat::cuda
