#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "decode/tiff/internal.hpp"

namespace imgstat::tiff {
namespace {

tmsize_t read_bytes(thandle_t h, void* buf, tmsize_t n) {
  auto* s = static_cast<Source*>(h);
  if (n <= 0) return 0;
  const uint64_t k = std::min<uint64_t>(static_cast<uint64_t>(n), s->size - std::min(s->pos, s->size));
  if (k) std::memcpy(buf, s->data + s->pos, k);
  s->pos += k;
  return static_cast<tmsize_t>(k);
}
tmsize_t write_bytes(thandle_t, void*, tmsize_t) { return 0; }
toff_t seek_bytes(thandle_t h, toff_t offset, int whence) {
  auto* s = static_cast<Source*>(h);
  uint64_t p = s->pos;
  if (whence == SEEK_SET) p = offset;
  if (whence == SEEK_CUR) p += offset;
  if (whence == SEEK_END) p = s->size + offset;
  s->pos = std::min<uint64_t>(p, s->size);
  return s->pos;
}
int close_bytes(thandle_t) { return 0; }
toff_t size_of_bytes(thandle_t h) { return static_cast<Source*>(h)->size; }
int map_bytes(thandle_t h, void** base, toff_t* size) {
  auto* s = static_cast<Source*>(h);
  *base = const_cast<uint8_t*>(s->data);  // libtiff only reads a file opened "r"
  *size = s->size;
  return 1;
}
void unmap_bytes(thandle_t, void*, toff_t) {}

int record_error(TIFF*, void* user, const char* module, const char* fmt, va_list ap) {
  auto* h = static_cast<Handle*>(user);
  if (h->error.empty()) {
    char text[400];
    std::vsnprintf(text, sizeof text, fmt, ap);
    h->error = (module && *module ? std::string(module) + ": " : std::string()) + text;
  }
  return 1;  // handled: not passed on to the global handler
}
// OpenCV 4.6 prints libtiff's warnings nowhere; neither do we.
int drop_warning(TIFF*, void*, const char*, const char*, va_list) { return 1; }

// LogL's luminance as libtiff's floats (cd/m^2), not its 8-bit tone map:
// set again on every directory read.
void float_luminance(TIFF* tif) {
  uint16_t photometric = 0;
  if (TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &photometric) && photometric == PHOTOMETRIC_LOGL)
    TIFFSetField(tif, TIFFTAG_SGILOGDATAFMT, SGILOGDATAFMT_FLOAT);
}

}  // namespace

std::unique_ptr<Handle> open_handle(const uint8_t* data, size_t size) {
  auto h = std::make_unique<Handle>();
  h->source = Source{data, size, 0};
  TIFFOpenOptions* options = TIFFOpenOptionsAlloc();
  if (!options) return nullptr;
  TIFFOpenOptionsSetErrorHandlerExtR(options, record_error, h.get());
  TIFFOpenOptionsSetWarningHandlerExtR(options, drop_warning, h.get());
  h->tif = TIFFClientOpenExt("TIFF", "r", &h->source, read_bytes, write_bytes, seek_bytes, close_bytes, size_of_bytes,
                             map_bytes, unmap_bytes, options);
  TIFFOpenOptionsFree(options);
  if (!h->tif) return nullptr;
  h->page = TIFFCurrentDirOffset(h->tif);
  float_luminance(h->tif);
  return h;
}

bool select_page(Handle& h, uint64_t offset) {
  if (offset == h.page) return true;
  if (!TIFFSetSubDirectory(h.tif, offset)) return false;
  h.page = offset;
  float_luminance(h.tif);
  return true;
}

}  // namespace imgstat::tiff
