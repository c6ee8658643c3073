// Parts of an image (masks, labels, tiles) over 8- and 16-bit samples: each
// thread counts runs of pixels of one part in registers and adds a run's
// moments with one atomic per accumulator; histogram or value counts per
// sample into shared memory when every part's fit there (a mask, a tile,
// few labels), else into global memory.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/tuning/launch.hpp"
#include "cuda/block/types.hpp"

namespace imgstat::cuda {

constexpr uint32_t kNoPartDevice = 0xFFFFFFFFu;

// The part of pixel (x, y): raw() reads what the map holds there, part()
// turns it into a part; consecutive equal raws skip the lookup.
struct MaskMap {
  const uint8_t* p;
  uint64_t stride;
  uint32_t step;  // bytes from one pixel's mask sample to the next
  __device__ uint32_t raw(uint32_t x, uint32_t y) const { return p[y * stride + uint64_t{x} * step]; }
  __device__ uint32_t part(uint32_t raw) const { return raw ? 0 : kNoPartDevice; }
};

template <class L>
struct TableMap {
  const uint8_t* p;
  uint64_t stride;
  uint32_t step;  // samples from one pixel's label to the next
  const uint32_t* table;
  __device__ L raw(uint32_t x, uint32_t y) const {
    return reinterpret_cast<const L*>(p + y * stride)[uint64_t{x} * step];
  }
  __device__ uint32_t part(L raw) const { return table[raw]; }
};

template <class L>
struct SearchMap {
  const uint8_t* p;
  uint64_t stride;
  uint32_t step;
  const long long* labels;  // ascending
  uint32_t count;
  bool ignore;
  long long ignored;
  __device__ L raw(uint32_t x, uint32_t y) const {
    return reinterpret_cast<const L*>(p + y * stride)[uint64_t{x} * step];
  }
  __device__ uint32_t part(L raw) const {
    const long long v = static_cast<long long>(raw);
    if (ignore && v == ignored) return kNoPartDevice;
    uint32_t lo = 0, hi = count;
    while (lo < hi) {
      const uint32_t mid = (lo + hi) / 2;
      if (labels[mid] < v)
        lo = mid + 1;
      else
        hi = mid;
    }
    return lo < count && labels[lo] == v ? lo : kNoPartDevice;
  }
};

// A run's moments of one channel, in registers until the part changes:
// sums in 64 bits, extremes as 32-bit offsets from the type's lowest value
// and, with positions, as keys that carry the pixel index.
template <class Sum, class Squares>
struct RunMomentsOf {
  unsigned long long n;
  Sum sum;
  Squares sumsq;
  uint32_t min;  // offsets
  uint32_t max;
  unsigned long long min_key;  // ~(offset << 40 | index): larger is smaller
  unsigned long long max_key;  // offset << 40 | (2^40 - 1 - index)
};

// 8-bit samples sum in 32 bits over a segment (32 x 255^2 fits); 16-bit ones in 64.
using RunMoments = RunMomentsOf<long long, unsigned long long>;
using NarrowRunMoments = RunMomentsOf<int, unsigned int>;

template <class R>
__device__ __forceinline__ void run_reset(R& r) {
  r.n = 0;
  r.sum = 0;
  r.sumsq = 0;
  r.min = 0xFFFFFFFFu;
  r.max = 0;
  r.min_key = 0;
  r.max_key = 0;
}

template <bool Positions, class R>
__device__ __forceinline__ void run_add(R& r, int32_t v, uint32_t offset, unsigned long long index) {
  r.n += 1;
  r.sum += v;
  r.sumsq += static_cast<uint32_t>(v * v);  // |v| <= 65535: v * v fits 32 bits unsigned
  r.min = min(r.min, offset);
  r.max = max(r.max, offset);
  if (Positions) {
    const unsigned long long at = static_cast<unsigned long long>(offset) << 40;
    const unsigned long long mk = ~(at | index);
    const unsigned long long xk = at | ((1ull << 40) - 1 - index);
    r.min_key = mk > r.min_key ? mk : r.min_key;
    r.max_key = xk > r.max_key ? xk : r.max_key;
  }
}

template <bool Positions, class R>
__device__ __forceinline__ void run_flush(const R& r, PartAccum& a) {
  if (r.n == 0) return;
  atomicAdd(&a.n, r.n);
  atomicAdd(&a.sum, static_cast<unsigned long long>(static_cast<long long>(r.sum)));
  atomicAdd(&a.sumsq, static_cast<unsigned long long>(r.sumsq));
  atomicMax(&a.min_inverse, ~r.min);
  atomicMax(&a.max, r.max);
  if (Positions) {
    atomicMax(&a.min_key, r.min_key);
    atomicMax(&a.max_key, r.max_key);
  }
}

// Slots: a part-channel's histogram bins or value counts, then underflow and
// overflow (slot_stride = slots + 2); slot_of maps a sample's offset.
struct SlotsOut {
  unsigned int* slots;  // global: parts * channels * stride
  const int32_t* slot_of;
  uint32_t stride;      // 0: no slots counted
  bool shared;          // every part's slots privatized in shared memory
};

__device__ __forceinline__ void count_slot(const SlotsOut& s, unsigned int* shared, uint32_t at, uint32_t offset) {
  const uint32_t k = at * s.stride + static_cast<uint32_t>(s.slot_of[offset]);
  if (s.shared)
    atomicAdd(&shared[k], 1u);
  else
    atomicAdd(&s.slots[k], 1u);
}

__device__ __forceinline__ void zero_shared(unsigned int* shared, uint32_t n) {
  for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) shared[i] = 0;
  __syncthreads();
}

// `copies` copies of `one` slots in shared memory, added into global ones.
__device__ __forceinline__ void publish_copies(const unsigned int* shared, uint32_t copies, uint32_t one,
                                               unsigned int* global) {
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < one; i += blockDim.x) {
    unsigned int total = 0;
    for (uint32_t k = 0; k < copies; ++k) total += shared[k * one + i];
    if (total) atomicAdd(&global[i], total);
  }
}

__device__ __forceinline__ void publish_shared(const unsigned int* shared, unsigned int* global, uint32_t n) {
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < n; i += blockDim.x)
    if (shared[i]) atomicAdd(&global[i], shared[i]);
}

// Masks and labels: grid-stride over segments of rows.
template <class T, class Map, bool Positions>
__global__ void __launch_bounds__(kPartThreads) part_map_kernel(const uint8_t* pixels, uint32_t width, uint32_t height,
                                                                uint32_t channels, int32_t lo, Map map,
                                                                PartAccum* acc, SlotsOut slots, uint32_t parts) {
  extern __shared__ unsigned int shared_slots[];
  const uint32_t shared_n = slots.shared ? parts * channels * slots.stride : 0;
  if (slots.shared) zero_shared(shared_slots, shared_n);
  const uint64_t segs_per_row = (width + kPartSegment - 1) / kPartSegment;
  const uint64_t segs = segs_per_row * height;
  const uint64_t row_samples = uint64_t{width} * channels;
  for (uint64_t seg = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; seg < segs;
       seg += uint64_t{gridDim.x} * blockDim.x) {
    const uint32_t y = static_cast<uint32_t>(seg / segs_per_row);
    const uint32_t x0 = static_cast<uint32_t>(seg % segs_per_row) * kPartSegment;
    const uint32_t x1 = min(x0 + kPartSegment, width);
    const T* row = reinterpret_cast<const T*>(pixels) + y * row_samples;
    using Run = std::conditional_t<sizeof(T) == 1, NarrowRunMoments, RunMoments>;
    Run run[4];
    for (uint32_t c = 0; c < 4; ++c) run_reset(run[c]);
    uint32_t part = kNoPartDevice;
    auto last = map.raw(x0, y);
    part = map.part(last);
    for (uint32_t x = x0; x < x1; ++x) {
      const auto raw = map.raw(x, y);
      if (raw != last) {
        last = raw;
        const uint32_t p = map.part(raw);
        if (p != part) {
          if (part != kNoPartDevice)
            for (uint32_t c = 0; c < channels; ++c) {
              run_flush<Positions>(run[c], acc[part * channels + c]);
              run_reset(run[c]);
            }
          part = p;
        }
      }
      if (part == kNoPartDevice) continue;
      const unsigned long long index = uint64_t{y} * width + x;
      for (uint32_t c = 0; c < channels; ++c) {
        const long long v = row[uint64_t{x} * channels + c];
        const uint32_t offset = static_cast<uint32_t>(v - lo);
        run_add<Positions>(run[c], static_cast<int32_t>(v), offset, index);
        if (slots.stride) count_slot(slots, shared_slots, part * channels + c, offset);
      }
    }
    if (part != kNoPartDevice)
      for (uint32_t c = 0; c < channels; ++c) run_flush<Positions>(run[c], acc[part * channels + c]);
  }
  if (slots.shared) publish_shared(shared_slots, slots.slots, shared_n);
}

// Tiles: block (t, k) takes the k-th share of tile t's rows, so its part is
// one and its slots are in shared memory; each thread's pixels are one run.
template <class T, bool Positions, bool Moments>
__global__ void __launch_bounds__(kPartThreads) part_tile_kernel(const uint8_t* pixels, uint32_t width,
                                                                 uint32_t channels, int32_t lo, const uint32_t* x_edges,
                                                                 const uint32_t* y_edges, uint32_t columns,
                                                                 PartAccum* acc, SlotsOut slots) {
  extern __shared__ unsigned int shared_slots[];
  const uint32_t tile = blockIdx.x;
  const uint32_t col = tile % columns, r = tile / columns;
  const uint32_t tx0 = x_edges[col], tx1 = x_edges[col + 1], ty0 = y_edges[r], ty1 = y_edges[r + 1];
  const uint32_t tw = tx1 - tx0;
  const uint64_t n = uint64_t{tw} * (ty1 - ty0);
  const uint64_t first = n * blockIdx.y / gridDim.y, end = n * (blockIdx.y + 1) / gridDim.y;
  const uint32_t shared_n = channels * slots.stride;
  if (slots.shared) zero_shared(shared_slots, shared_n);
  SlotsOut local = slots;  // this tile's slots, channel by channel
  local.slots = slots.slots + uint64_t{tile} * shared_n;
  RunMoments run[4];
  for (uint32_t c = 0; c < 4; ++c) run_reset(run[c]);
  for (uint64_t i = first + threadIdx.x; i < end; i += blockDim.x) {
    const uint32_t y = ty0 + static_cast<uint32_t>(i / tw), x = tx0 + static_cast<uint32_t>(i % tw);
    const T* px = reinterpret_cast<const T*>(pixels) + (uint64_t{y} * width + x) * channels;
    const unsigned long long index = uint64_t{y} * width + x;
    for (uint32_t c = 0; c < channels; ++c) {
      const long long v = px[c];
      const uint32_t offset = static_cast<uint32_t>(v - lo);
      if (Moments) run_add<Positions>(run[c], static_cast<int32_t>(v), offset, index);
      if (slots.stride) count_slot(local, shared_slots, c, offset);
    }
  }
  if (Moments)
    for (uint32_t c = 0; c < channels; ++c) run_flush<Positions>(run[c], acc[tile * channels + c]);
  if (slots.shared) publish_shared(shared_slots, local.slots, shared_n);
}

// Masks and labels when the slots are every value (8-bit histograms over the
// type's range, value counts: the slot of a sample is its offset) and no
// positions are asked for: the moments follow from the counts on the host,
// so each pixel is a lookup and an increment. Rows are shared out by block, pixels by thread (coalesced);
// slots in shared memory, one copy per group of warps when they fit.
template <class T, class Map>
__global__ void __launch_bounds__(kPartThreads) part_values_kernel(const uint8_t* pixels, uint32_t width,
                                                                   uint32_t height, uint32_t channels, int32_t lo,
                                                                   Map map, SlotsOut slots, uint32_t parts,
                                                                   uint32_t copies) {
  extern __shared__ unsigned int shared_slots[];
  const uint32_t one = parts * channels * slots.stride;
  if (slots.shared) zero_shared(shared_slots, one * copies);
  unsigned int* mine = slots.shared ? shared_slots + (threadIdx.x / 32 % copies) * one : slots.slots;
  const uint64_t row_samples = uint64_t{width} * channels;
  for (uint32_t y = blockIdx.x; y < height; y += gridDim.x) {
    const T* row = reinterpret_cast<const T*>(pixels) + y * row_samples;
    for (uint32_t x = threadIdx.x; x < width; x += blockDim.x) {
      const uint32_t p = map.part(map.raw(x, y));
      if (p == kNoPartDevice) continue;
      for (uint32_t c = 0; c < channels; ++c) {
        const uint32_t offset = static_cast<uint32_t>(static_cast<int32_t>(row[uint64_t{x} * channels + c]) - lo);
        atomicAdd(&mine[(p * channels + c) * slots.stride + offset], 1u);
      }
    }
  }
  if (slots.shared) publish_copies(shared_slots, copies, one, slots.slots);
}

// The same for 8-bit samples and a packed one-sample-a-pixel map (a byte
// mask, 8- or 16-bit labels): four pixels at a time, in C 32-bit loads of
// samples and one load of their map entries.
struct Mask4 {
  const uint8_t* p;
  __device__ void parts4(uint64_t g, uint32_t out[4]) const {
    const uchar4 m = reinterpret_cast<const uchar4*>(p)[g];
    out[0] = m.x ? 0 : kNoPartDevice;
    out[1] = m.y ? 0 : kNoPartDevice;
    out[2] = m.z ? 0 : kNoPartDevice;
    out[3] = m.w ? 0 : kNoPartDevice;
  }
  __device__ uint32_t part1(uint64_t i) const { return p[i] ? 0 : kNoPartDevice; }
};

// 8- or 16-bit labels, four read at once (uchar4 or ushort4).
template <class L>
struct Table4 {
  const L* p;
  const uint32_t* table;
  __device__ void parts4(uint64_t g, uint32_t out[4]) const {
    using Four = std::conditional_t<sizeof(L) == 1, uchar4, ushort4>;
    const Four m = reinterpret_cast<const Four*>(p)[g];
    out[0] = table[m.x];
    out[1] = table[m.y];
    out[2] = table[m.z];
    out[3] = table[m.w];
  }
  __device__ uint32_t part1(uint64_t i) const { return table[p[i]]; }
};

template <class T, uint32_t C, class Map4>
__global__ void __launch_bounds__(kPartThreads) part_values4_kernel(const uint8_t* pixels, uint64_t n, int32_t lo,
                                                                    Map4 map, SlotsOut slots, uint32_t parts,
                                                                    uint32_t copies) {
  extern __shared__ unsigned int shared_slots[];
  const uint32_t one = parts * C * slots.stride;
  if (slots.shared) zero_shared(shared_slots, one * copies);
  unsigned int* mine = slots.shared ? shared_slots + (threadIdx.x / 32 % copies) * one : slots.slots;
  auto count = [&](uint32_t p, uint8_t byte, uint32_t c) {
    const uint32_t offset = static_cast<uint32_t>(static_cast<int32_t>(static_cast<T>(byte)) - lo);
    atomicAdd(&mine[(p * C + c) * slots.stride + offset], 1u);
  };
  const uint64_t groups = n / 4;
  for (uint64_t g = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; g < groups; g += uint64_t{gridDim.x} * blockDim.x) {
    uint32_t part[4];
    map.parts4(g, part);
    if ((part[0] & part[1] & part[2] & part[3]) == kNoPartDevice) continue;
    uint32_t words[C];
    const uint32_t* w = reinterpret_cast<const uint32_t*>(pixels) + g * C;
#pragma unroll
    for (uint32_t k = 0; k < C; ++k) words[k] = w[k];
#pragma unroll
    for (uint32_t j = 0; j < 4; ++j) {
      if (part[j] == kNoPartDevice) continue;
#pragma unroll
      for (uint32_t c = 0; c < C; ++c) {
        const uint32_t b = j * C + c;  // byte of the 4 pixels' samples
        count(part[j], static_cast<uint8_t>(words[b / 4] >> (8 * (b % 4))), c);
      }
    }
  }
  if (blockIdx.x == 0 && threadIdx.x < n % 4) {  // the last pixels, one a thread
    const uint64_t i = groups * 4 + threadIdx.x;
    const uint32_t p = map.part1(i);
    if (p != kNoPartDevice)
      for (uint32_t c = 0; c < C; ++c) count(p, pixels[i * C + c], c);
  }
  if (slots.shared) publish_copies(shared_slots, copies, one, slots.slots);
}

}  // namespace imgstat::cuda
