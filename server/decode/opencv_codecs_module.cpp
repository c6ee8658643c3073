// The module behind opencv_codecs.hpp: the only code that links imgcodecs.
#include <opencv2/imgcodecs.hpp>

extern "C" {
__attribute__((visibility("default"))) void imgstat_opencv_imdecode(const cv::Mat& buf, int flags, cv::Mat& out) {
  out = cv::imdecode(buf, flags);
}
__attribute__((visibility("default"))) bool imgstat_opencv_imwrite(const std::string& path, const cv::Mat& img) {
  return cv::imwrite(path, img);
}
}
