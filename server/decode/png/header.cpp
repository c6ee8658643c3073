#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <exception>

#include "decode/png/internal.hpp"

namespace imgstat::png {

static_assert(kGray == PNG_COLOR_TYPE_GRAY && kRgb == PNG_COLOR_TYPE_RGB && kPalette == PNG_COLOR_TYPE_PALETTE &&
              kGrayAlpha == PNG_COLOR_TYPE_GRAY_ALPHA && kRgbAlpha == PNG_COLOR_TYPE_RGB_ALPHA);

namespace {

struct InfoRead {
  const uint8_t* data;
  size_t size;
  size_t pos = 0;
  std::vector<std::string>* warnings;
  const std::function<uint64_t(uint64_t)>* arrived;  // empty: all bytes are there
  std::exception_ptr failure;                    // arrived's, kept across libpng's jump
  jmp_buf jump;
};

void read_bytes(png_structp png, png_bytep out, size_t n) {
  auto* r = static_cast<InfoRead*>(png_get_io_ptr(png));
  if (n > r->size - r->pos) png_error(png, "PNG input buffer is incomplete");
  if (*r->arrived) {
    bool came = true;
    try {
      (*r->arrived)(r->pos + n);
    } catch (...) {  // no exception through libpng's C frames: it is thrown again past them
      r->failure = std::current_exception();
      came = false;
    }
    if (!came) png_error(png, "the upload ended");
  }
  std::memcpy(out, r->data + r->pos, n);
  r->pos += n;
}

// Errors end the attempt (libpng through OpenCV will say them); warnings are
// kept as the default handler would print them, distinct, at most 8.
void on_error(png_structp png, png_const_charp) { longjmp(static_cast<InfoRead*>(png_get_error_ptr(png))->jump, 1); }
void on_warning(png_structp png, png_const_charp message) {
  auto* w = static_cast<InfoRead*>(png_get_error_ptr(png))->warnings;
  std::string line = std::string("libpng warning: ") + message;
  if (w->size() < 8 && std::find(w->begin(), w->end(), line) == w->end()) w->push_back(std::move(line));
}

// png_read_info, as OpenCV's PngDecoder::readHeader calls it. No C++ object
// lives across the jump.
bool read_info(png_structp png, png_infop info, InfoRead* r) {
  if (setjmp(r->jump)) return false;
  png_set_read_fn(png, r, read_bytes);
  png_read_info(png, info);
  return true;
}

struct Libpng {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~Libpng() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

}  // namespace

bool read_header(const uint8_t* data, size_t size, const std::function<uint64_t(uint64_t)>& arrived,
                 std::vector<std::string>* warnings, Header* h) {
  InfoRead reader{data, size, 0, warnings, &arrived, nullptr, {}};
  Libpng lib;
  lib.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader, on_error, on_warning);
  if (!lib.png || !(lib.info = png_create_info_struct(lib.png))) return false;
  if (!read_info(lib.png, lib.info, &reader)) {
    if (reader.failure) std::rethrow_exception(reader.failure);
    return false;
  }
  png_uint_32 width = 0, height = 0;
  int interlace = 0;
  png_get_IHDR(lib.png, lib.info, &width, &height, &h->bit_depth, &h->colour_type, &interlace, nullptr, nullptr);
  h->width = width;
  h->height = height;
  h->interlaced = interlace != PNG_INTERLACE_NONE;
  // libpng stopped just past the first IDAT's length and type.
  h->image_data_at = reader.pos - 8;
  png_colorp palette = nullptr;
  if (h->colour_type == PNG_COLOR_TYPE_PALETTE) png_get_PLTE(lib.png, lib.info, &palette, &h->palette_size);
  png_bytep trans_alpha = nullptr;
  png_color_16p trans_colour = nullptr;
  png_get_tRNS(lib.png, lib.info, &trans_alpha, &h->trans_count, &trans_colour);
  h->trans_colour = trans_colour != nullptr;
  if (trans_colour) {
    h->trans_rgb[0] = trans_colour->red;
    h->trans_rgb[1] = trans_colour->green;
    h->trans_rgb[2] = trans_colour->blue;
  }
  if (h->colour_type == PNG_COLOR_TYPE_PALETTE) {
    for (int i = 0; i < 256; ++i) {
      const bool known = i < h->palette_size;
      h->palette[i][0] = known ? palette[i].red : 0;
      h->palette[i][1] = known ? palette[i].green : 0;
      h->palette[i][2] = known ? palette[i].blue : 0;
      h->palette[i][3] = i < h->trans_count ? trans_alpha[i] : 255;
    }
  }
  return true;
}

}  // namespace imgstat::png
