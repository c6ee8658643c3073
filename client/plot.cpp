#include "plot.hpp"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "decode/opencv_codecs.hpp"

namespace imgstat::client {
namespace {

constexpr int kWidth = 960;
constexpr int kPanel = 240;  // height of one channel's panel
constexpr int kLeft = 90, kRight = 30, kTop = 50, kBottom = 40;

cv::Scalar colour_of(const std::string& name) {  // BGR
  if (name == "R") return {40, 40, 210};
  if (name == "G") return {40, 160, 40};
  if (name == "B") return {200, 90, 30};
  if (name == "A") return {150, 150, 150};
  return {70, 70, 70};
}

std::string label(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

void text(cv::Mat& img, const std::string& s, cv::Point at, double scale = 0.45, cv::Scalar colour = {40, 40, 40}) {
  cv::putText(img, s, at, cv::FONT_HERSHEY_SIMPLEX, scale, colour, 1, cv::LINE_AA);
}

// One panel: bars over the occupied bins, x labelled in sample values, y in counts.
void draw_panel(cv::Mat& img, int top, const v1::ChannelStats& c) {
  const v1::Histogram& h = c.histogram();
  const int bins = h.counts_size();
  int first = 0, last = bins - 1;
  while (first < bins && h.counts(first) == 0) ++first;
  while (last > first && h.counts(last) == 0) --last;
  const int plot_w = kWidth - kLeft - kRight, plot_h = kPanel - kTop - kBottom;
  const cv::Point origin(kLeft, top + kPanel - kBottom);
  text(img, c.name() + "  (" + std::to_string(c.count()) + " samples)", {kLeft, top + 30}, 0.6, colour_of(c.name()));
  cv::line(img, origin, {origin.x + plot_w, origin.y}, {0, 0, 0});
  cv::line(img, origin, {origin.x, origin.y - plot_h}, {0, 0, 0});
  if (first >= bins) {
    text(img, "no finite samples", {kLeft + 10, origin.y - plot_h / 2});
    return;
  }
  const int span = last - first + 1;
  // A pixel column shows the mean count of the bins it covers, so that
  // folding unequal numbers of bins draws no sawtooth.
  const int columns = std::min(span, plot_w);
  std::vector<double> sum(columns, 0), n(columns, 0);
  for (int b = 0; b < span; ++b) {
    const int col = static_cast<int>(static_cast<int64_t>(b) * columns / span);
    sum[col] += static_cast<double>(h.counts(first + b));
    n[col] += 1;
  }
  double top_count = 0;
  for (int k = 0; k < columns; ++k) top_count = std::max(top_count, sum[k] / n[k]);
  for (int k = 0; k < columns; ++k) {
    const int x0 = origin.x + 1 + k * plot_w / columns, x1 = origin.x + 1 + (k + 1) * plot_w / columns;
    const int bar = static_cast<int>(std::lround(sum[k] / n[k] / top_count * plot_h));
    if (bar > 0) cv::rectangle(img, cv::Point(x0, origin.y - bar), cv::Point(std::max(x0, x1 - 1), origin.y - 1), colour_of(c.name()), cv::FILLED);
  }
  // x: the value range drawn, at five ticks; y: 0 and the tallest column.
  const double step = (h.hi() - h.lo()) / bins;
  const double lo = h.lo() + step * first, hi = h.lo() + step * (last + 1);
  for (int t = 0; t <= 4; ++t) {
    const int x = origin.x + t * plot_w / 4;
    cv::line(img, {x, origin.y}, {x, origin.y + 5}, {0, 0, 0});
    const std::string v = label(lo + (hi - lo) * t / 4);
    text(img, v, {x - 4 * static_cast<int>(v.size()), origin.y + 20});
  }
  text(img, "value", {origin.x + plot_w - 40, origin.y + 36}, 0.4, {110, 110, 110});
  cv::line(img, {origin.x - 5, origin.y - plot_h}, {origin.x, origin.y - plot_h}, {0, 0, 0});
  text(img, label(top_count), {8, origin.y - plot_h + 5});
  text(img, "0", {kLeft - 18, origin.y + 5});
  text(img, "count", {8, origin.y - plot_h / 2}, 0.4, {110, 110, 110});
  text(img, std::to_string(span) + " of " + std::to_string(bins) + " bins", {kWidth - kRight - 150, top + 30}, 0.4,
       {110, 110, 110});
}

constexpr int kJointPanel = 600, kJointSide = 480;

// A joint histogram as an image: the first channel down, the second across
// (a third summed over), log-scaled counts through a colour map.
void draw_joint(cv::Mat& img, int top, const v1::JointHistogram& h) {
  const int rows = static_cast<int>(h.bins(0)), cols = static_cast<int>(h.bins(1));
  const uint64_t depth = h.bins_size() > 2 ? h.bins(2) : 1;
  std::vector<double> cell(static_cast<size_t>(rows) * cols, 0);
  auto add = [&](uint64_t flat, uint64_t count) { cell[flat / depth] += static_cast<double>(count); };
  for (int i = 0; i < h.counts_size(); ++i) add(static_cast<uint64_t>(i), h.counts(i));
  for (int i = 0; i < h.nonzero_index_size(); ++i) add(h.nonzero_index(i), h.nonzero_count(i));
  const double most = std::max(1.0, *std::max_element(cell.begin(), cell.end()));
  cv::Mat grey(rows, cols, CV_8UC1);
  for (int y = 0; y < rows; ++y)
    for (int x = 0; x < cols; ++x)
      grey.at<uint8_t>(y, x) = static_cast<uint8_t>(std::lround(255 * std::log1p(cell[y * cols + x]) / std::log1p(most)));
  cv::Mat coloured, scaled;
  cv::applyColorMap(grey, coloured, cv::COLORMAP_VIRIDIS);
  cv::resize(coloured, scaled, {kJointSide, kJointSide}, 0, 0, cv::INTER_NEAREST);
  const cv::Rect at(kLeft, top + kTop, kJointSide, kJointSide);
  scaled.copyTo(img(at));
  std::string title = "joint histogram " + h.channels(0) + " (down) x " + h.channels(1) + " (across)";
  if (h.bins_size() > 2) title += ", summed over " + h.channels(2);
  text(img, title + ", log counts", {kLeft, top + 30}, 0.6, {0, 0, 0});
  const v1::HistogramRange &ry = h.ranges(0), &rx = h.ranges(1);
  text(img, label(ry.lo()), {8, at.y + 12});
  text(img, label(ry.hi()), {8, at.y + at.height});
  text(img, label(rx.lo()), {at.x, at.y + at.height + 20});
  text(img, label(rx.hi()), {at.x + at.width - 30, at.y + at.height + 20});
}

}  // namespace

bool write_plot(const Outcome& o, const std::string& path, std::string* error) {
  std::vector<const v1::ChannelStats*> panels;
  for (const v1::ChannelStats& c : o.response.channels())
    if (c.has_histogram()) panels.push_back(&c);
  if (o.response.has_luminance() && o.response.luminance().has_histogram()) panels.push_back(&o.response.luminance());
  const bool joint = o.response.has_joint() && o.response.joint().bins_size() >= 2;
  if (panels.empty() && !joint) {
    *error = "no histogram to plot (was it left out of --stats?)";
    return false;
  }
  cv::Mat img(static_cast<int>(panels.size()) * kPanel + (joint ? kJointPanel : 0) + 40, kWidth, CV_8UC3,
              cv::Scalar(255, 255, 255));
  const v1::AnalyzeResponse& r = o.response;
  text(img, o.file + ": " + r.format() + " " + std::to_string(r.width()) + "x" + std::to_string(r.height()), {10, 26},
       0.6, {0, 0, 0});
  for (size_t i = 0; i < panels.size(); ++i) draw_panel(img, 40 + static_cast<int>(i) * kPanel, *panels[i]);
  if (joint) draw_joint(img, 40 + static_cast<int>(panels.size()) * kPanel, o.response.joint());
  try {
    if (imgstat::opencv_codecs::imwrite(path, img)) return true;
    *error = "cannot write " + path;
  } catch (const cv::Exception& e) {
    *error = "cannot write " + path + ": " + e.err;
  } catch (const imgstat::Error& e) {
    *error = "cannot write " + path + ": " + e.what();
  }
  return false;
}

}  // namespace imgstat::client
