// Animated or extended WebP, which OpenCV 4.6 refuses, through libwebp's demuxer.
#include <webp/decode.h>
#include <webp/demux.h>

#include <memory>

#include "decode/decode.hpp"

namespace imgstat {

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
