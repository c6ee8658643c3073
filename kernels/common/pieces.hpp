// Cutting an image into pieces of whole pixels for parallel work, and turning
// a byte stream of a strided image back into runs of whole pixels.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "imgstat/engine.hpp"

namespace imgstat {

// rows x pixels sub-rectangle; each row of it starts at channel 0. Its
// first pixel is pixel `first` of the image (row-major), and each row of it
// starts `width` pixels after the one before.
struct Piece {
  const uint8_t* base;
  uint64_t rows;
  uint64_t stride;
  uint64_t pixels;
  uint64_t first = 0;
  uint64_t width = 0;
};

// About target_bytes a piece: several whole rows when rows are short, a
// segment of one row when rows are long.
class Pieces {
 public:
  Pieces(const ImageView& image, uint64_t target_bytes);
  size_t size() const { return count_; }
  Piece operator[](size_t i) const;

 private:
  const uint8_t* base_;
  Layout layout_;
  uint64_t rows_per_piece_ = 1;     // when rows are short
  uint64_t segments_per_row_ = 1;   // when rows are long
  uint64_t pixels_per_segment_ = 0;
  size_t count_ = 0;
};

// Feeds consecutive bytes of a strided image, calls sink(ptr, pixels,
// transient) with runs of whole pixels and skips row padding. A pixel split
// across two feeds is reassembled in a small carry buffer and passed with
// transient = true: that pointer is valid only during the call.
class Destrider {
 public:
  explicit Destrider(const Layout& layout);

  template <class Sink>
  void feed(const uint8_t* p, size_t n, Sink&& sink);

  uint64_t consumed() const { return consumed_; }
  bool complete() const { return row_ >= layout_.height; }

 private:
  Layout layout_;
  uint64_t pixel_bytes_;
  uint64_t row_bytes_;
  uint64_t stride_;
  uint64_t row_ = 0;        // current row
  uint64_t offset_ = 0;     // byte offset within the current row's stride
  uint64_t consumed_ = 0;
  uint8_t carry_[32];
  uint32_t carry_len_ = 0;
};

template <class Sink>
void Destrider::feed(const uint8_t* p, size_t n, Sink&& sink) {
  consumed_ += n;
  while (n > 0 && row_ < layout_.height) {
    // Packed rows are one run: the sink gets whole feeds, not a call a row
    // (a row of a 4096-wide uint16 image is 8 KiB: too little to copy on
    // several threads or to be worth a call).
    if (stride_ == row_bytes_ && carry_len_ == 0) {
      const uint64_t left = (layout_.height - row_) * row_bytes_ - offset_;
      const uint64_t pixels = std::min<uint64_t>(n, left) / pixel_bytes_;
      if (pixels > 0) {
        sink(p, pixels, false);
        const uint64_t used = pixels * pixel_bytes_, at = offset_ + used;
        p += used;
        n -= used;
        row_ += at / row_bytes_;
        offset_ = at % row_bytes_;
        continue;
      }
    }
    if (offset_ >= row_bytes_) {  // in the padding
      const uint64_t skip = std::min<uint64_t>(n, stride_ - offset_);
      p += skip;
      n -= skip;
      offset_ += skip;
      if (offset_ == stride_) {
        offset_ = 0;
        ++row_;
      }
      continue;
    }
    if (carry_len_ > 0) {  // complete the split pixel
      const uint32_t take = static_cast<uint32_t>(
          std::min<uint64_t>(n, pixel_bytes_ - carry_len_));
      std::memcpy(carry_ + carry_len_, p, take);
      carry_len_ += take;
      p += take;
      n -= take;
      offset_ += take;
      if (carry_len_ < pixel_bytes_) return;
      sink(static_cast<const uint8_t*>(carry_), uint64_t{1}, true);
      carry_len_ = 0;
    } else {
      const uint64_t avail = std::min<uint64_t>(n, row_bytes_ - offset_);
      const uint64_t pixels = avail / pixel_bytes_;
      if (pixels > 0) {
        sink(p, pixels, false);
        const uint64_t used = pixels * pixel_bytes_;
        p += used;
        n -= used;
        offset_ += used;
      } else {  // a partial pixel at the end of this feed
        std::memcpy(carry_, p, avail);
        carry_len_ = static_cast<uint32_t>(avail);
        p += avail;
        n -= avail;
        offset_ += avail;
      }
    }
    if (offset_ == row_bytes_ && (stride_ == row_bytes_ || row_ + 1 == layout_.height)) {
      offset_ = 0;
      ++row_;
    }
  }
}

}  // namespace imgstat
