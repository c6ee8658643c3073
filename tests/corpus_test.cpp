// Every file of the shared corpus behaves as reference.jsonl says: each file
// with a reference gives exactly those statistics, each undecodable one a
// clear INVALID_ARGUMENT (or RESOURCE_EXHAUSTED) error.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/analyzer.hpp"
#include "corpus.hpp"

namespace imgstat::testing {
namespace {

using nlohmann::json;

// Formats this service decodes although OpenCV 4.6 does not: their
// ImageMagick fallback reference must match too.
bool claimed_beyond_opencv(const std::string& format) { return format == "GIF" || format == "WebP"; }

class CorpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_corpus()) GTEST_SKIP() << "no corpus at " << corpus_dir() << " (set IMGSTAT_CORPUS)";
    // IMGSTAT_TEST_ENGINE=cuda checks the bare CUDA engine (no CPU fallback).
    const char* engine = std::getenv("IMGSTAT_TEST_ENGINE");
    std::shared_ptr<Engine> e = make_cpu_engine();
    if (engine && std::string(engine) == "cuda") {
      std::string why;
      e = make_cuda_engine(EngineOptions{}, &why);
      if (!e) GTEST_SKIP() << "no usable GPU: " << why;
    }
    analyzer_ = std::make_unique<Analyzer>(e, Limits{});
    for (const auto& row : corpus_manifest()) manifest_[row.at("file")] = row;
  }

  v1::AnalyzeRequest request_for(const json& ref) {
    v1::AnalyzeRequest r;
    const std::string file = ref["file"];
    r.mutable_input()->set_data(read_file(corpus_dir() / file));
    r.mutable_input()->set_name(file);
    // The references are of a file's first page or frame (the corpus'
    // convention, ImageMagick's FILE[0]); imgstat answers every page and
    // frame unless asked for one (tests/planes).
    if (ref["format"] == "TIFF" || ref["format"] == "GIF" || ref["format"] == "PNG" || ref["format"] == "WebP")
      r.mutable_options()->mutable_planes()->set_count(1);
    if (ref["format"] == "raw") {
      const auto& m = manifest_.at(file);
      r.mutable_input()->set_kind(v1::INPUT_KIND_RAW);
      v1::RawLayout* raw = r.mutable_input()->mutable_raw();
      raw->set_width(std::stoul(m.at("width")));
      raw->set_height(std::stoul(m.at("height")));
      raw->set_channels(std::stoul(m.at("channels")));
      raw->set_sample_type(m.at("bit_depth") == "16" ? v1::SAMPLE_TYPE_UINT16 : v1::SAMPLE_TYPE_UINT8);
    }
    return r;
  }

  std::unique_ptr<Analyzer> analyzer_;
  std::map<std::string, std::map<std::string, std::string>> manifest_;
};

const char* kSampleTypes[] = {"", "uint8", "uint16", "int8", "int16", "float32", "float64"};

void expect_matches(const v1::AnalyzeResponse& got, const json& want) {
  EXPECT_EQ(got.width(), want["width"].get<uint64_t>());
  EXPECT_EQ(got.height(), want["height"].get<uint64_t>());
  ASSERT_EQ(got.channel_count(), want["channels"].get<uint32_t>());
  const std::string type = want["sample_type"];
  EXPECT_EQ(kSampleTypes[got.sample_type()], type);
  const bool flt = type.rfind("float", 0) == 0;
  const uint64_t pixels = want["pixel_count"];
  ASSERT_EQ(static_cast<size_t>(got.channels_size()), want["stats"].size());
  for (int c = 0; c < got.channels_size(); ++c) {
    const v1::ChannelStats& g = got.channels(c);
    const json& w = want["stats"][c];
    SCOPED_TRACE("channel " + g.name());
    EXPECT_EQ(g.name(), w["channel"].get<std::string>());
    const uint64_t excluded = w.value("nonfinite_excluded", uint64_t{0});
    EXPECT_EQ(g.count(), pixels - excluded);
    EXPECT_EQ(g.nan_count() + g.posinf_count() + g.neginf_count(), excluded);
    EXPECT_EQ(g.min(), w["min"].get<double>());
    EXPECT_EQ(g.max(), w["max"].get<double>());
    const double mean = w["mean"], stddev = w["stddev"];
    if (flt) {
      const double sum = w["sum"];
      EXPECT_NEAR(g.sum(), sum, 1e-12 * std::abs(sum) + 1e-300);
      EXPECT_NEAR(g.mean(), mean, 1e-12 * std::abs(mean) + 1e-300);
      EXPECT_NEAR(g.stddev(), stddev, 1e-9 * stddev + 1e-300);
    } else {
      EXPECT_EQ(g.sum_int(), w["sum"].get<int64_t>());
      EXPECT_NEAR(g.mean(), mean, 1e-12 * std::abs(mean));
      EXPECT_NEAR(g.stddev(), stddev, 1e-10 * stddev + 1e-12);
    }
    const auto& hist = w["histogram"];
    ASSERT_EQ(static_cast<size_t>(g.histogram().counts_size()), hist.size());
    uint64_t l1 = 0;
    for (int b = 0; b < g.histogram().counts_size(); ++b) {
      const uint64_t a = g.histogram().counts(b), e = hist[b];
      l1 += a > e ? a - e : e - a;
    }
    // Float bins follow the float64 rule exactly; the reference notes how many
    // samples would move under float32 arithmetic, our only allowed slack.
    EXPECT_LE(l1, 2 * w.value("hist_float32_moved", uint64_t{0})) << "histogram L1 distance";
    if (flt) {
      EXPECT_EQ(g.histogram().lo(), w["hist_range"][0].get<double>());
      EXPECT_EQ(g.histogram().hi(), w["hist_range"][1].get<double>());
    }
  }
}

// A float64 RGB TIFF: OpenCV refuses it, ImageMagick's HDRI reading of it
// gives the values themselves.
bool beyond_opencv_tiff(const json& ref) {
  return ref["format"] == "TIFF" && ref["status"] == "imagemagick_only" && ref["category"] == "tiff-float" &&
         ref.contains("imagemagick_hdri") && ref["imagemagick_hdri"].value("units", "") == "float" &&
         ref["fallback_reference"].value("channels", 0) == 3;
}

void expect_matches_imagemagick(const v1::AnalyzeResponse& got, const json& im) {
  EXPECT_EQ(got.width(), im["width"].get<uint64_t>());
  EXPECT_EQ(got.height(), im["height"].get<uint64_t>());
  ASSERT_EQ(static_cast<size_t>(got.channels_size()), im["stats"].size());
  for (int c = 0; c < got.channels_size(); ++c) {
    const v1::ChannelStats& g = got.channels(c);
    const json& w = im["stats"][c];
    SCOPED_TRACE("channel " + g.name());
    EXPECT_EQ(g.name(), w["channel"].get<std::string>());
    EXPECT_EQ(g.count(), got.width() * got.height());
    // ImageMagick keeps float32 pixels: its figures to float32's precision.
    const double min = w["min"], max = w["max"], mean = w["mean"];
    EXPECT_NEAR(g.min(), min, 1e-6 * std::abs(min) + 1e-12);
    EXPECT_NEAR(g.max(), max, 1e-6 * std::abs(max) + 1e-12);
    EXPECT_NEAR(g.mean(), mean, 1e-6 * std::abs(mean) + 1e-12);
    EXPECT_NEAR(g.stddev(), w["stddev_population"].get<double>(), 1e-5 * w["stddev_population"].get<double>() + 1e-12);
  }
}

TEST_F(CorpusTest, EveryFileBehavesAsItsReferenceSays) {
  const auto refs = corpus_references();
  ASSERT_EQ(refs.size(), 242u);
  ASSERT_TRUE(analyzer_);
  int matched = 0, rejected = 0, fallback_matched = 0;
  for (const json& ref : refs) {
    const std::string file = ref["file"], status = ref["status"], format = ref["format"];
    SCOPED_TRACE(file + " (" + status + ")");
    // Where GDAL and friends are stand-ins (the GPU machine's bundle), EXR stays out.
    if (format == "EXR" && std::getenv("IMGSTAT_STUBBED_LIBS")) continue;
    v1::AnalyzeRequest request = request_for(ref);
    const json* want = ref["reference"].is_null() ? nullptr : &ref["reference"];
    if (!want && status == "imagemagick_only" && claimed_beyond_opencv(format)) want = &ref["fallback_reference"];
    try {
      v1::AnalyzeResponse got;
      // Data that ends, or meets its end-of-image marker, before the last
      // block ("premature end of data segment" at FF D9) is truncated.
      const std::string warning = want && (*want)["warnings"].is_string() ? (*want)["warnings"].get<std::string>() : "";
      const bool warned_truncated = warning.find("Premature end of JPEG file") != std::string::npos ||
                                    warning.find("premature end of data segment") != std::string::npos;
      if (warned_truncated) {
        // The default refuses a truncated JPEG; allow_truncated gives libjpeg's answer.
        try {
          analyzer_->analyze(request);
          ADD_FAILURE() << "a truncated JPEG was accepted without allow_truncated";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
          EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
        }
        request.mutable_options()->set_allow_truncated(true);
      }
      got = analyzer_->analyze(request);
      if (!want && beyond_opencv_tiff(ref)) {
        // OpenCV 4.6 cannot turn float64 RGB into BGR and refuses these;
        // libtiff reads them (tiff.hpp): ImageMagick's unnormalized figures.
        expect_matches_imagemagick(got, ref["imagemagick_hdri"]);
        ++fallback_matched;
        continue;
      }
      if (!want) {
        ADD_FAILURE() << "decoded a file whose reference says " << status << ": " << got.format() << " "
                      << got.width() << "x" << got.height();
        continue;
      }
      if (format != "raw") EXPECT_EQ(got.format(), format);
      expect_matches(got, *want);
      if ((*want)["warnings"].is_string()) {
        bool found = false;
        for (const auto& w : got.warnings()) found = found || (*want)["warnings"].get<std::string>().find(w) != std::string::npos;
        EXPECT_TRUE(found) << "expected the decoder warning \"" << (*want)["warnings"].get<std::string>() << "\"";
      }
      (ref["reference"].is_null() ? fallback_matched : matched)++;
    } catch (const Error& e) {
      if (want) {
        ADD_FAILURE() << "error for a file with a reference: " << e.what();
        continue;
      }
      EXPECT_TRUE(e.code() == ErrorCode::kInvalidArgument || e.code() == ErrorCode::kResourceExhausted)
          << "code " << static_cast<int>(e.code()) << ": " << e.what();
      EXPECT_GT(std::string(e.what()).size(), 10u) << "the message must say what is wrong";
      ++rejected;
    }
  }
  std::printf("corpus: %d files matched their reference, %d their ImageMagick fallback, %d rejected\n", matched,
              fallback_matched, rejected);
}

// Parts of every corpus image: a grid of one tile is the whole image's
// answer (its reference), a grid of 3x2 tiles shares out every pixel once,
// and an alpha channel as a mask selects no more than the image has.
TEST_F(CorpusTest, EveryFileByTilesAndByItsAlphaAnswersAsItsReference) {
  ASSERT_TRUE(analyzer_);
  int checked = 0;
  for (const json& ref : corpus_references()) {
    const std::string file = ref["file"], format = ref["format"];
    if (ref["reference"].is_null()) continue;
    if (format == "EXR" && std::getenv("IMGSTAT_STUBBED_LIBS")) continue;
    SCOPED_TRACE(file);
    const json& want = ref["reference"];
    v1::AnalyzeRequest request = request_for(ref);
    const std::string warning = want["warnings"].is_string() ? want["warnings"].get<std::string>() : "";
    if (warning.find("Premature end") != std::string::npos || warning.find("premature end") != std::string::npos)
      request.mutable_options()->set_allow_truncated(true);
    v1::AnalyzeRequest one = request;
    one.mutable_options()->mutable_parts()->mutable_tiles()->set_columns(1);
    one.mutable_options()->mutable_parts()->mutable_tiles()->set_rows(1);
    v1::AnalyzeResponse got;
    try {
      got = analyzer_->analyze(one);
    } catch (const Error& e) {
      // The bare CUDA engine leaves float images' parts to the CPU engine (a server's fallback).
      if (e.code() == ErrorCode::kUnimplemented && std::getenv("IMGSTAT_TEST_ENGINE")) continue;
      throw;
    }
    ASSERT_EQ(got.parts_size(), 1);
    v1::AnalyzeResponse as_whole = got;
    *as_whole.mutable_channels() = got.parts(0).channels();
    as_whole.clear_parts();
    expect_matches(as_whole, want);
    if (got.width() >= 3 && got.height() >= 2) {
      v1::AnalyzeRequest six = request;
      six.mutable_options()->mutable_parts()->mutable_tiles()->set_columns(3);
      six.mutable_options()->mutable_parts()->mutable_tiles()->set_rows(2);
      const v1::AnalyzeResponse tiles = analyzer_->analyze(six);
      ASSERT_EQ(tiles.parts_size(), 6);
      for (int c = 0; c < got.parts(0).channels_size(); ++c) {
        uint64_t total = 0;
        for (const v1::PartStats& p : tiles.parts())
          total += p.channels(c).count() + p.channels(c).nan_count() + p.channels(c).posinf_count() +
                   p.channels(c).neginf_count();
        EXPECT_EQ(total, got.width() * got.height()) << "channel " << c;
      }
    }
    if (got.channel_count() == 2 || got.channel_count() == 4) {
      v1::AnalyzeRequest alpha = request;
      alpha.mutable_options()->mutable_parts()->mutable_mask()->set_alpha(true);
      const v1::AnalyzeResponse masked = analyzer_->analyze(alpha);
      EXPECT_LE(masked.channels(0).count() + masked.channels(0).nan_count(), got.width() * got.height());
    }
    ++checked;
  }
  EXPECT_GT(checked, 150);
}

// The corpus' multi-page TIFFs: by default every page together, each
// page's own answer with planes.each, the first one its reference.
TEST_F(CorpusTest, MultiPageFilesAnswerEveryPageTheFirstAsItsReference) {
  ASSERT_TRUE(analyzer_);
  int checked = 0;
  for (const json& ref : corpus_references()) {
    const std::string file = ref["file"];
    if (ref["format"] != "TIFF" || file.find("multipage") == std::string::npos) continue;
    SCOPED_TRACE(file);
    v1::AnalyzeRequest request = request_for(ref);
    request.mutable_options()->clear_planes();
    const v1::AnalyzeResponse whole = analyzer_->analyze(request);
    request.mutable_options()->mutable_planes()->set_each(true);
    const v1::AnalyzeResponse each = analyzer_->analyze(request);
    EXPECT_EQ(whole.facts().planes(), 2u);
    ASSERT_EQ(each.planes_size(), 2);
    for (int c = 0; c < whole.channels_size(); ++c) {
      const v1::ChannelStats& w = whole.channels(c);
      const v1::ChannelStats &p0 = each.planes(0).channels(c), &p1 = each.planes(1).channels(c);
      EXPECT_EQ(w.count(), p0.count() + p1.count());
      EXPECT_EQ(w.min(), std::min(p0.min(), p1.min()));
      EXPECT_EQ(w.max(), std::max(p0.max(), p1.max()));
      if (w.has_sum_int()) EXPECT_EQ(w.sum_int(), p0.sum_int() + p1.sum_int());
      else EXPECT_NEAR(w.sum(), p0.sum() + p1.sum(), 1e-12 * std::abs(w.sum()));
      const json* want = ref["reference"].is_null() ? nullptr : &ref["reference"];
      if (want && w.has_sum_int()) EXPECT_EQ(p0.sum_int(), (*want)["stats"][c]["sum"].get<int64_t>());
    }
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

}  // namespace
}  // namespace imgstat::testing
