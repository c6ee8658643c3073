#include "decode/png/apng.hpp"

#include <opencv2/core.hpp>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "decode/opencv_codecs.hpp"
#include "decode/png/internal.hpp"
#include "decode/png/png.hpp"

namespace imgstat {

namespace {

[[noreturn]] void damaged(const std::string& what) { fail(ErrorCode::kInvalidArgument, "APNG: " + what); }

struct Chunk {
  size_t at = 0;  // the chunk's offset (its length field)
  uint32_t length = 0;
  const uint8_t* type = nullptr;
  const uint8_t* data = nullptr;
  bool is(const char* t) const { return std::memcmp(type, t, 4) == 0; }
  std::string name() const {
    std::string n(reinterpret_cast<const char*>(type), 4);
    for (char c : n)
      if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'))) return "chunk";
    return n + " chunk";
  }
};

// Walks a PNG's chunks from the signature to IEND, each checked to lie in
// the file; the CRC of every chunk the animation reads is checked.
template <class F>
void walk_chunks(const uint8_t* data, size_t size, F&& on_chunk) {
  size_t at = 8;
  for (;;) {
    if (size - at < 12) damaged("the file ends at byte " + std::to_string(size) + " before its IEND chunk (truncated)");
    Chunk c;
    c.at = at;
    c.length = png::be32(data + at);
    c.type = data + at + 4;
    c.data = c.type + 4;
    if (c.length > 0x7fffffffu || size - at - 12 < c.length)
      damaged("the " + c.name() + " at byte " + std::to_string(at) + " declares " + std::to_string(c.length) +
              " bytes, past the end of the file");
    const bool read = c.is("IHDR") || c.is("PLTE") || c.is("tRNS") || c.is("IDAT") || c.is("acTL") || c.is("fcTL") ||
                      c.is("fdAT");
    if (read && static_cast<uint32_t>(crc32(0, c.type, c.length + 4)) != png::be32(c.data + c.length))
      damaged("the " + c.name() + " at byte " + std::to_string(at) + " has a wrong CRC");
    if (c.is("IEND")) return;
    if (!on_chunk(c)) return;
    at += size_t{c.length} + 12;
  }
}

struct FrameControl {
  uint32_t width = 0, height = 0, x = 0, y = 0;
  uint32_t delay_ms = 0;
  uint8_t dispose = 0, blend = 0;
};

constexpr uint8_t kDisposeNone = 0, kDisposeBackground = 1, kDisposePrevious = 2;
constexpr uint8_t kBlendSource = 0, kBlendOver = 1;

FrameControl read_fcTL(const Chunk& c, uint64_t index, uint32_t canvas_w, uint32_t canvas_h) {
  if (c.length != 26) damaged("frame " + std::to_string(index) + "'s fcTL chunk has " + std::to_string(c.length) + " bytes, not 26");
  const uint8_t* p = c.data;
  FrameControl f;
  f.width = png::be32(p + 4);
  f.height = png::be32(p + 8);
  f.x = png::be32(p + 12);
  f.y = png::be32(p + 16);
  const uint32_t num = uint32_t{p[20]} << 8 | p[21];
  uint32_t den = uint32_t{p[22]} << 8 | p[23];
  if (den == 0) den = 100;  // the specification's default: hundredths
  f.delay_ms = (num * 1000 + den / 2) / den;
  f.dispose = p[24];
  f.blend = p[25];
  const std::string frame = "frame " + std::to_string(index);
  if (f.width == 0 || f.height == 0) damaged(frame + " is empty (" + std::to_string(f.width) + "x" + std::to_string(f.height) + ")");
  if (uint64_t{f.x} + f.width > canvas_w || uint64_t{f.y} + f.height > canvas_h)
    damaged(frame + "'s rectangle " + std::to_string(f.width) + "x" + std::to_string(f.height) + " at (" +
            std::to_string(f.x) + ", " + std::to_string(f.y) + ") is not inside the " + std::to_string(canvas_w) + "x" +
            std::to_string(canvas_h) + " canvas");
  if (f.dispose > kDisposePrevious) damaged(frame + " has dispose_op " + std::to_string(f.dispose) + " (0 to 2)");
  if (f.blend > kBlendOver) damaged(frame + " has blend_op " + std::to_string(f.blend) + " (0 or 1)");
  return f;
}

// The channels and samples a still PNG of this header decodes to (as
// OpenCV's imread and the streamed decoder give them).
void planned_samples(uint32_t depth, uint32_t colour, bool trns, ApngPlan* plan) {
  plan->channels = colour == png::kGray ? 1 : (colour == png::kRgb || colour == png::kPalette) ? (trns ? 4 : 3) : 4;
  plan->type = depth == 16 && colour != png::kPalette ? SampleType::kUint16 : SampleType::kUint8;
}

void put_chunk(std::vector<uint8_t>& out, const char* type, const uint8_t* data, size_t n) {
  const uint8_t head[8] = {uint8_t(n >> 24), uint8_t(n >> 16), uint8_t(n >> 8), uint8_t(n),
                           uint8_t(type[0]), uint8_t(type[1]), uint8_t(type[2]), uint8_t(type[3])};
  out.insert(out.end(), head, head + 8);
  if (n) out.insert(out.end(), data, data + n);
  uint32_t crc = static_cast<uint32_t>(crc32(0, head + 4, 4));
  if (n) crc = static_cast<uint32_t>(crc32(crc, data, static_cast<uInt>(n)));
  const uint8_t tail[4] = {uint8_t(crc >> 24), uint8_t(crc >> 16), uint8_t(crc >> 8), uint8_t(crc)};
  out.insert(out.end(), tail, tail + 4);
}

struct Piece {
  const uint8_t* data;
  size_t size;
};

// The apngdis formula: the frame's pixel over the canvas's, alpha not
// premultiplied, in integers of the sample's depth.
template <class T>
void blend_over(T* dst, const T* src) {
  constexpr uint64_t kMax = T(~T(0));
  const uint64_t a = src[3];
  if (a == kMax || dst[3] == 0) {
    if (a != 0) std::memcpy(dst, src, 4 * sizeof(T));
    return;
  }
  if (a == 0) return;
  const uint64_t u = a * kMax, v = (kMax - a) * dst[3], al = u + v;
  for (int c = 0; c < 3; ++c) dst[c] = static_cast<T>((src[c] * u + dst[c] * v) / al);
  dst[3] = static_cast<T>(al / kMax);
}

class Compositor {
 public:
  Compositor(const uint8_t* data, size_t size, const Layout& shape, const std::function<bool()>& cancelled)
      : data_(data), size_(size), shape_(shape), cancelled_(cancelled),
        pixel_(uint64_t{shape.channels} * sample_size(shape.type)),
        canvas_(shape.width * shape.height * pixel_, 0) {}

  void header(const Chunk& c) {
    if (c.is("IHDR") && c.length == 13) ihdr_.assign(c.data, c.data + 13);
    if (c.is("PLTE")) plte_.assign(c.data, c.data + c.length);
    if (c.is("tRNS")) trns_.assign(c.data, c.data + c.length);
  }
  // Frame k (its control and data) onto the canvas; its plane to sink if chosen.
  void frame(uint64_t k, const FrameControl& f, const std::vector<Piece>& pieces, bool send, uint64_t index,
             const RowSink& sink) {
    if (cancelled_ && cancelled_()) fail(ErrorCode::kCancelled, "cancelled while decoding");
    decode_frame(k, f, pieces);
    const uint64_t row = uint64_t{shape_.width} * pixel_, frame_row = uint64_t{f.width} * pixel_;
    uint8_t dispose = f.dispose;
    if (k == 0 && dispose == kDisposePrevious) dispose = kDisposeBackground;
    if (dispose == kDisposePrevious) {  // what the rectangle held before
      saved_.resize(frame_row * f.height);
      for (uint32_t y = 0; y < f.height; ++y)
        std::memcpy(&saved_[y * frame_row], &canvas_[(f.y + y) * row + f.x * pixel_], frame_row);
    }
    for (uint32_t y = 0; y < f.height; ++y) {
      uint8_t* out = &canvas_[(f.y + uint64_t{y}) * row + f.x * pixel_];
      const uint8_t* in = &frame_[y * frame_row];
      if (f.blend == kBlendSource || shape_.channels != 4) {
        std::memcpy(out, in, frame_row);
      } else if (shape_.type == SampleType::kUint8) {
        for (uint32_t x = 0; x < f.width; ++x) blend_over(out + x * 4, in + x * 4);
      } else {
        for (uint32_t x = 0; x < f.width; ++x)
          blend_over(reinterpret_cast<uint16_t*>(out) + x * 4, reinterpret_cast<const uint16_t*>(in) + x * 4);
      }
    }
    if (send) band_ = send_plane(sink, band_, canvas_.data(), shape_.width, shape_.height, shape_.channels, shape_.type, index, "APNG");
    if (dispose == kDisposeBackground)
      for (uint32_t y = 0; y < f.height; ++y) std::memset(&canvas_[(f.y + uint64_t{y}) * row + f.x * pixel_], 0, frame_row);
    if (dispose == kDisposePrevious)
      for (uint32_t y = 0; y < f.height; ++y)
        std::memcpy(&canvas_[(f.y + uint64_t{y}) * row + f.x * pixel_], &saved_[y * frame_row], frame_row);
  }

 private:
  // The frame's data as a PNG of its own size, decoded into frame_.
  void decode_frame(uint64_t k, const FrameControl& f, const std::vector<Piece>& pieces) {
    if (ihdr_.size() != 13) damaged("its IHDR chunk is not 13 bytes");
    std::vector<uint8_t> file = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    uint8_t ihdr[13];
    std::memcpy(ihdr, ihdr_.data(), 13);
    for (int i = 0; i < 4; ++i) ihdr[i] = uint8_t(f.width >> (24 - 8 * i)), ihdr[4 + i] = uint8_t(f.height >> (24 - 8 * i));
    put_chunk(file, "IHDR", ihdr, 13);
    if (!plte_.empty()) put_chunk(file, "PLTE", plte_.data(), plte_.size());
    if (!trns_.empty()) put_chunk(file, "tRNS", trns_.data(), trns_.size());
    for (const Piece& p : pieces) put_chunk(file, "IDAT", p.data, p.size);
    put_chunk(file, "IEND", nullptr, 0);
    const std::string what = "frame " + std::to_string(k);
    frame_.assign(uint64_t{f.width} * f.height * pixel_, 0);
    auto check = [&](uint32_t w, uint32_t h, uint32_t channels, SampleType type) {
      if (w != f.width || h != f.height || channels != shape_.channels || type != shape_.type)
        damaged(what + " decodes to " + std::to_string(channels) + " channels of " + to_string(type) + ", not as the file's header says");
    };
    RowSink sink;
    sink.begin = [&](uint32_t w, uint32_t h, uint32_t channels, SampleType type) {
      check(w, h, channels, type);
      return RowBand{frame_.data(), h};
    };
    sink.band = [](const uint8_t*, uint32_t, uint32_t) { return RowBand{}; };
    if (decode_png(file.data(), file.size(), cancelled_, sink).taken) return;
    // Interlaced, sub-8-bit gray or data libpng warns about: libpng's answer.
    cv::Mat m;
    try {
      m = opencv_codecs::imdecode(cv::Mat(1, static_cast<int>(file.size()), CV_8U, file.data()), -1);
    } catch (const cv::Exception&) {
    }
    if (m.empty()) damaged("could not decode " + what + " (corrupt or truncated data)");
    SampleType type = m.depth() == CV_16U ? SampleType::kUint16 : SampleType::kUint8;
    if (m.depth() != CV_16U && m.depth() != CV_8U) damaged(what + ": unexpected samples");
    check(static_cast<uint32_t>(m.cols), static_cast<uint32_t>(m.rows), static_cast<uint32_t>(m.channels()), type);
    const uint64_t row = uint64_t{f.width} * pixel_;
    const size_t s = sample_size(type);
    for (uint32_t y = 0; y < f.height; ++y) {
      const uint8_t* in = m.ptr<uint8_t>(static_cast<int>(y));
      uint8_t* out = &frame_[y * row];
      std::memcpy(out, in, row);
      if (shape_.channels >= 3)  // OpenCV's BGR(A) to R,G,B(,A)
        for (uint32_t x = 0; x < f.width; ++x) {
          uint8_t* px = out + x * pixel_;
          for (size_t b = 0; b < s; ++b) std::swap(px[b], px[2 * s + b]);
        }
    }
  }

  const uint8_t* data_;
  size_t size_;
  const Layout shape_;  // the canvas
  const std::function<bool()>& cancelled_;
  const uint64_t pixel_;
  std::vector<uint8_t> canvas_, saved_, frame_;
  std::vector<uint8_t> ihdr_, plte_, trns_;
  RowBand band_;
};

// The file's frames in order: each control with its data (IDAT for a frame
// whose fcTL comes before the image data, fdAT otherwise), handed to
// on_frame(index, control, pieces) as its data ends; false stops the walk.
template <class Header, class OnFrame>
void walk_frames(const uint8_t* data, size_t size, uint32_t canvas_w, uint32_t canvas_h, Header&& on_header,
                 OnFrame&& on_frame, bool* hidden, uint32_t* declared) {
  bool have = false, in_idat = false, seen_idat = false, stop = false;
  uint64_t k = 0;
  FrameControl control;
  std::vector<Piece> pieces;
  auto end_frame = [&] {
    if (!have) return;
    if (pieces.empty()) damaged("frame " + std::to_string(k) + " has no image data");
    if (!on_frame(k, control, pieces)) stop = true;
    ++k;
    have = false;
    pieces.clear();
  };
  walk_chunks(data, size, [&](const Chunk& c) {
    if (c.is("IDAT")) {
      if (!seen_idat && !have) *hidden = true;
      if (seen_idat && !in_idat) damaged("IDAT chunks apart at byte " + std::to_string(c.at));
      seen_idat = in_idat = true;
      if (have && k == 0 && !*hidden) pieces.push_back(Piece{c.data, c.length});
      return true;
    }
    in_idat = false;
    if (c.is("acTL")) {
      if (seen_idat) damaged("the acTL chunk comes after the image data");
      if (c.length != 8) damaged("the acTL chunk has " + std::to_string(c.length) + " bytes, not 8");
      *declared = png::be32(c.data);
    } else if (c.is("fcTL")) {
      end_frame();
      if (stop) return false;
      control = read_fcTL(c, k, canvas_w, canvas_h);
      if (k == 0 && !seen_idat && (control.x || control.y || control.width != canvas_w || control.height != canvas_h))
        damaged("the first frame is the image data but its rectangle is not the whole canvas");
      have = true;
    } else if (c.is("fdAT")) {
      if (c.length < 4) damaged("the fdAT chunk at byte " + std::to_string(c.at) + " has no sequence number");
      if (!have) damaged("the fdAT chunk at byte " + std::to_string(c.at) + " belongs to no frame");
      if (k == 0 && !*hidden) damaged("the first frame is the image data, but fdAT chunks follow its fcTL");
      pieces.push_back(Piece{c.data + 4, c.length - 4});
    } else if (!seen_idat) {
      on_header(c);
    }
    return true;
  });
  if (!stop) end_frame();
  if (!seen_idat) damaged("the file has no image data (IDAT)");
}

}  // namespace

bool png_declares_animation(const uint8_t* data, size_t size, const std::function<uint64_t(uint64_t)>& arrived) {
  size_t at = 8;
  for (;;) {
    if (arrived) arrived(std::min<uint64_t>(size, uint64_t{at} + 8));
    if (size - at < 8) return false;
    const uint32_t length = png::be32(data + at);
    const uint8_t* type = data + at + 4;
    if (std::memcmp(type, "acTL", 4) == 0) return true;
    if (std::memcmp(type, "IDAT", 4) == 0 || std::memcmp(type, "IEND", 4) == 0) return false;
    if (length > 0x7fffffffu || size - at - 8 < uint64_t{length} + 4) return false;
    at += size_t{length} + 12;
  }
}

ApngPlan plan_apng(const uint8_t* data, size_t size, uint64_t max_frames) {
  ApngPlan plan;
  if (size < 33 || !png_declares_animation(data, size, {})) return plan;
  plan.width = png::be32(data + 16);
  plan.height = png::be32(data + 20);
  const uint32_t depth = data[24], colour = data[25];
  bool trns = false;
  uint32_t declared = 0;
  walk_frames(
      data, size, plan.width, plan.height, [&](const Chunk& c) { trns = trns || c.is("tRNS"); },
      [&](uint64_t k, const FrameControl& f, const std::vector<Piece>&) {
        if (k >= max_frames)
          fail(ErrorCode::kResourceExhausted, "APNG: more than " + std::to_string(max_frames) +
                                                  " frames, the limit of planes a file may have (--max-planes)");
        plan.delays_ms.push_back(f.delay_ms);
        return true;
      },
      &plan.default_image_hidden, &declared);
  if (declared != plan.frames())
    plan.warning = "APNG: its acTL chunk declares " + std::to_string(declared) + " frames, but the file has " +
                   std::to_string(plan.frames()) + "; all of them were read";
  planned_samples(depth, colour, trns, &plan);
  const uint64_t canvas = uint64_t{plan.width} * plan.height * plan.channels * sample_size(plan.type);
  // The canvas, a saved rectangle, the frame decoded (and OpenCV's copy of
  // it), the frame's data made a file, and the streamed decoder's own.
  plan.memory_bytes = 4 * canvas + size + png_stream_memory_bytes(plan.width, plan.height, depth, colour, false, size);
  return plan;
}

void decode_apng_frames(const uint8_t* data, size_t size, const Layout& shape, uint64_t first, uint64_t last,
                        const std::function<bool()>& cancelled, const RowSink& sink) {
  Compositor canvas(data, size, shape, cancelled);
  bool hidden = false;
  uint32_t declared = 0;
  uint64_t done = 0;
  walk_frames(
      data, size, static_cast<uint32_t>(shape.width), static_cast<uint32_t>(shape.height), [&](const Chunk& c) { canvas.header(c); },
      [&](uint64_t k, const FrameControl& f, const std::vector<Piece>& pieces) {
        canvas.frame(k, f, pieces, k >= first, k - first, sink);
        done = k + 1;
        return k < last;
      },
      &hidden, &declared);
  if (done <= last) damaged("the file has " + std::to_string(done) + " frames, fewer than planned");
}

}  // namespace imgstat
