// Parts of images (rectangles, masks, labels, tiles) on every engine against
// the reference implementation over the same pixels, gathered here by plain
// loops from the part's own definition; and the CUDA engine against the CPU
// engine bit for bit where a GPU is.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <random>
#include <set>

#include "imgstat/engine.hpp"
#include "test_images.hpp"

namespace imgstat::testing {
namespace {

class PartsTest : public ::testing::TestWithParam<std::string> {
 public:
  void SetUp() override {
    cpu_ = make_cpu_engine(2);
    if (GetParam() == "cpu") return;
    if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU here";
    // As a server has it: what the GPU does not compute (float parts) goes to the CPU.
    EngineOptions o;
    o.kind = EngineKind::kCuda;
    try {
      cuda_ = make_engine(o);
    } catch (const Error& e) {
      GTEST_SKIP() << "no CUDA engine here: " << e.what();
    }
  }
  Engine& engine() { return cuda_ ? *cuda_ : *cpu_; }
  // The engine's answer; on the GPU also the CPU engine's, which must be the same.
  Result analyze(const ImageView& img, const Parts& parts, const StatsRequest& request) {
    Result r = engine().analyze_parts(img, parts, request);
    if (cuda_) {
      if (!is_float(img.layout.type)) EXPECT_EQ(r.engine, "cuda") << "integer parts are the GPU's";
      const Result c = cpu_->analyze_parts(img, parts, request);
      EXPECT_EQ(r.parts.size(), c.parts.size());
      expect_same_stats(r, c, img.layout.type);
      for (size_t i = 0; i < std::min(r.parts.size(), c.parts.size()); ++i) {
        SCOPED_TRACE("part " + std::to_string(i));
        EXPECT_EQ(r.parts[i].label, c.parts[i].label);
        Result a, b;
        a.channels = r.parts[i].channels;
        b.channels = c.parts[i].channels;
        expect_same_stats(a, b, img.layout.type);
      }
    }
    return r;
  }
  std::unique_ptr<Engine> cpu_, cuda_;
};

const SampleType kAllTypes[] = {SampleType::kUint8,  SampleType::kUint16,  SampleType::kInt8,
                                SampleType::kInt16,  SampleType::kFloat32, SampleType::kFloat64};

// The pixels of img where in(x, y), packed in row-major order as a 1 x n
// image, and where each came from.
struct Gathered {
  std::vector<uint8_t> pixels;
  std::vector<uint64_t> at;
  ImageView view;
};

Gathered gather(const ImageView& img, const std::function<bool(uint64_t, uint64_t)>& in) {
  Gathered g;
  const Layout& l = img.layout;
  const auto* base = static_cast<const uint8_t*>(img.data);
  for (uint64_t y = 0; y < l.height; ++y)
    for (uint64_t x = 0; x < l.width; ++x)
      if (in(x, y)) {
        const uint8_t* p = base + y * l.stride() + x * l.pixel_bytes();
        g.pixels.insert(g.pixels.end(), p, p + l.pixel_bytes());
        g.at.push_back(y * l.width + x);
      }
  g.view = ImageView{g.pixels.data(), Layout{g.at.size(), 1, l.channels, l.type, 0}};
  return g;
}

// A part's channels against the reference over its gathered pixels.
void expect_part(const std::vector<ChannelStats>& got, const Gathered& g, const StatsRequest& request) {
  if (g.at.empty()) {
    for (const ChannelStats& c : got) EXPECT_EQ(c.count + c.nan_count + c.posinf_count + c.neginf_count, 0u);
    return;
  }
  if (request.histogram) {
    expect_matches_reference(got, g.view, request.hist.bins, request.hist.explicit_range, request.hist.lo,
                             request.hist.hi);
  } else {  // the same checks less the histogram, which was not asked for
    const auto ref = reference_stats(g.view);
    for (size_t c = 0; c < got.size(); ++c) {
      EXPECT_TRUE(got[c].histogram.counts.empty());
      EXPECT_EQ(got[c].count, ref[c].count);
      if (ref[c].count == 0) continue;
      EXPECT_EQ(got[c].min, ref[c].min);
      EXPECT_EQ(got[c].max, ref[c].max);
      if (!is_float(g.view.layout.type)) EXPECT_EQ(static_cast<__int128>(got[c].sum_int), ref[c].sum_int);
      EXPECT_LE(std::abs(got[c].sum - ref[c].sum), 1e-12 * ref[c].sum_abs);
      expect_close(got[c].stddev, ref[c].stddev, 1e-12, "stddev");
    }
  }
  if (request.distribution) {
    std::vector<int> ps;
    for (double p : request.percentiles) ps.push_back(static_cast<int>(p));
    const auto ref = reference_described(g.view, ps);
    const bool flt = is_float(g.view.layout.type);
    for (size_t c = 0; c < got.size(); ++c) {
      if (ref[c].sorted.empty()) continue;
      ASSERT_TRUE(got[c].has_distribution);
      const double bound = flt ? (ref[c].sorted.back() - ref[c].sorted.front()) / 131072 * (1 + 1e-9) + 1e-300 : 0;
      EXPECT_NEAR(got[c].median, ref[c].median, bound);
      for (size_t i = 0; i < ps.size(); ++i) EXPECT_NEAR(got[c].percentiles.at(i).second, ref[c].percentiles[i], bound);
      if (!flt) EXPECT_EQ(got[c].mode, ref[c].mode);
      EXPECT_EQ(got[c].has_shape, ref[c].has_shape);
      if (got[c].has_shape && ref[c].has_shape)
        EXPECT_NEAR(got[c].skewness, ref[c].skewness, (flt ? 1e-7 : 1e-12) * (1 + std::abs(ref[c].skewness)));
    }
  }
  if (request.positions) {
    const auto ref = reference_described(g.view, {});
    for (size_t c = 0; c < got.size(); ++c) {
      if (ref[c].sorted.empty()) continue;
      ASSERT_TRUE(got[c].has_positions);
      EXPECT_EQ(got[c].min_at, g.at[ref[c].min_at]) << "channel " << c;
      EXPECT_EQ(got[c].max_at, g.at[ref[c].max_at]) << "channel " << c;
    }
  }
}

StatsRequest with_positions() {
  StatsRequest r;
  r.positions = true;
  return r;
}

TEST_P(PartsTest, RectanglesEveryTypeChannelsAndStride) {
  std::mt19937_64 rng(11);
  for (SampleType t : kAllTypes)
    for (uint32_t c = 1; c <= 4; ++c)
      for (int variant = 0; variant < 2; ++variant) {
        TestImage img = random_image(rng, 37, 23, c, t, variant ? 5 : 0, variant);
        SCOPED_TRACE(describe(img.view.layout));
        Parts parts;
        parts.kind = PartsKind::kRects;
        parts.rects = {{0, 0, 37, 23}, {0, 0, 1, 1}, {36, 22, 1, 1}, {5, 3, 17, 11}, {10, 0, 3, 23}, {4, 4, 6, 6}};
        const Result r = analyze(img.view, parts, with_positions());
        ASSERT_EQ(r.parts.size(), parts.rects.size());
        for (size_t i = 0; i < parts.rects.size(); ++i) {
          const Rect q = parts.rects[i];
          SCOPED_TRACE("rectangle " + std::to_string(i));
          EXPECT_EQ(r.parts[i].roi.x, q.x);
          EXPECT_EQ(r.parts[i].roi.width, q.width);
          expect_part(r.parts[i].channels, gather(img.view, [&](uint64_t x, uint64_t y) {
                        return x >= q.x && x < q.x + q.width && y >= q.y && y < q.y + q.height;
                      }),
                      with_positions());
        }
        // The whole image as a rectangle is the whole-image answer, exactly.
        Result whole = engine().analyze(img.view, with_positions());
        Result first;
        first.channels = r.parts[0].channels;
        expect_same_stats(first, whole, t);
      }
}

TEST_P(PartsTest, MasksRandomBlockAllAndNone) {
  std::mt19937_64 rng(12);
  for (SampleType t : kAllTypes)
    for (uint32_t c : {1u, 3u, 4u}) {
      TestImage img = random_image(rng, 61, 19, c, t, 3, 0);
      for (int kind = 0; kind < 4; ++kind) {
        // 0: random pixels; 1: a block; 2: every pixel; 3: none.
        std::vector<uint16_t> mask(61 * 19);
        for (uint64_t i = 0; i < mask.size(); ++i) {
          const uint64_t x = i % 61, y = i / 61;
          mask[i] = kind == 0 ? static_cast<uint16_t>(rng() % 2 * (1 + rng() % 60000))
                    : kind == 1 ? (x >= 7 && x < 40 && y >= 2 && y < 15 ? 256 : 0)
                    : kind == 2 ? 1 : 0;
        }
        SCOPED_TRACE(describe(img.view.layout) + " mask kind " + std::to_string(kind));
        Parts parts;
        parts.kind = PartsKind::kMask;
        parts.map = PartMapView{mask.data(), 61, 19, 1, 0, MapType::kUint16, 0};
        StatsRequest request = with_positions();
        request.summary = true;
        const Result r = analyze(img.view, parts, request);
        EXPECT_TRUE(r.parts.empty());
        expect_part(r.channels, gather(img.view, [&](uint64_t x, uint64_t y) { return mask[y * 61 + x] != 0; }), request);
        if (kind == 2) expect_same_stats(r, engine().analyze(img.view, request), t);
        if (kind == 3)
          for (const ChannelStats& s : r.channels) EXPECT_EQ(s.count, 0u);
      }
    }
}

TEST_P(PartsTest, MaskOfTheImagesOwnAlpha) {
  std::mt19937_64 rng(13);
  for (SampleType t : {SampleType::kUint8, SampleType::kUint16, SampleType::kFloat32}) {
    TestImage img = random_image(rng, 33, 17, 4, t, 0, 0);
    // Zero alpha on a third of the pixels.
    const size_t ss = sample_size(t);
    auto* base = const_cast<uint8_t*>(static_cast<const uint8_t*>(img.view.data));
    for (uint64_t i = 0; i < 33 * 17; i += 3) std::memset(base + i * 4 * ss + 3 * ss, 0, ss);
    Parts parts;
    parts.kind = PartsKind::kMask;
    parts.map = PartMapView{img.view.data, 33, 17, 4, 3, map_type_of(t), 0};
    const Result r = analyze(img.view, parts, StatsRequest{});
    expect_part(r.channels, gather(img.view, [&](uint64_t x, uint64_t y) {
                  return sample_at(base + (y * 33 + x) * 4 * ss + 3 * ss, t) != 0;
                }),
                StatsRequest{});
  }
}

template <class L>
std::vector<L> random_labels(std::mt19937_64& rng, size_t n, const std::vector<L>& pool) {
  std::vector<L> out(n);
  for (auto& v : out) v = pool[rng() % pool.size()];
  return out;
}

template <class L>
void check_labels(PartsTest& test, const TestImage& img, const std::vector<L>& labels, MapType type,
                  std::optional<int64_t> ignore, const StatsRequest& request,
                  const std::function<void(Parts&)>& give_index = {}) {
  const Layout& l = img.view.layout;
  Parts parts;
  parts.kind = PartsKind::kLabels;
  parts.map = PartMapView{labels.data(), l.width, l.height, 1, 0, type, 0};
  if (ignore) {
    parts.ignore_label = true;
    parts.ignored_label = *ignore;
  }
  // Each label's pixels, gathered in one pass in row-major order.
  std::map<int64_t, Gathered> present;
  const auto* base = static_cast<const uint8_t*>(img.view.data);
  for (uint64_t y = 0; y < l.height; ++y)
    for (uint64_t x = 0; x < l.width; ++x) {
      const int64_t v = static_cast<int64_t>(labels[y * l.width + x]);
      if (ignore && v == *ignore) continue;
      Gathered& g = present[v];
      const uint8_t* p = base + y * l.stride() + x * l.pixel_bytes();
      g.pixels.insert(g.pixels.end(), p, p + l.pixel_bytes());
      g.at.push_back(y * l.width + x);
    }
  for (auto& [v, g] : present) g.view = ImageView{g.pixels.data(), Layout{g.at.size(), 1, l.channels, l.type, 0}};
  if (give_index) {  // the boxes from the index given are the boxes found without it
    const std::vector<LabelBox> want = label_boxes(l, parts, l.height);
    give_index(parts);
    ASSERT_TRUE(parts.index);
    const std::vector<LabelBox> got = label_boxes(l, parts, l.height);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(std::vector<uint64_t>({static_cast<uint64_t>(got[i].label), got[i].x, got[i].y, got[i].width, got[i].height}),
                std::vector<uint64_t>({static_cast<uint64_t>(want[i].label), want[i].x, want[i].y, want[i].width,
                                       want[i].height}));
  }
  const Result r = test.analyze(img.view, parts, request);
  ASSERT_EQ(r.parts.size(), present.size());
  size_t i = 0;
  for (const auto& [label, g] : present) {
    SCOPED_TRACE("label " + std::to_string(label));
    EXPECT_TRUE(r.parts[i].has_label);
    EXPECT_EQ(r.parts[i].label, label);
    expect_part(r.parts[i].channels, g, request);
    ++i;
  }
}

TEST_P(PartsTest, LabelsOfEveryLabelTypeIgnoredAndNearTheTypesMaximum) {
  std::mt19937_64 rng(14);
  for (SampleType t : kAllTypes)
    for (uint32_t c : {1u, 3u}) {
      TestImage img = random_image(rng, 41, 29, c, t, 2, 1);
      SCOPED_TRACE(describe(img.view.layout));
      const size_t n = 41 * 29;
      StatsRequest plain = with_positions();
      StatsRequest described = everything({0, 50, 100});
      described.summary = described.unique_colors = described.luminance = false;
      check_labels<uint8_t>(*this, img, random_labels<uint8_t>(rng, n, {0, 1, 7, 255}), MapType::kUint8, 0, plain);
      check_labels<uint16_t>(*this, img, random_labels<uint16_t>(rng, n, {0, 3, 65534, 65535}), MapType::kUint16,
                             std::nullopt, described);
      check_labels<uint32_t>(*this, img, random_labels<uint32_t>(rng, n, {0, 5, 70000, 0xFFFFFFFFu}),
                             MapType::kUint32, 5, plain);
      check_labels<int32_t>(*this, img, random_labels<int32_t>(rng, n, {INT32_MIN, -1, 0, INT32_MAX}),
                            MapType::kInt32, std::nullopt, described);
    }
}

// A labels map's index found once (find_labels: the server finds it while
// a JPEG decodes) serves the engine and the boxes; an index of another map,
// of this map with another ignored label or none, or over another size is
// not used: every answer is this map's own, every box too.
TEST_P(PartsTest, LabelsFoundOnceServeTheEngineAndTheBoxesAndNoOtherMap) {
  std::mt19937_64 rng(77);
  const TestImage img = random_image(rng, 97, 61, 3, SampleType::kUint8, 2, 1);
  const Layout& l = img.view.layout;
  const size_t n = 97 * 61;
  const std::vector<uint16_t> labels = random_labels<uint16_t>(rng, n, {0, 3, 500, 65535});
  const std::vector<uint16_t> other = random_labels<uint16_t>(rng, n, {1, 2, 9});
  const std::vector<int32_t> wide = random_labels<int32_t>(rng, n, {INT32_MIN, -1, 0, 7});
  StatsRequest request = everything({0, 50, 100});
  request.summary = request.unique_colors = request.luminance = false;
  auto own = [&](Parts& p) { p.index = find_labels(l, p); };
  check_labels<uint16_t>(*this, img, labels, MapType::kUint16, 3, request, own);
  check_labels<int32_t>(*this, img, wide, MapType::kInt32, std::nullopt, request, own);
  check_labels<uint16_t>(*this, img, labels, MapType::kUint16, 3, request, [&](Parts& p) {
    Parts q = p;
    q.map.data = other.data();
    p.index = find_labels(l, q);
  });
  check_labels<uint16_t>(*this, img, labels, MapType::kUint16, 3, request, [&](Parts& p) {
    Parts q = p;
    q.ignored_label = 500;
    p.index = find_labels(l, q);
  });
  check_labels<uint16_t>(*this, img, labels, MapType::kUint16, std::nullopt, request, [&](Parts& p) {
    Parts q = p;
    q.ignore_label = true;
    q.ignored_label = 0;
    p.index = find_labels(l, q);
  });
  check_labels<uint16_t>(*this, img, labels, MapType::kUint16, 3, request, [&](Parts& p) {
    Parts q = p;  // the first 60 rows
    q.map.height = 60;
    Layout shorter = l;
    shorter.height = 60;
    p.index = find_labels(shorter, q);
  });
  // More labels than the parts allow: refused as the engine refuses them.
  Parts few;
  few.kind = PartsKind::kLabels;
  few.map = PartMapView{labels.data(), l.width, l.height, 1, 0, MapType::kUint16, 0};
  few.max_parts = 3;
  try {
    find_labels(l, few);
    ADD_FAILURE() << "4 labels taken where 3 are allowed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted) << e.what();
  }
}

// The default statistics of 8-bit images (the histogram is every value, so
// the GPU counts values alone, four pixels at a time): byte masks and 8- and
// 16-bit labels, every channel count, sizes leaving 0 to 3 pixels over.
TEST_P(PartsTest, DefaultStatisticsOf8BitImagesByMaskAndLabels) {
  std::mt19937_64 rng(19);
  for (SampleType t : {SampleType::kUint8, SampleType::kInt8})
    for (uint32_t c = 1; c <= 4; ++c)
      for (uint64_t w : {16u, 33u, 35u, 1u}) {
        const uint64_t h = 7 + c;
        TestImage img = random_image(rng, w, h, c, t, 0, 0);
        SCOPED_TRACE(describe(img.view.layout));
        std::vector<uint8_t> mask(w * h);
        for (auto& m : mask) m = static_cast<uint8_t>(rng() % 3 == 0 ? 0 : 1 + rng() % 255);
        Parts parts;
        parts.kind = PartsKind::kMask;
        parts.map = PartMapView{mask.data(), w, h, 1, 0, MapType::kUint8, 0};
        const Result r = analyze(img.view, parts, StatsRequest{});
        expect_part(r.channels, gather(img.view, [&](uint64_t x, uint64_t y) { return mask[y * w + x] != 0; }),
                    StatsRequest{});
        check_labels<uint8_t>(*this, img, random_labels<uint8_t>(rng, w * h, {0, 9, 255}), MapType::kUint8, 9,
                              StatsRequest{});
        check_labels<uint16_t>(*this, img, random_labels<uint16_t>(rng, w * h, {1, 300, 65535}), MapType::kUint16,
                               std::nullopt, StatsRequest{});
      }
}

TEST_P(PartsTest, FortyThousandOnePixelLabelsAndOneLabelOnly) {
  std::mt19937_64 rng(15);
  TestImage img = random_image(rng, 200, 200, 3, SampleType::kUint8, 0, 0);
  std::vector<uint32_t> labels(200 * 200);
  for (uint32_t i = 0; i < labels.size(); ++i) labels[i] = i * 7919u;  // distinct, not in pixel order
  // 40,000 parts' histograms would pass the answer limit: the moments and positions.
  StatsRequest moments = with_positions();
  moments.histogram = false;
  check_labels<uint32_t>(*this, img, labels, MapType::kUint32, std::nullopt, moments);
  // Labels 0 only: one part, or none when 0 is ignored.
  const std::vector<uint8_t> zeros(200 * 200, 0);
  check_labels<uint8_t>(*this, img, zeros, MapType::kUint8, std::nullopt, StatsRequest{});
  check_labels<uint8_t>(*this, img, zeros, MapType::kUint8, 0, StatsRequest{});
}

TEST_P(PartsTest, TilesCoverTheImageAsTheFormulaSays) {
  std::mt19937_64 rng(16);
  for (SampleType t : kAllTypes) {
    TestImage img = random_image(rng, 53, 31, 2, t, 1, 0);
    struct Grid { uint32_t cols, rows; };
    for (Grid g : {Grid{1, 1}, Grid{7, 3}, Grid{53, 1}, Grid{5, 31}}) {
      SCOPED_TRACE(describe(img.view.layout) + " grid " + std::to_string(g.cols) + "x" + std::to_string(g.rows));
      Parts parts;
      parts.kind = PartsKind::kTiles;
      parts.columns = g.cols;
      parts.rows = g.rows;
      const Result r = analyze(img.view, parts, with_positions());
      ASSERT_EQ(r.parts.size(), size_t{g.cols} * g.rows);
      uint64_t covered = 0;
      for (uint32_t row = 0; row < g.rows; ++row)
        for (uint32_t col = 0; col < g.cols; ++col) {
          const PartStats& p = r.parts[row * g.cols + col];
          EXPECT_TRUE(p.is_tile);
          EXPECT_EQ(p.column, col);
          EXPECT_EQ(p.row, row);
          const uint64_t x0 = col * 53 / g.cols, x1 = (col + 1) * 53 / g.cols;
          const uint64_t y0 = row * 31 / g.rows, y1 = (row + 1) * 31 / g.rows;
          EXPECT_EQ(p.roi.x, x0);
          EXPECT_EQ(p.roi.width, x1 - x0);
          EXPECT_EQ(p.roi.y, y0);
          EXPECT_EQ(p.roi.height, y1 - y0);
          covered += (x1 - x0) * (y1 - y0);
          expect_part(p.channels,
                      gather(img.view, [&](uint64_t x, uint64_t y) { return x >= x0 && x < x1 && y >= y0 && y < y1; }),
                      with_positions());
        }
      EXPECT_EQ(covered, 53u * 31u);
      if (g.cols == 1 && g.rows == 1) {
        Result one;
        one.channels = r.parts[0].channels;
        expect_same_stats(one, engine().analyze(img.view, with_positions()), t);
      }
    }
  }
}

TEST_P(PartsTest, ExplicitRangeAndFewBins) {
  std::mt19937_64 rng(17);
  for (SampleType t : kAllTypes) {
    TestImage img = random_image(rng, 29, 13, 3, t, 0, 0);
    std::vector<uint8_t> labels(29 * 13);
    for (auto& v : labels) v = static_cast<uint8_t>(rng() % 5);
    StatsRequest request;
    request.hist = HistogramSpec{7, true, -50, 100};
    check_labels<uint8_t>(*this, img, labels, MapType::kUint8, std::nullopt, request);
  }
}

TEST_P(PartsTest, BadPartsAreRefusedNamingTheProblem) {
  std::mt19937_64 rng(18);
  TestImage img = random_image(rng, 16, 8, 1, SampleType::kUint8, 0, 0);
  auto code_of = [&](const Parts& parts, const StatsRequest& request = {}) {
    try {
      engine().analyze_parts(img.view, parts, request);
    } catch (const Error& e) {
      return std::pair<ErrorCode, std::string>{e.code(), e.what()};
    }
    return std::pair<ErrorCode, std::string>{ErrorCode::kInternal, "no error"};
  };
  Parts rects;
  rects.kind = PartsKind::kRects;
  rects.rects = {{0, 0, 16, 8}, {10, 0, 7, 1}};
  auto [code, message] = code_of(rects);
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("rectangle 2 (10,0,7,1)"), std::string::npos) << message;
  rects.rects = {{UINT64_MAX, 0, 2, 1}};
  EXPECT_EQ(code_of(rects).first, ErrorCode::kInvalidArgument);
  rects.rects = {{0, 0, 0, 1}};
  EXPECT_NE(code_of(rects).second.find("no area"), std::string::npos);

  Parts tiles;
  tiles.kind = PartsKind::kTiles;
  tiles.columns = 17;
  tiles.rows = 1;
  EXPECT_EQ(code_of(tiles).first, ErrorCode::kInvalidArgument);  // wider than the image
  tiles.columns = 100000;
  tiles.rows = 100000;
  EXPECT_EQ(code_of(tiles).first, ErrorCode::kResourceExhausted);  // 10^10 tiles

  std::vector<uint32_t> labels(16 * 8);
  for (uint32_t i = 0; i < labels.size(); ++i) labels[i] = i;
  Parts many;
  many.kind = PartsKind::kLabels;
  many.map = PartMapView{labels.data(), 16, 8, 1, 0, MapType::kUint32, 0};
  many.max_parts = 100;
  std::tie(code, message) = code_of(many);
  EXPECT_EQ(code, ErrorCode::kResourceExhausted);
  EXPECT_NE(message.find("distinct labels"), std::string::npos) << message;
  many.max_parts = 1000;
  many.max_answer_bytes = 4096;  // 128 labels' histograms do not fit
  std::tie(code, message) = code_of(many);
  EXPECT_EQ(code, ErrorCode::kResourceExhausted);
  EXPECT_NE(message.find("MiB"), std::string::npos) << message;

  Parts wrong_size = many;
  wrong_size.max_answer_bytes = kDefaultMaxAnswerBytes;
  wrong_size.map.width = 15;
  std::tie(code, message) = code_of(wrong_size);
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("15x8"), std::string::npos) << message;
  EXPECT_NE(message.find("16x8"), std::string::npos) << message;

  Parts float_labels = many;
  float_labels.map.type = MapType::kFloat32;
  EXPECT_EQ(code_of(float_labels).first, ErrorCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Engines, PartsTest, ::testing::Values("cpu", "cuda"));

}  // namespace
}  // namespace imgstat::testing

namespace imgstat {
namespace {

// Each label's bounding box (label_boxes) over maps of runs of every length
// (1 to past 16 samples, so that the runs found sixteen bytes at a time end
// inside and at the edge of a vector), 8- and 16-bit, one channel and the
// second of two (the map read sample by sample), an ignored label, a
// stack of planes: the boxes a pixel-by-pixel scan gives.
TEST(LabelBoxes, EveryLabelsBoxAsAPixelByPixelScan) {
  std::mt19937_64 rng(2718);
  for (MapType type : {MapType::kUint8, MapType::kUint16})
    for (uint32_t channels : {1u, 2u})
      for (uint64_t width : {1u, 15u, 16u, 17u, 77u, 300u})
        for (bool ignore : {false, true}) {
          const uint64_t plane_height = 5, planes = 3, height = plane_height * planes;
          const size_t sample = type == MapType::kUint8 ? 1 : 2;
          std::vector<uint8_t> map(width * height * channels * sample);
          std::vector<int64_t> value(width * height);
          for (uint64_t y = 0; y < height; ++y)
            for (uint64_t x = 0; x < width;) {
              const uint64_t run = 1 + rng() % (rng() % 3 == 0 ? 40 : 6);
              const int64_t v = type == MapType::kUint8 ? static_cast<int64_t>(rng() % 7) * 37
                                                        : static_cast<int64_t>(rng() % 7) * 9001;
              for (uint64_t k = x; k < std::min(width, x + run); ++k) {
                value[y * width + k] = v;
                for (uint32_t c = 0; c < channels; ++c) {
                  const uint64_t s = c + 1 == channels ? static_cast<uint64_t>(v) : rng();  // the last channel is the map's
                  std::memcpy(&map[((y * width + k) * channels + c) * sample], &s, sample);
                }
              }
              x += run;
            }
          Parts parts;
          parts.kind = PartsKind::kLabels;
          parts.map = PartMapView{map.data(), width, height, channels, channels - 1, type, 0};
          const int64_t ignored = value[rng() % value.size()];
          if (ignore) parts.ignore_label = true, parts.ignored_label = ignored;
          const Layout layout{width, height, 1, SampleType::kUint8};
          const std::vector<LabelBox> got = label_boxes(layout, parts, plane_height);
          std::map<int64_t, LabelBox> want;
          for (uint64_t row = 0; row < height; ++row)
            for (uint64_t x = 0; x < width; ++x) {
              const int64_t v = value[row * width + x];
              if (ignore && v == ignored) continue;
              const uint64_t y = row % plane_height, z = row / plane_height;
              auto [it, fresh] = want.try_emplace(v);
              LabelBox& b = it->second;
              if (fresh) b.label = v, b.x = x, b.y = y, b.z = z, b.width = x, b.height = y, b.depth = z;
              b.x = std::min(b.x, x), b.y = std::min(b.y, y), b.z = std::min(b.z, z);
              b.width = std::max(b.width, x), b.height = std::max(b.height, y), b.depth = std::max(b.depth, z);
            }
          SCOPED_TRACE(std::to_string(width) + " wide, " + std::to_string(sample * 8) + "-bit, channels " +
                       std::to_string(channels) + (ignore ? ", one ignored" : ""));
          ASSERT_EQ(got.size(), want.size());
          size_t i = 0;
          for (const auto& [label, b] : want) {
            const LabelBox& g = got[i++];
            EXPECT_EQ(g.label, label);
            EXPECT_EQ(std::vector<uint64_t>({g.x, g.y, g.z, g.width, g.height, g.depth}),
                      std::vector<uint64_t>({b.x, b.y, b.z, b.width - b.x + 1, b.height - b.y + 1, b.depth - b.z + 1}))
                << "label " << label;
          }
        }
}

}  // namespace
}  // namespace imgstat
