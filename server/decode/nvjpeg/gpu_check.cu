#include "decode/nvjpeg/gpu_check.hpp"

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

__global__ void __launch_bounds__(kThreads) first_decode_kernel(const jpeg::EntropyTables* tables, const uint8_t* data,
                                                                const uint64_t* seg_start, const uint64_t* sub_first,
                                                                uint32_t segments, uint64_t n, jpeg::Record* records) {
  __shared__ jpeg::EntropyTables t;
  load_tables(tables, &t);
  const uint64_t j = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (j >= n) return;
  records[j] = jpeg::first_decode(t, data, jpeg::span_of(j, seg_start, sub_first, segments));
}

// One round: a subsequence whose entry is not its predecessor's exit is
// decoded again from that exit. A predecessor redone in the same round is
// read before or after: either is a state some decode reached, and the host
// checks the final chain.
__global__ void __launch_bounds__(kThreads) sync_round_kernel(const jpeg::EntropyTables* tables, const uint8_t* data,
                                                              const uint64_t* seg_start, const uint64_t* sub_first,
                                                              uint32_t segments, uint64_t n, jpeg::Record* records) {
  __shared__ jpeg::EntropyTables t;
  load_tables(tables, &t);
  const uint64_t j = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (j == 0 || j >= n) return;
  const jpeg::State before = *reinterpret_cast<volatile const uint64_t*>(&records[j - 1].exit);
  if (records[j].entry == before) return;
  const jpeg::Span sp = jpeg::span_of(j, seg_start, sub_first, segments);
  if (sp.first_of_segment) return;
  records[j] = jpeg::decode_span(t, data, sp.seg_end_bits, sp.limit_bits, before);
}

void launch_rounds(PendingCheck& p, cudaStream_t stream, int rounds) {
  const unsigned blocks = static_cast<unsigned>((p.subsequences + kThreads - 1) / kThreads);
  const uint32_t segments = static_cast<uint32_t>(p.segments.marker.size());
  for (int r = 0; r < rounds; ++r)
    sync_round_kernel<<<blocks, kThreads, 0, stream>>>(p.device_tables, p.device_data, p.device_seg_start,
                                                        p.device_sub_first, segments, p.subsequences, p.device_records);
  check(cudaGetLastError(), "JPEG check rounds");
  check(cudaMemcpyAsync(p.records, p.device_records, p.subsequences * sizeof(jpeg::Record), cudaMemcpyDeviceToHost,
                        stream),
        "JPEG check records to the host");
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

uint8_t* CheckStaging::take(size_t bytes) {
  const size_t n = aligned(bytes);
  if (used_ + n > capacity_) fail(ErrorCode::kInternal, "JPEG check staging overrun");
  uint8_t* p = base_ + used_;
  used_ += n;
  return p;
}

size_t check_staging_bytes(const JpegScan& scan, size_t size) {
  const uint64_t segments = (scan.restart_interval ? (scan.mcus + scan.restart_interval - 1) / scan.restart_interval : 1) + 1;
  const uint64_t subs = size / jpeg::kSubsequenceBytes + segments + 1;
  return aligned(size) + 2 * aligned((segments + 2) * sizeof(uint64_t)) + aligned(sizeof(jpeg::EntropyTables)) +
         aligned(subs * sizeof(jpeg::Record));
}

void launch_check(PendingCheck& p, const uint8_t* data, size_t size, CheckStaging& staging, cudaStream_t stream,
                  int rounds) {
  uint8_t* bytes = staging.take(size);
  p.segments = unstuff_jpeg_scan(p.scan, data, size, bytes);
  const JpegSegments& g = p.segments;
  p.subsequences = g.sub_first.back();
  const size_t n_seg = g.start.size() * sizeof(uint64_t), n_sub = g.sub_first.size() * sizeof(uint64_t);
  auto* seg_start = reinterpret_cast<uint64_t*>(staging.take(n_seg));
  auto* sub_first = reinterpret_cast<uint64_t*>(staging.take(n_sub));
  auto* tables = reinterpret_cast<jpeg::EntropyTables*>(staging.take(sizeof(jpeg::EntropyTables)));
  std::memcpy(seg_start, g.start.data(), n_seg);
  std::memcpy(sub_first, g.sub_first.data(), n_sub);
  *tables = p.scan.tables;
  p.records = reinterpret_cast<jpeg::Record*>(staging.take(p.subsequences * sizeof(jpeg::Record)));

  // One device allocation: data, segment tables, Huffman tables, records.
  const size_t o_seg = aligned(size), o_sub = o_seg + aligned(n_seg),
               o_tab = o_sub + aligned(n_sub), o_rec = o_tab + aligned(sizeof(jpeg::EntropyTables)),
               total = o_rec + aligned(p.subsequences * sizeof(jpeg::Record));
  check(cudaMallocAsync(&p.device, total, stream), "device memory for the JPEG check");
  auto* base = static_cast<uint8_t*>(p.device);
  p.device_data = base;
  p.device_seg_start = reinterpret_cast<const uint64_t*>(base + o_seg);
  p.device_sub_first = reinterpret_cast<const uint64_t*>(base + o_sub);
  p.device_tables = reinterpret_cast<const jpeg::EntropyTables*>(base + o_tab);
  p.device_records = reinterpret_cast<jpeg::Record*>(base + o_rec);
  // The staging pieces are contiguous in the same order: one copy up.
  check(cudaMemcpyAsync(base, bytes, o_rec, cudaMemcpyHostToDevice, stream), "JPEG data to the device");
  const unsigned blocks = static_cast<unsigned>((p.subsequences + kThreads - 1) / kThreads);
  first_decode_kernel<<<blocks, kThreads, 0, stream>>>(p.device_tables, p.device_data, p.device_seg_start,
                                                       p.device_sub_first, static_cast<uint32_t>(g.marker.size()),
                                                       p.subsequences, p.device_records);
  launch_rounds(p, stream, rounds);
}

JpegCheck finish_check(PendingCheck& p, cudaStream_t stream, bool* covered) {
  JpegCheck out;
  for (int extra = 0;; ++extra) {
    bool synchronized = false;
    out = jpeg_verdict(p.scan, p.segments, p.records, covered, &synchronized);
    if (synchronized || extra == 64) break;  // 64 x 8 rounds: hostile data is left to libjpeg
    launch_rounds(p, stream, 8);
    check(cudaStreamSynchronize(stream), "JPEG check rounds");
  }
  cudaFreeAsync(p.device, stream);
  p.device = nullptr;
  return out;
}

void launch_ycc_to_rgb(const uint8_t* y, const uint8_t* cb, const uint8_t* cr, uint32_t width, uint32_t height,
                       uint32_t h_factor, uint32_t v_factor, uint8_t* rgb, cudaStream_t stream) {
  const dim3 grid((width + 127) / 128, height);
  ycc_to_rgb_kernel<<<grid, 128, 0, stream>>>(y, cb, cr, width, height, h_factor, v_factor, rgb);
  check(cudaGetLastError(), "YCbCr to RGB");
}

}  // namespace imgstat::nvjpeg
