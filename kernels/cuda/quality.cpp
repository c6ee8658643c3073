#include "cuda/quality.hpp"

#include <cstring>
#include <vector>

#include "common/hashes.hpp"
#include "common/pil_resample.hpp"
#include "common/quality.hpp"
#include "cuda/block/quality_counts.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/dispatch/quality.hpp"

namespace imgstat::cuda {
namespace {

// Device memory of one call in one stream-ordered allocation: no device
// synchronization (cudaFree has one) between images.
class CallMemory {
 public:
  CallMemory(DeviceBudget& budget, uint64_t bytes, cudaStream_t stream) : budget_(budget), bytes_(bytes), stream_(stream) {
    budget_.take(bytes_, "the quality measures' counts and thumbnails");
    if (cudaMallocAsync(&data_, bytes_, stream_) != cudaSuccess) {
      cudaGetLastError();
      budget_.give(bytes_);
      fail(ErrorCode::kResourceExhausted, "GPU out of memory for the quality measures");
    }
  }
  ~CallMemory() {
    IMGSTAT_CUDA_REPORT(cudaFreeAsync(data_, stream_));
    budget_.give(bytes_);
  }
  CallMemory(const CallMemory&) = delete;
  CallMemory& operator=(const CallMemory&) = delete;
  uint8_t* data() const { return static_cast<uint8_t*>(data_); }

 private:
  DeviceBudget& budget_;
  uint64_t bytes_;
  cudaStream_t stream_;
  void* data_ = nullptr;
};

uint64_t aligned(uint64_t bytes) { return (bytes + 255) & ~uint64_t{255}; }

// A thumbnail's horizontal pass on the device: its plan's coefficients up,
// the pass's rows back (copied by finish()).
struct Thumbnail {
  const PilPlan* plan = nullptr;
  uint32_t bands = 1;
  uint64_t coeff_at = 0, out_at = 0;
  std::vector<uint8_t> host;

  uint64_t coeff_bytes() const {
    return aligned(plan->horizontal.bounds.size() * sizeof(int)) + aligned(plan->horizontal.k.size() * sizeof(int32_t));
  }
  uint64_t out_bytes() const { return aligned(static_cast<uint64_t>(plan->rows) * plan->xsize * bands); }

  void launch(const DeviceImageView& image, const uint32_t* rgb, uint8_t* base, const DeviceInfo& dev,
              cudaStream_t stream) {
    const PilCoeffs& c = plan->horizontal;
    int* bounds = reinterpret_cast<int*>(base + coeff_at);
    int32_t* k = reinterpret_cast<int32_t*>(base + coeff_at + aligned(c.bounds.size() * sizeof(int)));
    IMGSTAT_CUDA(cudaMemcpyAsync(bounds, c.bounds.data(), c.bounds.size() * sizeof(int), cudaMemcpyHostToDevice, stream));
    IMGSTAT_CUDA(cudaMemcpyAsync(k, c.k.data(), c.k.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
    launch_pil_horizontal(static_cast<const uint8_t*>(image.data), static_cast<uint32_t>(image.layout.width),
                          image.layout.channels, bands, rgb, plan->first_row, plan->rows, plan->xsize, bounds, k,
                          c.ksize, base + out_at, dev, stream);
    host.resize(static_cast<size_t>(plan->rows) * plan->xsize * bands);
    IMGSTAT_CUDA(cudaMemcpyAsync(host.data(), base + out_at, host.size(), cudaMemcpyDeviceToHost, stream));
  }

  PilImage finish() const {
    PilImage t;
    t.w = plan->xsize, t.h = plan->rows, t.bands = static_cast<int>(bands);
    t.px = host;
    return pil_vertical(t, *plan);
  }
};

}  // namespace

bool measures_on_device(const Layout& l, const StatsRequest& r) {
  if (!(r.quality || r.hashes) || r.background.enabled) return false;
  if (l.type != SampleType::kUint8 || (l.channels != 1 && l.channels != 3)) return false;
  if (l.width < 2 || l.height < 2 || l.width >= (1u << 30) || l.height >= (1u << 30)) return false;
  int xs = 0, ys = 0;
  if (r.quality && (!blurriness_size(l.width, l.height, &xs, &ys) || xs == static_cast<int>(l.width) ||
                    ys == static_cast<int>(l.height)))
    return false;
  if (r.hashes && (l.width == kPhashSide || l.height == kPhashSide)) return false;
  return true;
}

void device_measures(const DeviceImageView& image, const StatsRequest& r, const DeviceInfo& dev, DeviceBudget& budget,
                     Result& result) {
  const Layout& l = image.layout;
  if (!measures_on_device(l, r) || (l.row_stride != 0 && l.row_stride != l.row_bytes()))
    fail(ErrorCode::kInternal, "device measures of an image they do not take");
  const cudaStream_t stream = cudaStreamPerThread;
  const auto* px = static_cast<const uint8_t*>(image.data);
  const uint64_t n = l.pixels();
  const int w = static_cast<int>(l.width), h = static_cast<int>(l.height);
  const bool colour = l.channels == 3;

  // One allocation: the counts, each thumbnail's coefficients and rows.
  uint64_t bytes = 0;
  const uint64_t counts_at = 0;
  if (r.quality) bytes += aligned(kQualityCountsSize * sizeof(unsigned long long));
  Thumbnail blur, phash;
  if (r.quality) {
    int xs = 0, ys = 0;
    blurriness_size(l.width, l.height, &xs, &ys);
    blur.plan = &pil_plan(w, h, xs, ys, PilFilter::kBicubic);
    blur.bands = colour ? 3 : 1;
    blur.coeff_at = bytes, bytes += blur.coeff_bytes();
    blur.out_at = bytes, bytes += blur.out_bytes();
  }
  if (r.hashes) {
    phash.plan = &pil_plan(w, h, kPhashSide, kPhashSide, PilFilter::kLanczos);
    phash.coeff_at = bytes, bytes += phash.coeff_bytes();
    phash.out_at = bytes, bytes += phash.out_bytes();
  }
  CallMemory memory(budget, bytes, stream);
  uint8_t* base = memory.data();
  auto* counts = reinterpret_cast<unsigned long long*>(base + counts_at);
  std::vector<unsigned long long> host_counts;
  if (r.quality) {
    IMGSTAT_CUDA(cudaMemsetAsync(counts, 0, kQualityCountsSize * sizeof(unsigned long long), stream));
    launch_quality_counts(px, static_cast<uint32_t>(w), static_cast<uint32_t>(h), l.channels, r.rgb, counts, dev,
                          stream);
    blur.launch(image, r.rgb, base, dev, stream);
    host_counts.resize(kQualityCountsSize);
    IMGSTAT_CUDA(cudaMemcpyAsync(host_counts.data(), counts, host_counts.size() * sizeof(unsigned long long),
                                 cudaMemcpyDeviceToHost, stream));
  }
  if (r.hashes) phash.launch(image, r.rgb, base, dev, stream);
  std::vector<uint8_t> pixels;
  if (r.hashes) {  // the pixel hash's copy, behind the kernels on the stream
    pixels.resize(n * l.channels);
    IMGSTAT_CUDA(cudaMemcpyAsync(pixels.data(), px, pixels.size(), cudaMemcpyDeviceToHost, stream));
  }
  IMGSTAT_CUDA(cudaStreamSynchronize(stream));

  if (r.quality) {
    QualityCounts q;
    const auto* sums = reinterpret_cast<const long long*>(host_counts.data());
    q.grey = sums[0], q.grey_sq = sums[1], q.lap = sums[2], q.lap_sq = sums[3];
    q.rg = sums[4], q.rg_sq = sums[5], q.yb2 = sums[6], q.yb2_sq = sums[7];
    q.equal_rgb = host_counts[kQualityUnequalAt] == 0;
    q.hist.assign(l.channels, {});
    for (uint32_t c = 0; c < l.channels; ++c)
      for (int v = 0; v < 256; ++v) q.hist[c][v] = host_counts[kQualityHistAt + c * 256 + v];
    if (colour) {
      q.buckets.assign(host_counts.begin() + kQualityBucketsAt, host_counts.end());
      const std::vector<uint32_t> wanted = brightness_wanted(q.buckets.data(), n);
      WantedBuckets device_wanted{};
      uint64_t m = 0;
      for (uint32_t b : wanted) {
        device_wanted.bucket[device_wanted.count++] = b;
        m += q.buckets[b];
      }
      // At most every pixel: within 4/3 of the image's own bytes.
      CallMemory gathered(budget, aligned(m * sizeof(uint32_t)) + sizeof(unsigned int), stream);
      auto* next = reinterpret_cast<unsigned int*>(gathered.data() + aligned(m * sizeof(uint32_t)));
      IMGSTAT_CUDA(cudaMemsetAsync(next, 0, sizeof(unsigned int), stream));
      launch_wanted_colours(px, n, r.rgb, device_wanted, reinterpret_cast<uint32_t*>(gathered.data()), next,
                            static_cast<uint32_t>(m), dev, stream);
      q.colours.resize(m);
      unsigned int found = 0;
      IMGSTAT_CUDA(cudaMemcpyAsync(q.colours.data(), gathered.data(), m * sizeof(uint32_t), cudaMemcpyDeviceToHost,
                                   stream));
      IMGSTAT_CUDA(cudaMemcpyAsync(&found, next, sizeof found, cudaMemcpyDeviceToHost, stream));
      IMGSTAT_CUDA(cudaStreamSynchronize(stream));
      if (found != m) fail(ErrorCode::kInternal, "the brightness buckets' pixels are not their counts");
    }
    q.thumbnail = blur.finish();
    result.quality = quality_of_counts(l, r.rgb, q);
    result.has_quality = true;
  }
  if (r.hashes) {
    ImageHashes hashes;
    pixel_hash(ImageView{pixels.data(), l}, r.rgb, hashes.pixels.data());
    hashes.has_phash = true;
    hashes.phash = perceptual_hash_of(phash.finish());
    result.hashes = hashes;
    result.has_hashes = true;
  }
}

}  // namespace imgstat::cuda
