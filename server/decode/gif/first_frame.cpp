// GIF through giflib: the first frame, as ImageMagick reads FILE[0].
#include "decode/gif/giflib.hpp"

namespace imgstat {


// The first frame, as ImageMagick reads FILE[0]: the frame's own rectangle,
// palette expanded to RGB, with an alpha channel when the frame has a
// transparent colour.
cv::Mat decode_gif(const uint8_t* d, size_t n, const DecodeOptions& options, std::vector<std::string>* warnings) {
  gif::Source src{d, n};
  const gif::Handle gif = gif::open(src);
  int transparent = NO_TRANSPARENT_COLOR;
  cv::Mat out;
  for (;;) {
    GifRecordType type;
    if (DGifGetRecordType(gif.get(), &type) == GIF_ERROR) gif::refuse(gif->Error);
    if (type == TERMINATE_RECORD_TYPE) break;
    if (type == EXTENSION_RECORD_TYPE) {
      int code;
      GifByteType* ext = nullptr;
      if (DGifGetExtension(gif.get(), &code, &ext) == GIF_ERROR) gif::refuse(gif->Error);
      if (code == GRAPHICS_EXT_FUNC_CODE && ext && out.empty()) {
        GraphicsControlBlock gcb;
        if (DGifExtensionToGCB(ext[0], ext + 1, &gcb) == GIF_OK) transparent = gcb.TransparentColor;
      }
      while (ext)
        if (DGifGetExtensionNext(gif.get(), &ext) == GIF_ERROR) gif::refuse(gif->Error);
      continue;
    }
    if (type != IMAGE_DESC_RECORD_TYPE) continue;
    if (DGifGetImageDesc(gif.get()) == GIF_ERROR) gif::refuse(gif->Error);
    if (!out.empty()) {  // a second frame: say so, read no further
      warnings->push_back("GIF has several frames: only the first was analyzed");
      break;
    }
    const GifImageDesc& desc = gif->Image;
    const int w = desc.Width, h = desc.Height;
    if (w <= 0 || h <= 0) invalid_data("GIF: zero width or height");
    // The plan read this frame's size from the same descriptor; giflib is
    // asked again so that no path allocates an unchecked size.
    if (static_cast<uint64_t>(h) > options.max_pixels / static_cast<uint64_t>(w))
      fail(ErrorCode::kResourceExhausted, "GIF frame of " + std::to_string(w) + "x" + std::to_string(h) +
                                              " pixels is over the limit of " + std::to_string(options.max_pixels));
    const ColorMapObject* map = desc.ColorMap ? desc.ColorMap : gif->SColorMap;
    if (!map) invalid_data("GIF: no colour map");
    std::vector<uint8_t> idx(static_cast<size_t>(w) * h);
    static const int kStart[] = {0, 4, 2, 1}, kStep[] = {8, 8, 4, 2};
    const int passes = desc.Interlace ? 4 : 1;
    for (int pass = 0; pass < passes; ++pass)
      for (int y = desc.Interlace ? kStart[pass] : 0; y < h; y += desc.Interlace ? kStep[pass] : 1) {
        if (DGifGetLine(gif.get(), &idx[static_cast<size_t>(y) * w], w) == GIF_ERROR) gif::refuse(gif->Error);
        if ((y & 255) == 0 && options.cancelled && options.cancelled()) fail(ErrorCode::kCancelled, "cancelled while decoding");
      }
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
  if (out.empty()) invalid_data("GIF: no image in the file");
  return out;
}

}  // namespace imgstat
