#include "cuda/analysis.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>

#include "cuda/dispatch/dispatch.hpp"
#include "cuda/tuning/host.hpp"
#include "cuda/workspace.hpp"
#include "imgstat/trace.hpp"

namespace imgstat::cuda {

bool explicit_ranges(const StatsRequest& request) {
  return request.hist.explicit_range || !request.channel_hists.empty();
}

bool keeps_pixels(const Layout& layout, const StatsRequest& request) {
  return is_float(layout.type) && ((request.histogram && !explicit_ranges(request)) || request.distribution);
}

GpuAnalysis::GpuAnalysis(const GpuContext& gpu, const Layout& layout, const StatsRequest& request,
                         std::chrono::milliseconds wait, const Session* session)
    : gpu_(gpu),
      ws_(gpu.workspaces->acquire(wait)),
      source_(layout),
      layout_(measured_layout(layout, request)),
      request_(measured_request(request, layout)),
      space_(request.colour_space) {
  for (int i = 0; i < 3; ++i) rgb_[i] = request.rgb[i];
  source_.width = layout_.width = layout.pixels();
  source_.height = layout_.height = 1;
  source_.row_stride = layout_.row_stride = 0;
  pixel_bytes_ = source_.pixel_bytes();
  chunk_pixels_ = std::max<uint64_t>(16, kSlotBytes / pixel_bytes_ / 16 * 16);
  direct_pixels_ = std::max<uint64_t>(16, kDeviceSlotBytes / pixel_bytes_ / 16 * 16);
  values_ = sample_size(layout_.type) == 2 && counts_every_value(request_);
  try {
    const bool floats = is_float(layout_.type);
    if (session) first_ = session->first;
    if (keeps_pixels(layout_, request_)) {
      if (session) {
        kept_ = session->kept;
        kept_before_ = kept_->pieces().size();
      } else {
        kept_ = &own_kept_.emplace(*gpu_.budget, layout_.pixel_bytes(), gpu_.device);
        kept_->reserve(layout_.pixels(), ws_->streams[0]);
      }
    }
    used_[0] = true;
    // A session may end part way (its counts are read back): never one block.
    one_block_ = !session && sample_size(layout_.type) == 1 && layout_.pixels() * pixel_bytes_ <= kOneBlockHist8Bytes &&
                 !request_.positions && !wants_colors() && space_ == ColourSpace::kNone && !request_.joint.axes;
    fused_ = space_ != ColourSpace::kNone && source_.type == SampleType::kUint8 && !request_.joint.axes &&
             !request_.positions && !wants_colors();
    // Kept pixels are converted into the kept buffer, the rest into slots.
    if (space_ != ColourSpace::kNone && !fused_ && !kept_) {
      colour_slot_bytes_ = direct_pixels_ * layout_.pixel_bytes();
      colour_.emplace(*gpu_.budget, colour_slot_bytes_ * kSlots, "colour conversion slots");
    }
    if (request_.joint.axes) {
      const uint64_t bins = request_.joint.total_bins();
      joint_.emplace(*gpu_.budget, (bins + 1) * 8, "a joint histogram of " + std::to_string(bins) + " bins");
      IMGSTAT_CUDA(cudaMemsetAsync(joint_->data(), 0, (bins + 1) * 8, ws_->streams[0]));
    }
    if (!one_block_) {
      cudaStream_t s0 = ws_->streams[0];
      launch_reset(histogram_out(), layout_.channels, ws_->device_results->ints, ws_->device_results->running,
                   kSlots * kMaxChannels, s0);
      if (request_.positions)
        IMGSTAT_CUDA(cudaMemsetAsync(ws_->device_results->extremes, 0, sizeof(Results::extremes), s0));
      if (wants_colors() || (floats && request_.distribution)) ws_->ensure_extra();
      if (wants_colors())
        IMGSTAT_CUDA(cudaMemsetAsync(ws_->device_extra->colors, 0, color_words(layout_.channels) * 8, s0));
      if (floats && request_.distribution)
        IMGSTAT_CUDA(cudaMemsetAsync(ws_->device_extra->fine, 0, sizeof(uint64_t) * kFineBins * layout_.channels, s0));
      IMGSTAT_CUDA(cudaEventRecord(ws_->reset_done, s0));
    }
  } catch (...) {
    IMGSTAT_CUDA_REPORT(cudaStreamSynchronize(ws_->streams[0]));
    gpu_.workspaces->release(ws_);
    throw;
  }
}

GpuAnalysis::~GpuAnalysis() {
  // On success or failure alike: nothing of this image may run when the
  // workspace goes to the next one.
  if (!synced_)
    for (int k = 0; k < kSlots; ++k)
      if (used_[k]) IMGSTAT_CUDA_REPORT(cudaStreamSynchronize(ws_->streams[k]));
  IMGSTAT_CUDA_REPORT(cudaGetLastError());
  gpu_.workspaces->release(ws_);
}

// A stream's first work of this image waits for the results to be reset.
void GpuAnalysis::use_stream(int k) {
  if (used_[k]) return;
  IMGSTAT_CUDA(cudaStreamWaitEvent(ws_->streams[k], ws_->reset_done, 0));
  used_[k] = true;
}

HistogramOut GpuAnalysis::histogram_out() const {
  Results* r = ws_->device_results;
  HistogramOut h;
  h.counts = r->counts;
  h.underflow = r->underflow;
  h.overflow = r->overflow;
  const bool bytes = sample_size(layout_.type) == 1;
  // 8-bit, and 16-bit with a distribution: counts per value, binned on the host.
  h.bins = bytes ? 256 : values_ ? 65536 : request_.hist.bins;
  h.explicit_range = explicit_ranges(request_) && !bytes && !values_;
  for (uint32_t c = 0; c < layout_.channels && c < kMaxChannels; ++c) {
    h.lo[c] = hist_of(request_, c).lo;
    h.hi[c] = hist_of(request_, c).hi;
  }
  return h;
}

// One chunk from host memory (pinned) through the slot's stream: transfer,
// then the passes that can run on it alone.
void GpuAnalysis::submit(const uint8_t* host, uint64_t pixels) {
  use_stream(slot_);
  cudaStream_t s = ws_->streams[slot_];
  if (one_block_) {
    // Small 8-bit image: the kernel reads the pinned slot and writes the
    // pinned results straight over the bus; one launch, no copies.
    launch_hist8_one_block(host, pixels, layout_.channels, ws_->host_results->counts, s);
    sent_ += pixels;
    return;
  }
  const uint64_t bytes = pixels * pixel_bytes_;
  // Kept pixels of a colour space are kept converted (measured()).
  uint8_t* dst = kept_ && space_ == ColourSpace::kNone ? kept_->append(pixels, s) : ws_->device_slot[slot_];
  IMGSTAT_CUDA(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, s));
  launch_passes(dst, first_ + sent_, pixels, slot_);
  IMGSTAT_CUDA(cudaEventRecord(ws_->slot_free[slot_], s));
  sent_ += pixels;
  slot_ = (slot_ + 1) % kSlots;
}

const uint8_t* GpuAnalysis::measured(const uint8_t* pixels, uint64_t count, int slot) {
  if (space_ == ColourSpace::kNone) return pixels;
  const cudaStream_t s = ws_->streams[slot];
  uint8_t* out = kept_ ? kept_->append(count, s) : static_cast<uint8_t*>(colour_->data()) + slot * colour_slot_bytes_;
  launch_convert(pixels, count, source_.channels, source_.type, space_, rgb_, out, gpu_.info, s);
  return out;
}

void GpuAnalysis::launch_passes(const uint8_t* source, uint64_t first, uint64_t pixels, int slot) {
  // Value counts alone (every default statistic of 8-bit samples follow
  // from them): converted in registers as they are counted.
  if (fused_) {
    launch_hist8_colour(source, pixels, source_.channels, space_, rgb_, ws_->device_results->counts, gpu_.info,
                        ws_->streams[slot]);
    return;
  }
  launch_measured_passes(measured(source, pixels, slot), first, pixels, slot);
}

void GpuAnalysis::launch_measured_passes(const uint8_t* dst, uint64_t first, uint64_t pixels, int slot) {
  const cudaStream_t s = ws_->streams[slot];
  Results* r = ws_->device_results;
  const DeviceInfo& dev = gpu_.info;
  const uint32_t c = layout_.channels;
  if (request_.joint.axes) {
    auto* counts = static_cast<unsigned long long*>(joint_->data());
    launch_joint(dst, pixels, c, layout_.type, request_.joint, counts, counts + request_.joint.total_bins(), dev, s);
  }
  switch (layout_.type) {
    case SampleType::kUint8:
    case SampleType::kInt8:
      launch_hist8(dst, pixels, c, r->counts, dev, s);
      break;
    case SampleType::kUint16:
    case SampleType::kInt16: {
      HistogramOut h = histogram_out();
      if (!request_.histogram && !values_) h.counts = nullptr;
      launch_int16(dst, pixels, c, layout_.type == SampleType::kInt16, r->ints, h, dev, s);
      break;
    }
    case SampleType::kFloat32:
    case SampleType::kFloat64:
      launch_float_moments(dst, pixels, c, layout_.type, ws_->partials[slot], r->running + slot * kMaxChannels, dev, s);
      if (request_.histogram && explicit_ranges(request_))
        launch_float_bins(dst, pixels, c, layout_.type, histogram_out(), nullptr, 0, dev, s);
      break;
  }
  if (request_.positions)
    launch_extremes(dst, pixels, first, c, layout_.type, ws_->extreme_partials[slot], r->extremes + slot * kMaxChannels,
                    dev, s);
  if (wants_colors()) launch_colors(dst, pixels, c, ws_->device_extra->colors, dev, s);
}

void GpuAnalysis::add_device(const uint8_t* p, uint64_t count) {
  flush();
  use_stream(slot_);
  cudaStream_t s = ws_->streams[slot_];
  if (one_block_) {  // the one-block kernel reads device memory as well as mapped host memory
    launch_hist8_one_block(p, count, layout_.channels, ws_->host_results->counts, s);
  } else if (kept_ && space_ != ColourSpace::kNone) {  // converted into the kept buffer
    launch_passes(p, first_ + sent_, count, slot_);
  } else if (kept_) {  // pass 2 needs the whole image in its own buffer
    uint8_t* dst = kept_->append(count, s);
    IMGSTAT_CUDA(cudaMemcpyAsync(dst, p, count * pixel_bytes_, cudaMemcpyDeviceToDevice, s));
    launch_passes(dst, first_ + sent_, count, slot_);
  } else if (space_ != ColourSpace::kNone && !fused_ && count > direct_pixels_) {
    // The conversion slots hold a device slot's worth: the image in pieces, streams in turn.
    for (uint64_t done = 0; done < count;) {
      const uint64_t n = std::min(direct_pixels_, count - done);
      use_stream(slot_);
      launch_passes(p + done * pixel_bytes_, first_ + sent_ + done, n, slot_);
      IMGSTAT_CUDA(cudaEventRecord(ws_->slot_free[slot_], ws_->streams[slot_]));
      slot_ = (slot_ + 1) % kSlots;
      done += n;
    }
    sent_ += count;
    return;
  } else {
    launch_passes(p, first_ + sent_, count, slot_);
  }
  sent_ += count;
  if (!one_block_) {
    IMGSTAT_CUDA(cudaEventRecord(ws_->slot_free[slot_], s));
    slot_ = (slot_ + 1) % kSlots;
  }
}

void GpuAnalysis::flush() {
  if (staged_ == 0) return;
  submit(ws_->pinned[slot_], staged_);
  staged_ = 0;
}

void GpuAnalysis::add(const uint8_t* p, uint64_t count) {
  if (staged_ == 0 && !one_block_ && count * pixel_bytes_ >= kLaneReadMinBytes && gpu_.arena->max_concurrency() > 1)
    return add_read_in_lanes([p](uint64_t at, uint64_t n, uint8_t* out) { std::memcpy(out, p + at, n); }, 0, count);
  while (count > 0) {
    if (staged_ == 0) IMGSTAT_CUDA(cudaEventSynchronize(ws_->slot_free[slot_]));  // the slot's last use is over
    const uint64_t n = std::min(count, chunk_pixels_ - staged_);
    gpu_.copy(ws_->pinned[slot_] + staged_ * pixel_bytes_, p, n * pixel_bytes_);
    staged_ += n;
    p += n * pixel_bytes_;
    count -= n;
    if (staged_ == chunk_pixels_) flush();
  }
}

void GpuAnalysis::add_read(const ByteReader& read, uint64_t at, uint64_t count) {
  flush();
  if (!one_block_ && count * pixel_bytes_ >= kLaneReadMinBytes && gpu_.arena->max_concurrency() > 1)
    return add_read_in_lanes(read, at, count);
  while (count > 0) {
    IMGSTAT_CUDA(cudaEventSynchronize(ws_->slot_free[slot_]));  // the slot's last use is over
    const uint64_t n = std::min(count, chunk_pixels_);
    gpu_.read(ws_->pinned[slot_], read, at, n * pixel_bytes_);
    staged_ = n;
    flush();
    at += n * pixel_bytes_;
    count -= n;
  }
}

// The read is cut into windows of a device slot each (or of the kept
// buffer), taken in turn by the slot streams, and each window into pieces.
// A lane (one a core) takes the next piece, reads it into the older of its
// own two pinned pieces and sends it on its window's stream; whoever sends a
// window's last piece launches the passes of every window complete by then,
// in window order, so that each slot's sums are added in the order a single
// thread would add them. A window's copies wait until the passes of the
// window that last used its slot are launched on the same stream.
void GpuAnalysis::add_read_in_lanes(const ByteReader& read, uint64_t at, uint64_t count) {
  const int lanes = gpu_.arena->max_concurrency();
  // The engine's larger pieces where no other read has them, else the
  // workspace's slots shared out.
  std::unique_lock<std::mutex> own_pieces;
  if (gpu_.lane_pieces) own_pieces = gpu_.lane_pieces->take(lanes);
  const LanePieces* large = own_pieces ? gpu_.lane_pieces : nullptr;
  const uint64_t per_slot = (2 * static_cast<uint64_t>(lanes) + kSlots - 1) / kSlots;
  const uint64_t piece_bytes =
      large ? kLanePieceBytes : std::min(kLanePieceMaxBytes, kSlotBytes / per_slot / 4096 * 4096);
  if (piece_bytes == 0) fail(ErrorCode::kInternal, "too many lanes for the pinned slots");
  const uint64_t window_pixels = direct_pixels_, window_bytes = window_pixels * pixel_bytes_;
  const uint64_t windows = (count + window_pixels - 1) / window_pixels;
  const uint64_t pieces_per_window = (window_bytes + piece_bytes - 1) / piece_bytes;
  const uint64_t last_pixels = count - (windows - 1) * window_pixels;
  const uint64_t last_pieces = (last_pixels * pixel_bytes_ + piece_bytes - 1) / piece_bytes;
  const uint64_t jobs = (windows - 1) * pieces_per_window + last_pieces;
  const int slot0 = slot_;
  ws_->ensure_piece_events(2 * static_cast<size_t>(lanes));
  for (int k = 0; k < kSlots; ++k) use_stream(k);
  // Whole-image kept pixels go straight into the kept buffer, in one piece.
  uint8_t* kept_base = kept_ && space_ == ColourSpace::kNone ? kept_->append(count, ws_->streams[slot0]) : nullptr;
  if (kept_base) {  // allocated in slot0's stream order (a stream's new piece): the others copy into it after
    IMGSTAT_CUDA(cudaEventRecord(ws_->stream_done[slot0], ws_->streams[slot0]));
    for (int k = 0; k < kSlots; ++k)
      if (k != slot0) IMGSTAT_CUDA(cudaStreamWaitEvent(ws_->streams[k], ws_->stream_done[slot0], 0));
  }
  auto slot_of = [&](uint64_t w) { return static_cast<int>((slot0 + w) % kSlots); };
  auto window_at = [&](uint64_t w) {
    return kept_base ? kept_base + w * window_bytes : ws_->device_slot[slot_of(w)];
  };
  auto pixels_in = [&](uint64_t w) { return w + 1 == windows ? last_pixels : window_pixels; };

  std::mutex mu;
  std::condition_variable launched_more;
  uint64_t launched = 0;  // windows whose passes are launched, the first ones
  std::vector<char> complete(windows, 0);
  std::vector<std::atomic<uint64_t>> sent_pieces(windows);
  std::atomic<uint64_t> next{0};
  std::atomic<bool> stop{false};
  std::exception_ptr error;
  auto stopped_by = [&](std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mu);
    if (!error) error = e;
    stop = true;
    launched_more.notify_all();
  };
  auto lane = [&](int l) {
    try {
      gpu_.use();
      int mine = 0;
      for (;;) {
        const uint64_t j = next.fetch_add(1);
        if (j >= jobs || stop) return;
        const uint64_t w = j / pieces_per_window, offset = (j % pieces_per_window) * piece_bytes;
        const uint64_t n = std::min(piece_bytes, pixels_in(w) * pixel_bytes_ - offset);
        const uint64_t piece = 2 * static_cast<uint64_t>(l) + mine;
        mine ^= 1;
        uint8_t* pinned = large ? large->piece(piece) : ws_->pinned[piece / per_slot] + (piece % per_slot) * piece_bytes;
        cudaEvent_t free_again = large ? large->free_again(piece) : ws_->piece_free[piece];
        IMGSTAT_CUDA(cudaEventSynchronize(free_again));  // its last copy is over
        const uint64_t from = at + w * window_bytes + offset;
        tbb::this_task_arena::isolate([&] { read(from, n, pinned); });
        const cudaStream_t s = ws_->streams[slot_of(w)];
        {
          std::unique_lock<std::mutex> lock(mu);
          launched_more.wait(lock, [&] { return stop || w < kSlots || launched > w - kSlots; });
          if (stop) return;
        }
        IMGSTAT_CUDA(cudaMemcpyAsync(window_at(w) + offset, pinned, n, cudaMemcpyHostToDevice, s));
        IMGSTAT_CUDA(cudaEventRecord(free_again, s));
        if (sent_pieces[w].fetch_add(1) + 1 != (w + 1 == windows ? last_pieces : pieces_per_window)) continue;
        std::lock_guard<std::mutex> lock(mu);
        complete[w] = 1;
        for (; launched < windows && complete[launched]; ++launched) {
          const int slot = slot_of(launched);
          launch_passes(window_at(launched), first_ + sent_ + launched * window_pixels, pixels_in(launched), slot);
          IMGSTAT_CUDA(cudaEventRecord(ws_->slot_free[slot], ws_->streams[slot]));
        }
        launched_more.notify_all();
      }
    } catch (...) {
      stopped_by(std::current_exception());
    }
  };
  // A lane a task, so that no thread runs two lanes one after the other.
  gpu_.arena->execute([&] {
    tbb::parallel_for(
        tbb::blocked_range<int>(0, lanes, 1),
        [&](const tbb::blocked_range<int>& r) {
          for (int l = r.begin(); l != r.end(); ++l) lane(l);
        },
        tbb::simple_partitioner());
  });
  if (error) std::rethrow_exception(error);
  if (launched != windows) fail(ErrorCode::kInternal, "a read in lanes left windows unsent");
  sent_ += count;
  slot_ = slot_of(windows);
}

void GpuAnalysis::add_pinned(const uint8_t* p, uint64_t count) {
  flush();
  while (count > 0) {
    const uint64_t n = std::min(count, direct_pixels_);
    submit(p, n);
    p += n * pixel_bytes_;
    count -= n;
  }
}

void GpuAnalysis::collect() {
  cudaStream_t s0 = ws_->streams[0];
  for (int k = 1; k < kSlots; ++k) {
    if (!used_[k]) continue;
    IMGSTAT_CUDA(cudaEventRecord(ws_->stream_done[k], ws_->streams[k]));
    IMGSTAT_CUDA(cudaStreamWaitEvent(s0, ws_->stream_done[k], 0));
  }
  const bool fine = is_float(layout_.type) && request_.distribution;
  if (kept_ && finished_) {
    const std::vector<KeptPixels::Piece>& pieces = kept_->pieces();
    // Earlier sessions' counts went with their workspaces; their pixels did not.
    for (size_t i = 0; i < kept_before_; ++i)
      launch_measured_passes(pieces[i].data, pieces[i].first, pieces[i].pixels, 0);
    for (const KeptPixels::Piece& piece : pieces) {
      if (request_.histogram && !explicit_ranges(request_))
        launch_float_bins(piece.data, piece.pixels, layout_.channels, layout_.type, histogram_out(),
                          ws_->device_results->running, kSlots, gpu_.info, s0);
      if (fine) {
        HistogramOut f{ws_->device_extra->fine, nullptr, nullptr, kFineBins, false, {}, {}};
        launch_float_bins(piece.data, piece.pixels, layout_.channels, layout_.type, f, ws_->device_results->running,
                          kSlots, gpu_.info, s0);
      }
    }
  }
  const size_t needed =
      offsetof(Results, counts) + sizeof(unsigned long long) * histogram_out().bins * layout_.channels;
  if (!one_block_) IMGSTAT_CUDA(cudaMemcpyAsync(ws_->host_results, ws_->device_results, needed, cudaMemcpyDeviceToHost, s0));
  if (fine && kept_ && finished_)
    IMGSTAT_CUDA(cudaMemcpyAsync(ws_->host_extra->fine, ws_->device_extra->fine,
                                 sizeof(uint64_t) * kFineBins * layout_.channels, cudaMemcpyDeviceToHost, s0));
  if (wants_colors())
    IMGSTAT_CUDA(cudaMemcpyAsync(ws_->host_extra->colors, ws_->device_extra->colors, color_words(layout_.channels) * 8,
                                 cudaMemcpyDeviceToHost, s0));
  if (joint_) {
    joint_host_.resize(request_.joint.total_bins() + 1);
    IMGSTAT_CUDA(cudaMemcpyAsync(joint_host_.data(), joint_->data(), joint_host_.size() * 8, cudaMemcpyDeviceToHost, s0));
  }
  IMGSTAT_CUDA(cudaStreamSynchronize(s0));
}

std::optional<Partial> GpuAnalysis::partial() {
  if (finished_ || one_block_ || kept_) return std::nullopt;
  flush();
  collect();
  return partial_from_host();
}

Result GpuAnalysis::finish() { return result_of(finish_partial(), request_, "cuda"); }

Partial GpuAnalysis::finish_partial() {
  TraceRange range("gpu analysis finish (wait, read back)");
  if (finished_) fail(ErrorCode::kInternal, "analysis finished twice");
  finished_ = true;
  flush();
  collect();
  synced_ = true;
  return partial_from_host();
}

Partial GpuAnalysis::partial_from_host() const {
  const Results* h = ws_->host_results;
  const HistogramOut out = histogram_out();
  const SampleType type = layout_.type;
  Partial p;
  p.type = type;
  if (wants_colors()) p.colors.assign(ws_->host_extra->colors, ws_->host_extra->colors + color_words(layout_.channels));
  if (!joint_host_.empty()) {
    p.joint.assign(joint_host_.begin(), joint_host_.end() - 1);
    p.joint_outside = joint_host_.back();
  }
  for (uint32_t ch = 0; ch < layout_.channels; ++ch) {
    Extremes at;
    if (request_.positions)
      for (int k = 0; k < kSlots; ++k) merge(at, h->extremes[k * kMaxChannels + ch]);
    if (sample_size(type) == 1) {
      // Counts by raw byte; int8 flips the sign bit to index by v + 128.
      std::vector<uint64_t> values(256);
      const size_t flip = type == SampleType::kInt8 ? 0x80 : 0;
      for (size_t i = 0; i < 256; ++i) values[i ^ flip] = h->counts[ch * 256 + i];
      p.channels.push_back(partial_of_values(values.data(), type, request_, ch));
      p.channels.back().extremes = at;
      continue;
    }
    if (values_) {  // counts by offset from the type's lowest value: exactly what partial_of_values takes
      std::vector<uint64_t> values(h->counts + ch * 65536, h->counts + (ch + 1) * 65536);
      p.channels.push_back(partial_of_values(values.data(), type, request_, ch));
      p.channels.back().extremes = at;
      continue;
    }
    ChannelPartial c;
    c.extremes = at;
    if (!is_float(type)) {
      // Sums of offsets u = v - lo, exact: sum v = sum u + n lo,
      // sum v^2 = sum u^2 + 2 lo sum u + n lo^2.
      const IntAccum& a = h->ints[ch];
      const int128 lo = type_lo(type), n = sent_, su = a.sum;
      const uint128 squ = (static_cast<uint128>(a.sumsq_hi) << 64) | a.sumsq_lo;
      c.ints.n = sent_;
      c.ints.min = static_cast<int64_t>(a.min) + type_lo(type);
      c.ints.max = static_cast<int64_t>(a.max) + type_lo(type);
      c.ints.sum = su + n * lo;
      c.ints.sumsq = static_cast<uint128>(static_cast<int128>(squ) + 2 * lo * su + n * lo * lo);
    } else {
      for (int k = 0; k < kSlots; ++k) merge(c.floats, h->running[k * kMaxChannels + ch]);
      if (request_.distribution && kept_ && finished_)
        c.fine = fine_bins_of(ws_->host_extra->fine + ch * kFineBins, kFineBins);
    }
    if (request_.histogram) {
      c.histogram.counts.assign(h->counts + ch * out.bins, h->counts + (ch + 1) * out.bins);
      if (out.explicit_range) {
        c.histogram.underflow = h->underflow[ch];
        c.histogram.overflow = h->overflow[ch];
      }
    }
    p.channels.push_back(std::move(c));
  }
  return p;
}

}  // namespace imgstat::cuda
