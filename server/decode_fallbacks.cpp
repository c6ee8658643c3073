// Decoders for what OpenCV 4.6 cannot read or reads wrong: OS/2 palette BMPs,
// GIF (giflib) and animated or extended WebP (libwebp's demuxer).
#include <gif_lib.h>
#include <webp/decode.h>
#include <webp/demux.h>

#include <cstring>

#include "decode.hpp"

namespace imgstat {
namespace {

[[noreturn]] void invalid(const std::string& m) { fail(ErrorCode::kInvalidArgument, m); }

uint32_t le16(const uint8_t* p) { return p[0] | (p[1] << 8); }
uint32_t le32(const uint8_t* p) { return le16(p) | (le16(p + 2) << 16); }

struct Rgb {
  uint8_t r, g, b;
};

// As OpenCV does for palette images: a palette of grays gives one channel.
cv::Mat expand_palette(const std::vector<uint8_t>& indices, int w, int h, const std::vector<Rgb>& palette) {
  bool gray = true;
  for (const Rgb& c : palette) gray = gray && c.r == c.g && c.g == c.b;
  cv::Mat m(h, w, gray ? CV_8UC1 : CV_8UC3);
  for (int y = 0; y < h; ++y) {
    uint8_t* row = m.ptr<uint8_t>(y);
    for (int x = 0; x < w; ++x) {
      const size_t i = indices[static_cast<size_t>(y) * w + x];
      const Rgb c = i < palette.size() ? palette[i] : Rgb{0, 0, 0};
      if (gray) {
        row[x] = c.r;
      } else {
        row[3 * x] = c.b;
        row[3 * x + 1] = c.g;
        row[3 * x + 2] = c.r;
      }
    }
  }
  return m;
}

}  // namespace

// OS/2 1.x BMPs (12-byte BITMAPCOREHEADER) store palette entries in 3 bytes;
// OpenCV 4.6 reads them as 4 and returns wrong colours.
cv::Mat decode_bmp_core(const uint8_t* d, size_t n) {
  if (n < 26 || le32(d + 14) != 12) return {};
  const int w = static_cast<int>(le16(d + 18)), h = static_cast<int>(le16(d + 20));
  const uint32_t bpp = le16(d + 24), offset = le32(d + 10);
  if (bpp != 1 && bpp != 4 && bpp != 8) return {};
  if (w == 0 || h == 0) invalid("BMP: zero width or height");
  if (offset < 26 || offset > n) invalid("BMP: pixel data offset outside the file");
  const size_t entries = std::min<size_t>(size_t{1} << bpp, (offset - 26) / 3);
  std::vector<Rgb> palette;
  for (size_t i = 0; i < entries; ++i) palette.push_back({d[26 + 3 * i + 2], d[26 + 3 * i + 1], d[26 + 3 * i]});
  const size_t row_bytes = ((static_cast<size_t>(w) * bpp + 31) / 32) * 4;
  if (offset + row_bytes * h > n) invalid("BMP: file ends before its pixel data does (truncated)");
  std::vector<uint8_t> indices(static_cast<size_t>(w) * h);
  for (int y = 0; y < h; ++y) {
    const uint8_t* row = d + offset + row_bytes * (h - 1 - y);  // bottom-up
    for (int x = 0; x < w; ++x) {
      const size_t bit = static_cast<size_t>(x) * bpp;
      const uint32_t byte = row[bit / 8];
      indices[static_cast<size_t>(y) * w + x] =
          static_cast<uint8_t>((byte >> (8 - bpp - bit % 8)) & ((1u << bpp) - 1));
    }
  }
  return expand_palette(indices, w, h, palette);
}

namespace {

struct GifSource {
  const uint8_t* data;
  size_t size;
  size_t pos = 0;
};

int gif_read(GifFileType* gif, GifByteType* buf, int len) {
  auto* src = static_cast<GifSource*>(gif->UserData);
  const size_t n = std::min<size_t>(static_cast<size_t>(len), src->size - src->pos);
  std::memcpy(buf, src->data + src->pos, n);
  src->pos += n;
  return static_cast<int>(n);
}

struct GifCloser {
  void operator()(GifFileType* g) const {
    int err;
    DGifCloseFile(g, &err);
  }
};

std::string gif_error(int code) {
  const char* s = GifErrorString(code);
  return std::string("GIF: ") + (s ? s : "could not decode");
}

}  // namespace

// The first frame, as ImageMagick reads FILE[0]: the frame's own rectangle,
// palette expanded to RGB, with an alpha channel when the frame has a
// transparent colour.
cv::Mat decode_gif(const uint8_t* d, size_t n, std::vector<std::string>* warnings) {
  GifSource src{d, n};
  int err = 0;
  std::unique_ptr<GifFileType, GifCloser> gif(DGifOpen(&src, gif_read, &err));
  if (!gif) invalid(gif_error(err));
  int transparent = NO_TRANSPARENT_COLOR;
  cv::Mat out;
  for (;;) {
    GifRecordType type;
    if (DGifGetRecordType(gif.get(), &type) == GIF_ERROR) invalid(gif_error(gif->Error));
    if (type == TERMINATE_RECORD_TYPE) break;
    if (type == EXTENSION_RECORD_TYPE) {
      int code;
      GifByteType* ext = nullptr;
      if (DGifGetExtension(gif.get(), &code, &ext) == GIF_ERROR) invalid(gif_error(gif->Error));
      if (code == GRAPHICS_EXT_FUNC_CODE && ext && out.empty()) {
        GraphicsControlBlock gcb;
        if (DGifExtensionToGCB(ext[0], ext + 1, &gcb) == GIF_OK) transparent = gcb.TransparentColor;
      }
      while (ext)
        if (DGifGetExtensionNext(gif.get(), &ext) == GIF_ERROR) invalid(gif_error(gif->Error));
      continue;
    }
    if (type != IMAGE_DESC_RECORD_TYPE) continue;
    if (DGifGetImageDesc(gif.get()) == GIF_ERROR) invalid(gif_error(gif->Error));
    if (!out.empty()) {  // a second frame: say so, read no further
      warnings->push_back("GIF has several frames: only the first was analyzed");
      break;
    }
    const GifImageDesc& desc = gif->Image;
    const int w = desc.Width, h = desc.Height;
    if (w <= 0 || h <= 0) invalid("GIF: zero width or height");
    const ColorMapObject* map = desc.ColorMap ? desc.ColorMap : gif->SColorMap;
    if (!map) invalid("GIF: no colour map");
    std::vector<uint8_t> idx(static_cast<size_t>(w) * h);
    static const int kStart[] = {0, 4, 2, 1}, kStep[] = {8, 8, 4, 2};
    const int passes = desc.Interlace ? 4 : 1;
    for (int pass = 0; pass < passes; ++pass)
      for (int y = desc.Interlace ? kStart[pass] : 0; y < h; y += desc.Interlace ? kStep[pass] : 1)
        if (DGifGetLine(gif.get(), &idx[static_cast<size_t>(y) * w], w) == GIF_ERROR) invalid(gif_error(gif->Error));
    const bool alpha = transparent != NO_TRANSPARENT_COLOR;
    out.create(h, w, alpha ? CV_8UC4 : CV_8UC3);
    const int ch = out.channels();
    for (int y = 0; y < h; ++y) {
      uint8_t* row = out.ptr<uint8_t>(y);
      for (int x = 0; x < w; ++x) {
        const int i = idx[static_cast<size_t>(y) * w + x];
        const GifColorType c = i < map->ColorCount ? map->Colors[i] : GifColorType{0, 0, 0};
        row[ch * x] = c.Blue;
        row[ch * x + 1] = c.Green;
        row[ch * x + 2] = c.Red;
        if (alpha) row[ch * x + 3] = i == transparent ? 0 : 255;
      }
    }
  }
  if (out.empty()) invalid("GIF: no image in the file");
  return out;
}

// WebP files OpenCV 4.6 refuses (animations, some extended files): the first
// frame on its canvas, through libwebp's demuxer.
cv::Mat decode_webp_frames(const uint8_t* d, size_t n, std::vector<std::string>* warnings) {
  WebPBitstreamFeatures features;
  if (WebPGetFeatures(d, n, &features) != VP8_STATUS_OK) return {};
  const WebPData data{d, n};
  WebPAnimDecoderOptions options;
  if (!WebPAnimDecoderOptionsInit(&options)) return {};
  options.color_mode = MODE_BGRA;
  options.use_threads = 0;
  std::unique_ptr<WebPAnimDecoder, void (*)(WebPAnimDecoder*)> dec(WebPAnimDecoderNew(&data, &options),
                                                                    WebPAnimDecoderDelete);
  if (!dec) return {};
  WebPAnimInfo info;
  if (!WebPAnimDecoderGetInfo(dec.get(), &info)) return {};
  uint8_t* frame = nullptr;
  int timestamp = 0;
  if (!WebPAnimDecoderGetNext(dec.get(), &frame, &timestamp)) return {};
  const cv::Mat bgra(static_cast<int>(info.canvas_height), static_cast<int>(info.canvas_width), CV_8UC4, frame);
  if (info.frame_count > 1)
    warnings->push_back("animated WebP of " + std::to_string(info.frame_count) +
                        " frames: only the first was analyzed");
  if (features.has_alpha) return bgra.clone();
  cv::Mat bgr(bgra.rows, bgra.cols, CV_8UC3);
  const int from_to[] = {0, 0, 1, 1, 2, 2};
  cv::mixChannels(&bgra, 1, &bgr, 1, from_to, 3);
  return bgr;
}

}  // namespace imgstat
