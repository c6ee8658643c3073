#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "decode/png/internal.hpp"
#include "decode/png/png.hpp"

namespace imgstat {

namespace png {

bool ImageData::walk() {
  if (over_) return false;
  if (left_ > 0) return give_part();
  if (in_chunk_) {  // its data given: its CRC before anything after it
    in_chunk_ = false;
    arrived_(at_ + 4);
    if (crc_ != be32(data_ + at_)) return stop(true);
    at_ += 4;
  }
  if (arrived_) arrived_(std::min<uint64_t>(size_, uint64_t{at_} + 12));
  if (size_ - at_ < 12) return stop(true);
  const uint32_t length = be32(data_ + at_);
  if (length > 0x7fffffffu || size_ - at_ - 12 < length) return stop(true);
  const uint8_t* type = data_ + at_ + 4;
  if (std::memcmp(type, "IEND", 4) != 0 && std::memcmp(type, "IDAT", 4) != 0) return stop(true);
  if (arrived_ && std::memcmp(type, "IDAT", 4) == 0) {
    crc_ = static_cast<uint32_t>(crc32(0, type, 4));
    at_ += 8;
    left_ = length;
    in_chunk_ = true;
    return left_ > 0 ? give_part() : walk();
  }
  if (arrived_) arrived_(uint64_t{at_} + 12 + length);
  if (static_cast<uint32_t>(crc32(0, type, static_cast<uInt>(length) + 4)) != be32(type + 4 + length))
    return stop(true);
  if (std::memcmp(type, "IEND", 4) == 0) return stop(length != 0);
  pieces_.push_back(StreamPiece{type + 4, length});
  at_ += size_t{length} + 12;
  return true;
}

// What has come of the chunk's data, from 64 KiB (or its rest) to 1 MiB:
// its CRC reads it, and what is read stays in memory until the decode is
// done with it.
bool ImageData::give_part() {
  constexpr uint64_t kLeast = 64 << 10, kMost = 1 << 20;
  const uint64_t have = arrived_(0);
  const uint64_t n = std::min<uint64_t>(left_, std::clamp<uint64_t>(have > at_ ? have - at_ : 0, kLeast, kMost));
  arrived_(at_ + n);
  crc_ = static_cast<uint32_t>(crc32(crc_, data_ + at_, static_cast<uInt>(n)));
  pieces_.push_back(StreamPiece{data_ + at_, static_cast<size_t>(n)});
  at_ += static_cast<size_t>(n);
  left_ -= n;
  return true;
}

}  // namespace png

std::string png_chunk_past_end(const uint8_t* data, size_t size, const std::function<void(uint64_t, uint64_t)>& release) {
  constexpr uint64_t kHarmless = 1 << 20;  // what libpng may zero for a truncated chunk
  size_t at = 8;                            // past the signature
  size_t read = 0;                          // chunk headers read before this: done with
  while (size - at >= 8) {
    if (release && at - read >= (size_t{4} << 20)) release(read, at), read = at;
    const uint32_t length = png::be32(data + at);
    const std::string type(reinterpret_cast<const char*>(data + at + 4), 4);
    if (type == "IEND") return {};
    const uint64_t rest = size - at - 8;
    if (uint64_t{length} + 4 > rest) {
      if (length <= kHarmless || type == "IDAT") return {};
      bool letters = true;
      for (char c : type) letters = letters && ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'));
      return "the " + (letters ? type + " chunk" : std::string("chunk")) + " at byte " + std::to_string(at) +
             " declares " + std::to_string(length) + " bytes of data, but the file ends " + std::to_string(rest) +
             " bytes later";
    }
    at += size_t{length} + 12;
  }
  return {};  // ends between chunks: libpng says so itself, without allocating
}

}  // namespace imgstat
