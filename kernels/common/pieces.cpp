#include "common/pieces.hpp"

#include <algorithm>

namespace imgstat {

Pieces::Pieces(const ImageView& image, uint64_t target_bytes)
    : base_(static_cast<const uint8_t*>(image.data)), layout_(image.layout) {
  if (layout_.width == 0 || layout_.height == 0) return;
  const uint64_t row_bytes = layout_.row_bytes();
  target_bytes = std::max<uint64_t>(target_bytes, layout_.pixel_bytes());
  if (row_bytes <= target_bytes) {
    rows_per_piece_ = std::max<uint64_t>(1, target_bytes / row_bytes);
    count_ = (layout_.height + rows_per_piece_ - 1) / rows_per_piece_;
  } else {
    segments_per_row_ = (row_bytes + target_bytes - 1) / target_bytes;
    pixels_per_segment_ = (layout_.width + segments_per_row_ - 1) / segments_per_row_;
    segments_per_row_ = (layout_.width + pixels_per_segment_ - 1) / pixels_per_segment_;
    count_ = layout_.height * segments_per_row_;
  }
}

Piece Pieces::operator[](size_t i) const {
  const uint64_t stride = layout_.stride();
  if (segments_per_row_ == 1 && pixels_per_segment_ == 0) {
    const uint64_t r0 = i * rows_per_piece_;
    const uint64_t rows = std::min(rows_per_piece_, layout_.height - r0);
    return {base_ + r0 * stride, rows, stride, layout_.width, r0 * layout_.width, layout_.width};
  }
  const uint64_t row = i / segments_per_row_, seg = i % segments_per_row_;
  const uint64_t x0 = seg * pixels_per_segment_;
  const uint64_t pixels = std::min(pixels_per_segment_, layout_.width - x0);
  return {base_ + row * stride + x0 * layout_.pixel_bytes(), 1, stride, pixels, row * layout_.width + x0, layout_.width};
}

Destrider::Destrider(const Layout& layout)
    : layout_(layout),
      pixel_bytes_(layout.pixel_bytes()),
      row_bytes_(layout.row_bytes()),
      stride_(layout.stride()) {}

}  // namespace imgstat
