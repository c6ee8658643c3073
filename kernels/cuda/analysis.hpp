// One image's accumulation on the GPU, or one session of a stream's: the
// upload ring (host copies into pinned slots, transfers, kernels per chunk
// on the workspace's streams) and reading the results back.
#pragma once

#include <tbb/task_arena.h>

#include <chrono>
#include <cstdint>
#include <optional>

#include "common/partial.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/kept_pixels.hpp"
#include "cuda/workspace.hpp"
#include "imgstat/engine.hpp"

namespace imgstat::cuda {

// What an analysis needs of its engine: the GPU, its memory budget and
// workspaces, and the arena that splits staging copies across cores.
struct GpuContext {
  int device = 0;
  DeviceInfo info{};
  DeviceBudget* budget = nullptr;
  WorkspacePool* workspaces = nullptr;
  tbb::task_arena* arena = nullptr;
  LanePieces* lane_pieces = nullptr;  // null: reads in lanes use their workspace's slots

  void use() const { IMGSTAT_CUDA(cudaSetDevice(device)); }
  // Copies n bytes, split across the arena's threads when large.
  void copy(uint8_t* to, const uint8_t* from, uint64_t n) const;
  // Reads n bytes from `at` into `to`, split across the arena's threads the same way.
  void read(uint8_t* to, const ByteReader& read, uint64_t at, uint64_t n) const;
};

// rows x row_bytes of pageable host memory (rows `stride` apart) into packed
// device memory, staged through a workspace's pinned ring: host copies
// split across the arena's threads while earlier slots are in flight, at
// the pinned-copy rate. Waits for a workspace as an image does
// (kResourceExhausted when none comes) and returns when the copy is done.
void stage_to_device(const GpuContext& gpu, const uint8_t* host, uint64_t rows, uint64_t row_bytes, uint64_t stride,
                     uint8_t* device);

// Histograms over ranges given beforehand: the request's, or with a colour
// space each channel's (measured_request()).
bool explicit_ranges(const StatsRequest& request);
// Floats binned over [min, max] need every pixel before their second pass.
bool keeps_pixels(const Layout& layout, const StatsRequest& request);

// Where one session of a stream sits in its image: it starts where the last
// one ended, and a float stream's pixels stay with the stream across sessions.
struct Session {
  uint64_t first = 0;           // the image's pixel index of the session's first pixel
  KeptPixels* kept = nullptr;   // keeps_pixels(): the stream's pieces
};

// One image's accumulation, or one session of a stream's: whole pixels in
// order, staged through the workspace's ring (or sent straight from pinned
// memory), kernels per chunk. It holds the workspace while it lives.
class GpuAnalysis {
 public:
  GpuAnalysis(const GpuContext& gpu, const Layout& layout, const StatsRequest& request,
              std::chrono::milliseconds wait, const Session* session = nullptr);
  ~GpuAnalysis();
  GpuAnalysis(const GpuAnalysis&) = delete;
  GpuAnalysis& operator=(const GpuAnalysis&) = delete;

  void add(const uint8_t* pixels, uint64_t count);         // pageable memory: staged
  void add_pinned(const uint8_t* pixels, uint64_t count);  // page-locked memory: sent as is
  void add_device(const uint8_t* pixels, uint64_t count);  // already on the device: no transfer
  // count pixels read from byte `at` on straight into the pinned slots.
  void add_read(const ByteReader& read, uint64_t at, uint64_t count);
  // Sends what is staged on its way (a session about to end).
  void flush();
  // What the pixels added so far add up to, waiting for their work to
  // finish; empty where that needs the rest of the image (floats binned over
  // their own range) or would disturb it (one-block images).
  std::optional<Partial> partial();
  Result finish();
  // The same, before result_of(): a stream merges it with its earlier sessions'.
  Partial finish_partial();

 private:
  void submit(const uint8_t* host, uint64_t pixels);
  // add() and add_read() of a large source: in lanes over every core (kLaneReadMinBytes).
  void add_read_in_lanes(const ByteReader& read, uint64_t at, uint64_t count);
  // The passes that run on one chunk alone: `pixels` device pixels at
  // source, the image's from `first` on, on the streams and buffers of
  // `slot`: converted to the measured space (measured()), then
  // launch_measured_passes.
  void launch_passes(const uint8_t* source, uint64_t first, uint64_t pixels, int slot);
  void launch_measured_passes(const uint8_t* dst, uint64_t first, uint64_t pixels, int slot);
  // Brings the accumulators to host_results once all work so far has run.
  void collect();
  Partial partial_from_host() const;
  void use_stream(int k);
  HistogramOut histogram_out() const;
  bool wants_colors() const { return request_.unique_colors && sample_size(layout_.type) == 1; }

  // Colour conversion into colour_[slot], or for kept pixels into the kept
  // buffer; returns where the measured pixels are.
  const uint8_t* measured(const uint8_t* pixels, uint64_t count, int slot);

  const GpuContext& gpu_;
  Workspace* ws_;
  Layout source_;  // of the pixel stream: channels and type; width = all pixels
  Layout layout_;  // of what is measured: source_, or its colour space's channels
  StatsRequest request_;  // measured_request()'s
  ColourSpace space_ = ColourSpace::kNone;
  uint32_t rgb_[3] = {0, 1, 2};
  // Colour spaces whose value counts alone are wanted convert in registers
  // as they count (launch_hist8_colour); the others convert into
  // colour_'s slots first.
  bool fused_ = false;
  // Colour spaces: a device slot's worth of converted pixels per stream.
  std::optional<DeviceBuffer> colour_;
  uint64_t colour_slot_bytes_ = 0;
  // Joint histograms: the counts, then the pixels outside.
  std::optional<DeviceBuffer> joint_;
  std::vector<uint64_t> joint_host_;
  uint64_t pixel_bytes_;
  uint64_t chunk_pixels_;   // a pinned slot's worth, a multiple of 16 pixels
  uint64_t direct_pixels_;  // a device slot's worth
  int slot_ = 0;            // the slot being filled or sent next
  bool used_[kSlots] = {};  // streams that carry work of this image
  uint64_t staged_ = 0;    // pixels in pinned[slot_]
  uint64_t first_ = 0;     // the image's pixel index of this analysis's first pixel
  uint64_t sent_ = 0;      // pixels submitted
  // Floats binned over [min, max]: the pixels stay on the device, in the
  // stream's pieces or, for a whole image, in own_kept_. Pieces before
  // kept_before_ came in earlier sessions: finish() counts them again.
  std::optional<KeptPixels> own_kept_;
  KeptPixels* kept_ = nullptr;
  size_t kept_before_ = 0;
  // A small 8-bit image: one chunk, one block that writes the counts into
  // pinned host memory, no reset, no copies.
  bool one_block_ = false;
  bool finished_ = false;
  bool synced_ = false;  // finish() waited for everything
  // 16-bit samples with a distribution or shape: the kernel counts every
  // value, and the requested histogram is binned from those on the host.
  bool values_ = false;
};

}  // namespace imgstat::cuda
