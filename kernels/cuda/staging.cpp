// The upload ring: host pixels into a workspace's pinned slots, copies split
// across the engine's arena, each slot's DMA under way while the next is filled.
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>

#include "cuda/analysis.hpp"
#include "cuda/tuning/host.hpp"
#include "cuda/workspace.hpp"

namespace imgstat::cuda {

void GpuContext::copy(uint8_t* to, const uint8_t* from, uint64_t n) const {
  if (n < 2 * kParallelCopyBytes) {
    std::memcpy(to, from, n);
    return;
  }
  const uint64_t pieces = (n + kParallelCopyBytes - 1) / kParallelCopyBytes;
  arena->execute([&] {
    tbb::parallel_for(uint64_t{0}, pieces, [&](uint64_t i) {
      const uint64_t off = i * kParallelCopyBytes;
      std::memcpy(to + off, from + off, std::min(kParallelCopyBytes, n - off));
    });
  });
}

void GpuContext::read(uint8_t* to, const ByteReader& read, uint64_t at, uint64_t n) const {
  // A reader may do more than copy (a FITS file's bytes reversed): a slot's
  // read is spread over every thread, not one a MiB.
  const uint64_t threads = static_cast<uint64_t>(std::max(1, arena->max_concurrency()));
  const uint64_t piece = std::max(kReadPieceMinBytes, (n + threads - 1) / threads);
  arena->execute([&] { read_in_pieces(read, at, n, to, piece); });
}

void stage_to_device(const GpuContext& gpu, const uint8_t* host, uint64_t rows, uint64_t row_bytes, uint64_t stride,
                     uint8_t* device) {
  Workspace* ws = gpu.workspaces->acquire(kAnalyzeWait);
  struct Lent {
    const GpuContext& gpu;
    Workspace* ws;
    ~Lent() {
      for (cudaStream_t s : ws->streams) IMGSTAT_CUDA_REPORT(cudaStreamSynchronize(s));
      gpu.workspaces->release(ws);
    }
  } lent{gpu, ws};
  // Whole rows a slot, or one row in pieces when a row is longer than a slot.
  const uint64_t rows_per_slot = std::max<uint64_t>(1, kSlotBytes / std::max<uint64_t>(1, row_bytes));
  int slot = 0;
  uint64_t out = 0;
  auto send = [&](const uint8_t* from_rows, uint64_t n_rows, uint64_t bytes_each, uint64_t from_stride) {
    IMGSTAT_CUDA(cudaEventSynchronize(ws->slot_free[slot]));  // the slot's last copy is over
    uint8_t* pinned = ws->pinned[slot];
    if (from_stride == bytes_each) {
      gpu.copy(pinned, from_rows, n_rows * bytes_each);
    } else {
      for (uint64_t r = 0; r < n_rows; ++r) std::memcpy(pinned + r * bytes_each, from_rows + r * from_stride, bytes_each);
    }
    const uint64_t bytes = n_rows * bytes_each;
    IMGSTAT_CUDA(cudaMemcpyAsync(device + out, pinned, bytes, cudaMemcpyHostToDevice, ws->streams[slot]));
    IMGSTAT_CUDA(cudaEventRecord(ws->slot_free[slot], ws->streams[slot]));
    out += bytes;
    slot = (slot + 1) % kSlots;
  };
  if (row_bytes > kSlotBytes) {
    for (uint64_t r = 0; r < rows; ++r)
      for (uint64_t at = 0; at < row_bytes; at += kSlotBytes)
        send(host + r * stride + at, 1, std::min(kSlotBytes, row_bytes - at), 0);
  } else {
    for (uint64_t r = 0; r < rows; r += rows_per_slot)
      send(host + r * stride, std::min(rows_per_slot, rows - r), row_bytes, stride);
  }
}

}  // namespace imgstat::cuda
