// A file's answer from imgstat's decoders and from OpenCV's imdecode, side by
// side: the verdict, the error's code and words, what the libraries printed,
// and the pixels as planes in the reported order (R, G, B, A or Gray), so
// that a decoder test compares the two plane by plane.
#pragma once

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "decode/decode.hpp"
#include "decode/library_messages.hpp"

namespace imgstat::testing {

struct DecoderAnswer {
  bool ok = false;
  ErrorCode code = ErrorCode::kInternal;
  std::string decoder;
  std::vector<cv::Mat> planes;        // reported order: R,G,B,A or Gray
  std::vector<std::string> warnings;  // ours: the answer's; OpenCV's: what its libraries printed
  std::string error;
};

// A file of several planes: its first (OpenCV reads one), unless options choose.
inline DecoderAnswer imgstat_answer(const std::string& f, DecodeOptions options = {}) {
  DecoderAnswer a;
  if (options.plane_count == 0) options.plane_count = 1;
  try {
    const DecodedImage d = decode_image(reinterpret_cast<const uint8_t*>(f.data()), f.size(), options);
    a.ok = true;
    a.decoder = d.decoder;
    a.warnings = d.warnings;
    for (uint32_t c : d.channel_order) {
      cv::Mat plane;
      cv::extractChannel(d.pixels, plane, static_cast<int>(c));
      a.planes.push_back(plane);
    }
  } catch (const Error& e) {
    a.code = e.code();
    a.error = e.what();
  }
  return a;
}

// OpenCV's imdecode(IMREAD_UNCHANGED), with what its libraries printed meanwhile.
inline DecoderAnswer opencv_answer(const std::string& f) {
  DecoderAnswer a;
  LibraryMessages said;
  cv::Mat m;
  try {
    m = cv::imdecode(cv::Mat(1, static_cast<int>(f.size()), CV_8U, const_cast<char*>(f.data())), cv::IMREAD_UNCHANGED);
  } catch (const cv::Exception&) {
  }
  a.warnings = said.lines();
  if (m.empty()) return a;
  a.ok = true;
  for (int i = 0; i < m.channels(); ++i) {
    cv::Mat plane;
    cv::extractChannel(m, plane, m.channels() >= 3 && i < 3 ? 2 - i : i);  // BGR(A) -> R,G,B(,A)
    a.planes.push_back(plane);
  }
  return a;
}

// Byte for byte, so that NaN equals NaN.
inline bool same_samples(const cv::Mat& a, const cv::Mat& b) {
  if (a.size() != b.size() || a.type() != b.type()) return false;
  for (int y = 0; y < a.rows; ++y)
    if (std::memcmp(a.ptr(y), b.ptr(y), a.cols * a.elemSize()) != 0) return false;
  return true;
}

// Empty when both have the same planes; else which differ.
inline std::string plane_difference(const DecoderAnswer& a, const DecoderAnswer& b) {
  if (a.planes.size() != b.planes.size())
    return "channels " + std::to_string(a.planes.size()) + " vs " + std::to_string(b.planes.size());
  for (size_t c = 0; c < a.planes.size(); ++c)
    if (!same_samples(a.planes[c], b.planes[c])) return "channel " + std::to_string(c) + ": samples differ";
  return {};
}

// Library lines outside a LibraryMessages scope go nowhere (once a process).
inline void quiet_library_messages() {
  static bool done = false;
  if (!done) catch_library_messages([](const std::string&) {});
  done = true;
}

}  // namespace imgstat::testing
