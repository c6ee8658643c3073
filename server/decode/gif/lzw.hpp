// A GIF frame's LZW code stream decoded into palette indices, as many at a
// time as asked: giflib's DGifGetLine decodes a string a byte at a time
// through a stack, and was two thirds of an animation's decode; this writes
// each string straight into its place. Untrusted input: every code is
// checked against the table before it is followed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace imgstat {

class GifLzw {
 public:
  // data: the image's sub-blocks' bytes, joined; min_code_size: the byte
  // before them (1 to 8).
  GifLzw(const uint8_t* data, size_t size, int min_code_size);
  // Writes the next n indices to out; false (error() says why) where the
  // codes are damaged or end first.
  bool read(uint8_t* out, size_t n);
  const std::string& error() const { return error_; }

 private:
  static constexpr int kMaxCodes = 4096;
  void reset();
  int next_code();  // -1: the data ended
  const uint8_t* data_;
  size_t size_, pos_ = 0;
  uint64_t bits_ = 0;  // unread bits, least significant first
  int have_ = 0;       // how many
  int min_size_, size_now_ = 0, clear_, end_, next_ = 0, prev_ = -1;
  bool ended_ = false;
  uint16_t prefix_[kMaxCodes];
  uint16_t length_[kMaxCodes];
  uint8_t suffix_[kMaxCodes];
  uint8_t first_[kMaxCodes];
  // What is left of the last string when the caller asked for fewer.
  uint8_t pending_[kMaxCodes];
  int pending_at_ = 0, pending_end_ = 0;
  std::string error_;
};

}  // namespace imgstat
