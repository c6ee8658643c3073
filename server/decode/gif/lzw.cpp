#include "decode/gif/lzw.hpp"

#include <algorithm>
#include <cstring>

namespace imgstat {

GifLzw::GifLzw(const uint8_t* data, size_t size, int min_code_size)
    : data_(data), size_(size), min_size_(min_code_size), clear_(1 << min_code_size), end_(clear_ + 1) {
  for (int i = 0; i < clear_; ++i) {
    prefix_[i] = 0;
    length_[i] = 1;
    suffix_[i] = static_cast<uint8_t>(i);
    first_[i] = static_cast<uint8_t>(i);
  }
  reset();
}

void GifLzw::reset() {
  size_now_ = min_size_ + 1;
  next_ = end_ + 1;
  prev_ = -1;
}

int GifLzw::next_code() {
  while (have_ < size_now_) {
    if (pos_ >= size_) return -1;
    bits_ |= uint64_t{data_[pos_++]} << have_;
    have_ += 8;
  }
  const int code = static_cast<int>(bits_ & ((1u << size_now_) - 1));
  bits_ >>= size_now_;
  have_ -= size_now_;
  return code;
}

bool GifLzw::read(uint8_t* out, size_t n) {
  size_t done = 0;
  if (pending_at_ < pending_end_) {
    const size_t k = std::min<size_t>(n, static_cast<size_t>(pending_end_ - pending_at_));
    std::memcpy(out, pending_ + pending_at_, k);
    pending_at_ += static_cast<int>(k);
    done = k;
  }
  while (done < n) {
    if (ended_) return error_ = "the image data ends before its pixels", false;
    const int code = next_code();
    if (code < 0) return error_ = "the image data ends before its pixels", false;
    if (code == clear_) {
      reset();
      continue;
    }
    if (code == end_) {
      ended_ = true;
      continue;
    }
    int string;  // the code whose string is written
    if (prev_ < 0) {
      if (code >= clear_) return error_ = "an LZW code before any string", false;
      string = code;
    } else if (code < next_) {
      string = code;
      if (next_ < kMaxCodes) {
        prefix_[next_] = static_cast<uint16_t>(prev_);
        suffix_[next_] = first_[code];
        first_[next_] = first_[prev_];
        length_[next_] = static_cast<uint16_t>(length_[prev_] + 1);
        ++next_;
      }
      if (next_ == (1 << size_now_) && size_now_ < 12) ++size_now_;
    } else if (code == next_ && next_ < kMaxCodes) {  // the string being defined: prev's and its first byte
      prefix_[next_] = static_cast<uint16_t>(prev_);
      suffix_[next_] = first_[prev_];
      first_[next_] = first_[prev_];
      length_[next_] = static_cast<uint16_t>(length_[prev_] + 1);
      string = next_++;
      if (next_ == (1 << size_now_) && size_now_ < 12) ++size_now_;
    } else {
      return error_ = "an LZW code past the table", false;
    }
    prev_ = code;
    // The string backwards from its last byte, into the output when it fits.
    const int len = length_[string];
    uint8_t* to;
    if (done + static_cast<size_t>(len) <= n) {
      to = out + done;
      done += static_cast<size_t>(len);
    } else {
      to = pending_;
      pending_at_ = 0;
      pending_end_ = len;
    }
    for (int c = string, i = len - 1; i >= 0; --i) {
      to[i] = suffix_[c];
      c = prefix_[c];
    }
    if (to == pending_) {
      const size_t k = n - done;
      std::memcpy(out + done, pending_, k);
      pending_at_ = static_cast<int>(k);
      done = n;
    }
  }
  return true;
}

}  // namespace imgstat
