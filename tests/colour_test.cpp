// Colour spaces and joint histograms on the CPU engine: every uint8 colour
// converts as OpenCV's cvtColor does, the statistics of a converted image
// are those of OpenCV's converted pixels, and joint histograms count as a
// plain loop over the pixels does.
#include <gtest/gtest.h>
#include <opencv2/imgproc.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "common/colour.hpp"
#include "imgstat/engine.hpp"

namespace imgstat {
namespace {

struct Space {
  ColourSpace space;
  int code;
  int channels;
};

const Space kSpaces[] = {{ColourSpace::kHsv, cv::COLOR_RGB2HSV, 3},     {ColourSpace::kHsvFull, cv::COLOR_RGB2HSV_FULL, 3},
                         {ColourSpace::kHls, cv::COLOR_RGB2HLS, 3},     {ColourSpace::kLab, cv::COLOR_RGB2Lab, 3},
                         {ColourSpace::kYCrCb, cv::COLOR_RGB2YCrCb, 3}, {ColourSpace::kGray, cv::COLOR_RGB2GRAY, 1}};

// All 2^24 RGB colours as one 4096 x 4096 image.
cv::Mat every_colour() {
  cv::Mat img(4096, 4096, CV_8UC3);
  for (int i = 0; i < 1 << 24; ++i) {
    uint8_t* p = img.data + 3 * static_cast<size_t>(i);
    p[0] = static_cast<uint8_t>(i);
    p[1] = static_cast<uint8_t>(i >> 8);
    p[2] = static_cast<uint8_t>(i >> 16);
  }
  return img;
}

TEST(Colour, EveryUint8ColourConvertsAsOpenCv) {
  const cv::Mat img = every_colour();
  const uint32_t rgb[3] = {0, 1, 2};
  for (const Space& s : kSpaces) {
    cv::Mat want;
    cv::cvtColor(img, want, s.code);
    std::vector<uint8_t> got(size_t{1} << 24 << 2);
    convert_pixels(s.space, SampleType::kUint8, img.data, uint64_t{1} << 24, 3, rgb, got.data());
    uint64_t differ = 0;
    for (size_t i = 0; i < (size_t{1} << 24) * s.channels; ++i) differ += got[i] != want.data[i];
    EXPECT_EQ(differ, 0u) << to_string(s.space);
  }
}

// OpenCV converts HLS in vectors of pixels and the last pixels of a row
// that fill no vector in scalar code, which rounds differently: rows here
// are whole vectors, and imgstat gives the vector code's answer for every
// pixel.
TEST(Colour, BgrOrderAndAlphaAreHonoured) {
  std::mt19937 rng(7);
  cv::Mat rgba(37, 64, CV_8UC4);
  for (size_t i = 0; i < rgba.total() * 4; ++i) rgba.data[i] = static_cast<uint8_t>(rng());
  cv::Mat bgra;
  cv::cvtColor(rgba, bgra, cv::COLOR_RGBA2BGRA);
  const uint32_t bgr[3] = {2, 1, 0};
  for (const Space& s : kSpaces) {
    cv::Mat rgb, want;
    cv::cvtColor(rgba, rgb, cv::COLOR_RGBA2RGB);
    cv::cvtColor(rgb, want, s.code);
    std::vector<uint8_t> got(rgba.total() * (s.channels + 1));
    convert_pixels(s.space, SampleType::kUint8, bgra.data, rgba.total(), 4, bgr, got.data());
    for (size_t i = 0; i < rgba.total(); ++i) {
      for (int c = 0; c < s.channels; ++c)
        ASSERT_EQ(got[i * (s.channels + 1) + c], want.data[i * s.channels + c]) << to_string(s.space) << " pixel " << i;
      ASSERT_EQ(got[i * (s.channels + 1) + s.channels], rgba.data[i * 4 + 3]) << "alpha, pixel " << i;
    }
  }
}

TEST(Colour, Float32FollowsOpenCvsFormulas) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  cv::Mat img(61, 67, CV_32FC3);
  auto* f = img.ptr<float>();
  for (size_t i = 0; i < img.total() * 3; ++i) f[i] = unit(rng);
  f[0] = f[1] = f[2] = 0.25f;  // gray: hue and saturation 0
  const uint32_t rgb[3] = {0, 1, 2};
  for (const Space& s : kSpaces) {
    cv::Mat want;
    cv::cvtColor(img, want, s.code);
    std::vector<float> got(img.total() * 3);
    convert_pixels(s.space, SampleType::kFloat32, img.data, img.total(), 3, rgb, reinterpret_cast<uint8_t*>(got.data()));
    const float* w = want.ptr<float>();
    const double tolerance = 1e-5;
    double worst = 0;
    for (size_t i = 0; i < img.total() * s.channels; ++i) {
      const bool hue = (s.space == ColourSpace::kHsv || s.space == ColourSpace::kHsvFull || s.space == ColourSpace::kHls) &&
                       i % 3 == 0;
      const double scale = s.space == ColourSpace::kLab ? (i % 3 == 0 ? 100.0 : 256.0) : hue ? 360.0 : 1.0;
      worst = std::max(worst, std::abs(static_cast<double>(got[i]) - w[i]) / scale);
    }
    EXPECT_LE(worst, tolerance) << to_string(s.space);
  }
}

// Float Lab is OpenCV's 33^3 table interpolated; at the grid points the
// answer is the table entry itself, so every entry is checked here, the
// near-ties OpenCV's software float rounds its own way included.
TEST(Colour, FloatLabTableIsOpenCvs) {
  cv::Mat grid(33 * 33 * 33, 1, CV_32FC3);
  auto* f = grid.ptr<float>();
  for (int i = 0; i < 33 * 33 * 33; ++i) {
    f[i * 3] = static_cast<float>(i % 33) / 32.0f;
    f[i * 3 + 1] = static_cast<float>(i / 33 % 33) / 32.0f;
    f[i * 3 + 2] = static_cast<float>(i / 1089) / 32.0f;
  }
  cv::Mat want;
  cv::cvtColor(grid, want, cv::COLOR_RGB2Lab);
  const uint32_t rgb[3] = {0, 1, 2};
  std::vector<float> got(grid.total() * 3);
  convert_pixels(ColourSpace::kLab, SampleType::kFloat32, grid.data, grid.total(), 3, rgb,
                 reinterpret_cast<uint8_t*>(got.data()));
  const float* w = want.ptr<float>();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], w[i]) << "grid point " << i / 3 << ", channel " << i % 3;
}

Result analyze(const cv::Mat& m, const StatsRequest& r) {
  const SampleType type = m.depth() == CV_8U    ? SampleType::kUint8
                          : m.depth() == CV_16U ? SampleType::kUint16
                                                : SampleType::kFloat32;
  const Layout layout{static_cast<uint64_t>(m.cols), static_cast<uint64_t>(m.rows), static_cast<uint32_t>(m.channels()),
                      type, m.step[0]};
  return make_cpu_engine(2)->analyze(ImageView{m.data, layout}, r);
}

// The statistics of an image in a colour space are those of OpenCV's
// converted image, histograms over each channel's range.
TEST(Colour, StatisticsAreThoseOfTheConvertedPixels) {
  std::mt19937 rng(3);
  cv::Mat img(601, 997, CV_8UC3);  // rows padded by the ROI below, whole vectors (see above)
  for (size_t i = 0; i < img.total() * 3; ++i) img.data[i] = static_cast<uint8_t>(rng() % 200 + (i % 7) * 8);
  const cv::Mat view = img(cv::Rect(3, 1, 960, 599));
  StatsRequest request;
  request.distribution = request.shape = request.positions = request.merge_state = true;
  for (const Space& s : kSpaces) {
    cv::Mat want;
    cv::cvtColor(view, want, s.code);
    StatsRequest plain = request;
    plain.colour_space = ColourSpace::kNone;
    request.colour_space = s.space;
    const Result got = analyze(view, request);
    ASSERT_EQ(got.channels.size(), static_cast<size_t>(s.channels));
    for (int c = 0; c < s.channels; ++c) {
      plain.hist.explicit_range = true;
      colour_channel_range(s.space, c, SampleType::kUint8, &plain.hist.lo, &plain.hist.hi);
      const ChannelStats w = analyze(want, plain).channels[c];
      const ChannelStats& g = got.channels[c];
      EXPECT_EQ(g.count, w.count);
      EXPECT_EQ(g.sum_int, w.sum_int) << to_string(s.space) << " channel " << c;
      EXPECT_EQ(g.min, w.min);
      EXPECT_EQ(g.max, w.max);
      EXPECT_EQ(g.stddev, w.stddev);
      EXPECT_EQ(g.histogram.counts, w.histogram.counts);
      EXPECT_EQ(g.histogram.lo, w.histogram.lo);
      EXPECT_EQ(g.histogram.hi, w.histogram.hi);
      EXPECT_EQ(g.value_counts, w.value_counts);
      EXPECT_EQ(g.median, w.median);
      EXPECT_EQ(g.min_at, w.min_at);
      EXPECT_EQ(g.max_at, w.max_at);
    }
  }
}

// The luminance (--stats luminance) stays that of the pixels as they are,
// whatever space and joint histogram the channels are measured in.
TEST(Colour, LuminanceIsOfThePixelsAsTheyAre) {
  std::mt19937 rng(13);
  for (int depth : {CV_8U, CV_32F}) {
    cv::Mat img(97, 131, CV_MAKETYPE(depth, 3));
    for (int y = 0; y < img.rows; ++y)
      for (int x = 0; x < img.cols * 3; ++x) {
        const uint32_t v = rng() % 256;
        if (depth == CV_8U)
          img.ptr<uint8_t>(y)[x] = static_cast<uint8_t>(v);
        else
          img.ptr<float>(y)[x] = static_cast<float>(v) / 255.0f;
      }
    StatsRequest plain;
    plain.luminance = plain.distribution = true;
    const Result want = analyze(img, plain);
    ASSERT_TRUE(want.has_luminance);
    StatsRequest r = plain;
    r.colour_space = ColourSpace::kLab;
    r.joint.axes = 2;
    r.joint.channels[0] = 1;
    r.joint.channels[1] = 2;
    r.joint.bins[0] = r.joint.bins[1] = 8;
    const Result got = analyze(img, r);
    ASSERT_TRUE(got.has_luminance);
    EXPECT_EQ(got.luminance.histogram.counts, want.luminance.histogram.counts);
    EXPECT_EQ(got.luminance.sum, want.luminance.sum);
    EXPECT_EQ(got.luminance.median, want.luminance.median);
    EXPECT_TRUE(got.has_joint);
    EXPECT_NE(got.channels[0].sum, want.channels[0].sum);  // the channels are Lab's
  }
}

TEST(Colour, HueHistogramDefaultsToItsRange) {
  cv::Mat img(1, 3, CV_8UC3);
  const uint8_t px[] = {255, 0, 0, 0, 255, 0, 0, 0, 255};  // red, green, blue: hue 0, 60, 120
  std::memcpy(img.data, px, sizeof px);
  StatsRequest r;
  r.hist.bins = 180;
  r.colour_space = ColourSpace::kHsv;
  const Result got = analyze(img, r);
  EXPECT_EQ(got.channels[0].histogram.lo, 0);
  EXPECT_EQ(got.channels[0].histogram.hi, 180);
  EXPECT_EQ(got.channels[0].histogram.counts[0], 1u);
  EXPECT_EQ(got.channels[0].histogram.counts[60], 1u);
  EXPECT_EQ(got.channels[0].histogram.counts[120], 1u);
}

// A plain loop: bin = floor((v - lo) * bins / (hi - lo)), outside apart.
std::vector<uint64_t> joint_by_loop(const cv::Mat& m, const JointSpec& j, uint64_t* outside) {
  std::vector<uint64_t> counts(j.total_bins(), 0);
  *outside = 0;
  for (int y = 0; y < m.rows; ++y)
    for (int x = 0; x < m.cols; ++x) {
      uint64_t flat = 0;
      bool in = true;
      for (uint32_t a = 0; a < j.axes; ++a) {
        const double v = m.depth() == CV_8U ? m.ptr<uint8_t>(y)[x * m.channels() + j.channels[a]]
                                            : m.ptr<float>(y)[x * m.channels() + j.channels[a]];
        if (!(v >= j.lo[a] && v < j.hi[a])) {
          in = false;
          break;
        }
        const uint64_t bin = std::min<uint64_t>(j.bins[a] - 1, static_cast<uint64_t>(std::floor((v - j.lo[a]) / (j.hi[a] - j.lo[a]) * j.bins[a])));
        flat = flat * j.bins[a] + bin;
      }
      if (in)
        ++counts[flat];
      else
        ++*outside;
    }
  return counts;
}

TEST(Joint, CountsAsALoopDoes) {
  std::mt19937 rng(5);
  cv::Mat img(211, 307, CV_8UC4);
  for (size_t i = 0; i < img.total() * 4; ++i) img.data[i] = static_cast<uint8_t>(rng());
  StatsRequest r;
  r.joint.axes = 3;
  r.joint.channels[0] = 2;
  r.joint.channels[1] = 0;
  r.joint.channels[2] = 3;
  r.joint.bins[0] = 7;
  r.joint.bins[1] = 13;
  r.joint.bins[2] = 32;
  const Result got = analyze(img, r);
  ASSERT_TRUE(got.has_joint);
  JointSpec j = r.joint;
  for (uint32_t a = 0; a < 3; ++a) {
    j.lo[a] = 0;
    j.hi[a] = 256;
  }
  uint64_t outside = 0;
  EXPECT_EQ(got.joint.counts, joint_by_loop(img, j, &outside));
  EXPECT_EQ(got.joint.outside, 0u);
  // Explicit ranges leave values out on both sides.
  r.joint.axes = 2;
  r.joint.explicit_range = true;
  r.joint.lo[0] = 40;
  r.joint.hi[0] = 200.5;
  r.joint.lo[1] = -3;
  r.joint.hi[1] = 100;
  const Result ranged = analyze(img, r);
  j = r.joint;
  const std::vector<uint64_t> want = joint_by_loop(img, j, &outside);
  EXPECT_EQ(ranged.joint.counts, want);
  EXPECT_EQ(ranged.joint.outside, outside);
  EXPECT_GT(outside, 0u);
}

TEST(Joint, LargeHistogramsAndFloatsAndColourSpaces) {
  std::mt19937 rng(9);
  cv::Mat img(173, 129, CV_8UC3);
  for (size_t i = 0; i < img.total() * 3; ++i) img.data[i] = static_cast<uint8_t>(rng());
  StatsRequest r;
  r.joint.axes = 3;
  for (uint32_t a = 0; a < 3; ++a) {
    r.joint.channels[a] = a;
    r.joint.bins[a] = 256;  // 2^24 bins: one shared table
  }
  const Result big = analyze(img, r);
  uint64_t outside = 0;
  JointSpec j = r.joint;
  for (uint32_t a = 0; a < 3; ++a) j.hi[a] = 256;
  EXPECT_EQ(big.joint.counts, joint_by_loop(img, j, &outside));
  // In HSV, over each channel's range.
  r.colour_space = ColourSpace::kHsv;
  r.joint.axes = 2;
  r.joint.bins[0] = 30;
  r.joint.bins[1] = 32;
  const Result hs = analyze(img, r);
  cv::Mat hsv;
  cv::cvtColor(img, hsv, cv::COLOR_RGB2HSV);
  j = r.joint;
  j.lo[0] = j.lo[1] = 0;
  j.hi[0] = 180;
  j.hi[1] = 256;
  EXPECT_EQ(hs.joint.counts, joint_by_loop(hsv, j, &outside));
  // Float samples with NaN, explicit ranges.
  cv::Mat f(31, 29, CV_32FC3);
  std::uniform_real_distribution<float> u(-0.5f, 1.5f);
  for (size_t i = 0; i < f.total() * 3; ++i) f.ptr<float>()[i] = u(rng);
  f.ptr<float>()[4] = std::nanf("");
  StatsRequest fr;
  fr.joint.axes = 2;
  fr.joint.channels[0] = 1;
  fr.joint.channels[1] = 2;
  fr.joint.bins[0] = fr.joint.bins[1] = 9;
  fr.joint.explicit_range = true;
  fr.joint.lo[0] = fr.joint.lo[1] = 0;
  fr.joint.hi[0] = fr.joint.hi[1] = 1;
  const Result fj = analyze(f, fr);
  EXPECT_EQ(fj.joint.counts, joint_by_loop(f, fr.joint, &outside));
  EXPECT_EQ(fj.joint.outside, outside);
  // int8 samples, ranges below zero.
  cv::Mat s8(37, 41, CV_8SC2);
  for (size_t i = 0; i < s8.total() * 2; ++i) s8.data[i] = static_cast<uint8_t>(rng());
  StatsRequest sr;
  sr.joint.axes = 2;
  sr.joint.channels[1] = 1;
  sr.joint.bins[0] = sr.joint.bins[1] = 64;
  sr.joint.explicit_range = true;
  sr.joint.lo[0] = -40.5;
  sr.joint.hi[0] = 100;
  sr.joint.lo[1] = -30.5;
  sr.joint.hi[1] = 130;
  const Layout l8{41, 37, 2, SampleType::kInt8, s8.step[0]};
  const Result sj = make_cpu_engine(2)->analyze(ImageView{s8.data, l8}, sr);
  std::vector<uint64_t> want(64 * 64, 0);
  uint64_t out8 = 0;
  for (int y = 0; y < s8.rows; ++y)
    for (int x = 0; x < s8.cols; ++x) {
      const double a = s8.ptr<int8_t>(y)[2 * x], b = s8.ptr<int8_t>(y)[2 * x + 1];
      if (a < -40.5 || a >= 100 || b < -30.5 || b >= 130) {
        ++out8;
        continue;
      }
      ++want[static_cast<size_t>(std::floor((a + 40.5) / 140.5 * 64)) * 64 + static_cast<size_t>(std::floor((b + 30.5) / 160.5 * 64))];
    }
  EXPECT_EQ(sj.joint.counts, want);
  EXPECT_EQ(sj.joint.outside, out8);
}

TEST(Joint, BadRequestsAreRefusedWithTheReason) {
  cv::Mat img(8, 8, CV_8UC3, cv::Scalar(1, 2, 3));
  auto refused = [&](const StatsRequest& r, const std::string& words, const cv::Mat& m) {
    try {
      analyze(m, r);
      ADD_FAILURE() << "accepted; wanted an error with \"" << words << "\"";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  StatsRequest r;
  r.joint.axes = 3;
  r.joint.channels[1] = 1;
  r.joint.channels[2] = 2;
  r.joint.bins[0] = 256;
  r.joint.bins[1] = 256;
  r.joint.bins[2] = 257;  // 2^24 + 65536
  refused(r, "256x256x257 bins", img);
  r.joint.bins[2] = 0;
  refused(r, "at least 1", img);
  r.joint.bins[2] = 4;
  r.joint.channels[2] = 3;
  refused(r, "channel 3 is past the 3 channels", img);
  StatsRequest c;
  c.colour_space = ColourSpace::kLab;
  refused(c, "needs an RGB or RGBA image", cv::Mat(4, 4, CV_8UC1, cv::Scalar(9)));
  refused(c, "uint8 and float32", cv::Mat(4, 4, CV_16UC3, cv::Scalar(9)));
  StatsRequest f;
  f.joint.axes = 2;
  f.joint.channels[1] = 1;
  f.joint.bins[0] = f.joint.bins[1] = 4;
  refused(f, "needs its ranges", cv::Mat(4, 4, CV_32FC3, cv::Scalar(0.5)));
}

TEST(Colour, PartsAreMeasuredInTheSpace) {
  std::mt19937 rng(13);
  cv::Mat img(64, 96, CV_8UC3);
  for (size_t i = 0; i < img.total() * 3; ++i) img.data[i] = static_cast<uint8_t>(rng());
  cv::Mat lab;
  cv::cvtColor(img, lab, cv::COLOR_RGB2Lab);
  Parts parts;
  parts.kind = PartsKind::kTiles;
  parts.columns = 3;
  parts.rows = 2;
  StatsRequest r;
  r.colour_space = ColourSpace::kLab;
  r.joint.axes = 2;
  r.joint.channels[0] = 1;
  r.joint.channels[1] = 2;
  r.joint.bins[0] = r.joint.bins[1] = 16;
  const Layout layout{96, 64, 3, SampleType::kUint8, 0};
  const Result got = make_cpu_engine(2)->analyze_parts(ImageView{img.data, layout}, parts, r);
  ASSERT_EQ(got.parts.size(), 6u);
  for (const PartStats& p : got.parts) {
    const cv::Mat tile = lab(cv::Rect(static_cast<int>(p.roi.x), static_cast<int>(p.roi.y), static_cast<int>(p.roi.width),
                                      static_cast<int>(p.roi.height)));
    StatsRequest plain;
    plain.joint = r.joint;
    const Result want = analyze(tile, plain);
    for (int c = 0; c < 3; ++c) EXPECT_EQ(p.channels[c].sum_int, want.channels[c].sum_int);
    ASSERT_TRUE(p.has_joint);
    EXPECT_EQ(p.joint.counts, want.joint.counts);
  }
  // Joint histograms of many parts are counted whole: refused past 256 MiB
  // before anything is counted.
  {
    Parts many;
    many.kind = PartsKind::kTiles;
    many.columns = 96;
    many.rows = 64;  // 6,144 tiles of one pixel
    StatsRequest big;
    big.joint.axes = 3;
    big.joint.bins[0] = big.joint.bins[1] = big.joint.bins[2] = 32;
    big.joint.channels[1] = 1;
    big.joint.channels[2] = 2;
    try {
      make_cpu_engine(2)->analyze_parts(ImageView{img.data, layout}, many, big);
      ADD_FAILURE() << "6,144 joint histograms of 32768 bins (1.5 GiB) were counted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted);
      EXPECT_NE(std::string(e.what()).find("32768 bins for 6144 parts"), std::string::npos) << e.what();
    }
  }
  // Labels: each label's mean Lab colour.
  std::vector<uint8_t> labels(96 * 64);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<uint8_t>((i % 96) / 32 + 3 * ((i / 96) / 32));
  Parts by_label;
  by_label.kind = PartsKind::kLabels;
  by_label.map = PartMapView{labels.data(), 96, 64, 1, 0, MapType::kUint8, 0};
  const Result per_label = make_cpu_engine(2)->analyze_parts(ImageView{img.data, layout}, by_label, r);
  ASSERT_EQ(per_label.parts.size(), 6u);
  for (size_t k = 0; k < 6; ++k) {
    EXPECT_EQ(per_label.parts[k].channels[0].sum_int, got.parts[k].channels[0].sum_int) << "label " << k;
    EXPECT_EQ(per_label.parts[k].joint.counts, got.parts[k].joint.counts) << "label " << k;
  }
}

}  // namespace
}  // namespace imgstat
