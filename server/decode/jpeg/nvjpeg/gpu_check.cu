#include "decode/jpeg/nvjpeg/gpu_check.hpp"

#include <cstring>
#include <string>

#include "imgstat/error.hpp"

namespace imgstat::nvjpeg {
namespace {

constexpr int kThreads = 128;
constexpr size_t kAlign = 256;

size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    cudaGetLastError();
    fail(ErrorCode::kUnavailable, std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
  }
}

__device__ void load_tables(const jpeg::EntropyTables* from, jpeg::EntropyTables* to) {
  const auto* src = reinterpret_cast<const uint32_t*>(from);
  auto* dst = reinterpret_cast<uint32_t*>(to);
  for (size_t i = threadIdx.x; i < sizeof(jpeg::EntropyTables) / 4; i += blockDim.x) dst[i] = src[i];
  __syncthreads();
}

// One file of a batch on the device; offsets from the batch's base.
struct CheckFile {
  uint64_t data, seg_start, sub_first, tables;
  uint64_t first_record, subsequences;
  uint32_t segments, first_block;
};

struct BatchView {
  const uint8_t* base;
  const CheckFile* files;
  const uint32_t* block_file;
  jpeg::Record* records;
};

// A block holds subsequences of one file. With first, each is decoded from
// its guessed state; then the block redoes, round after round, every
// subsequence whose entry is not its predecessor's exit, until none is (or
// the cap: a hostile chain is left to the host's extra launches and, at
// worst, to libjpeg). In later launches its first subsequence reads the
// block before as it stands: that is some state a decode reached, the host
// checks the final chain, and a later launch carries any change across.
__global__ void __launch_bounds__(kThreads) check_kernel(BatchView b, bool first) {
  // Raw bytes: EntropyTables has initializers, which __shared__ cannot run.
  __shared__ alignas(jpeg::EntropyTables) unsigned char tables[sizeof(jpeg::EntropyTables)];
  jpeg::EntropyTables& t = *reinterpret_cast<jpeg::EntropyTables*>(tables);
  const CheckFile f = b.files[b.block_file[blockIdx.x]];
  load_tables(reinterpret_cast<const jpeg::EntropyTables*>(b.base + f.tables), &t);
  const uint64_t j = uint64_t{blockIdx.x - f.first_block} * blockDim.x + threadIdx.x;
  const bool mine = j < f.subsequences;
  const uint8_t* data = b.base + f.data;
  jpeg::Record* records = b.records + f.first_record;
  jpeg::Span sp{};
  if (mine)
    sp = jpeg::span_of(j, reinterpret_cast<const uint64_t*>(b.base + f.seg_start),
                       reinterpret_cast<const uint64_t*>(b.base + f.sub_first), f.segments);
  if (first && mine) records[j] = jpeg::first_decode(t, data, sp);
  // In the first launch the block before may not have run yet: the block's
  // first subsequence keeps its warm-up entry until a later launch.
  const bool chain_start = sp.first_of_segment || (first && threadIdx.x == 0);
  for (int round = 0; round < kThreads + 1; ++round) {
    __syncthreads();
    jpeg::State before = 0;
    bool redo = false;
    if (mine && !chain_start) {
      before = *reinterpret_cast<volatile const uint64_t*>(&records[j - 1].exit);
      redo = records[j].entry != before;
    }
    __syncthreads();  // every thread has read before any writes
    if (redo) records[j] = jpeg::decode_span(t, data, sp.seg_end_bits, sp.limit_bits, before);
    if (!__syncthreads_or(redo)) break;
  }
}

// Fancy upsampling of one chroma sample at output (x, y), as jdsample.c.
__device__ __forceinline__ int upsample(const uint8_t* c, uint32_t cw, uint32_t ch, uint32_t x, uint32_t y,
                                        uint32_t hf, uint32_t vf) {
  if (hf == 1 && vf == 1) return c[size_t{y} * cw + x];
  if (hf == 2 && vf == 1 && cw > 2) {  // h2v1_fancy_upsample
    const uint32_t i = x >> 1;
    const uint8_t* row = c + size_t{y} * cw;
    return (x & 1) ? (3 * row[i] + row[min(i + 1, cw - 1)] + 2) >> 2 : (3 * row[i] + row[i ? i - 1 : 0] + 1) >> 2;
  }
  if (hf == 1 && vf == 2) {  // h1v2_fancy_upsample
    const uint32_t i = y >> 1;
    const uint32_t near = (y & 1) ? min(i + 1, ch - 1) : (i ? i - 1 : 0);
    return (3 * c[size_t{i} * cw + x] + c[size_t{near} * cw + x] + ((y & 1) ? 2 : 1)) >> 2;
  }
  if (hf == 2 && vf == 2 && cw > 2) {  // h2v2_fancy_upsample
    const uint32_t i = y >> 1, j = x >> 1;
    const uint32_t near = (y & 1) ? min(i + 1, ch - 1) : (i ? i - 1 : 0);
    const uint8_t* r0 = c + size_t{i} * cw;
    const uint8_t* r1 = c + size_t{near} * cw;
    const int here = 3 * r0[j] + r1[j];
    const uint32_t k = (x & 1) ? min(j + 1, cw - 1) : (j ? j - 1 : 0);
    const int there = 3 * r0[k] + r1[k];
    return (x & 1) ? (3 * here + there + 7) >> 4 : (3 * here + there + 8) >> 4;
  }
  return c[size_t{y / vf} * cw + x / hf];  // h2v1_upsample, h2v2_upsample, int_upsample: boxes
}

__device__ __forceinline__ uint8_t clamp255(int v) { return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v); }

__global__ void ycc_to_rgb_kernel(const uint8_t* y, const uint8_t* cb, const uint8_t* cr, uint32_t w, uint32_t h,
                                  uint32_t hf, uint32_t vf, uint8_t* rgb) {
  const uint32_t x = blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t row = blockIdx.y;
  if (x >= w) return;
  const uint32_t cw = (w + hf - 1) / hf, ch = (h + vf - 1) / vf;
  const int l = y[size_t{row} * w + x];
  const int b = upsample(cb, cw, ch, x, row, hf, vf) - 128;
  const int r = upsample(cr, cw, ch, x, row, hf, vf) - 128;
  // jdcolor.c's build_ycc_rgb_table: 16-bit fixed point, FIX(1.40200) etc.
  constexpr int kHalf = 1 << 15;
  const int cr_r = (91881 * r + kHalf) >> 16;
  const int cb_b = (116130 * b + kHalf) >> 16;
  const int g = (-22554 * b + kHalf + -46802 * r) >> 16;
  uint8_t* out = rgb + (size_t{row} * w + x) * 3;
  out[0] = clamp255(l + cr_r);
  out[1] = clamp255(l + g);
  out[2] = clamp255(l + cb_b);
}

}  // namespace

CheckStaging::~CheckStaging() {
  if (base_) cudaFreeHost(base_);
}

void CheckStaging::reserve(size_t bytes) {
  used_ = 0;
  if (bytes <= capacity_) return;
  if (base_) cudaFreeHost(base_);
  base_ = nullptr;
  capacity_ = 0;
  const size_t want = aligned(bytes + bytes / 4);
  check(cudaHostAlloc(reinterpret_cast<void**>(&base_), want, cudaHostAllocDefault), "pinned staging for the JPEG check");
  capacity_ = want;
}

void CheckStaging::shrink_to(size_t bytes) {
  if (capacity_ <= bytes) return;
  cudaFreeHost(base_);
  base_ = nullptr;
  capacity_ = used_ = 0;
}

uint8_t* CheckStaging::take(size_t bytes) {
  const size_t n = aligned(bytes);
  if (used_ + n > capacity_) fail(ErrorCode::kInternal, "JPEG check staging overrun");
  uint8_t* p = base_ + used_;
  used_ += n;
  return p;
}

namespace {

// Pinned bytes a file's part of the batch takes at most.
size_t staging_bytes(const JpegScan& scan, size_t size) {
  const uint64_t segments = (scan.restart_interval ? (scan.mcus + scan.restart_interval - 1) / scan.restart_interval : 1) + 1;
  const uint64_t subs = size / jpeg::kSubsequenceBytes + segments + 1;
  return aligned(size) + 2 * aligned((segments + 2) * sizeof(uint64_t)) + aligned(sizeof(jpeg::EntropyTables)) +
         aligned(subs * sizeof(jpeg::Record)) + sizeof(CheckFile) + (subs / kThreads + 1) * sizeof(uint32_t);
}

BatchView view_of(uint8_t* device, size_t files_offset, size_t blocks_offset, size_t records_offset) {
  return BatchView{device, reinterpret_cast<const CheckFile*>(device + files_offset),
                   reinterpret_cast<const uint32_t*>(device + blocks_offset),
                   reinterpret_cast<jpeg::Record*>(device + records_offset)};
}

}  // namespace

CheckBatch::~CheckBatch() {
  if (device_) cudaFree(device_);  // only after a failure that skipped abandon()
}

void CheckBatch::launch(CheckStaging& staging, cudaStream_t stream, int rounds) {
  size_t bytes = 4 * kAlign;
  for (const PendingCheck* p : files_) bytes += staging_bytes(p->scan, p->size);
  staging.reserve(bytes);
  std::vector<CheckFile> files;
  records_ = 0;
  blocks_ = 0;
  auto offset = [&](const uint8_t* p) { return static_cast<uint64_t>(p - staging.base()); };
  auto put = [&](const void* from, size_t n) {
    uint8_t* to = staging.take(n);
    std::memcpy(to, from, n);
    return offset(to);
  };
  for (PendingCheck* p : files_) {
    uint8_t* data = staging.take(p->size);
    if (p->unstuffed.empty()) p->segments = unstuff_jpeg_scan(p->scan, p->data, p->size, data);
    else std::memcpy(data, p->unstuffed.data(), p->segments.bytes);
    const JpegSegments& g = p->segments;
    p->subsequences = g.sub_first.back();
    p->first_record = records_;
    CheckFile f{};
    f.data = offset(data);
    f.seg_start = put(g.start.data(), g.start.size() * sizeof(uint64_t));
    f.sub_first = put(g.sub_first.data(), g.sub_first.size() * sizeof(uint64_t));
    f.tables = put(&p->scan.tables, sizeof(jpeg::EntropyTables));
    f.first_record = records_;
    f.subsequences = p->subsequences;
    f.segments = static_cast<uint32_t>(g.marker.size());
    f.first_block = blocks_;
    files.push_back(f);
    records_ += p->subsequences;
    blocks_ += static_cast<uint32_t>((p->subsequences + kThreads - 1) / kThreads);
  }
  files_offset_ = put(files.data(), files.size() * sizeof(CheckFile));
  uint8_t* block_file = staging.take(size_t{blocks_} * sizeof(uint32_t));
  blocks_offset_ = offset(block_file);
  for (uint32_t i = 0; i < files.size(); ++i) {
    const uint32_t end = i + 1 < files.size() ? files[i + 1].first_block : blocks_;
    for (uint32_t blk = files[i].first_block; blk < end; ++blk) std::memcpy(block_file + blk * sizeof(uint32_t), &i, 4);
  }
  upload_bytes_ = staging.used();
  host_records_ = reinterpret_cast<jpeg::Record*>(staging.take(records_ * sizeof(jpeg::Record)));

  // One device allocation: the staging's image, then the records.
  void* device = nullptr;
  check(cudaMallocAsync(&device, upload_bytes_ + aligned(records_ * sizeof(jpeg::Record)), stream),
        "device memory for the JPEG check");
  device_ = static_cast<uint8_t*>(device);
  check(cudaMemcpyAsync(device_, staging.base(), upload_bytes_, cudaMemcpyHostToDevice, stream), "JPEG data to the device");
  if (blocks_ == 0) return;
  check_kernel<<<blocks_, kThreads, 0, stream>>>(view_of(device_, files_offset_, blocks_offset_, upload_bytes_), true);
  launch_rounds(stream, rounds);
}

void CheckBatch::launch_rounds(cudaStream_t stream, int rounds) {
  if (blocks_ == 0) return;
  const BatchView view = view_of(device_, files_offset_, blocks_offset_, upload_bytes_);
  for (int r = 0; r < rounds; ++r) check_kernel<<<blocks_, kThreads, 0, stream>>>(view, false);
  check(cudaGetLastError(), "JPEG check");
  check(cudaMemcpyAsync(host_records_, view.records, records_ * sizeof(jpeg::Record), cudaMemcpyDeviceToHost, stream),
        "JPEG check records to the host");
}

void CheckBatch::finish(cudaStream_t stream, JpegCheck* verdicts, bool* covered) {
  for (int extra = 0;; ++extra) {
    bool all = true;
    for (size_t i = 0; i < files_.size(); ++i) {
      bool synchronized = false;
      verdicts[i] = jpeg_verdict(files_[i]->scan, files_[i]->segments, host_records_ + files_[i]->first_record,
                                 &covered[i], &synchronized);
      all = all && synchronized;
    }
    // Each launch carries a fix across at least one block: 64 x 8 more is
    // more than a real file needs; hostile data is then left to libjpeg.
    if (all || extra == 64) break;
    launch_rounds(stream, 8);
    check(cudaStreamSynchronize(stream), "JPEG check rounds");
  }
  abandon(stream);
}

void CheckBatch::abandon(cudaStream_t stream) {
  if (device_) cudaFreeAsync(device_, stream);
  device_ = nullptr;
}

void launch_ycc_to_rgb(const uint8_t* y, const uint8_t* cb, const uint8_t* cr, uint32_t width, uint32_t height,
                       uint32_t h_factor, uint32_t v_factor, uint8_t* rgb, cudaStream_t stream) {
  const dim3 grid((width + 127) / 128, height);
  ycc_to_rgb_kernel<<<grid, 128, 0, stream>>>(y, cb, cr, width, height, h_factor, v_factor, rgb);
  check(cudaGetLastError(), "YCbCr to RGB");
}

}  // namespace imgstat::nvjpeg
