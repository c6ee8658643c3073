// The CPU engine's stream: bytes of a strided image as they arrive,
// counted at once; what a second pass needs (floats binned over their own
// range) is kept as it comes, or read again where the image can be.
#pragma once

#include <tbb/task_arena.h>

#include <array>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "common/partial.hpp"
#include "common/pieces.hpp"
#include "cpu/analysis.hpp"
#include "imgstat/engine.hpp"

namespace imgstat::cpu {

class CpuStream final : public CheckpointStream {
 public:
  // reread: where the image can be read again for a second pass, so that
  // none of it is kept; null: what a second pass needs is kept as it comes.
  CpuStream(const Layout& layout, const StatsRequest& request, tbb::task_arena& arena,
            const ByteReader* reread = nullptr)
      : layout_(layout), destrider_(layout), analysis_(make_analysis(layout, request)), arena_(arena), reread_(reread) {}

  void feed(const void* data, size_t bytes) override {
    if (destrider_.consumed() + gathered_.size() + bytes > layout_.stride() * layout_.height)
      fail(ErrorCode::kInvalidArgument, "more data than the layout holds");
    if (bytes >= kStreamGatherBytes) {
      flush();
      take(data, bytes);
      return;
    }
    const auto* p = static_cast<const uint8_t*>(data);
    gathered_.insert(gathered_.end(), p, p + bytes);
    if (gathered_.size() >= kStreamGatherBytes) flush();
  }

  Result finish() override {
    flush();
    if (!destrider_.complete())
      fail(ErrorCode::kInvalidArgument,
           "stream ended after " + std::to_string(destrider_.consumed()) + " bytes; the layout needs " +
               std::to_string(layout_.min_bytes()));
    if (analysis_->wants_second_pass() && reread_) {
      second_pass_from(*reread_);
    } else if (analysis_->wants_second_pass()) {
      std::vector<Piece> pieces;
      for (const std::vector<uint8_t>& k : kept_) {
        const ImageView part{k.data(), Layout{k.size() / layout_.pixel_bytes(), 1, layout_.channels, layout_.type, 0}};
        for (const Piece& pc : pieces_of(part)) pieces.push_back(pc);
      }
      arena_.execute([&] { analysis_->add_second_pass(pieces); });
    }
    return analysis_->finish();
  }

  std::optional<Partial> partial() override {
    flush();
    return analysis_->partial();
  }

 private:
  void flush() {
    if (gathered_.empty()) return;
    take(gathered_.data(), gathered_.size());
    gathered_.clear();
  }

  // The image read again, a chunk at a time, for the second pass.
  void second_pass_from(const ByteReader& read) {
    Destrider again(layout_);
    const uint64_t total = layout_.min_bytes(), pixel_bytes = layout_.pixel_bytes();
    // Not value-initialized: the reads fill it (read_into says why).
    const std::unique_ptr<uint8_t[]> chunk(new uint8_t[static_cast<size_t>(std::min(kReadChunkBytes, total))]);
    for (uint64_t at = 0; at < total; at += kReadChunkBytes) {
      const uint64_t n = std::min(kReadChunkBytes, total - at);
      read_in_pieces(read, at, n, chunk.get(), kReadPieceBytes);
      std::vector<Piece> runs;
      std::deque<std::array<uint8_t, 32>> split;  // pixels cut by a chunk's edge, whole again
      again.feed(chunk.get(), n, [&](const uint8_t* p, uint64_t pixels, bool transient) {
        if (transient) {
          split.emplace_back();
          std::memcpy(split.back().data(), p, pixel_bytes);
          p = split.back().data();
        }
        // A packed chunk is one run: in pieces, for every thread.
        for (const Piece& pc : pieces_of(ImageView{p, Layout{pixels, 1, layout_.channels, layout_.type, 0}}))
          runs.push_back(pc);
      });
      arena_.execute([&] { analysis_->add_second_pass(runs); });
    }
  }

  // Counts the bytes now: the pieces have read them when this returns.
  void take(const void* data, size_t bytes) {
    const bool keep = analysis_->wants_second_pass() && !reread_;
    const uint64_t pixel_bytes = layout_.pixel_bytes();
    // A feed (a decoder's band: a few MiB) is one run: cut small enough that
    // every thread of the arena gets several pieces.
    const uint64_t piece_bytes = std::clamp<uint64_t>(
        bytes / (4 * static_cast<uint64_t>(std::max(1, arena_.max_concurrency()))), uint64_t{64} << 10, kPieceBytes);
    std::vector<Piece> runs;
    destrider_.feed(static_cast<const uint8_t*>(data), bytes, [&](const uint8_t* p, uint64_t pixels, bool transient) {
      if (keep) this->keep(p, pixels * pixel_bytes);
      const uint64_t first = fed_pixels_;
      fed_pixels_ += pixels;
      if (transient) {
        analysis_->add_all({Piece{p, 1, 0, pixels, first, pixels}});
        return;
      }
      const ImageView run{p, Layout{pixels, 1, layout_.channels, layout_.type, 0}};
      for (const Piece& pc : pieces_of(run, first, piece_bytes)) runs.push_back(pc);
    });
    if (!runs.empty()) arena_.execute([&] { analysis_->add_all(runs); });
  }

  // Pixels for the second pass, in buffers of kKeptBytes: what is kept grows
  // with what was fed (never with what the layout declares), and never by a
  // copy of all of it into a larger buffer.
  void keep(const uint8_t* p, uint64_t bytes) {
    const uint64_t room = kKeptBytes / layout_.pixel_bytes() * layout_.pixel_bytes();
    while (bytes > 0) {
      if (kept_.empty() || kept_.back().size() >= room) {
        kept_.emplace_back();
        kept_.back().reserve(room);
      }
      std::vector<uint8_t>& k = kept_.back();
      const uint64_t n = std::min<uint64_t>(bytes, room - k.size());
      k.insert(k.end(), p, p + n);
      p += n;
      bytes -= n;
    }
  }

  static constexpr uint64_t kKeptBytes = uint64_t{16} << 20;

  Layout layout_;
  uint64_t fed_pixels_ = 0;
  Destrider destrider_;
  std::unique_ptr<Analysis> analysis_;
  tbb::task_arena& arena_;
  const ByteReader* reread_;
  std::vector<std::vector<uint8_t>> kept_;
  std::vector<uint8_t> gathered_;  // small feeds, not yet counted
};

}  // namespace imgstat::cpu
