// WebP files OpenCV 4.6 refuses (animations, some extended files), through libwebp's demuxer.
#include "decode/webp.hpp"

#include <webp/decode.h>
#include <webp/demux.h>

#include <memory>

#include "decode/decode.hpp"

namespace imgstat {

namespace {

using AnimDecoder = std::unique_ptr<WebPAnimDecoder, void (*)(WebPAnimDecoder*)>;

AnimDecoder open_animation(const uint8_t* d, size_t n, WEBP_CSP_MODE mode) {
  const WebPData data{d, n};
  WebPAnimDecoderOptions options;
  if (!WebPAnimDecoderOptionsInit(&options)) return AnimDecoder(nullptr, WebPAnimDecoderDelete);
  options.color_mode = mode;
  options.use_threads = 0;
  return AnimDecoder(WebPAnimDecoderNew(&data, &options), WebPAnimDecoderDelete);
}

}  // namespace

WebpAnimation plan_webp_animation(const uint8_t* d, size_t n, uint64_t max_frames) {
  WebpAnimation plan;
  const WebPData data{d, n};
  std::unique_ptr<WebPDemuxer, void (*)(WebPDemuxer*)> demux(WebPDemux(&data), WebPDemuxDelete);
  if (!demux) return plan;
  const uint32_t flags = WebPDemuxGetI(demux.get(), WEBP_FF_FORMAT_FLAGS);
  if (!(flags & ANIMATION_FLAG)) return plan;
  const uint64_t frames = WebPDemuxGetI(demux.get(), WEBP_FF_FRAME_COUNT);
  if (frames > max_frames)
    fail(ErrorCode::kResourceExhausted, "WebP: " + std::to_string(frames) + " frames, more than " +
                                            std::to_string(max_frames) + ", the limit of planes a file may have (--max-planes)");
  plan.width = WebPDemuxGetI(demux.get(), WEBP_FF_CANVAS_WIDTH);
  plan.height = WebPDemuxGetI(demux.get(), WEBP_FF_CANVAS_HEIGHT);
  plan.alpha = (flags & ALPHA_FLAG) != 0;
  WebPIterator it;
  if (WebPDemuxGetFrame(demux.get(), 1, &it)) {
    do plan.delays_ms.push_back(static_cast<uint32_t>(std::max(0, it.duration)));
    while (WebPDemuxNextFrame(&it));
    WebPDemuxReleaseIterator(&it);
  }
  // libwebp's canvas, its previous canvas and a frame's pixels, and the
  // plane without alpha we make of them.
  plan.memory_bytes = 4 * uint64_t{plan.width} * plan.height * 4;
  return plan;
}

void decode_webp_animation(const uint8_t* d, size_t n, const Layout& shape, uint64_t first, uint64_t last,
                           const std::function<bool()>& cancelled, const RowSink& sink) {
  AnimDecoder dec = open_animation(d, n, MODE_RGBA);
  if (!dec) invalid_data("WebP: libwebp's animation decoder refused the file (corrupt or truncated data)");
  WebPAnimInfo info;
  if (!WebPAnimDecoderGetInfo(dec.get(), &info) || info.canvas_width != shape.width || info.canvas_height != shape.height)
    invalid_data("WebP: the animation is not as planned");
  const uint64_t pixels = uint64_t{shape.width} * shape.height;
  std::vector<uint8_t> rgb((shape.channels == 4) ? 0 : pixels * 3);
  RowBand band;
  for (uint64_t k = 0; k <= last; ++k) {
    if (cancelled && cancelled()) fail(ErrorCode::kCancelled, "cancelled while decoding");
    uint8_t* frame = nullptr;
    int timestamp = 0;
    if (!WebPAnimDecoderHasMoreFrames(dec.get()) || !WebPAnimDecoderGetNext(dec.get(), &frame, &timestamp))
      invalid_data("WebP: could not decode frame " + std::to_string(k) + " (corrupt or truncated data)");
    if (k < first) continue;
    const uint8_t* plane = frame;
    if (!(shape.channels == 4)) {
      for (uint64_t i = 0; i < pixels; ++i) rgb[i * 3] = frame[i * 4], rgb[i * 3 + 1] = frame[i * 4 + 1], rgb[i * 3 + 2] = frame[i * 4 + 2];
      plane = rgb.data();
    }
    band = send_plane(sink, band, plane, shape.width, shape.height, (shape.channels == 4) ? 4 : 3, SampleType::kUint8, k - first, "WebP");
  }
}

// A WebP file of one frame that OpenCV 4.6 refuses (some extended files):
// that frame on its canvas.
cv::Mat decode_webp_frames(const uint8_t* d, size_t n, std::vector<std::string>* warnings) {
  WebPBitstreamFeatures features;
  if (WebPGetFeatures(d, n, &features) != VP8_STATUS_OK) return {};
  AnimDecoder dec = open_animation(d, n, MODE_BGRA);
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
