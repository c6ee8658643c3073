#include "cuda/quality.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "common/hashes.hpp"
#include "common/pil_resample.hpp"
#include "common/quality.hpp"
#include "common/xxh3_long.hpp"
#include "cuda/block/quality_counts.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/dispatch/quality.hpp"
#include "cuda/tuning/host.hpp"

namespace imgstat::cuda {
namespace {

// The device memory a call's measures hold, counted against the budget
// while they run.
class BudgetHold {
 public:
  BudgetHold(DeviceBudget& budget, uint64_t bytes) : budget_(budget), bytes_(bytes) {
    budget_.take(bytes_, "the quality measures' counts and thumbnails");
  }
  ~BudgetHold() { budget_.give(bytes_); }
  BudgetHold(const BudgetHold&) = delete;
  BudgetHold& operator=(const BudgetHold&) = delete;

 private:
  DeviceBudget& budget_;
  uint64_t bytes_;
};

// Device memory kept by a thread on one GPU for its next image, up to
// kKeptDeviceBytes (cuda/tuning/host.hpp; larger: a stream-ordered
// allocation of that call's). The driver serializes CUDA calls across the
// server's threads, so each call an image makes counts: an allocation and
// its free were two of some fifteen. Its first kBrightnessBuckets counts are
// the brightness buckets, which find_wanted leaves zeroed: cleared only when
// fresh or after a call that did not end.
constexpr uint64_t kBucketsBytes = uint64_t{kBrightnessBuckets} * sizeof(unsigned long long);

class DeviceScratch {
 public:
  ~DeviceScratch() {  // at exit, perhaps after the context
    if (data_ && cudaFree(data_) != cudaSuccess) cudaGetLastError();
  }
  // Room for `bytes` (at most kKeptDeviceBytes); zeroed: its buckets are 0.
  uint8_t* get(uint64_t bytes) {
    if (bytes > capacity_) {
      if (data_ && cudaFree(data_) != cudaSuccess) cudaGetLastError();
      data_ = nullptr, capacity_ = 0, zeroed = false;
      const uint64_t want = std::max<uint64_t>(bytes, uint64_t{1} << 20);
      if (cudaMalloc(&data_, want) != cudaSuccess) {
        cudaGetLastError();
        data_ = nullptr;
        fail(ErrorCode::kResourceExhausted, "GPU out of memory for the quality measures");
      }
      capacity_ = want;
    }
    return static_cast<uint8_t*>(data_);
  }
  bool zeroed = false;

 private:
  void* data_ = nullptr;
  uint64_t capacity_ = 0;
};

DeviceScratch& scratch_of_thread() {
  int device = 0;
  IMGSTAT_CUDA(cudaGetDevice(&device));
  thread_local std::map<int, std::unique_ptr<DeviceScratch>> kept;  // memory belongs to a device
  std::unique_ptr<DeviceScratch>& s = kept[device];
  if (!s) s = std::make_unique<DeviceScratch>();
  return *s;
}

// A larger call's own memory, freed in stream order.
class CallMemory {
 public:
  CallMemory(uint64_t bytes, cudaStream_t stream) : stream_(stream) {
    if (cudaMallocAsync(&data_, bytes, stream_) != cudaSuccess) {
      cudaGetLastError();
      data_ = nullptr;
      fail(ErrorCode::kResourceExhausted, "GPU out of memory for the quality measures");
    }
  }
  ~CallMemory() { IMGSTAT_CUDA_REPORT(cudaFreeAsync(data_, stream_)); }
  CallMemory(const CallMemory&) = delete;
  CallMemory& operator=(const CallMemory&) = delete;
  uint8_t* data() const { return static_cast<uint8_t*>(data_); }

 private:
  cudaStream_t stream_;
  void* data_ = nullptr;
};

uint64_t aligned(uint64_t bytes) { return (bytes + 255) & ~uint64_t{255}; }

// Page-locked host memory kept by a thread for its next image, up to
// kKeptPinnedBytes (cuda/tuning/host.hpp; larger: its own allocation, for
// that call). Copies from pageable memory go through the driver's staging
// buffers one at a time: with a server's threads copying at once, that was
// most of a small image's measures.

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

// A thumbnail made on the device: its plan's coefficients (copied up with
// the other's), PIL's two passes, the thumbnail (copied back with the rest).
struct Thumbnail {
  const PilPlan* plan = nullptr;
  uint32_t bands = 1;
  // Offsets on the device and, the same, in the pinned staging: both
  // passes' coefficients (bounds, taps), the horizontal pass's rows, the
  // thumbnail.
  uint64_t coeff_at = 0, rows_at = 0, out_at = 0;

  static uint64_t pass_bytes(const PilCoeffs& c) {
    return aligned(c.bounds.size() * sizeof(int)) + aligned(c.k.size() * sizeof(int32_t));
  }
  uint64_t coeff_bytes() const { return plan ? pass_bytes(plan->horizontal) + pass_bytes(plan->vertical) : 0; }
  uint64_t rows_bytes() const { return plan ? aligned(static_cast<uint64_t>(plan->rows) * plan->xsize * bands) : 0; }
  size_t thumbnail_bytes() const { return plan ? static_cast<size_t>(plan->ysize) * plan->xsize * bands : 0; }

  // The coefficients into the staging, for the one copy up.
  void stage(uint8_t* staging) const {
    const PilCoeffs &ch = plan->horizontal, &cv = plan->vertical;
    std::memcpy(staging + coeff_at, ch.bounds.data(), ch.bounds.size() * sizeof(int));
    std::memcpy(staging + hk_at(), ch.k.data(), ch.k.size() * sizeof(int32_t));
    std::memcpy(staging + vb_at(), cv.bounds.data(), cv.bounds.size() * sizeof(int));
    std::memcpy(staging + vk_at(), cv.k.data(), cv.k.size() * sizeof(int32_t));
  }
  // Where its passes find and leave things on the device (none: xsize 0).
  ThumbnailPass pass(uint8_t* base) const {
    ThumbnailPass t;
    if (!plan) return t;
    t.h_bounds = reinterpret_cast<const int*>(base + coeff_at), t.h_k = reinterpret_cast<const int32_t*>(base + hk_at());
    t.v_bounds = reinterpret_cast<const int*>(base + vb_at()), t.v_k = reinterpret_cast<const int32_t*>(base + vk_at());
    t.h_ksize = plan->horizontal.ksize, t.v_ksize = plan->vertical.ksize;
    t.first_row = plan->first_row, t.rows = plan->rows, t.xsize = plan->xsize, t.ysize = plan->ysize;
    t.rows_out = base + rows_at, t.out = base + out_at;
    return t;
  }
  PilImage finish(const uint8_t* staging) const {
    PilImage t;
    t.w = plan->xsize, t.h = plan->ysize, t.bands = static_cast<int>(bands);
    t.px.assign(staging + out_at, staging + out_at + thumbnail_bytes());
    return t;
  }

 private:
  uint64_t hk_at() const { return coeff_at + aligned(plan->horizontal.bounds.size() * sizeof(int)); }
  uint64_t vb_at() const { return coeff_at + pass_bytes(plan->horizontal); }
  uint64_t vk_at() const { return vb_at() + aligned(plan->vertical.bounds.size() * sizeof(int)); }
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

  // One device allocation, mirrored by the thread's pinned staging from
  // the copy up to the end of the copy back, so that one copy takes each way:
  //   the brightness buckets (zero between calls) | up: both thumbnails'
  //   coefficients, XXH3's secret, the pixel hash's header | up and back:
  //   the gather's buckets and count, the counts' head (zeros up) | back:
  //   the thumbnails, the pixel hash's pieces (the host chains them), the
  //   first colours (kColoursFirstBack) | the other colours (room for
  //   every pixel), the horizontal passes' rows
  // and, in the staging alone, a short input's pixels for the host to hash.
  Thumbnail blur, phash;
  if (r.quality) {
    int xs = 0, ys = 0;
    blurriness_size(l.width, l.height, &xs, &ys);
    blur.plan = &pil_plan(w, h, xs, ys, PilFilter::kBicubic);
    blur.bands = colour ? 3 : 1;
  }
  if (r.hashes) phash.plan = &pil_plan(w, h, kPhashSide, kPhashSide, PilFilter::kLanczos);
  const std::vector<uint8_t> header = r.hashes ? pixel_hash_header(l) : std::vector<uint8_t>{};
  const uint64_t hash_len = header.size() + n * l.channels;
  const bool hash_here = r.hashes && hash_len > kXxh3LongAfter;  // else the host hashes the few bytes
  const uint64_t up_at = aligned(kBucketsBytes);
  blur.coeff_at = up_at, phash.coeff_at = blur.coeff_at + blur.coeff_bytes();
  const uint64_t secret_at = phash.coeff_at + phash.coeff_bytes(), header_at = secret_at + kXxh3SecretSize;
  const uint64_t head_at = aligned(header_at + header.size());  // the gather's buckets, their count, the counts
  const uint64_t next_at = head_at + sizeof(WantedBuckets), counts_at = aligned(next_at + sizeof(unsigned int));
  const uint64_t out_at = aligned(counts_at + kQualityBucketsAt * sizeof(unsigned long long));
  blur.out_at = out_at, phash.out_at = blur.out_at + aligned(blur.thumbnail_bytes());
  const uint64_t adds_at = phash.out_at + aligned(phash.thumbnail_bytes());
  const uint64_t adds_bytes = hash_here ? xxh3_pieces(hash_len) * kXxh3Lanes * sizeof(uint64_t) : 0;
  const uint64_t colours_at = aligned(adds_at + adds_bytes);
  const bool gather = r.quality && colour;
  const uint64_t first_back = gather ? std::min<uint64_t>(n, kColoursFirstBack) : 0;
  const uint64_t back_end = colours_at + first_back * sizeof(uint32_t);
  const uint64_t rows_at = colours_at + (gather ? aligned(n * sizeof(uint32_t)) : 0);
  blur.rows_at = rows_at, phash.rows_at = blur.rows_at + blur.rows_bytes();
  const uint64_t device_bytes = phash.rows_at + phash.rows_bytes();
  const uint64_t pixels_at = aligned(back_end);
  const uint64_t staging_bytes = pixels_at + (r.hashes && !hash_here ? n * l.channels : 0);
  // The statistics pass's histograms where it counted them (256 bins of
  // every channel), else the quality pass counts them.
  std::vector<std::array<uint64_t, 256>> known;
  const bool have_histograms = r.quality && engine_histograms(result, l, r, &known);
  BudgetHold hold(budget, device_bytes);
  std::optional<CallMemory> own;
  DeviceScratch* kept = nullptr;
  uint8_t* base = nullptr;
  if (device_bytes <= kKeptDeviceBytes) {
    kept = &scratch_of_thread();
    base = kept->get(device_bytes);
  } else {
    own.emplace(device_bytes, stream);
    base = own->data();
  }
  const bool buckets_zeroed = kept && kept->zeroed;
  if (kept) kept->zeroed = false;  // until this call ends
  uint8_t* staging = staging_of_thread().get(staging_bytes);
  if (blur.plan) blur.stage(staging);
  if (phash.plan) phash.stage(staging);
  std::memcpy(staging + secret_at, xxh3_default_secret(), kXxh3SecretSize);
  if (!header.empty()) std::memcpy(staging + header_at, header.data(), header.size());
  std::memset(staging + head_at, 0, out_at - head_at);
  IMGSTAT_CUDA(cudaMemcpyAsync(base + up_at, staging + up_at, out_at - up_at, cudaMemcpyHostToDevice, stream));
  auto* buckets = reinterpret_cast<unsigned long long*>(base);
  if (gather && !buckets_zeroed) IMGSTAT_CUDA(cudaMemsetAsync(buckets, 0, kBucketsBytes, stream));
  auto* wanted = reinterpret_cast<WantedBuckets*>(base + head_at);
  QualityCountsPass counts;
  if (r.quality) {
    counts.out = reinterpret_cast<unsigned long long*>(base + counts_at);
    counts.buckets = buckets;
  }
  PixelHashPass hash;
  if (hash_here) {
    hash.input.header = base + header_at, hash.input.header_bytes = static_cast<uint32_t>(header.size());
    hash.input.px = px, hash.input.sample_bytes = n * l.channels, hash.input.channels = l.channels;
    if (colour) hash.input.order0 = r.rgb[0], hash.input.order1 = r.rgb[1], hash.input.order2 = r.rgb[2];
    hash.len = hash_len, hash.secret = base + secret_at;
    hash.adds = reinterpret_cast<unsigned long long*>(base + adds_at);
  }
  launch_measures_first(px, static_cast<uint32_t>(w), static_cast<uint32_t>(h), l.channels, r.rgb, counts,
                        !have_histograms, blur.pass(base), phash.pass(base), hash, dev, stream);
  BrightnessRanks ranks{};
  if (gather) {
    const auto wanted_ranks = brightness_ranks(n);
    for (int i = 0; i < kBrightnessRanks; ++i) ranks.rank[i] = wanted_ranks[i];
  }
  launch_measures_second(gather ? buckets : nullptr, ranks, wanted, blur.bands, blur.pass(base), phash.pass(base), dev,
                         stream);
  if (gather)
    launch_measures_colours(px, n, r.rgb, wanted, reinterpret_cast<uint32_t*>(base + colours_at),
                            reinterpret_cast<unsigned int*>(base + next_at), dev, stream);
  IMGSTAT_CUDA(cudaMemcpyAsync(staging + head_at, base + head_at, back_end - head_at, cudaMemcpyDeviceToHost, stream));
  if (r.hashes && !hash_here)
    IMGSTAT_CUDA(cudaMemcpyAsync(staging + pixels_at, px, n * l.channels, cudaMemcpyDeviceToHost, stream));
  IMGSTAT_CUDA(cudaStreamSynchronize(stream));
  if (kept) kept->zeroed = gather || buckets_zeroed;
  ImageHashes hashes;
  if (hash_here) {
    uint64_t low = 0, high = 0;  // the staging's offsets are 256-byte aligned
    xxh3_from_adds(reinterpret_cast<const uint64_t*>(staging + adds_at), hash_len, xxh3_default_secret(), &low, &high);
    pixel_hash_bytes(low, high, hashes.pixels.data());
  } else if (r.hashes) {
    pixel_hash(ImageView{staging + pixels_at, l}, r.rgb, hashes.pixels.data());
  }

  if (r.quality) {
    QualityCounts q;
    const auto* host_counts = reinterpret_cast<const unsigned long long*>(staging + counts_at);
    const auto* sums = reinterpret_cast<const long long*>(host_counts);
    q.grey = sums[0], q.grey_sq = sums[1], q.lap = sums[2], q.lap_sq = sums[3];
    q.rg = sums[4], q.rg_sq = sums[5], q.yb2 = sums[6], q.yb2_sq = sums[7];
    q.equal_rgb = host_counts[kQualityUnequalAt] == 0;
    if (have_histograms) {
      q.hist = std::move(known);
    } else {
      q.hist.assign(l.channels, {});
      for (uint32_t c = 0; c < l.channels; ++c)
        for (int v = 0; v < 256; ++v) q.hist[c][v] = host_counts[kQualityHistAt + c * 256 + v];
    }
    if (gather) {
      WantedBuckets wanted;
      unsigned int found = 0;
      std::memcpy(&wanted, staging + head_at, sizeof wanted);
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
    q.thumbnail = blur.finish(staging);
    result.quality = quality_of_counts(l, r.rgb, q);
    result.has_quality = true;
  }
  if (r.hashes) {
    hashes.has_phash = true;
    hashes.phash = perceptual_hash_of(phash.finish(staging));
    result.hashes = hashes;
    result.has_hashes = true;
  }
  staging_of_thread().trim();
}

}  // namespace imgstat::cuda
