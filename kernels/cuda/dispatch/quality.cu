// Launch shapes of the quality measures' and the thumbnails' kernels
// (agent/quality.cuh): the counting pass's strips and bands; the other
// passes' persistent grid-stride blocks (fewer for small images), several
// passes' blocks side by side in one launch.
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
                           const uint32_t* rgb, bool histograms, unsigned long long* counts,
                           unsigned long long* buckets, const DeviceInfo& dev, cudaStream_t stream) {
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
      quality_counts<3, true><<<grid, kQualityStripWidth, 0, stream>>>(pixels, width, height, band_rows, order, counts, buckets);
    else
      quality_counts<3, false><<<grid, kQualityStripWidth, 0, stream>>>(pixels, width, height, band_rows, order, counts, buckets);
  } else {
    if (histograms)
      quality_counts<1, true><<<grid, kQualityStripWidth, 0, stream>>>(pixels, width, height, band_rows, order, counts, buckets);
    else
      quality_counts<1, false><<<grid, kQualityStripWidth, 0, stream>>>(pixels, width, height, band_rows, order, counts, buckets);
  }
  IMGSTAT_CUDA_LAUNCHED("quality_counts");
}

void launch_find_wanted(unsigned long long* buckets, const BrightnessRanks& ranks, WantedBuckets* wanted,
                        cudaStream_t stream) {
  find_wanted<<<1, kWantedThreads, 0, stream>>>(buckets, ranks, wanted);
  IMGSTAT_CUDA_LAUNCHED("find_wanted");
}

void launch_measures_horizontal(const uint8_t* pixels, uint32_t width, uint32_t height, uint32_t channels,
                                const uint32_t* rgb, const WantedBuckets* wanted, uint32_t* colours,
                                unsigned int* next, ThumbnailPass blur, ThumbnailPass phash, PixelHashPass hash,
                                const DeviceInfo& dev, cudaStream_t stream) {
  const uint64_t n = static_cast<uint64_t>(width) * height;
  const uint32_t gather = colours && channels == 3 && n ? grid_for(n, dev) : 0;
  blur.blocks = blur.xsize ? grid_for(static_cast<uint64_t>(blur.rows) * blur.xsize, dev) : 0;
  phash.blocks = phash.xsize ? grid_for(static_cast<uint64_t>(phash.rows) * phash.xsize, dev) : 0;
  hash.blocks = hash.len ? grid_for(xxh3_pieces(hash.len) * kXxh3Lanes, dev) : 0;
  const uint32_t blocks = gather + blur.blocks + phash.blocks + hash.blocks;
  if (blocks == 0) return;
  const uint3 order = make_uint3(rgb[0], rgb[1], rgb[2]);
  if (channels == 3)
    measures_horizontal<3><<<blocks, kPassThreads, 0, stream>>>(pixels, width, n, order, wanted, colours, next, gather,
                                                                 blur, phash, hash);
  else
    measures_horizontal<1><<<blocks, kPassThreads, 0, stream>>>(pixels, width, n, order, wanted, colours, next, 0,
                                                                 blur, phash, hash);
  IMGSTAT_CUDA_LAUNCHED("measures_horizontal");
}

void launch_measures_vertical(uint32_t blur_bands, ThumbnailPass blur, ThumbnailPass phash, PixelHashPass hash,
                              const DeviceInfo& dev, cudaStream_t stream) {
  blur.blocks = blur.xsize ? grid_for(static_cast<uint64_t>(blur.ysize) * blur.xsize * blur_bands, dev) : 0;
  phash.blocks = phash.xsize ? grid_for(static_cast<uint64_t>(phash.ysize) * phash.xsize, dev) : 0;
  hash.blocks = hash.len ? 1 : 0;
  const uint32_t blocks = blur.blocks + phash.blocks + hash.blocks;
  if (blocks == 0) return;
  if (blur_bands == 3)
    measures_vertical<3><<<blocks, kPassThreads, 0, stream>>>(blur, phash, hash);
  else
    measures_vertical<1><<<blocks, kPassThreads, 0, stream>>>(blur, phash, hash);
  IMGSTAT_CUDA_LAUNCHED("measures_vertical");
}

}  // namespace imgstat::cuda
