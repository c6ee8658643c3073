#include "decode/png/png.hpp"

#include "decode/inflate/parallel_inflate.hpp"

#include <png.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <csetjmp>
#include <exception>
#include <cstring>
#include <future>
#include <vector>
#include <memory>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace imgstat {
namespace {

uint32_t be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

uint32_t stored_channels(uint32_t colour_type) {
  switch (colour_type) {
    case PNG_COLOR_TYPE_GRAY_ALPHA: return 2;
    case PNG_COLOR_TYPE_RGB: return 3;
    case PNG_COLOR_TYPE_RGB_ALPHA: return 4;
  }
  return 1;  // gray, palette
}

bool streamable(uint32_t bit_depth, uint32_t colour_type, bool interlaced) {
  if (interlaced) return false;  // Adam7's passes: libpng
  if (colour_type == PNG_COLOR_TYPE_PALETTE) return bit_depth <= 8;
  return bit_depth == 8 || bit_depth == 16;  // gray under 8 bits: libpng's scaling
}

// ---- unfiltering ------------------------------------------------------------
// Sub, Average and Paeth depend on the pixel to the left: one pixel at a time,
// its bytes in one vector (16-bit lanes for the arithmetic).

#if defined(__SSE2__)
// Loads and stores of W bytes, W >= the pixel's: a 3- or 6-byte pixel moves
// as 4 or 8 bytes, the bytes past it written back as they were read.
template <int W>
__m128i load_bytes(const uint8_t* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, W);
  return _mm_unpacklo_epi8(_mm_cvtsi64_si128(static_cast<long long>(v)), _mm_setzero_si128());
}
template <int W>
void store_bytes(uint8_t* p, __m128i v) {
  const uint64_t x = static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_packus_epi16(v, v)));
  std::memcpy(p, &x, W);
}
__m128i abs16(__m128i x) { return _mm_max_epi16(x, _mm_sub_epi16(_mm_setzero_si128(), x)); }
__m128i low_byte(__m128i x) { return _mm_and_si128(x, _mm_set1_epi16(0xff)); }
template <int kBpp>
__m128i pixel_lanes() {  // 16-bit lanes of the pixel's bytes
  alignas(16) int16_t m[8] = {};
  for (int i = 0; i < kBpp; ++i) m[i] = -1;
  return _mm_load_si128(reinterpret_cast<const __m128i*>(m));
}

// The prediction of each filter from left a, up b, up-left c.
enum class Filter { kSub, kAvg, kPaeth };
template <Filter F>
__m128i predict(__m128i a, __m128i b, __m128i c) {
  if constexpr (F == Filter::kSub) return a;
  if constexpr (F == Filter::kAvg) return _mm_srli_epi16(_mm_add_epi16(a, b), 1);
  if constexpr (F == Filter::kPaeth) {
    const __m128i bc = _mm_sub_epi16(b, c), ac = _mm_sub_epi16(a, c);
    const __m128i pa = abs16(bc), pb = abs16(ac), pc = abs16(_mm_add_epi16(bc, ac));
    const __m128i least = _mm_min_epi16(pa, _mm_min_epi16(pb, pc));
    // Paeth's ties: a before b before c.
    const __m128i take_a = _mm_cmpeq_epi16(least, pa);
    const __m128i take_b = _mm_andnot_si128(take_a, _mm_cmpeq_epi16(least, pb));
    const __m128i take_c = _mm_andnot_si128(_mm_or_si128(take_a, take_b), _mm_set1_epi16(-1));
    return _mm_or_si128(_mm_or_si128(_mm_and_si128(take_a, a), _mm_and_si128(take_b, b)), _mm_and_si128(take_c, c));
  }
}

template <int kBpp, Filter F>
void unfilter_pixels(uint8_t* row, const uint8_t* prev, size_t n) {
  constexpr int kWide = kBpp == 3 ? 4 : kBpp == 6 ? 8 : kBpp;
  const __m128i keep = pixel_lanes<kBpp>();
  __m128i a = _mm_setzero_si128(), c = _mm_setzero_si128();
  size_t i = 0;
  // Wide moves while they stay inside the row, then the last pixel exactly.
  for (; i + kWide <= n; i += kBpp) {
    const __m128i b = F == Filter::kSub ? c : load_bytes<kWide>(prev + i);
    a = low_byte(_mm_add_epi16(load_bytes<kWide>(row + i), _mm_and_si128(predict<F>(a, b, c), keep)));
    store_bytes<kWide>(row + i, a);
    c = b;
  }
  for (; i < n; i += kBpp) {
    const __m128i b = F == Filter::kSub ? c : load_bytes<kBpp>(prev + i);
    a = low_byte(_mm_add_epi16(load_bytes<kBpp>(row + i), _mm_and_si128(predict<F>(a, b, c), keep)));
    store_bytes<kBpp>(row + i, a);
    c = b;
  }
}
template <int kBpp>
bool unfilter_simd(uint8_t filter, uint8_t* row, const uint8_t* prev, size_t n) {
  switch (filter) {
    case 1: unfilter_pixels<kBpp, Filter::kSub>(row, nullptr, n); return true;
    case 3: unfilter_pixels<kBpp, Filter::kAvg>(row, prev, n); return true;
    case 4: unfilter_pixels<kBpp, Filter::kPaeth>(row, prev, n); return true;
  }
  return false;
}
#endif

void unfilter_scalar(uint8_t filter, uint8_t* row, const uint8_t* prev, size_t n, uint32_t bpp) {
  switch (filter) {
    case 1:
      for (size_t i = bpp; i < n; ++i) row[i] = static_cast<uint8_t>(row[i] + row[i - bpp]);
      break;
    case 3:
      for (size_t i = 0; i < n; ++i) {
        const unsigned left = i >= bpp ? row[i - bpp] : 0;
        row[i] = static_cast<uint8_t>(row[i] + ((left + prev[i]) >> 1));
      }
      break;
    case 4:
      for (size_t i = 0; i < n; ++i) {
        const int a = i >= bpp ? row[i - bpp] : 0, b = prev[i], c = i >= bpp ? prev[i - bpp] : 0;
        const int pa = std::abs(b - c), pb = std::abs(a - c), pc = std::abs(a + b - 2 * c);
        const int pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
        row[i] = static_cast<uint8_t>(row[i] + pred);
      }
      break;
  }
}

// ---- libpng for everything before the image data ----------------------------

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

struct PngHeader {
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, colour_type = 0, interlace = 0;
  png_colorp palette = nullptr;
  int palette_size = 0;
  png_bytep trans_alpha = nullptr;
  int trans_count = 0;
  png_color_16p trans_colour = nullptr;
};

struct Libpng {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~Libpng() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

// ---- row conversion, as libpng's transformations that OpenCV asks for -------

struct Converter {
  uint32_t width;
  int bit_depth, colour_type;
  uint32_t out_channels;
  uint8_t lut[256][4];  // palette index -> R,G,B,A
  bool trans = false;   // RGB tRNS: the colour made transparent
  uint16_t trans_rgb[3] = {0, 0, 0};

  void row(const uint8_t* in, uint8_t* out) const {
    const uint32_t w = width;
    if (colour_type == PNG_COLOR_TYPE_PALETTE) {
      const int per_byte = 8 / bit_depth, mask = (1 << bit_depth) - 1;
      for (uint32_t x = 0; x < w; ++x) {
        const uint32_t idx =
            bit_depth == 8 ? in[x] : (in[x / per_byte] >> (8 - bit_depth * (x % per_byte + 1))) & mask;
        std::memcpy(out + size_t{x} * out_channels, lut[idx], out_channels);
      }
      return;
    }
    if (bit_depth == 8) {
      switch (colour_type) {
        case PNG_COLOR_TYPE_GRAY_ALPHA:
          for (uint32_t x = 0; x < w; ++x) {
            const uint8_t g = in[2 * x], a = in[2 * x + 1];
            uint8_t* o = out + 4 * size_t{x};
            o[0] = o[1] = o[2] = g;
            o[3] = a;
          }
          return;
        case PNG_COLOR_TYPE_RGB:
          if (trans) {
            for (uint32_t x = 0; x < w; ++x) {
              const uint8_t* p = in + 3 * size_t{x};
              uint8_t* o = out + 4 * size_t{x};
              o[0] = p[0], o[1] = p[1], o[2] = p[2];
              o[3] = p[0] == (trans_rgb[0] & 0xff) && p[1] == (trans_rgb[1] & 0xff) && p[2] == (trans_rgb[2] & 0xff)
                         ? 0 : 255;
            }
            return;
          }
          break;
      }
      std::memcpy(out, in, size_t{w} * out_channels);
      return;
    }
    // 16-bit: big-endian in the file, native (little-endian) out.
    auto sample = [](const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); };
    auto* o = reinterpret_cast<uint16_t*>(out);
    switch (colour_type) {
      case PNG_COLOR_TYPE_GRAY_ALPHA:
        for (uint32_t x = 0; x < w; ++x) {
          const uint16_t g = sample(in + 4 * size_t{x}), a = sample(in + 4 * size_t{x} + 2);
          o[4 * size_t{x}] = o[4 * size_t{x} + 1] = o[4 * size_t{x} + 2] = g;
          o[4 * size_t{x} + 3] = a;
        }
        return;
      case PNG_COLOR_TYPE_RGB:
        if (trans) {
          for (uint32_t x = 0; x < w; ++x) {
            const uint16_t r = sample(in + 6 * size_t{x}), g = sample(in + 6 * size_t{x} + 2),
                           b = sample(in + 6 * size_t{x} + 4);
            uint16_t* p = o + 4 * size_t{x};
            p[0] = r, p[1] = g, p[2] = b;
            p[3] = r == trans_rgb[0] && g == trans_rgb[1] && b == trans_rgb[2] ? 0 : 65535;
          }
          return;
        }
        break;
    }
    const size_t samples = size_t{w} * out_channels;
    for (size_t i = 0; i < samples; ++i) o[i] = sample(in + 2 * i);
  }
};

}  // namespace

bool png_unfilter_row(uint8_t filter, uint8_t* row, const uint8_t* prev, size_t row_bytes, uint32_t bpp) {
  if (filter > 4) return false;
  if (filter == 0) return true;
  if (!prev) {  // the first row: the row above is zeros
    if (filter == 2) return true;
    if (filter == 4) filter = 1;  // Paeth of (a, 0, 0) is a
    if (filter == 3) {
      for (size_t i = bpp; i < row_bytes; ++i) row[i] = static_cast<uint8_t>(row[i] + (row[i - bpp] >> 1));
      return true;
    }
  }
  if (filter == 2) {
    for (size_t i = 0; i < row_bytes; ++i) row[i] = static_cast<uint8_t>(row[i] + prev[i]);
    return true;
  }
#if defined(__SSE2__)
  switch (bpp) {
    case 1: return unfilter_simd<1>(filter, row, prev, row_bytes);
    case 2: return unfilter_simd<2>(filter, row, prev, row_bytes);
    case 3: return unfilter_simd<3>(filter, row, prev, row_bytes);
    case 4: return unfilter_simd<4>(filter, row, prev, row_bytes);
    case 6: return unfilter_simd<6>(filter, row, prev, row_bytes);
    case 8: return unfilter_simd<8>(filter, row, prev, row_bytes);
  }
#endif
  unfilter_scalar(filter, row, prev, row_bytes, bpp);
  return true;
}

std::string png_chunk_past_end(const uint8_t* data, size_t size, const std::function<void(uint64_t, uint64_t)>& release) {
  constexpr uint64_t kHarmless = 1 << 20;  // what libpng may zero for a truncated chunk
  size_t at = 8;                            // past the signature
  size_t read = 0;                          // chunk headers read before this: done with
  while (size - at >= 8) {
    if (release && at - read >= (size_t{4} << 20)) release(read, at), read = at;
    const uint32_t length = be32(data + at);
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

namespace {

// One PNG at a time is inflated on every core; others meanwhile are
// inflated by zlib on their own core, as before: under load the cores are
// busy anyway, and each parallel inflate holds its chunks in flight.
class ParallelSlot {
 public:
  bool take(int cores) {
    int idle = 0;
    return cores > 1 && (taken_ = in_flight().compare_exchange_strong(idle, 1));
  }
  ~ParallelSlot() {
    if (taken_) in_flight().fetch_sub(1);
  }

 private:
  static std::atomic<int>& in_flight() {
    static std::atomic<int> n{0};
    return n;
  }
  bool taken_ = false;
};

// The image data: the IDAT chunks from the first on, walked one at a time,
// each chunk's CRC checked, as far as a file still arriving has come
// (arrived waits for it). Whole, a chunk is a piece once its CRC is right.
// Arriving, a chunk's data is given in pieces as it comes (a file of one
// large IDAT is inflated while it arrives) and its CRC checked at its end,
// before the walk goes on: a wrong one ends the walk there, and the decode
// gives up rows it may have given. The walk ends at IEND, or bad where
// libpng would refuse or warn: a CRC, a chunk other than IDAT, IEND with
// data, a length past the file's end.
class ImageData {
 public:
  ImageData(const uint8_t* data, size_t size, size_t at, const std::function<uint64_t(uint64_t)>& arrived)
      : data_(data), size_(size), at_(at), arrived_(arrived) {}
  // One more piece of IDAT data into pieces(); false at the end of the walk.
  bool walk() {
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
  const std::vector<StreamPiece>& pieces() const { return pieces_; }
  size_t offset() const { return at_; }  // where the walk is
  bool bad() const { return bad_; }

 private:
  // What has come of the chunk's data, from 64 KiB (or its rest) to 1 MiB:
  // its CRC reads it, and what is read stays in memory until the decode is
  // done with it.
  bool give_part() {
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
  bool stop(bool bad) {
    over_ = true;
    bad_ = bad;
    return false;
  }
  const uint8_t* data_;
  size_t size_;
  size_t at_;
  const std::function<uint64_t(uint64_t)>& arrived_;
  std::vector<StreamPiece> pieces_;
  uint64_t left_ = 0;      // arriving: the chunk's data not yet given
  bool in_chunk_ = false;  // arriving: its CRC not yet checked
  uint32_t crc_ = 0;
  bool over_ = false, bad_ = false;
};

// The parallel inflater's settings for PNG: chunks of 512 KiB (on 16 cores
// about 35 MB in flight for a photo), and at most 8 times that kept a chunk
// (photos inflate 2-6 times; what inflates more is inflated by zlib from
// there on, quickly).
ParallelInflateOptions png_inflate_options() {
  ParallelInflateOptions o;
  o.chunk_bytes = uint64_t{512} << 10;
  o.max_ratio = 8;
  return o;
}

}  // namespace

uint64_t png_stream_memory_bytes(uint64_t width, uint64_t height, uint32_t bit_depth, uint32_t colour_type,
                                 bool interlaced, uint64_t file_bytes) {
  if (!streamable(bit_depth, colour_type, interlaced) || width == 0 || height == 0) return 0;
  const uint64_t stride = (width * stored_channels(colour_type) * bit_depth + 7) / 8 + 1;
  const uint64_t out_row = width * 4 * (bit_depth == 16 ? 2 : 1);
  const uint64_t inflating = file_bytes >= kParallelPngInflateBytes
                                 ? parallel_inflate_memory_bytes(png_inflate_options())
                                 : uint64_t{64} << 10;  // zlib's state
  // Two chunks of filtered rows (one filling, one unfiltering), a row kept
  // across chunks, two bands of pixels.
  return 2 * stride * band_rows(stride, height) + stride + 2 * out_row * band_rows(out_row, height) + inflating;
}

PngDecode decode_png(const uint8_t* data, size_t size, const std::function<bool()>& cancelled, const RowSink& sink,
                     const std::function<void(uint64_t, uint64_t)>& release,
                     const std::function<uint64_t(uint64_t)>& arrived) {
  PngDecode out;
  InfoRead reader{data, size, 0, &out.warnings, &arrived, nullptr, {}};
  Libpng lib;
  lib.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader, on_error, on_warning);
  if (!lib.png || !(lib.info = png_create_info_struct(lib.png))) return out;
  if (!read_info(lib.png, lib.info, &reader)) {
    if (reader.failure) std::rethrow_exception(reader.failure);
    return out;
  }
  PngHeader h;
  png_get_IHDR(lib.png, lib.info, &h.width, &h.height, &h.bit_depth, &h.colour_type, &h.interlace, nullptr, nullptr);
  if (!streamable(h.bit_depth, h.colour_type, h.interlace != PNG_INTERLACE_NONE)) return out;
  if (h.colour_type == PNG_COLOR_TYPE_PALETTE) png_get_PLTE(lib.png, lib.info, &h.palette, &h.palette_size);
  png_get_tRNS(lib.png, lib.info, &h.trans_alpha, &h.trans_count, &h.trans_colour);

  // libpng stopped just past the first IDAT's length and type. The image
  // data is that chunk and the IDATs that follow it, then IEND: anything
  // else (a CRC libpng would refuse, chunks after the image data) is libpng's.
  // A whole file is walked first, its chunks checked before a row goes out
  // (what it has read goes back as it goes: the decode reads the image
  // data again, in order); a file still arriving is walked as the decode
  // needs its chunks, and damage met late gives up rows already given.
  ImageData idat(data, size, reader.pos - 8, arrived);
  uint64_t released = 0;  // the decode's: bytes before this done with
  auto done_before = [&](uint64_t offset) {  // a MiB at a time, and the end
    if (release && offset > released && (offset - released >= (1 << 20) || offset == size))
      release(released, offset), released = offset;
  };
  if (!arrived) {
    size_t checked = idat.offset();
    while (idat.walk()) {
      if (release && idat.offset() - checked >= (size_t{4} << 20)) release(checked, idat.offset()), checked = idat.offset();
    }
    if (release) release(checked, idat.offset());
    if (idat.bad()) return out;
  }
  size_t next_idat = 0;
  // The next IDAT's data, walked to where that is needed; false at the end.
  auto next_piece = [&](StreamPiece* piece) {
    if (next_idat == idat.pieces().size() && !idat.walk()) return false;
    *piece = idat.pieces()[next_idat++];
    return true;
  };
  const uint32_t channels_in = stored_channels(static_cast<uint32_t>(h.colour_type));
  const size_t row_bytes = (size_t{h.width} * channels_in * static_cast<uint32_t>(h.bit_depth) + 7) / 8;
  const size_t stride = row_bytes + 1;
  Converter convert{h.width, h.bit_depth, h.colour_type, 0, {}, false, {}};
  const uint32_t bpp = std::max<uint32_t>(1, channels_in * static_cast<uint32_t>(h.bit_depth) / 8);
  switch (h.colour_type) {
    case PNG_COLOR_TYPE_GRAY: convert.out_channels = 1; break;  // tRNS ignored, as OpenCV's decode does
    case PNG_COLOR_TYPE_GRAY_ALPHA:
    case PNG_COLOR_TYPE_RGB_ALPHA: convert.out_channels = 4; break;
    case PNG_COLOR_TYPE_RGB:
      convert.trans = h.trans_count > 0 && h.trans_colour;
      if (convert.trans) {
        convert.trans_rgb[0] = h.trans_colour->red;
        convert.trans_rgb[1] = h.trans_colour->green;
        convert.trans_rgb[2] = h.trans_colour->blue;
      }
      convert.out_channels = convert.trans ? 4 : 3;
      break;
    case PNG_COLOR_TYPE_PALETTE:
      convert.out_channels = h.trans_count > 0 ? 4 : 3;
      for (int i = 0; i < 256; ++i) {
        const bool known = i < h.palette_size;
        convert.lut[i][0] = known ? h.palette[i].red : 0;
        convert.lut[i][1] = known ? h.palette[i].green : 0;
        convert.lut[i][2] = known ? h.palette[i].blue : 0;
        convert.lut[i][3] = i < h.trans_count ? h.trans_alpha[i] : 255;
      }
      break;
  }
  const bool short_palette = h.colour_type == PNG_COLOR_TYPE_PALETTE && h.palette_size < (1 << h.bit_depth);

  const uint32_t chunk_rows = band_rows(stride, h.height);
  // Two chunks of filtered rows: zlib fills one while the other is unfiltered.
  std::unique_ptr<uint8_t[]> filtered[2] = {std::unique_ptr<uint8_t[]>(new uint8_t[size_t{chunk_rows} * stride]),
                                            std::unique_ptr<uint8_t[]>(new uint8_t[size_t{chunk_rows} * stride])};
  std::vector<uint8_t> last_row(row_bytes);  // the chunk before's last row, unfiltered
  const SampleType type = h.bit_depth == 16 ? SampleType::kUint16 : SampleType::kUint8;
  const size_t out_row_bytes = size_t{h.width} * convert.out_channels * (h.bit_depth == 16 ? 2 : 1);
  RowBand band{};
  uint32_t band_first = 0, filled = 0;
  const int per_byte = 8 / h.bit_depth, mask = (1 << h.bit_depth) - 1;
  // Not taken after all, though rows may have gone out.
  auto given_up = [&] {
    out.taken = false;
    return out;
  };
  // Unfilters, converts and hands on one chunk of rows; false where libpng
  // would refuse or warn.
  auto pass_on = [&](uint8_t* chunk, uint32_t y0, uint32_t n) {
    // Unfiltering: a row filtered with None or Sub needs no row above it, so
    // each such row starts a run of rows that depends on no other run; the
    // runs on every core of the arena (OpenCV writes Sub everywhere: every
    // row a run).
    std::vector<uint32_t> runs;
    for (uint32_t i = 0; i < n; ++i) {
      const uint8_t filter = chunk[size_t{i} * stride];
      if (filter > 4) return false;
      if (i == 0 || filter <= 1) runs.push_back(i);
    }
    runs.push_back(n);
    auto unfilter = [&](size_t r) {
      for (uint32_t i = runs[r]; i < runs[r + 1]; ++i) {
        uint8_t* row = chunk + size_t{i} * stride + 1;
        const uint8_t* prev = i ? row - stride : y0 ? last_row.data() : nullptr;
        png_unfilter_row(row[-1], row, prev, row_bytes, bpp);
      }
    };
    if (runs.size() > 2 && tbb::this_task_arena::max_concurrency() > 1) {
      tbb::this_task_arena::isolate([&] { tbb::parallel_for(size_t{0}, runs.size() - 1, unfilter); });
    } else {
      for (size_t r = 0; r + 1 < runs.size(); ++r) unfilter(r);
    }
    for (uint32_t i = 0; i < n; ++i) {
      uint8_t* row = chunk + size_t{i} * stride + 1;
      if (short_palette) {  // an index past the palette: libpng warns at the end
        for (uint32_t x = 0; x < h.width; ++x) {
          const int idx = h.bit_depth == 8 ? row[x] : (row[x / per_byte] >> (8 - h.bit_depth * (x % per_byte + 1))) & mask;
          if (idx >= h.palette_size) return false;
        }
      }
      if (y0 == 0 && i == 0) {
        out.taken = true;  // from here a refusal comes after rows went out: the caller drops them
        band = sink.begin(h.width, h.height, convert.out_channels, type);
      }
      convert.row(row, band.rows + size_t{filled} * out_row_bytes);
      const uint32_t y = y0 + i;
      if (++filled == band.count || y + 1 == h.height) {
        if (cancelled && cancelled()) fail(ErrorCode::kCancelled, "cancelled while decoding");
        band = sink.band(band.rows, band_first, filled);
        band_first += filled;
        filled = 0;
        if (band.count == 0 && y + 1 < h.height) fail(ErrorCode::kInternal, "PNG: no room for the next rows");
      }
    }
    std::memcpy(last_row.data(), chunk + size_t{n - 1} * stride + 1, row_bytes);
    return true;
  };
  // Inflating and unfiltering overlap: a helper unfilters chunk k while
  // chunk k + 1 is inflated, in an arena as large as the caller's.
  tbb::task_arena helper_arena(tbb::this_task_arena::max_concurrency());
  auto pass_on_helper = [&](uint8_t* chunk, uint32_t y0, uint32_t n) {
    return helper_arena.execute([&] { return pass_on(chunk, y0, n); });
  };
  std::future<bool> passing;
  WaitOnExit<bool> drain{passing};
  auto passed = [&] { return !passing.valid() || passing.get(); };
  // The chunk of filtered rows being filled (k), from the top row y0; full,
  // it goes to the helper while the other fills.
  int k = 0;
  uint32_t y0 = 0;
  size_t fill = 0;
  auto want = [&] { return size_t{std::min(chunk_rows, h.height - y0)} * stride; };
  // n more bytes are in the chunk; false where libpng would refuse.
  auto commit = [&](size_t n) {
    fill += n;
    if (fill < want()) return true;
    const uint32_t rows = std::min(chunk_rows, h.height - y0);
    if (!passed()) return false;
    if (rows == h.height) {  // one chunk: no helper
      if (!pass_on(filtered[k].get(), y0, rows)) return false;
    } else {
      passing = std::async(std::launch::async, pass_on_helper, filtered[k].get(), y0, rows);
    }
    y0 += rows;
    fill = 0;
    k ^= 1;
    return true;
  };
  // The parallel inflater's output, copied into the chunks.
  auto take = [&](const uint8_t* p, size_t n) {
    while (n > 0) {
      if (y0 == h.height) return false;  // more image data than rows
      const size_t step = std::min(n, want() - fill);
      std::memcpy(filtered[k].get() + fill, p, step);
      p += step;
      n -= step;
      if (!commit(step)) return false;
    }
    return true;
  };

  // Much image data and more than one core: inflated on all of them, zlib's
  // bytes and verdict (inflate/parallel_inflate.hpp), read from the IDAT
  // chunks in place, its output cut into chunks of rows as it comes. From
  // the start where the image data is there (or, arriving, already far
  // ahead); else from where zlib, inflating as the data comes, falls that
  // far behind it (a file arriving faster than one core inflates).
  uint64_t idat_bytes = arrived ? size - idat.offset() : 0;  // arriving: most of what is left
  for (const StreamPiece& piece : idat.pieces()) idat_bytes += piece.size;
  const uint64_t idat_start = idat.offset();
  auto far_ahead = [&](uint64_t from) {
    return !arrived || arrived(0) >= from + kParallelPngInflateBytes;
  };
  ParallelSlot slot;
  auto inflate_in_parallel = [&](const InflateResume* resume) {
    ParallelInflateOptions options = png_inflate_options();
    options.size_hint = arrived ? idat_bytes : 0;
    options.resume = resume;
    out.parallel_from = resume ? static_cast<int64_t>(resume->bit / 8) : 0;
    // Stream offsets back to the file's: the IDAT piece holding each. The
    // pieces are walked on this thread, between the inflater's groups.
    const std::vector<StreamPiece> walked(idat.pieces().begin(), idat.pieces().begin() + next_idat);
    std::vector<uint64_t> starts;
    uint64_t stream_at = 0;
    for (const StreamPiece& piece : walked) starts.push_back(stream_at), stream_at += piece.size;
    auto more = [&](StreamPiece* piece) {
      if (!next_piece(piece)) return false;
      starts.push_back(stream_at);
      stream_at += piece->size;
      return true;
    };
    if (release)
      options.consumed = [&](uint64_t offset) {
        const size_t i = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), offset) - starts.begin());
        if (i > 0) {
          const StreamPiece& piece = idat.pieces()[i - 1];
          done_before(static_cast<uint64_t>(piece.data - data) + std::min<uint64_t>(offset - starts[i - 1], piece.size));
        }
      };
    const bool inflated = parallel_inflate(walked, more, uint64_t{h.height} * stride, take, options);
    if (!passed() || !inflated || y0 != h.height || idat.bad()) return given_up();
    done_before(size);
    return out;
  };
  const int cores = tbb::this_task_arena::max_concurrency();
  if (idat_bytes >= kParallelPngInflateBytes && far_ahead(idat_start) && slot.take(cores))
    return inflate_in_parallel(nullptr);

  // zlib, as libpng runs it (the window its header names), straight from the
  // IDAT chunks into the chunks of filtered rows: no copy of the compressed
  // data, no buffer of the whole image. libdeflate inflates faster but
  // accepts streams zlib refuses (codes 286-287 and 30-31, incomplete code
  // sets), so a damaged file would get pixels here and an error from libpng.
  // Arriving, it stops at each block's end to see whether it has fallen
  // behind (Z_BLOCK).
  z_stream z{};
  if (inflateInit2(&z, 0) != Z_OK) return out;
  struct End {
    z_stream& z;
    ~End() { inflateEnd(&z); }
  } end{z};
  bool ended = false;
  uint64_t piece_start = 0;  // the stream offset of the piece zlib reads
  StreamPiece piece{nullptr, 0};
  const bool may_hand_over = arrived && idat_bytes >= kParallelPngInflateBytes && cores > 1;
  while (y0 < h.height) {
    if (ended) {  // too little image data
      passed();
      return given_up();
    }
    if (z.avail_in == 0) {
      piece_start += piece.size;
      if (!next_piece(&piece)) {
        passed();
        return given_up();
      }
      z.next_in = const_cast<Bytef*>(piece.data);
      z.avail_in = static_cast<uInt>(piece.size);
      continue;
    }
    z.next_out = filtered[k].get() + fill;
    z.avail_out = static_cast<uInt>(want() - fill);
    const int r = inflate(&z, may_hand_over ? Z_BLOCK : Z_NO_FLUSH);
    if (r == Z_STREAM_END) ended = true;
    else if (r != Z_OK) {
      passed();
      return given_up();
    }
    if (!commit(want() - fill - z.avail_out)) return given_up();
    if (z.next_in) done_before(static_cast<uint64_t>(z.next_in - data));
    // At the end of a block that is not the last, with rows still to come.
    if (may_hand_over && (z.data_type & 128) && !(z.data_type & 64) && !ended && y0 < h.height &&
        far_ahead(static_cast<uint64_t>(z.next_in - data)) && slot.take(cores)) {
      uint8_t window[32768];
      uInt window_size = sizeof window;
      if (inflateGetDictionary(&z, window, &window_size) != Z_OK) return given_up();
      const uint64_t used = piece_start + (piece.size - z.avail_in);
      InflateResume resume{used * 8 - static_cast<uint64_t>(z.data_type & 7), z.total_out,
                           static_cast<uint32_t>(z.adler), window, window_size};
      return inflate_in_parallel(&resume);
    }
  }
  if (!passed()) return given_up();
  // The stream ends exactly with the last row, its checksum right, and no
  // data follows it: anything else makes libpng warn or refuse.
  uint8_t spare = 0;
  while (!ended) {
    if (z.avail_in == 0) {
      if (!next_piece(&piece)) break;
      z.next_in = const_cast<Bytef*>(piece.data);
      z.avail_in = static_cast<uInt>(piece.size);
      continue;
    }
    z.next_out = &spare;
    z.avail_out = 1;
    const int r = inflate(&z, Z_NO_FLUSH);
    if (r == Z_STREAM_END && z.avail_out == 1) ended = true;
    else if (r != Z_OK || z.avail_out == 0) break;  // damaged, or more image data than rows
  }
  while (next_piece(&piece)) z.avail_in += static_cast<uInt>(piece.size > 0);
  if (!ended || z.avail_in != 0 || idat.bad()) out.taken = false;
  done_before(size);
  return out;
}

}  // namespace imgstat
