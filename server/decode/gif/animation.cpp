// An animated GIF, frame by frame, composited as Pillow (9.4) composites it,
// which follows the GIF89a specification where browsers do not:
// - the canvas is the logical screen (grown to hold the first frame), first
//   filled with the first frame's transparent colour (its palette entry,
//   alpha 0) or else palette entry 0;
// - the planes are RGBA when the first frame has a transparent colour, RGB
//   otherwise;
// - a frame's pixels of its transparent colour leave the canvas as it was;
//   the first frame's are drawn, with alpha 0;
// - a disposal method, once given, holds until another is given; 2 restores
//   the frame's rectangle to its transparent colour (alpha 0) or else to the
//   screen's background colour, from the frame's palette; 3 restores what the
//   rectangle held before the frame (the first frame: its transparent colour,
//   else nothing);
// - frames reaching past the canvas are clipped to it (Pillow grows it).
#include <algorithm>
#include <cstring>
#include <vector>

#include "decode/gif/gif.hpp"
#include "decode/gif/giflib.hpp"
#include "decode/gif/lzw.hpp"

namespace imgstat {

namespace {

struct Colour {
  uint8_t r = 0, g = 0, b = 0, a = 255;
};

Colour entry(const ColorMapObject* map, int i, bool transparent) {
  Colour c;
  if (map && i >= 0 && i < map->ColorCount) c = Colour{map->Colors[i].Red, map->Colors[i].Green, map->Colors[i].Blue, 255};
  if (transparent) c.a = 0;
  return c;
}

struct CanvasArea {
  uint32_t x0 = 0, y0 = 0, x1 = 0, y1 = 0;  // clipped to the canvas
  bool empty() const { return x0 >= x1 || y0 >= y1; }
};

CanvasArea clipped(const GifImageDesc& d, uint32_t w, uint32_t h) {
  CanvasArea r;
  r.x0 = std::min<uint32_t>(static_cast<uint32_t>(std::max(0, d.Left)), w);
  r.y0 = std::min<uint32_t>(static_cast<uint32_t>(std::max(0, d.Top)), h);
  r.x1 = std::min<uint64_t>(uint64_t{r.x0} + static_cast<uint32_t>(std::max(0, d.Width)), w);
  r.y1 = std::min<uint64_t>(uint64_t{r.y0} + static_cast<uint32_t>(std::max(0, d.Height)), h);
  return r;
}

// What the control block before an image says of it.
struct Control {
  int transparent = -1;
  int disposal = 0;  // the bits as written (0: none given)
  uint32_t delay_ms = 0;
};

// Walks a GIF's records: on_image(gif, control) is called after each image
// descriptor, must consume the image's data, and returns whether to go on.
// What giflib keeps of every image seen (SavedImages, with a copy of its
// colour table) is dropped as it goes: memory stays that of one frame.
// Returns false where the records end in damage (giflib's error in *error).
template <class OnImage>
bool walk(GifFileType* g, const std::function<bool()>& cancelled, OnImage on_image, int* error) {
  Control control;
  for (uint64_t n = 0;; ++n) {
    if (cancelled && (n & 255) == 0 && cancelled()) fail(ErrorCode::kCancelled, "cancelled while decoding");
    GifRecordType type;
    if (DGifGetRecordType(g, &type) == GIF_ERROR) return *error = g->Error, false;
    if (type == TERMINATE_RECORD_TYPE) return true;
    if (type == EXTENSION_RECORD_TYPE) {
      int code;
      GifByteType* ext = nullptr;
      if (DGifGetExtension(g, &code, &ext) == GIF_ERROR) return *error = g->Error, false;
      GraphicsControlBlock gcb;
      if (code == GRAPHICS_EXT_FUNC_CODE && ext && DGifExtensionToGCB(ext[0], ext + 1, &gcb) == GIF_OK) {
        control.transparent = gcb.TransparentColor;
        control.disposal = gcb.DisposalMode;
        control.delay_ms = static_cast<uint32_t>(std::max(0, gcb.DelayTime)) * 10;
      }
      while (ext)
        if (DGifGetExtensionNext(g, &ext) == GIF_ERROR) return *error = g->Error, false;
      continue;
    }
    if (type != IMAGE_DESC_RECORD_TYPE) continue;
    if (DGifGetImageDesc(g) == GIF_ERROR) return *error = g->Error, false;
    GifFreeSavedImages(g);
    g->ImageCount = 0;  // giflib indexes its next saved image by this count
    if (!on_image(g, control)) return true;
    control = Control{};
  }
}

bool skip_data(GifFileType* g) {
  int code_size;
  GifByteType* block = nullptr;
  if (DGifGetCode(g, &code_size, &block) == GIF_ERROR) return false;
  while (block)
    if (DGifGetCodeNext(g, &block) == GIF_ERROR) return false;
  return true;
}

}  // namespace

GifPlan plan_gif(const uint8_t* data, size_t size, uint64_t max_frames, const std::function<bool()>& cancelled) {
  gif::Source src{data, size};
  const gif::Handle g = gif::open(src);
  GifPlan plan;
  plan.width = static_cast<uint32_t>(std::max(0, g->SWidth));
  plan.height = static_cast<uint32_t>(std::max(0, g->SHeight));
  int error = 0;
  bool damaged = false;
  uint64_t widest = 0;
  const bool whole = walk(
      g.get(), cancelled,
      [&](GifFileType* f, const Control& c) {
        const GifImageDesc& d = f->Image;
        if (plan.frames() >= max_frames)
          fail(ErrorCode::kResourceExhausted, "GIF: more than " + std::to_string(max_frames) +
                                                  " frames, the limit of planes a file may have (--max-planes)");
        if (!d.ColorMap && !f->SColorMap) invalid_data("GIF: frame " + std::to_string(plan.frames()) + " has no colour table");
        if (!skip_data(f)) return error = f->Error, damaged = true, false;
        const uint64_t right = uint64_t{static_cast<uint32_t>(std::max(0, d.Left))} + static_cast<uint32_t>(std::max(0, d.Width));
        const uint64_t bottom = uint64_t{static_cast<uint32_t>(std::max(0, d.Top))} + static_cast<uint32_t>(std::max(0, d.Height));
        if (plan.frames() == 0) {  // Pillow grows the canvas to hold the first frame
          plan.width = static_cast<uint32_t>(std::max<uint64_t>(plan.width, right));
          plan.height = static_cast<uint32_t>(std::max<uint64_t>(plan.height, bottom));
          plan.alpha = c.transparent >= 0;
        }
        widest = std::max<uint64_t>(widest, static_cast<uint32_t>(std::max(0, d.Width)));
        plan.delays_ms.push_back(c.delay_ms);
        return true;
      },
      &error);
  if (plan.frames() == 0) {
    if (!whole || damaged) gif::refuse(error);
    invalid_data("GIF: no image in the file");
  }
  if (!whole || damaged) {
    const char* why = GifErrorString(error);
    plan.warning = "GIF: the file is damaged after frame " + std::to_string(plan.frames() - 1) + " (" +
                   (why ? why : "could not read") + "): the frames before are answered";
  }
  const uint64_t canvas = uint64_t{plan.width} * plan.height * (plan.alpha ? 4 : 3);
  plan.memory_bytes = 2 * canvas + widest;
  return plan;
}

void decode_gif_frames(const uint8_t* data, size_t size, const Layout& shape, uint64_t first, uint64_t last,
                       const std::function<bool()>& cancelled, const RowSink& sink) {
  gif::Source src{data, size};
  const gif::Handle g = gif::open(src);
  const uint32_t W = static_cast<uint32_t>(shape.width), H = static_cast<uint32_t>(shape.height), C = shape.channels;
  const size_t row_bytes = size_t{W} * C;
  std::vector<uint8_t> canvas(row_bytes * H), saved, line, codes;
  auto put = [&](uint32_t x, uint32_t y, const Colour& c) {
    uint8_t* p = &canvas[y * row_bytes + size_t{x} * C];
    p[0] = c.r, p[1] = c.g, p[2] = c.b;
    if (C == 4) p[3] = c.a;
  };
  auto fill = [&](const CanvasArea& r, const Colour& c) {
    for (uint32_t y = r.y0; y < r.y1; ++y)
      for (uint32_t x = r.x0; x < r.x1; ++x) put(x, y, c);
  };
  // What the last frame leaves to be done before the next is drawn.
  enum class Dispose { kNone, kFill, kRestore } pending = Dispose::kNone;
  CanvasArea pending_rect;
  Colour pending_colour;
  int disposal = 0;
  uint64_t k = 0;
  RowBand band;
  int error = 0;
  bool damaged = false;
  walk(
      g.get(), cancelled,
      [&](GifFileType* f, const Control& c) {
        const GifImageDesc& d = f->Image;
        const ColorMapObject* map = d.ColorMap ? d.ColorMap : f->SColorMap;
        if (!map) invalid_data("GIF: frame " + std::to_string(k) + " has no colour table");
        if (pending == Dispose::kFill) fill(pending_rect, pending_colour);
        if (pending == Dispose::kRestore)
          for (uint32_t y = pending_rect.y0, i = 0; y < pending_rect.y1; ++y, ++i)
            std::memcpy(&canvas[y * row_bytes + size_t{pending_rect.x0} * C],
                        &saved[i * size_t{pending_rect.x1 - pending_rect.x0} * C],
                        size_t{pending_rect.x1 - pending_rect.x0} * C);
        pending = Dispose::kNone;
        if (c.disposal) disposal = c.disposal;
        const CanvasArea r = clipped(d, W, H);
        if (disposal == 2) {
          pending = Dispose::kFill;
          pending_colour = c.transparent >= 0 ? entry(map, c.transparent, true) : entry(map, f->SBackGroundColor, false);
        } else if (disposal >= 3 && k == 0) {
          if (c.transparent >= 0) pending = Dispose::kFill, pending_colour = entry(map, c.transparent, true);
        } else if (disposal >= 3 && !r.empty()) {
          pending = Dispose::kRestore;
          const size_t bytes = size_t{r.x1 - r.x0} * C;
          saved.resize(bytes * (r.y1 - r.y0));
          for (uint32_t y = r.y0, i = 0; y < r.y1; ++y, ++i)
            std::memcpy(&saved[i * bytes], &canvas[y * row_bytes + size_t{r.x0} * C], bytes);
        }
        pending_rect = r;
        if (k == 0) fill(CanvasArea{0, 0, W, H}, entry(map, std::max(0, c.transparent), c.transparent >= 0));
        // The frame's lines in the order the file gives them (interlaced:
        // every 8th from 0, every 8th from 4, every 4th from 2, every 2nd from 1).
        const uint32_t fw = static_cast<uint32_t>(std::max(0, d.Width)), fh = static_cast<uint32_t>(std::max(0, d.Height));
        if (fw == 0 || fh == 0) {
          if (!skip_data(f)) return error = f->Error, damaged = true, false;
        } else {
          line.resize(fw);
          // The frame's palette as the canvas's samples; an index that draws
          // nothing (a later frame's transparent colour) is marked apart.
          uint8_t lut[256][4];
          bool draws[256];
          for (int i = 0; i < 256; ++i) {
            const Colour e = entry(map, i, i == c.transparent);
            lut[i][0] = e.r, lut[i][1] = e.g, lut[i][2] = e.b, lut[i][3] = e.a;
            draws[i] = k == 0 || i != c.transparent;
          }
          const uint32_t left = static_cast<uint32_t>(std::max(0, d.Left));
          static const uint32_t kStart[] = {0, 4, 2, 1}, kStep[] = {8, 8, 4, 2};
          const int passes = d.Interlace ? 4 : 1;
          // The frame's code stream, its sub-blocks joined (giflib read the
          // code size; its blocks are handed over undecoded).
          int code_size = 0;
          GifByteType* block = nullptr;
          codes.clear();
          if (DGifGetCode(f, &code_size, &block) == GIF_ERROR) return error = f->Error, damaged = true, false;
          while (block) {
            codes.insert(codes.end(), block + 1, block + 1 + block[0]);
            if (DGifGetCodeNext(f, &block) == GIF_ERROR) return error = f->Error, damaged = true, false;
          }
          if (code_size < 1 || code_size > 8)
            invalid_data("GIF: frame " + std::to_string(k) + " has an LZW code size of " + std::to_string(code_size));
          GifLzw lzw(codes.data(), codes.size(), code_size);
          for (int pass = 0; pass < passes; ++pass)
            for (uint32_t row = d.Interlace ? kStart[pass] : 0; row < fh; row += d.Interlace ? kStep[pass] : 1) {
              if (!lzw.read(line.data(), fw)) invalid_data("GIF: could not decode frame " + std::to_string(k) + " (" + lzw.error() + ")");
              if ((row & 255) == 0 && cancelled && cancelled()) fail(ErrorCode::kCancelled, "cancelled while decoding");
              const uint64_t y = uint64_t{static_cast<uint32_t>(std::max(0, d.Top))} + row;
              if (y < r.y0 || y >= r.y1) continue;
              const uint8_t* in = &line[r.x0 - left];
              uint8_t* out = &canvas[y * row_bytes + size_t{r.x0} * C];
              const uint32_t n = r.x1 - r.x0;
              // Byte by byte: a 3-byte memcpy is a library call a pixel.
              if (C == 3)
                for (uint32_t x = 0; x < n; ++x, out += 3) {
                  const uint8_t* e = lut[in[x]];
                  if (draws[in[x]]) out[0] = e[0], out[1] = e[1], out[2] = e[2];
                }
              else
                for (uint32_t x = 0; x < n; ++x, out += 4) {
                  const uint8_t* e = lut[in[x]];
                  if (draws[in[x]]) out[0] = e[0], out[1] = e[1], out[2] = e[2], out[3] = e[3];
                }
            }
        }
        if (k >= first) {
          if (k == first) {
            band = sink.begin(W, H, C, SampleType::kUint8);
          } else {
            if (!sink.plane) fail(ErrorCode::kInternal, "GIF: the sink takes one plane");
            sink.plane(k - first);
          }
          for (uint32_t y = 0; y < H;) {
            if (band.count == 0) fail(ErrorCode::kInternal, "GIF: the sink gave a band of no rows");
            const uint32_t n = std::min(band.count, H - y);
            std::memcpy(band.rows, &canvas[y * row_bytes], n * row_bytes);
            band = sink.band(band.rows, y, n);
            y += n;
          }
        }
        return ++k <= last;
      },
      &error);
  if (damaged || k <= last) {
    const char* why = GifErrorString(error);
    invalid_data("GIF: could not decode frame " + std::to_string(k) + " (" + (why ? why : "corrupt or truncated data") + ")");
  }
}

}  // namespace imgstat
