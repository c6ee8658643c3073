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

void launch_measures_first(const uint8_t* pixels, uint32_t width, uint32_t height, uint32_t channels,
                           const uint32_t* rgb, QualityCountsPass counts, bool histograms, ThumbnailPass blur,
                           ThumbnailPass phash, PixelHashPass hash, const DeviceInfo& dev, cudaStream_t stream) {
  if (width == 0 || height == 0) return;
  const uint3 order = make_uint3(rgb[0], rgb[1], rgb[2]);
  if (counts.out) {
    // Strips across, bands down: about kQualityBlocksPerSm blocks an SM,
    // bands of kQualityMinBandRows .. kQualityMaxBandRows rows (taller
    // images: each block takes several bands, grid-stride).
    counts.strips = (width + kQualityStripWidth - 1) / kQualityStripWidth;
    const uint64_t wanted_blocks = static_cast<uint64_t>(dev.sm_count) * kQualityBlocksPerSm;
    const uint64_t bands_wanted = std::max<uint64_t>(1, wanted_blocks / counts.strips);
    counts.band_rows = static_cast<uint32_t>(
        std::clamp<uint64_t>((height + bands_wanted - 1) / bands_wanted, kQualityMinBandRows, kQualityMaxBandRows));
    counts.bands = static_cast<uint32_t>(std::min<uint64_t>((height + counts.band_rows - 1) / counts.band_rows, 65535));
    counts.blocks = counts.strips * counts.bands;
  } else {
    counts.blocks = 0;
  }
  blur.blocks = blur.xsize ? grid_for(static_cast<uint64_t>(blur.rows) * blur.xsize, dev) : 0;
  phash.blocks = phash.xsize ? grid_for(static_cast<uint64_t>(phash.rows) * phash.xsize, dev) : 0;
  hash.blocks = hash.len ? grid_for(xxh3_pieces(hash.len) * kXxh3Lanes, dev) : 0;
  const uint32_t blocks = counts.blocks + blur.blocks + phash.blocks + hash.blocks;
  if (blocks == 0) return;
  if (channels == 3) {
    if (histograms)
      measures_first<3, true><<<blocks, kPassThreads, 0, stream>>>(pixels, width, height, order, counts, blur, phash, hash);
    else
      measures_first<3, false><<<blocks, kPassThreads, 0, stream>>>(pixels, width, height, order, counts, blur, phash, hash);
  } else {
    if (histograms)
      measures_first<1, true><<<blocks, kPassThreads, 0, stream>>>(pixels, width, height, order, counts, blur, phash, hash);
    else
      measures_first<1, false><<<blocks, kPassThreads, 0, stream>>>(pixels, width, height, order, counts, blur, phash, hash);
  }
  IMGSTAT_CUDA_LAUNCHED("measures_first");
}

void launch_measures_second(unsigned long long* buckets, const BrightnessRanks& ranks, WantedBuckets* wanted,
                            uint32_t blur_bands, ThumbnailPass blur, ThumbnailPass phash, const DeviceInfo& dev,
                            cudaStream_t stream) {
  const uint32_t wanted_blocks = buckets ? 1 : 0;
  auto grid = [&](uint64_t items) {  // blocks of kWantedThreads, as many threads an SM as grid_for's
    const uint64_t want = (items + kWantedThreads - 1) / kWantedThreads;
    const uint64_t most = static_cast<uint64_t>(dev.sm_count) * kBlocksPerSm * kPassThreads / kWantedThreads;
    return static_cast<uint32_t>(std::clamp<uint64_t>(want, 1, std::max<uint64_t>(1, most)));
  };
  blur.blocks = blur.xsize ? grid(static_cast<uint64_t>(blur.ysize) * blur.xsize * blur_bands) : 0;
  phash.blocks = phash.xsize ? grid(static_cast<uint64_t>(phash.ysize) * phash.xsize) : 0;
  const uint32_t blocks = wanted_blocks + blur.blocks + phash.blocks;
  if (blocks == 0) return;
  if (blur_bands == 3)
    measures_second<3><<<blocks, kWantedThreads, 0, stream>>>(buckets, ranks, wanted, wanted_blocks, blur, phash);
  else
    measures_second<1><<<blocks, kWantedThreads, 0, stream>>>(buckets, ranks, wanted, wanted_blocks, blur, phash);
  IMGSTAT_CUDA_LAUNCHED("measures_second");
}

void launch_measures_colours(const uint8_t* pixels, uint64_t n, const uint32_t* rgb, const WantedBuckets* wanted,
                             uint32_t* colours, unsigned int* next, const DeviceInfo& dev, cudaStream_t stream) {
  if (n == 0) return;
  measures_colours<<<grid_for(n, dev), kPassThreads, 0, stream>>>(pixels, n, make_uint3(rgb[0], rgb[1], rgb[2]), wanted,
                                                                    colours, next);
  IMGSTAT_CUDA_LAUNCHED("measures_colours");
}

}  // namespace imgstat::cuda
