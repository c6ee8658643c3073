// Parts through the request core: masks and label images encoded, raw or
// the image's own alpha; streamed uploads and banded decodes answering as
// the whole-image path does; every bad map, size and limit a clear error.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>
#include <random>

#include "core/analyzer.hpp"
#include "core/validate.hpp"
#include "decode/decode.hpp"
#include "error_code.hpp"
#include "jpeg_samples.hpp"
#include "raw_request.hpp"
#include "test_images.hpp"

namespace imgstat::testing {
namespace {

// A PNG of gray (1 channel) samples, 8 or 16 bits, written here from the
// format's definition: filter 0 rows, one zlib stream, CRCs.
std::string gray_png(uint32_t w, uint32_t h, int bits, const std::function<uint32_t(uint32_t, uint32_t)>& value) {
  auto be32 = [](std::string& s, uint32_t v) {
    for (int i = 3; i >= 0; --i) s += static_cast<char>(v >> (8 * i));
  };
  auto chunk = [&](std::string& out, const char* type, const std::string& data) {
    be32(out, static_cast<uint32_t>(data.size()));
    const std::string body = type + data;
    out += body;
    be32(out, static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()))));
  };
  std::string rows;
  for (uint32_t y = 0; y < h; ++y) {
    rows += '\0';
    for (uint32_t x = 0; x < w; ++x) {
      const uint32_t v = value(x, y);
      if (bits == 16) rows += static_cast<char>(v >> 8);
      rows += static_cast<char>(v);
    }
  }
  uLongf n = compressBound(static_cast<uLong>(rows.size()));
  std::string z(n, '\0');
  compress2(reinterpret_cast<Bytef*>(z.data()), &n, reinterpret_cast<const Bytef*>(rows.data()),
            static_cast<uLong>(rows.size()), 6);
  z.resize(n);
  std::string ihdr;
  be32(ihdr, w);
  be32(ihdr, h);
  ihdr += static_cast<char>(bits);
  ihdr += std::string("\0\0\0\0", 4);  // gray; compression, filter, interlace 0
  std::string png = "\x89PNG\r\n\x1a\n";
  chunk(png, "IHDR", ihdr);
  chunk(png, "IDAT", z);
  chunk(png, "IEND", "");
  return png;
}

class PartsRequest : public ::testing::Test {
 protected:
  PartsRequest() {
    Limits limits;
    limits.max_pixels = 1 << 22;
    engine_ = std::shared_ptr<Engine>(make_cpu_engine(2));
    analyzer_ = std::make_unique<Analyzer>(engine_, limits);
  }
  // The response's channels (in engine order: raw input keeps it) against
  // an engine result.
  static void expect_channels(const google::protobuf::RepeatedPtrField<v1::ChannelStats>& got,
                              const std::vector<ChannelStats>& want) {
    ASSERT_EQ(static_cast<size_t>(got.size()), want.size());
    for (size_t c = 0; c < want.size(); ++c) {
      EXPECT_EQ(got[c].count(), want[c].count);
      if (want[c].count == 0) continue;
      EXPECT_EQ(got[c].min(), want[c].min);
      EXPECT_EQ(got[c].max(), want[c].max);
      EXPECT_EQ(got[c].sum_int(), want[c].sum_int);
      EXPECT_EQ(got[c].stddev(), want[c].stddev);
      EXPECT_EQ(std::vector<uint64_t>(got[c].histogram().counts().begin(), got[c].histogram().counts().end()),
                want[c].histogram.counts);
    }
  }
  std::string error_of(const v1::AnalyzeRequest& r, ErrorCode* code = nullptr) {
    try {
      analyzer_->analyze(r);
    } catch (const Error& e) {
      if (code) *code = e.code();
      return e.what();
    }
    return "";
  }
  std::shared_ptr<Engine> engine_;
  std::unique_ptr<Analyzer> analyzer_;
};

TEST_F(PartsRequest, EncodedMaskAndLabelImagesAnswerAsTheEngineDoes) {
  std::mt19937_64 rng(31);
  TestImage img = random_image(rng, 97, 61, 3, SampleType::kUint8, 5, 0);
  std::vector<uint8_t> mask(97 * 61);
  std::vector<uint16_t> labels(97 * 61);
  for (uint32_t i = 0; i < mask.size(); ++i) {
    mask[i] = (i % 97 > 20 && i / 97 < 40) ? 255 : 0;
    labels[i] = static_cast<uint16_t>(i % 97 / 20 * 1000 + i / 97 / 30);
  }
  v1::AnalyzeRequest r = raw_request(img);
  r.mutable_options()->mutable_parts()->mutable_mask()->mutable_image()->set_data(
      gray_png(97, 61, 8, [&](uint32_t x, uint32_t y) { return mask[y * 97 + x]; }));
  Parts parts;
  parts.kind = PartsKind::kMask;
  parts.map = PartMapView{mask.data(), 97, 61, 1, 0, MapType::kUint8, 0};
  v1::AnalyzeResponse got = analyzer_->analyze(r);
  EXPECT_EQ(got.parts_size(), 0);
  expect_channels(got.channels(), engine_->analyze_parts(img.view, parts, StatsRequest{}).channels);
  EXPECT_EQ(got.channels(0).count(), 76u * 40u);

  r.mutable_options()->mutable_parts()->mutable_labels()->mutable_image()->set_data(
      gray_png(97, 61, 16, [&](uint32_t x, uint32_t y) { return labels[y * 97 + x]; }));
  r.mutable_options()->mutable_parts()->mutable_labels()->set_ignore(1000);
  parts.kind = PartsKind::kLabels;
  parts.map = PartMapView{labels.data(), 97, 61, 1, 0, MapType::kUint16, 0};
  parts.ignore_label = true;
  parts.ignored_label = 1000;
  got = analyzer_->analyze(r);
  const Result want = engine_->analyze_parts(img.view, parts, StatsRequest{});
  ASSERT_EQ(static_cast<size_t>(got.parts_size()), want.parts.size());
  // The object's own channels stay the whole image's.
  expect_channels(got.channels(), engine_->analyze(img.view, StatsRequest{}).channels);
  for (int i = 0; i < got.parts_size(); ++i) {
    SCOPED_TRACE("label " + std::to_string(want.parts[i].label));
    EXPECT_EQ(got.parts(i).label(), want.parts[i].label);
    EXPECT_NE(got.parts(i).label(), 1000);
    expect_channels(got.parts(i).channels(), want.parts[i].channels);
  }
}

TEST_F(PartsRequest, RawWideLabelsAlphaMasksRectanglesAndTiles) {
  std::mt19937_64 rng(32);
  TestImage img = random_image(rng, 40, 30, 4, SampleType::kUint16, 0, 0);
  std::vector<int32_t> labels(40 * 30);
  for (uint32_t i = 0; i < labels.size(); ++i) labels[i] = (i % 3 == 0) ? INT32_MIN : static_cast<int32_t>(i % 7) - 3;
  v1::AnalyzeRequest r = raw_request(img);
  v1::Input* map = r.mutable_options()->mutable_parts()->mutable_labels()->mutable_image();
  map->set_kind(v1::INPUT_KIND_RAW);
  map->mutable_raw()->set_width(40);
  map->mutable_raw()->set_height(30);
  map->mutable_raw()->set_channels(1);
  map->mutable_raw()->set_sample_type(v1::SAMPLE_TYPE_INT32);
  map->set_data(std::string(reinterpret_cast<const char*>(labels.data()), labels.size() * 4));
  const v1::AnalyzeResponse got = analyzer_->analyze(r);
  ASSERT_EQ(got.parts_size(), 8);  // INT32_MIN and -3..3
  EXPECT_EQ(got.parts(0).label(), INT32_MIN);
  EXPECT_EQ(got.parts(7).label(), 3);
  uint64_t total = 0;
  for (const v1::PartStats& p : got.parts()) total += p.channels(0).count();
  EXPECT_EQ(total, 40u * 30u);

  // The image's own alpha: where it is nonzero.
  v1::AnalyzeRequest alpha = raw_request(img);
  alpha.mutable_options()->mutable_parts()->mutable_mask()->set_alpha(true);
  uint64_t selected = 0;
  for (uint32_t i = 0; i < 40 * 30; ++i)
    selected += reinterpret_cast<const uint16_t*>(img.view.data)[i * 4 + 3] != 0;
  EXPECT_EQ(analyzer_->analyze(alpha).channels(0).count(), selected);

  // Rectangles and tiles name their parts; tiles follow the floor formula.
  v1::AnalyzeRequest rects = raw_request(img);
  v1::Rectangle* q = rects.mutable_options()->mutable_parts()->mutable_rectangles()->add_rectangles();
  q->set_x(3);
  q->set_y(4);
  q->set_width(5);
  q->set_height(6);
  const v1::AnalyzeResponse rr = analyzer_->analyze(rects);
  ASSERT_EQ(rr.parts_size(), 1);
  EXPECT_EQ(rr.parts(0).roi().width(), 5u);
  EXPECT_EQ(rr.parts(0).channels(0).count(), 30u);
  EXPECT_EQ(rr.parts(0).channels(2).name(), "B");
  v1::AnalyzeRequest tiles = raw_request(img);
  tiles.mutable_options()->mutable_parts()->mutable_tiles()->set_columns(3);
  tiles.mutable_options()->mutable_parts()->mutable_tiles()->set_rows(4);
  const v1::AnalyzeResponse tr = analyzer_->analyze(tiles);
  ASSERT_EQ(tr.parts_size(), 12);
  EXPECT_EQ(tr.parts(4).tile().column(), 1u);
  EXPECT_EQ(tr.parts(4).tile().row(), 1u);
  EXPECT_EQ(tr.parts(4).roi().x(), 13u);  // floor(40 / 3)
  EXPECT_EQ(tr.parts(4).roi().width(), 13u);
  EXPECT_EQ(tr.parts(4).roi().y(), 7u);   // floor(30 / 4)
  EXPECT_EQ(tr.parts(4).roi().height(), 8u);
}

TEST_F(PartsRequest, StreamsAndBandedDecodesAnswerAsTheWholePath) {
  std::mt19937_64 rng(33);
  TestImage img = random_image(rng, 123, 45, 3, SampleType::kFloat32, 0, 0);
  v1::AnalyzeRequest whole = raw_request(img);
  whole.mutable_options()->mutable_parts()->mutable_tiles()->set_columns(5);
  whole.mutable_options()->mutable_parts()->mutable_tiles()->set_rows(2);
  const v1::AnalyzeResponse want = analyzer_->analyze(whole);
  v1::StreamHeader header;
  *header.mutable_input() = whole.input();
  header.mutable_input()->clear_data();
  *header.mutable_options() = whole.options();
  header.set_total_bytes(whole.input().data().size());
  auto upload = analyzer_->begin_upload(header);
  const std::string& data = whole.input().data();
  for (size_t off = 0; off < data.size(); off += 1000) upload->add(data.substr(off, 1000));
  const v1::AnalyzeResponse got = upload->finish({});
  ASSERT_EQ(got.parts_size(), 10);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(got.parts(i).SerializeAsString(), want.parts(i).SerializeAsString());

  // A JPEG the whole-image path decodes in bands: one tile is the whole image.
  v1::AnalyzeRequest jpeg;
  jpeg.mutable_input()->set_data(write_jpeg(1500, 1300, jpeg_samplings()[2], 0, 90, 2));
  const v1::AnalyzeResponse plain = analyzer_->analyze(jpeg);
  jpeg.mutable_options()->mutable_parts()->mutable_tiles()->set_columns(1);
  jpeg.mutable_options()->mutable_parts()->mutable_tiles()->set_rows(1);
  const v1::AnalyzeResponse one = analyzer_->analyze(jpeg);
  ASSERT_EQ(one.parts_size(), 1);
  ASSERT_EQ(one.parts(0).channels_size(), plain.channels_size());
  for (int c = 0; c < plain.channels_size(); ++c)
    EXPECT_EQ(one.parts(0).channels(c).SerializeAsString(), plain.channels(c).SerializeAsString());
}

// A mask or label image sent after the input in a stream's chunks
// (StreamHeader.map_bytes) answers as the same map in one message, raw or
// encoded, for raw and encoded inputs; what breaks the protocol is named.
TEST_F(PartsRequest, MapsThatFollowTheirInputInAStreamAnswerAsInOneMessage) {
  std::mt19937_64 rng(37);
  TestImage img = random_image(rng, 97, 61, 3, SampleType::kUint8, 0, 0);
  std::string labels(97 * 61 * 2, '\0');
  for (uint32_t i = 0; i < 97 * 61; ++i) {
    const uint16_t v = static_cast<uint16_t>(i % 97 / 10 + 100 * (i / 97 / 20));
    std::memcpy(&labels[i * 2], &v, 2);
  }
  const std::string png = gray_png(97, 61, 16, [&](uint32_t x, uint32_t y) {
    uint16_t v;
    std::memcpy(&v, &labels[(y * 97 + x) * 2], 2);
    return v;
  });
  const std::string jpeg = write_jpeg(97, 61, jpeg_samplings()[0], 0, 90, 3);
  for (bool encoded_input : {false, true})
    for (bool encoded_map : {false, true}) {
      SCOPED_TRACE(std::string(encoded_input ? "encoded" : "raw") + " input, " + (encoded_map ? "encoded" : "raw") + " map");
      v1::AnalyzeRequest whole = raw_request(img);
      if (encoded_input) {
        whole.mutable_input()->Clear();
        whole.mutable_input()->set_data(jpeg);
      }
      v1::Input* map = whole.mutable_options()->mutable_parts()->mutable_labels()->mutable_image();
      if (encoded_map) {
        map->set_data(png);
      } else {
        map->set_kind(v1::INPUT_KIND_RAW);
        map->mutable_raw()->set_width(97);
        map->mutable_raw()->set_height(61);
        map->mutable_raw()->set_channels(1);
        map->mutable_raw()->set_sample_type(v1::SAMPLE_TYPE_UINT16);
        map->set_data(labels);
      }
      const v1::AnalyzeResponse want = analyzer_->analyze(whole);
      ASSERT_GT(want.parts_size(), 10);
      v1::StreamHeader header;
      *header.mutable_input() = whole.input();
      header.mutable_input()->clear_data();
      *header.mutable_options() = whole.options();
      v1::Input* header_map = header.mutable_options()->mutable_parts()->mutable_labels()->mutable_image();
      const std::string map_bytes = header_map->data();
      header_map->clear_data();
      header.set_total_bytes(whole.input().data().size());
      header.set_map_bytes(map_bytes.size());
      // Chunks that straddle the input's end and the map's start.
      const std::string all = whole.input().data() + map_bytes;
      auto upload = analyzer_->begin_upload(header);
      for (size_t off = 0; off < all.size(); off += 777) upload->add(std::string_view(all).substr(off, 777));
      const v1::AnalyzeResponse got = upload->finish({});
      ASSERT_EQ(got.parts_size(), want.parts_size());
      for (int i = 0; i < got.parts_size(); ++i) EXPECT_EQ(got.parts(i).SerializeAsString(), want.parts(i).SerializeAsString());
      upload.reset();
      EXPECT_EQ(analyzer_->budget().in_use(), 0u);

      auto refused = [&](const v1::StreamHeader& h, const std::string& bytes, const std::string& words) {
        try {
          auto u = analyzer_->begin_upload(h);
          u->add(bytes);
          u->finish({});
          ADD_FAILURE() << "accepted: " << words;
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
          EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
        }
      };
      refused(header, all + "x", "more than the header's total_bytes and map_bytes");
      refused(header, all.substr(0, all.size() - 1), "total_bytes and map_bytes");
      v1::StreamHeader with_data = header;
      with_data.mutable_options()->mutable_parts()->mutable_labels()->mutable_image()->set_data("x");
      refused(with_data, all, "already has its data");
      v1::StreamHeader no_parts = header;
      no_parts.mutable_options()->clear_parts();
      refused(no_parts, all, "names no mask or label image");
    }
}

// A JPEG's mask or label image is decoded beside the JPEG (its size from
// the JPEG's header): the answers are those of the JPEG's own pixels sent
// raw with the same maps, and errors are those of one after the other: the
// image's first, then the map's, a map of another size refused by name.
TEST_F(PartsRequest, AJpegsMapsReadBesideItAnswerAsItsPixelsDo) {
  const uint32_t w = 211, h = 97;
  const std::string jpeg = write_jpeg(w, h, jpeg_samplings()[1], 0, 85, 5);
  const auto* bytes = reinterpret_cast<const uint8_t*>(jpeg.data());
  DecodeOptions o;
  o.max_pixels = 1 << 22;
  const DecodedImage pixels = decode_image(bytes, jpeg.size(), plan_decode(bytes, jpeg.size(), o), o);
  TestImage img;
  img.view = pixels.view;
  ASSERT_EQ(img.view.layout.width, w);
  std::mt19937_64 rng(52);
  std::vector<uint8_t> mask(w * h);
  std::vector<uint16_t> labels(w * h);
  for (uint32_t i = 0; i < w * h; ++i) {
    mask[i] = rng() % 3 ? 0 : 200;
    labels[i] = static_cast<uint16_t>(rng() % 5 + 1000 * (i % w / 70));
  }
  const std::string mask_png = gray_png(w, h, 8, [&](uint32_t x, uint32_t y) { return mask[y * w + x]; });
  const std::string labels_png = gray_png(w, h, 16, [&](uint32_t x, uint32_t y) { return labels[y * w + x]; });
  auto same = [](const v1::ChannelStats& a, const v1::ChannelStats& b) {
    EXPECT_EQ(a.count(), b.count());
    EXPECT_EQ(a.min(), b.min());
    EXPECT_EQ(a.max(), b.max());
    EXPECT_EQ(a.sum_int(), b.sum_int());
    EXPECT_EQ(a.stddev(), b.stddev());
    EXPECT_EQ(a.histogram().SerializeAsString(), b.histogram().SerializeAsString());
  };
  for (int kind = 0; kind < 3; ++kind) {
    SCOPED_TRACE("map " + std::to_string(kind));
    v1::AnalyzeRequest enc;
    enc.mutable_input()->set_data(jpeg);
    v1::AnalyzeRequest raw = raw_request(img);
    for (v1::AnalyzeRequest* r : {&enc, &raw}) {
      v1::Parts* p = r->mutable_options()->mutable_parts();
      if (kind == 0) p->mutable_mask()->mutable_image()->set_data(mask_png);
      if (kind == 1) {
        p->mutable_labels()->mutable_image()->set_data(labels_png);
        p->mutable_labels()->set_ignore(1002);
      }
      if (kind == 2) {  // a raw mask
        v1::Input* m = p->mutable_mask()->mutable_image();
        m->set_kind(v1::INPUT_KIND_RAW);
        m->mutable_raw()->set_width(w);
        m->mutable_raw()->set_height(h);
        m->mutable_raw()->set_channels(1);
        m->mutable_raw()->set_sample_type(v1::SAMPLE_TYPE_UINT8);
        m->set_data(std::string(mask.begin(), mask.end()));
      }
    }
    const v1::AnalyzeResponse got = analyzer_->analyze(enc), want = analyzer_->analyze(raw);
    ASSERT_EQ(got.channels_size(), want.channels_size());
    for (int c = 0; c < got.channels_size(); ++c) same(got.channels(c), want.channels(c));
    ASSERT_EQ(got.parts_size(), want.parts_size());
    if (kind == 1) EXPECT_EQ(got.parts_size(), 4 * 5 - 1);  // 0-4, 1000-1004 but 1002, 2000-2004, 3000-3004 (column 210)
    for (int i = 0; i < got.parts_size(); ++i) {
      EXPECT_EQ(got.parts(i).label(), want.parts(i).label());
      ASSERT_EQ(got.parts(i).channels_size(), want.parts(i).channels_size());
      for (int c = 0; c < got.parts(i).channels_size(); ++c) same(got.parts(i).channels(c), want.parts(i).channels(c));
    }
  }
  // A map of another size, named with the JPEG's.
  ErrorCode code{};
  v1::AnalyzeRequest r;
  r.mutable_input()->set_data(jpeg);
  r.mutable_options()->mutable_parts()->mutable_mask()->mutable_image()->set_data(
      gray_png(w - 1, h, 8, [](uint32_t x, uint32_t) { return x; }));
  std::string e = error_of(r, &code);
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
  EXPECT_NE(e.find("210x97"), std::string::npos) << e;
  EXPECT_NE(e.find("211x97"), std::string::npos) << e;
  // A damaged map with a sound JPEG: the map's error.
  r.mutable_options()->mutable_parts()->mutable_mask()->mutable_image()->set_data(mask_png.substr(0, mask_png.size() / 2));
  e = error_of(r, &code);
  EXPECT_NE(e.find("mask"), std::string::npos) << e;
  // A cut JPEG with a sound map: the JPEG's error, as without parts.
  v1::AnalyzeRequest cut;
  cut.mutable_input()->set_data(jpeg.substr(0, jpeg.size() / 2));
  ErrorCode alone{};
  const std::string alone_error = error_of(cut, &alone);
  ASSERT_FALSE(alone_error.empty());
  cut.mutable_options()->mutable_parts()->mutable_mask()->mutable_image()->set_data(mask_png);
  EXPECT_EQ(error_of(cut, &code), alone_error);
  EXPECT_EQ(code, alone);
}

TEST_F(PartsRequest, BadMapsSizesAndLimitsAreClearErrors) {
  std::mt19937_64 rng(34);
  TestImage img = random_image(rng, 64, 32, 3, SampleType::kUint8, 0, 0);
  ErrorCode code{};
  // Sizes that differ, naming both.
  v1::AnalyzeRequest r = raw_request(img);
  r.mutable_options()->mutable_parts()->mutable_mask()->mutable_image()->set_data(
      gray_png(63, 32, 8, [](uint32_t x, uint32_t) { return x; }));
  std::string e = error_of(r, &code);
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
  EXPECT_NE(e.find("63x32"), std::string::npos) << e;
  EXPECT_NE(e.find("64x32"), std::string::npos) << e;
  // A mask that would decode past the pixel limit (a decompression bomb's header).
  r.mutable_options()->mutable_parts()->mutable_mask()->mutable_image()->set_data(
      gray_png(1, 1, 8, [](uint32_t, uint32_t) { return 1; }).replace(16, 8, std::string("\0\1\0\0\0\1\0\0", 8)));
  e = error_of(r, &code);
  EXPECT_NE(e.find("mask"), std::string::npos) << e;
  EXPECT_TRUE(code == ErrorCode::kResourceExhausted || code == ErrorCode::kInvalidArgument) << e;
  // Alpha of an image without one; bytes as a map; float labels.
  r.mutable_options()->mutable_parts()->mutable_mask()->set_alpha(true);
  EXPECT_NE(error_of(r, &code).find("alpha"), std::string::npos);
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
  v1::Input* labels = r.mutable_options()->mutable_parts()->mutable_labels()->mutable_image();
  labels->set_kind(v1::INPUT_KIND_BYTES);
  labels->set_data("xyz");
  EXPECT_EQ((error_of(r, &code), code), ErrorCode::kInvalidArgument);
  labels->set_kind(v1::INPUT_KIND_RAW);
  labels->mutable_raw()->set_width(64);
  labels->mutable_raw()->set_height(32);
  labels->mutable_raw()->set_channels(1);
  labels->mutable_raw()->set_sample_type(v1::SAMPLE_TYPE_FLOAT32);
  labels->set_data(std::string(64 * 32 * 4, '\0'));
  EXPECT_NE(error_of(r, &code).find("labels are uint8"), std::string::npos);
  labels->mutable_raw()->set_sample_type(v1::SAMPLE_TYPE_UINT32);
  labels->set_data(std::string(64 * 32 * 4 - 1, '\0'));  // a byte short
  EXPECT_EQ((error_of(r, &code), code), ErrorCode::kInvalidArgument);
  // An image may not be uint32.
  v1::AnalyzeRequest wide = raw_request(img);
  wide.mutable_input()->mutable_raw()->set_sample_type(v1::SAMPLE_TYPE_UINT32);
  EXPECT_NE(error_of(wide, &code).find("label images only"), std::string::npos);

  // 2048 distinct labels against --max-parts and an answer limit.
  std::vector<uint16_t> many(64 * 32);
  for (uint32_t i = 0; i < many.size(); ++i) many[i] = static_cast<uint16_t>(i * 31);
  labels->mutable_raw()->set_sample_type(v1::SAMPLE_TYPE_UINT16);
  labels->set_data(std::string(reinterpret_cast<const char*>(many.data()), many.size() * 2));
  r.mutable_options()->mutable_parts()->mutable_labels()->set_max_labels(100);
  e = error_of(r, &code);
  EXPECT_EQ(code, ErrorCode::kResourceExhausted);
  EXPECT_NE(e.find("2048 distinct labels"), std::string::npos) << e;
  r.mutable_options()->mutable_parts()->mutable_labels()->set_max_labels(0);
  EXPECT_EQ(analyzer_->analyze(r).parts_size(), 2048);
  {
    Limits small;
    small.max_message_bytes = 2 << 20;  // 2048 labels x 3 histograms do not fit 2 MiB
    Analyzer strict(engine_, small);
    try {
      strict.analyze(r);
      ADD_FAILURE() << "no error";
    } catch (const Error& x) {
      EXPECT_EQ(x.code(), ErrorCode::kResourceExhausted);
      EXPECT_NE(std::string(x.what()).find("MiB"), std::string::npos) << x.what();
    }
    r.mutable_options()->add_statistics(v1::STATISTIC_MIN_MAX);  // no histogram: it fits
    EXPECT_EQ(strict.analyze(r).parts_size(), 2048);
  }

  // Rectangles past 32 bits and 10^9 tiles.
  v1::AnalyzeRequest rects = raw_request(img);
  v1::Rectangle* q = rects.mutable_options()->mutable_parts()->mutable_rectangles()->add_rectangles();
  q->set_x(UINT32_MAX);
  q->set_width(2);
  q->set_height(1);
  e = error_of(rects, &code);
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
  EXPECT_NE(e.find("rectangle 1 (4294967295,0,2,1) is not inside"), std::string::npos) << e;
  v1::AnalyzeRequest tiles = raw_request(img);
  tiles.mutable_options()->mutable_parts()->mutable_tiles()->set_columns(40000);
  tiles.mutable_options()->mutable_parts()->mutable_tiles()->set_rows(25000);
  EXPECT_NE(error_of(tiles, &code).find("--max-parts"), std::string::npos);
  EXPECT_EQ(code, ErrorCode::kResourceExhausted);
  // The GPU decoder cannot be asked for with parts.
  v1::AnalyzeRequest jpeg;
  jpeg.mutable_input()->set_data(write_jpeg(64, 32, jpeg_samplings()[0], 0, 90, 1));
  jpeg.mutable_options()->set_decoder(v1::DECODER_CHOICE_GPU);
  *jpeg.mutable_options()->mutable_parts() = tiles.options().parts();
  EXPECT_EQ((error_of(jpeg, &code), code), ErrorCode::kFailedPrecondition);
  EXPECT_EQ(analyzer_->server_info().limits().max_parts(), 65536u);
}

}  // namespace
}  // namespace imgstat::testing
