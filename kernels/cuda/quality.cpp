#include "cuda/quality.hpp"

#include <algorithm>
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

// Page-locked host memory kept by a thread for its next image, up to
// kKeptPinnedBytes (larger: its own allocation, for that call). Copies from
// pageable memory go through the driver's staging buffers one at a time:
// with a server's threads copying at once, that was most of a small
// image's measures.
constexpr size_t kKeptPinnedBytes = size_t{16} << 20;

class Pinned {
 public:
  ~Pinned() { release(); }
  uint8_t* get(size_t bytes) {
    if (bytes > capacity_) {
      release();
      const size_t want = std::max(bytes, size_t{1} << 20);
      IMGSTAT_CUDA(cudaHostAlloc(&data_, want, cudaHostAllocPortable));
      capacity_ = want;
    }
    return static_cast<uint8_t*>(data_);
  }
  // What the call leaves is kept only up to the limit.
  void trim() {
    if (capacity_ > kKeptPinnedBytes) release();
  }

 private:
  void release() {
    if (data_ && cudaFreeHost(data_) != cudaSuccess) cudaGetLastError();  // at exit, perhaps after the context
    data_ = nullptr, capacity_ = 0;
  }
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

// The thread's staging for what the device's work brings back.
Pinned& staging_of_thread() {
  thread_local Pinned kept;
  return kept;
}

// A thumbnail made on the device: its plan's coefficients up, PIL's two
// passes, the thumbnail back (finish() reads it after the stream's sync).
struct Thumbnail {
  const PilPlan* plan = nullptr;
  uint32_t bands = 1;
  // On the device and, the same offsets, in the pinned staging: both
  // passes' coefficients (bounds, taps), the horizontal pass's rows, the
  // thumbnail.
  uint64_t coeff_at = 0, rows_at = 0, out_at = 0;
  const uint8_t* host = nullptr;

  static uint64_t pass_bytes(const PilCoeffs& c) {
    return aligned(c.bounds.size() * sizeof(int)) + aligned(c.k.size() * sizeof(int32_t));
  }
  uint64_t coeff_bytes() const { return pass_bytes(plan->horizontal) + pass_bytes(plan->vertical); }
  uint64_t rows_bytes() const { return aligned(static_cast<uint64_t>(plan->rows) * plan->xsize * bands); }
  size_t thumbnail_bytes() const { return static_cast<size_t>(plan->ysize) * plan->xsize * bands; }
  // Lays itself out from `at` on.
  uint64_t place(uint64_t at) {
    coeff_at = at, rows_at = coeff_at + coeff_bytes(), out_at = rows_at + rows_bytes();
    return out_at + aligned(thumbnail_bytes());
  }

  void launch(const DeviceImageView& image, const uint32_t* rgb, uint8_t* base, uint8_t* staging,
              const DeviceInfo& dev, cudaStream_t stream) {
    const PilCoeffs &ch = plan->horizontal, &cv = plan->vertical;
    const uint64_t hk_at = coeff_at + aligned(ch.bounds.size() * sizeof(int));
    const uint64_t vb_at = coeff_at + pass_bytes(ch), vk_at = vb_at + aligned(cv.bounds.size() * sizeof(int));
    std::memcpy(staging + coeff_at, ch.bounds.data(), ch.bounds.size() * sizeof(int));
    std::memcpy(staging + hk_at, ch.k.data(), ch.k.size() * sizeof(int32_t));
    std::memcpy(staging + vb_at, cv.bounds.data(), cv.bounds.size() * sizeof(int));
    std::memcpy(staging + vk_at, cv.k.data(), cv.k.size() * sizeof(int32_t));
    IMGSTAT_CUDA(cudaMemcpyAsync(base + coeff_at, staging + coeff_at, coeff_bytes(), cudaMemcpyHostToDevice, stream));
    launch_pil_horizontal(static_cast<const uint8_t*>(image.data), static_cast<uint32_t>(image.layout.width),
                          image.layout.channels, bands, rgb, plan->first_row, plan->rows, plan->xsize,
                          reinterpret_cast<const int*>(base + coeff_at), reinterpret_cast<const int32_t*>(base + hk_at),
                          ch.ksize, base + rows_at, dev, stream);
    launch_pil_vertical(base + rows_at, bands, plan->first_row, plan->xsize, plan->ysize,
                        reinterpret_cast<const int*>(base + vb_at), reinterpret_cast<const int32_t*>(base + vk_at),
                        cv.ksize, base + out_at, dev, stream);
    host = staging + out_at;
    IMGSTAT_CUDA(cudaMemcpyAsync(staging + out_at, base + out_at, thumbnail_bytes(), cudaMemcpyDeviceToHost, stream));
  }

  PilImage finish() const {
    PilImage t;
    t.w = plan->xsize, t.h = plan->ysize, t.bands = static_cast<int>(bands);
    t.px.assign(host, host + thumbnail_bytes());
    return t;
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

  // One device allocation, mirrored by the thread's pinned staging up to
  // the colours' first part: the counts, the gather's buckets and count
  // (zeroed with them), each thumbnail's coefficients and rows; then the
  // colours (room for every pixel; the staging: kColoursFirstBack), and in
  // the staging alone the pixels for their hash.
  const uint64_t counts_bytes = kQualityCountsSize * sizeof(unsigned long long);
  const uint64_t wanted_at = counts_bytes, next_at = wanted_at + sizeof(WantedBuckets);
  const uint64_t zeroed = next_at + sizeof(unsigned int);
  uint64_t bytes = r.quality ? aligned(zeroed) : 0;
  Thumbnail blur, phash;
  if (r.quality) {
    int xs = 0, ys = 0;
    blurriness_size(l.width, l.height, &xs, &ys);
    blur.plan = &pil_plan(w, h, xs, ys, PilFilter::kBicubic);
    blur.bands = colour ? 3 : 1;
    bytes = blur.place(bytes);
  }
  if (r.hashes) {
    phash.plan = &pil_plan(w, h, kPhashSide, kPhashSide, PilFilter::kLanczos);
    bytes = phash.place(bytes);
  }
  const bool gather = r.quality && colour;
  const uint64_t colours_at = bytes;
  const uint64_t first_back = gather ? std::min<uint64_t>(n, kColoursFirstBack) : 0;
  const uint64_t device_bytes = bytes + (gather ? aligned(n * sizeof(uint32_t)) : 0);
  const uint64_t pixels_at = bytes + aligned(first_back * sizeof(uint32_t));
  const uint64_t staging_bytes = pixels_at + (r.hashes ? n * l.channels : 0);
  CallMemory memory(budget, device_bytes, stream);
  uint8_t* base = memory.data();
  uint8_t* staging = staging_of_thread().get(staging_bytes);
  if (r.quality) {
    auto* counts = reinterpret_cast<unsigned long long*>(base);
    IMGSTAT_CUDA(cudaMemsetAsync(base, 0, zeroed, stream));
    launch_quality_counts(px, static_cast<uint32_t>(w), static_cast<uint32_t>(h), l.channels, r.rgb, counts, dev,
                          stream);
    if (gather) {
      BrightnessRanks ranks{};
      const auto wanted_ranks = brightness_ranks(n);
      for (int i = 0; i < kBrightnessRanks; ++i) ranks.rank[i] = wanted_ranks[i];
      launch_wanted_colours(px, n, r.rgb, counts + kQualityBucketsAt, ranks,
                            reinterpret_cast<WantedBuckets*>(base + wanted_at),
                            reinterpret_cast<uint32_t*>(base + colours_at),
                            reinterpret_cast<unsigned int*>(base + next_at), dev, stream);
    }
    blur.launch(image, r.rgb, base, staging, dev, stream);
    // Back: the sums and histograms, the wanted buckets; not every bucket.
    IMGSTAT_CUDA(cudaMemcpyAsync(staging, base, kQualityBucketsAt * sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                                 stream));
    IMGSTAT_CUDA(cudaMemcpyAsync(staging + wanted_at, base + wanted_at, zeroed - wanted_at, cudaMemcpyDeviceToHost,
                                 stream));
    if (gather)
      IMGSTAT_CUDA(cudaMemcpyAsync(staging + colours_at, base + colours_at, first_back * sizeof(uint32_t),
                                   cudaMemcpyDeviceToHost, stream));
  }
  if (r.hashes) {
    phash.launch(image, r.rgb, base, staging, dev, stream);
    // The pixel hash's copy, behind the kernels on the stream.
    IMGSTAT_CUDA(cudaMemcpyAsync(staging + pixels_at, px, n * l.channels, cudaMemcpyDeviceToHost, stream));
  }
  IMGSTAT_CUDA(cudaStreamSynchronize(stream));

  if (r.quality) {
    QualityCounts q;
    const auto* host_counts = reinterpret_cast<const unsigned long long*>(staging);
    const auto* sums = reinterpret_cast<const long long*>(host_counts);
    q.grey = sums[0], q.grey_sq = sums[1], q.lap = sums[2], q.lap_sq = sums[3];
    q.rg = sums[4], q.rg_sq = sums[5], q.yb2 = sums[6], q.yb2_sq = sums[7];
    q.equal_rgb = host_counts[kQualityUnequalAt] == 0;
    q.hist.assign(l.channels, {});
    for (uint32_t c = 0; c < l.channels; ++c)
      for (int v = 0; v < 256; ++v) q.hist[c][v] = host_counts[kQualityHistAt + c * 256 + v];
    if (gather) {
      WantedBuckets wanted;
      unsigned int found = 0;
      std::memcpy(&wanted, staging + wanted_at, sizeof wanted);
      std::memcpy(&found, staging + next_at, sizeof found);
      uint64_t m = 0;
      for (uint32_t i = 0; i < wanted.count; ++i) {
        q.wanted.push_back(BrightnessBucket{wanted.bucket[i], wanted.first[i], wanted.pixels[i]});
        m += wanted.pixels[i];
      }
      if (found != m) fail(ErrorCode::kInternal, "the brightness buckets' pixels are not their counts");
      const auto* first = reinterpret_cast<const uint32_t*>(staging + colours_at);
      q.colours.assign(first, first + std::min(m, first_back));
      if (m > first_back) {  // many: the rest in a second round trip
        q.colours.resize(m);
        IMGSTAT_CUDA(cudaMemcpyAsync(q.colours.data() + first_back, base + colours_at + first_back * sizeof(uint32_t),
                                     (m - first_back) * sizeof(uint32_t), cudaMemcpyDeviceToHost, stream));
        IMGSTAT_CUDA(cudaStreamSynchronize(stream));
      }
    }
    q.thumbnail = blur.finish();
    result.quality = quality_of_counts(l, r.rgb, q);
    result.has_quality = true;
  }
  if (r.hashes) {
    ImageHashes hashes;
    pixel_hash(ImageView{staging + pixels_at, l}, r.rgb, hashes.pixels.data());
    hashes.has_phash = true;
    hashes.phash = perceptual_hash_of(phash.finish());
    result.hashes = hashes;
    result.has_hashes = true;
  }
  staging_of_thread().trim();
}

}  // namespace imgstat::cuda
