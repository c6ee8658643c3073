// nvJPEG against libjpeg-turbo (through OpenCV) on every corpus JPEG, the
// batching window, and the analyzer's GPU path against its CPU path. Skips
// where there is no GPU or no libnvjpeg.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <cstring>
#include <future>
#include <random>
#include <thread>

#include "core/analyzer.hpp"
#include "corpus.hpp"
#include "decode/decode.hpp"
#include "decode/jpeg/gpu.hpp"
#include "decode/jpeg/verify.hpp"
#include <google/protobuf/util/message_differencer.h>

#include "jpeg_samples.hpp"
#include "test_images.hpp"

namespace imgstat::testing {
namespace {

// The GPU decoder's pixels are libjpeg-turbo's: nvJPEG's planes upsampled
// and converted as libjpeg-turbo does (gpu_check.cu). No difference at all.
constexpr int kStatedBound = 0;

std::vector<uint8_t> to_host(const GpuDecodedImage& g) {
  const Layout& l = g.view.layout;
  std::vector<uint8_t> out(l.pixels() * l.pixel_bytes());
  EXPECT_EQ(cudaMemcpy(out.data(), g.view.data, out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

class GpuJpegTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_corpus()) GTEST_SKIP() << "no corpus";
    std::string why;
    EngineOptions o;
    o.kind = EngineKind::kCuda;
    try {
      engine_ = make_engine(o);
    } catch (const Error& e) {
      GTEST_SKIP() << "no CUDA engine: " << e.what();
    }
    GpuJpegOptions j;
    j.batch_window = window_;
    decoder_ = open_gpu_jpeg_decoder(j, &why);
    if (!decoder_) GTEST_SKIP() << "no GPU JPEG decoder: " << why;
    std::printf("%s\n", decoder_->description().c_str());
  }

  static std::vector<std::filesystem::path> corpus_jpegs() {
    std::vector<std::filesystem::path> out;
    for (const auto& e : std::filesystem::recursive_directory_iterator(corpus_dir())) {
      if (!e.is_regular_file()) continue;
      const std::string data = slurp_file(e.path().string());
      if (data.size() > 3 && static_cast<uint8_t>(data[0]) == 0xff && static_cast<uint8_t>(data[1]) == 0xd8 &&
          static_cast<uint8_t>(data[2]) == 0xff)
        out.push_back(e.path());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  std::chrono::microseconds window_{1000};
  std::shared_ptr<Engine> engine_;
  std::shared_ptr<GpuJpegDecoder> decoder_;
};

TEST_F(GpuJpegTest, EveryCorpusJpegAgainstLibjpegTurbo) {
  int compared = 0, on_cpu = 0, refused = 0, identical = 0, worst = 0;
  for (const auto& path : corpus_jpegs()) {
    const std::string data = slurp_file(path.string());
    const auto* bytes = reinterpret_cast<const uint8_t*>(data.data());
    DecodedImage cpu;
    try {
      cpu = decode_image(bytes, data.size(), DecodeOptions{});
    } catch (const Error& e) {
      ++refused;  // bad files: the GPU path runs the same check first and refuses them alike
      continue;
    }
    if (cpu.view.layout.type != SampleType::kUint8) continue;  // 12-bit: nvJPEG decodes 8-bit only
    GpuDecodedImage gpu;
    try {
      auto ticket = decoder_->announce();
      gpu = decoder_->decode(*ticket, bytes, data.size());
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnimplemented) << path << ": " << e.what();
      std::printf("%-48s on the CPU: %s\n", path.filename().c_str(), e.what());
      ++on_cpu;
      continue;
    }
    const Layout& g = gpu.view.layout;
    const Layout& c = cpu.view.layout;
    ASSERT_EQ(g.width, c.width) << path;
    ASSERT_EQ(g.height, c.height) << path;
    ASSERT_EQ(g.channels, c.channels) << path;
    const std::vector<uint8_t> px = to_host(gpu);
    int max_diff = 0;
    uint64_t differ = 0, total = 0;
    const auto* base = static_cast<const uint8_t*>(cpu.view.data);
    for (uint64_t y = 0; y < c.height; ++y)
      for (uint64_t x = 0; x < c.width; ++x)
        for (uint32_t ch = 0; ch < c.channels; ++ch) {
          // nvJPEG's R,G,B against the CPU decoder's reported channel ch.
          const int a = px[(y * c.width + x) * c.channels + ch];
          const int b = base[y * c.stride() + x * c.channels + cpu.channel_order[ch]];
          const int d = std::abs(a - b);
          if (d) ++differ;
          total += d;
          max_diff = std::max(max_diff, d);
        }
    const uint64_t samples = c.pixels() * c.channels;
    std::printf("%-48s %-16s %5llux%-5llu max |diff| %3d, mean |diff| %.3f, %6.2f%% of samples differ\n",
                path.filename().c_str(), gpu.decoder.c_str(), static_cast<unsigned long long>(c.width),
                static_cast<unsigned long long>(c.height), max_diff, static_cast<double>(total) / samples,
                100.0 * differ / samples);
    EXPECT_LE(max_diff, kStatedBound) << path;
    worst = std::max(worst, max_diff);
    identical += max_diff == 0;
    ++compared;
  }
  std::printf("SUMMARY nvJPEG vs libjpeg-turbo: %d JPEGs compared, %d identical, largest difference %d; %d went to "
              "the CPU decoder, %d refused by the check\n",
              compared, identical, worst, on_cpu, refused);
  EXPECT_GE(compared, 8);  // the corpus's baseline JPEGs that are not CMYK, Adobe-transformed or 2x2 gray
}

TEST_F(GpuJpegTest, EngineOnDeviceImagesMatchesTheCpuEngineOnTheSamePixels) {
  auto cpu = make_cpu_engine();
  int n = 0;
  for (const auto& path : corpus_jpegs()) {
    const std::string data = slurp_file(path.string());
    GpuDecodedImage gpu;
    try {
      auto ticket = decoder_->announce();
      gpu = decoder_->decode(*ticket, reinterpret_cast<const uint8_t*>(data.data()), data.size());
    } catch (const Error&) {
      continue;
    }
    const std::vector<uint8_t> px = to_host(gpu);
    for (uint32_t bins : {256u, 100u}) {
      StatsRequest r;
      r.hist.bins = bins;
      const Result on_gpu = engine_->analyze_device(gpu.view, r);
      EXPECT_EQ(on_gpu.engine, "cuda");
      expect_same_stats(on_gpu, cpu->analyze(ImageView{px.data(), gpu.view.layout}, r), SampleType::kUint8);
    }
    // Quality measures of the pixels on the device: the CPU engine's bits.
    StatsRequest q;
    q.quality = true;
    const Result qg = engine_->analyze_device(gpu.view, q);
    const Result qc = cpu->analyze(ImageView{px.data(), gpu.view.layout}, q);
    ASSERT_TRUE(qg.has_quality && qc.has_quality) << path;
    EXPECT_EQ(qg.quality.laplacian_variance, qc.quality.laplacian_variance) << path;
    EXPECT_EQ(qg.quality.rms_contrast, qc.quality.rms_contrast) << path;
    EXPECT_EQ(qg.quality.colourfulness, qc.quality.colourfulness) << path;
    EXPECT_EQ(qg.quality.share_at_max, qc.quality.share_at_max) << path;
    EXPECT_EQ(qg.quality.cleanvision.brightness_percentiles, qc.quality.cleanvision.brightness_percentiles) << path;
    EXPECT_EQ(qg.quality.cleanvision.blurriness, qc.quality.cleanvision.blurriness) << path;
    EXPECT_EQ(qg.quality.cleanvision.entropy, qc.quality.cleanvision.entropy) << path;
    if (++n == 40) break;
  }
  EXPECT_GT(n, 10);
}

TEST_F(GpuJpegTest, ALoneRequestDoesNotWaitTheWindow) {
  decoder_.reset();
  GpuJpegOptions j;
  j.batch_window = std::chrono::seconds(5);  // far longer than any decode
  std::string why;
  decoder_ = open_gpu_jpeg_decoder(j, &why);
  ASSERT_TRUE(decoder_) << why;
  const auto path = corpus_jpegs().front();
  const std::string file = slurp_file(path.string());
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) {
    auto ticket = decoder_->announce();
    try {
      decoder_->decode(*ticket, reinterpret_cast<const uint8_t*>(file.data()), file.size());
    } catch (const Error&) {
    }
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4));
}

TEST_F(GpuJpegTest, ABurstOf64DecodesAlikeInBatches) {
  // 64 callers at once, each announcing first as the analyzer does: every
  // one gets the pixels a lone decode gives.
  std::vector<std::string> files;
  for (const auto& path : corpus_jpegs()) {
    const std::string data = slurp_file(path.string());
    try {
      // What the analyzer lets through to the GPU: files the check passes.
      if (check_jpeg_data(reinterpret_cast<const uint8_t*>(data.data()), data.size(), DecodeOptions{}).truncated)
        continue;
      auto ticket = decoder_->announce();
      decoder_->decode(*ticket, reinterpret_cast<const uint8_t*>(data.data()), data.size());
      files.push_back(data);
    } catch (const Error&) {
    }
    if (files.size() == 16) break;
  }
  ASSERT_FALSE(files.empty());
  std::vector<std::vector<uint8_t>> alone;
  for (const std::string& f : files) {
    auto ticket = decoder_->announce();
    alone.push_back(to_host(decoder_->decode(*ticket, reinterpret_cast<const uint8_t*>(f.data()), f.size())));
  }
  std::vector<std::thread> callers;
  std::atomic<int> same{0};
  for (int i = 0; i < 64; ++i)
    callers.emplace_back([&, i] {
      const std::string& f = files[i % files.size()];
      auto ticket = decoder_->announce();
      std::this_thread::sleep_for(std::chrono::microseconds(100 * (i % 5)));  // checks of different lengths
      const GpuDecodedImage g = decoder_->decode(*ticket, reinterpret_cast<const uint8_t*>(f.data()), f.size());
      if (to_host(g) == alone[i % files.size()])
        ++same;
      else
        std::printf("burst caller %d, file %zu (%s): pixels differ from its lone decode\n", i, i % files.size(),
                    g.decoder.c_str());
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(same.load(), 64);
}

TEST_F(GpuJpegTest, TruncatedJpegsAreRefusedAsOnTheCpu) {
  // Half a JPEG with an end-of-image marker appended, and the corpus's cut
  // files: the GPU path runs libjpeg's check first, so they are refused (or,
  // with allow_truncated, analyzed on the CPU) exactly as before. What
  // nvJPEG alone makes of them is printed: it is why the check stays.
  Analyzer analyzer(engine_, Limits{}, decoder_);
  std::vector<std::string> cut;
  for (const auto& path : corpus_jpegs()) {
    const std::string whole = slurp_file(path.string());
    if (whole.size() < 2000) continue;
    try {  // as decode_test: whole files the check passes, arithmetic coding aside
      check_jpeg_data(reinterpret_cast<const uint8_t*>(whole.data()), whole.size(), DecodeOptions{});
      if (read_jpeg_header(reinterpret_cast<const uint8_t*>(whole.data()), whole.size(), uint64_t{1} << 40).arithmetic)
        continue;
    } catch (const Error&) {
      continue;
    }
    std::string half = whole.substr(0, whole.size() / 2) + "\xff\xd9";
    cut.push_back(half);
  }
  ASSERT_FALSE(cut.empty());
  int refused = 0;
  for (const std::string& data : cut) {
    v1::AnalyzeRequest req;
    req.mutable_input()->set_data(data);
    try {
      analyzer.analyze(req);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      ++refused;
    }
    req.mutable_options()->set_allow_truncated(true);
    try {
      EXPECT_EQ(analyzer.analyze(req).decoder(), "libjpeg-turbo");
    } catch (const Error&) {
    }
    // Without the end marker too, and cut at 90%: would nvJPEG's own status do?
    const std::string bare = data.substr(0, data.size() - 2);
    for (const std::string* variant : {&data, &bare}) {
      std::string alone;
      try {
        auto ticket = decoder_->announce();
        alone = "decoded by " +
                decoder_->decode(*ticket, reinterpret_cast<const uint8_t*>(variant->data()), variant->size()).decoder;
      } catch (const Error& e) {
        alone = std::string("refused: ") + e.what();
      }
      std::printf("NVJPEG-ALONE %s: %s\n", variant == &data ? "half + EOI" : "half, no EOI", alone.c_str());
    }
  }
  EXPECT_EQ(refused, static_cast<int>(cut.size()));
}

// The real decoder, whose every third decode is lost after the batch ran
// (as a device that fails mid-batch): the callers it fails are decoded again
// on the CPU, the others keep the GPU's answer, and none is lost.
class LosingDecoder final : public GpuJpegDecoder {
 public:
  explicit LosingDecoder(std::shared_ptr<GpuJpegDecoder> real) : real_(std::move(real)) {}
  std::unique_ptr<Ticket> announce() override { return real_->announce(); }
  GpuDecodedImage decode(Ticket& ticket, const uint8_t* data, size_t size) override {
    GpuDecodedImage image = real_->decode(ticket, data, size);
    if (++calls_ % 3 == 0) {
      ++lost_;
      fail(ErrorCode::kUnavailable, "the device was lost (injected)");
    }
    return image;
  }
  std::string description() const override { return real_->description(); }
  int lost() const { return lost_; }

 private:
  std::shared_ptr<GpuJpegDecoder> real_;
  std::atomic<int> calls_{0}, lost_{0};
};

TEST_F(GpuJpegTest, ADeviceLostMidBatchLosesNoCall) {
  auto losing = std::make_shared<LosingDecoder>(decoder_);
  Analyzer gpu(engine_, Limits{}, losing);
  Analyzer cpu(engine_, Limits{}, nullptr);
  std::vector<std::string> files;
  for (const auto& path : corpus_jpegs()) {
    v1::AnalyzeRequest req;
    req.mutable_input()->set_data(slurp_file(path.string()));
    try {
      if (gpu.analyze(req).decoder().rfind("nvjpeg", 0) == 0) files.push_back(req.input().data());
    } catch (const Error&) {
    }
  }
  ASSERT_GT(files.size(), 5u);
  const int before = losing->lost();
  std::vector<std::thread> callers;
  std::atomic<int> on_cpu{0}, on_gpu{0}, wrong{0};
  for (int i = 0; i < 48; ++i)
    callers.emplace_back([&, i] {
      v1::AnalyzeRequest req;
      req.mutable_input()->set_data(files[i % files.size()]);
      const v1::AnalyzeResponse got = gpu.analyze(req);  // throws: the test fails
      const v1::AnalyzeResponse want = cpu.analyze(req);
      if (got.decoder() == "libjpeg-turbo") {
        ++on_cpu;
        for (int c = 0; c < want.channels_size(); ++c)
          if (got.channels(c).SerializeAsString() != want.channels(c).SerializeAsString()) ++wrong;
      } else {
        ++on_gpu;
        for (int c = 0; c < want.channels_size(); ++c)
          if (std::abs(got.channels(c).mean() - want.channels(c).mean()) > kStatedBound) ++wrong;
      }
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(on_cpu + on_gpu, 48);
  EXPECT_EQ(on_cpu.load(), losing->lost() - before);
  EXPECT_GT(on_cpu.load(), 10);
  EXPECT_EQ(wrong.load(), 0);
}

// One GPU listed twice (--cuda-devices 0,0): two engines and two decoders,
// each with lanes of its own, behind one placement. Every corpus JPEG from
// many callers at once: decoded and computed on both slots, answers the CPU
// decoder's to the last count; a slot taken out gets nothing more.
TEST_F(GpuJpegTest, OneGpuListedTwiceDecodesOnBothSlotsAsTheCpuDoes) {
  EngineOptions o;
  o.kind = EngineKind::kCuda;
  o.cuda_devices = {0, 0};
  std::shared_ptr<Engine> twice = make_engine(o);
  const std::shared_ptr<Placement> placement = twice->placement();
  ASSERT_TRUE(placement);
  ASSERT_EQ(placement->size(), 2u);
  std::vector<std::unique_ptr<GpuJpegDecoder>> decoders;
  for (int i = 0; i < 2; ++i) {
    std::string why;
    decoders.push_back(open_gpu_jpeg_decoder(GpuJpegOptions{}, &why));
    ASSERT_TRUE(decoders.back()) << why;
  }
  Analyzer gpu(twice, Limits{}, make_placed_gpu_jpeg_decoder(std::move(decoders), placement));
  Analyzer cpu(make_cpu_engine(), Limits{}, nullptr);
  std::vector<std::string> files;
  for (const auto& path : corpus_jpegs()) files.push_back(slurp_file(path.string()));
  auto run = [&](int callers, int each) {
    std::atomic<int> wrong{0}, on_gpu{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < callers; ++t)
      threads.emplace_back([&, t] {
        for (int i = 0; i < each; ++i) {
          v1::AnalyzeRequest req;
          req.mutable_input()->set_data(files[(t * each + i) % files.size()]);
          v1::AnalyzeResponse got, want;
          try {
            got = gpu.analyze(req);
          } catch (const Error& e) {
            try {
              cpu.analyze(req);
              ++wrong;  // refused on one path only
            } catch (const Error& c) {
              if (c.code() != e.code()) ++wrong;
            }
            continue;
          }
          want = cpu.analyze(req);
          if (got.decoder().rfind("nvjpeg", 0) == 0) {
            ++on_gpu;
            if (!got.has_device() || got.device() != 0) ++wrong;
          }
          for (int c = 0; c < want.channels_size(); ++c)
            if (got.channels(c).SerializeAsString() != want.channels(c).SerializeAsString()) ++wrong;
        }
      });
    for (auto& th : threads) th.join();
    EXPECT_EQ(wrong.load(), 0);
    return on_gpu.load();
  };
  EXPECT_GT(run(16, 24), 100);
  std::vector<GpuStatus> s = placement->status();
  EXPECT_GT(s[0].images, 20u);
  EXPECT_GT(s[1].images, 20u);
  EXPECT_EQ(s[0].in_flight + s[1].in_flight, 0u);
  placement->take_out(1, "taken out by the test");
  const uint64_t before = s[1].images;
  EXPECT_GT(run(8, 8), 10);
  s = placement->status();
  EXPECT_EQ(s[1].images, before);
  EXPECT_FALSE(s[1].in_service);
  std::printf("GPU 0 listed twice: slot 0 %llu images, slot 1 %llu\n", static_cast<unsigned long long>(s[0].images),
              static_cast<unsigned long long>(s[1].images));
}

TEST_F(GpuJpegTest, TheAnalyzerSaysWhichDecoderRanAndHonoursTheChoice) {
  Analyzer analyzer(engine_, Limits{}, decoder_);
  int gpu_answers = 0;
  for (const auto& path : corpus_jpegs()) {
    v1::AnalyzeRequest req;
    req.mutable_input()->set_data(slurp_file(path.string()));
    v1::AnalyzeResponse cpu_r, auto_r;
    try {
      req.mutable_options()->set_decoder(v1::DECODER_CHOICE_CPU);
      cpu_r = analyzer.analyze(req);
    } catch (const Error& e) {
      // A bad file is refused alike whichever decoder is asked for.
      req.mutable_options()->set_decoder(v1::DECODER_CHOICE_AUTO);
      try {
        analyzer.analyze(req);
        ADD_FAILURE() << path << " refused on the CPU path only";
      } catch (const Error& g) {
        EXPECT_EQ(g.code(), e.code()) << path;
      }
      continue;
    }
    EXPECT_NE(cpu_r.decoder().find("libjpeg"), std::string::npos) << path;
    req.mutable_options()->set_decoder(v1::DECODER_CHOICE_AUTO);
    auto_r = analyzer.analyze(req);
    EXPECT_EQ(auto_r.width(), cpu_r.width());
    EXPECT_EQ(auto_r.channel_count(), cpu_r.channel_count());
    ASSERT_EQ(auto_r.channels_size(), cpu_r.channels_size());
    for (int c = 0; c < cpu_r.channels_size(); ++c) {
      // Identical pixels: identical answers, whichever decoder ran.
      const v1::ChannelStats& g = auto_r.channels(c);
      const v1::ChannelStats& w = cpu_r.channels(c);
      EXPECT_EQ(g.name(), w.name());
      EXPECT_EQ(g.count(), w.count());
      EXPECT_EQ(g.min(), w.min()) << path;
      EXPECT_EQ(g.max(), w.max()) << path;
      EXPECT_EQ(g.sum_int(), w.sum_int()) << path;
      EXPECT_EQ(g.mean(), w.mean()) << path;
      EXPECT_NEAR(g.stddev(), w.stddev(), 1e-12 * std::max(1.0, w.stddev())) << path;
      EXPECT_TRUE(std::equal(g.histogram().counts().begin(), g.histogram().counts().end(),
                             w.histogram().counts().begin(), w.histogram().counts().end()))
          << path;
    }
    if (auto_r.decoder().rfind("nvjpeg", 0) == 0) {
      ++gpu_answers;
      EXPECT_EQ(auto_r.engine(), "cuda");
      req.mutable_options()->set_decoder(v1::DECODER_CHOICE_GPU);
      EXPECT_EQ(analyzer.analyze(req).decoder(), auto_r.decoder());
    }
  }
  EXPECT_GE(gpu_answers, 8);
}

// Masks, labels and tiles of a JPEG the GPU decodes are counted there from
// its pixels: the whole answer equals the one from libjpeg-turbo's pixels on
// the host, field for field (only the decoder and the times differ).
TEST_F(GpuJpegTest, PartsOfGpuDecodedJpegsAnswerAsTheCpuDecodersPixels) {
  Analyzer analyzer(engine_, Limits{}, decoder_);
  std::mt19937_64 rng(52);
  int compared = 0;
  for (const auto& path : corpus_jpegs()) {
    v1::AnalyzeRequest req;
    req.mutable_input()->set_data(slurp_file(path.string()));
    v1::AnalyzeResponse whole;
    try {
      whole = analyzer.analyze(req);
    } catch (const Error&) {
      continue;  // refused alike (TheAnalyzerSaysWhichDecoderRanAndHonoursTheChoice)
    }
    if (whole.decoder().rfind("nvjpeg", 0) != 0) continue;
    const uint32_t w = whole.width(), h = whole.height();
    std::string mask(uint64_t{w} * h, '\0'), labels(uint64_t{w} * h * 2, '\0');
    for (char& m : mask) m = static_cast<char>(rng() % 2 ? 255 : 0);
    for (uint64_t i = 0; i < uint64_t{w} * h; ++i) {
      const uint16_t v = static_cast<uint16_t>(rng() % 7 + (i % w) / std::max(1u, w / 3) * 100);
      std::memcpy(&labels[i * 2], &v, 2);
    }
    auto raw_map = [&](v1::Input* map, const std::string& bytes, v1::SampleType type) {
      map->set_kind(v1::INPUT_KIND_RAW);
      map->mutable_raw()->set_width(w);
      map->mutable_raw()->set_height(h);
      map->mutable_raw()->set_channels(1);
      map->mutable_raw()->set_sample_type(type);
      map->set_data(bytes);
    };
    std::vector<v1::AnalyzeRequest> asked(3, req);
    raw_map(asked[0].mutable_options()->mutable_parts()->mutable_mask()->mutable_image(), mask, v1::SAMPLE_TYPE_UINT8);
    raw_map(asked[1].mutable_options()->mutable_parts()->mutable_labels()->mutable_image(), labels,
            v1::SAMPLE_TYPE_UINT16);
    asked[1].mutable_options()->mutable_parts()->mutable_labels()->set_ignore(3);
    asked[2].mutable_options()->mutable_parts()->mutable_tiles()->set_columns(std::min(w, 5u));
    asked[2].mutable_options()->mutable_parts()->mutable_tiles()->set_rows(std::min(h, 3u));
    for (v1::AnalyzeRequest& a : asked) {
      SCOPED_TRACE(path.string() + " " + a.options().parts().ShortDebugString().substr(0, 40));
      a.mutable_options()->set_decoder(v1::DECODER_CHOICE_GPU);
      v1::AnalyzeResponse gpu = analyzer.analyze(a);
      a.mutable_options()->set_decoder(v1::DECODER_CHOICE_CPU);
      v1::AnalyzeResponse cpu = analyzer.analyze(a);
      EXPECT_EQ(gpu.decoder(), whole.decoder());
      EXPECT_NE(cpu.decoder().find("libjpeg"), std::string::npos);
      if (a.options().parts().has_tiles()) EXPECT_EQ(gpu.parts_size(), a.options().parts().tiles().columns() * a.options().parts().tiles().rows());
      for (v1::AnalyzeResponse* r : {&gpu, &cpu}) {
        r->clear_decoder();
        r->clear_decode_time();
        r->clear_compute_time();
      }
      EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(gpu, cpu))
          << gpu.ShortDebugString().substr(0, 400) << "\n" << cpu.ShortDebugString().substr(0, 400);
    }
    if (++compared == 12) break;
  }
  EXPECT_GE(compared, 8);
}

}  // namespace
}  // namespace imgstat::testing

namespace imgstat::testing {
namespace {

// Every sampling libjpeg-turbo writes, odd sizes, restart intervals: the
// GPU's pixels equal libjpeg-turbo's (through OpenCV) sample for sample, and
// the GPU's check gives the host check's verdict (jpeg_verify_test holds that
// to libjpeg's) on each file cut and bit-flipped.
TEST_F(GpuJpegTest, GeneratedJpegsPixelsIdenticalAndChecksAgreeWhenCutOrFlipped) {
  const std::pair<int, int> sizes[] = {{1, 1}, {7, 7}, {17, 5}, {33, 33}, {101, 61}, {1001, 667}};
  int identical = 0, checked = 0, left_to_cpu = 0;
  uint32_t seed = 11;
  for (const JpegSampling& s : jpeg_samplings())
    for (const auto& [w, h] : sizes)
      for (int restart : {0, 2}) {
        const std::string f = write_jpeg(w, h, s, restart, 88, seed++);
        const auto started = std::chrono::steady_clock::now();
        const std::string name = std::string(s.name) + " " + std::to_string(w) + "x" + std::to_string(h) + " restart " +
                                 std::to_string(restart);
        const auto* bytes = reinterpret_cast<const uint8_t*>(f.data());
        GpuDecodedImage gpu;
        try {
          auto ticket = decoder_->announce();
          gpu = decoder_->decode(*ticket, bytes, f.size());
        } catch (const Error& e) {
          std::printf("%-28s on the CPU: %s\n", name.c_str(), e.what());
          ++left_to_cpu;
          continue;
        }
        const DecodedImage cpu = decode_image(bytes, f.size(), DecodeOptions{});
        const Layout& c = cpu.view.layout;
        ASSERT_EQ(gpu.view.layout.width, c.width) << name;
        ASSERT_EQ(gpu.view.layout.channels, c.channels) << name;
        const std::vector<uint8_t> px = to_host(gpu);
        const auto* base = static_cast<const uint8_t*>(cpu.view.data);
        uint64_t differ = 0;
        for (uint64_t y = 0; y < c.height; ++y)
          for (uint64_t x = 0; x < c.width; ++x)
            for (uint32_t ch = 0; ch < c.channels; ++ch)
              differ += px[(y * c.width + x) * c.channels + ch] != base[y * c.stride() + x * c.channels + cpu.channel_order[ch]];
        EXPECT_EQ(differ, 0u) << name;
        identical += differ == 0;
        // Damaged versions go up 32 at a time from as many threads, so that
        // they share batches: files cut, flipped and whole side by side in one
        // batched check must each get their own verdict.
        std::vector<std::string> damaged;
        int n_damaged = 0;
        for (std::string& g : damaged_jpegs(f, seed, 24))
          if (++n_damaged % 2 == 0) damaged.push_back(std::move(g));
        for (size_t from = 0; from < damaged.size(); from += 32) {
          const size_t to = std::min(damaged.size(), from + 32);
          std::vector<std::unique_ptr<GpuJpegDecoder::Ticket>> tickets;
          for (size_t i = from; i < to; ++i) tickets.push_back(decoder_->announce());
          std::vector<std::future<GpuDecodedImage>> results;
          for (size_t i = from; i < to; ++i)
            results.push_back(std::async(std::launch::async, [&, i] {
              const std::string& g = damaged[i];
              return decoder_->decode(*tickets[i - from], reinterpret_cast<const uint8_t*>(g.data()), g.size());
            }));
          for (size_t i = from; i < to; ++i) {
            const std::string& g = damaged[i];
            bool covered = false;
            const JpegCheck host = verify_jpeg_on_host(reinterpret_cast<const uint8_t*>(g.data()), g.size(), &covered);
            try {
              const GpuDecodedImage got = results[i - from].get();
              ASSERT_TRUE(covered) << name << ": the GPU vouched for a file the host check leaves to libjpeg";
              EXPECT_EQ(got.check.truncated, host.truncated) << name << " damaged #" << i;
              EXPECT_EQ(got.check.corrupt, host.corrupt) << name << " damaged #" << i;
              EXPECT_EQ(got.check.corrupt_reason, host.corrupt_reason) << name << " damaged #" << i;
              ++checked;
            } catch (const Error& e) {
              EXPECT_EQ(e.code(), ErrorCode::kUnimplemented) << name << ": " << e.what();
            }
          }
        }
        std::printf("%-28s identical %s, %zu damaged versions in %.0f ms\n", name.c_str(), identical ? "so far" : "-",
                    damaged.size(), std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count());
        std::fflush(stdout);
      }
  std::printf("SUMMARY generated JPEGs: %d decoded identical to libjpeg-turbo, %d left to the CPU; %d damaged files "
              "checked on the GPU alike\n",
              identical, left_to_cpu, checked);
  EXPECT_GE(identical, 60);
  EXPECT_GT(checked, 500);
}

}  // namespace
}  // namespace imgstat::testing
