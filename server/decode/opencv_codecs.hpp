// OpenCV's image codecs (imgcodecs), loaded the first time a file needs them.
// Linked directly they bring some 140 shared libraries (GDAL, GDCM, OpenEXR,
// HEIF...) into every process at start: 0.15 s and 40 MiB before the first
// byte, for a CLI that streams JPEG and PNG without them. The module
// libimgstat-opencv-codecs.so is looked for beside the program: in
// ../lib/imgstat (installed), then ../lib (the build tree, the container and
// the bundles), then as the loader finds any library (LD_LIBRARY_PATH);
// IMGSTAT_OPENCV_CODECS names another path.
#pragma once

#include <opencv2/core.hpp>

#include <string>

#include "imgstat/error.hpp"

namespace imgstat::opencv_codecs {

inline constexpr const char* kModuleName = "libimgstat-opencv-codecs.so";

// cv::imdecode and cv::imwrite, through the module; they throw cv::Exception
// as OpenCV does. A module that cannot be loaded throws imgstat::Error
// (kInternal) naming the loader's reason.
cv::Mat imdecode(const cv::Mat& buf, int flags);
bool imwrite(const std::string& path, const cv::Mat& img);

// True once the module is in the process: the streamed decoders never load it.
bool loaded();

}  // namespace imgstat::opencv_codecs
