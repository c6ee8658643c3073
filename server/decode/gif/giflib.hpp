// giflib on bytes in memory, its errors as imgstat's.
#pragma once

#include <gif_lib.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "decode/decode.hpp"

namespace imgstat::gif {

struct Source {
  const uint8_t* data;
  size_t size;
  size_t pos = 0;
};

inline int read(GifFileType* gif, GifByteType* buf, int len) {
  auto* src = static_cast<Source*>(gif->UserData);
  const size_t n = std::min<size_t>(static_cast<size_t>(len), src->size - src->pos);
  std::memcpy(buf, src->data + src->pos, n);
  src->pos += n;
  return static_cast<int>(n);
}

struct Closer {
  void operator()(GifFileType* g) const {
    int err;
    DGifCloseFile(g, &err);
  }
};
using Handle = std::unique_ptr<GifFileType, Closer>;

[[noreturn]] inline void refuse(int code) {
  const char* s = GifErrorString(code);
  invalid_data(std::string("GIF: ") + (s ? s : "could not decode"));
}

inline Handle open(Source& src) {
  int err = 0;
  Handle h(DGifOpen(&src, read, &err));
  if (!h) refuse(err);
  return h;
}

}  // namespace imgstat::gif
