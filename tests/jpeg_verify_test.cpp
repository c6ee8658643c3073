// The entropy verifier (the GPU's algorithm, run on the host) against
// libjpeg's check, file by file: the corpus, every sampling libjpeg-turbo
// writes at odd sizes with and without restart markers, and each of them cut
// and bit-flipped.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "corpus.hpp"
#include "decode/jpeg/verify.hpp"
#include "jpeg_samples.hpp"

namespace imgstat::testing {
namespace {

struct Tally {
  int covered = 0, not_covered = 0, whole = 0, truncated = 0, corrupt = 0;
};

// Where the verifier vouches for a file, libjpeg says the same: the same
// class, the same reason, and no warning on a whole file.
void expect_agreement(const std::string& f, const std::string& what, Tally& t) {
  const auto* d = reinterpret_cast<const uint8_t*>(f.data());
  bool covered = false;
  const JpegCheck ours = verify_jpeg_on_host(d, f.size(), &covered);
  if (!covered) {
    ++t.not_covered;
    return;
  }
  ++t.covered;
  const JpegCheck lib = check_jpeg(d, f.size());
  const std::string a = verdict_text(ours), b = verdict_text(lib);
  EXPECT_EQ(a, b) << what << " (" << f.size() << " bytes)";
  if (a != b) return;
  if (ours.corrupt) ++t.corrupt;
  else if (ours.truncated) ++t.truncated;
  else ++t.whole;
}

void print(const char* name, const Tally& t) {
  std::printf("%-28s covered %5d (whole %5d, truncated %5d, corrupt %5d), left to libjpeg %5d\n", name, t.covered, t.whole,
              t.truncated, t.corrupt, t.not_covered);
}

TEST(JpegVerify, EverySamplingSizeAndRestartIntervalWholeCutAndFlipped) {
  Tally t;
  const std::pair<int, int> sizes[] = {{1, 1}, {7, 7}, {17, 5}, {33, 33}, {100, 61}, {257, 129}};
  uint32_t seed = 1;
  for (const JpegSampling& s : jpeg_samplings())
    for (const auto& [w, h] : sizes)
      for (int restart : {0, 1, 3}) {
        const std::string f = write_jpeg(w, h, s, restart, 90, seed++);
        const std::string name = std::string(s.name) + " " + std::to_string(w) + "x" + std::to_string(h) + " restart " +
                                 std::to_string(restart);
        Tally whole;
        expect_agreement(f, name, whole);
        EXPECT_EQ(whole.whole, 1) << name << ": a file libjpeg-turbo wrote is covered and whole";
        t.whole += whole.whole;
        t.covered += whole.covered;
        int i = 0;
        for (const std::string& g : damaged_jpegs(f, seed, w * h > 1000 ? 48 : 8))
          expect_agreement(g, name + " damaged #" + std::to_string(i++), t);
      }
  print("generated, whole + damaged", t);
  // The comparison means something only where the verifier decided.
  EXPECT_GT(t.truncated, 1000);
  EXPECT_GT(t.corrupt, 10);
  EXPECT_GT(t.covered, t.not_covered);
}

TEST(JpegVerify, EveryCorpusJpegWholeCutAndFlipped) {
  if (!have_corpus()) GTEST_SKIP() << "no corpus";
  Tally t;
  int files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(corpus_dir())) {
    if (!e.is_regular_file()) continue;
    const std::string f = slurp_file(e.path().string());
    if (f.size() < 3 || static_cast<uint8_t>(f[0]) != 0xff || static_cast<uint8_t>(f[1]) != 0xd8) continue;
    ++files;
    expect_agreement(f, e.path().filename().string(), t);
    int i = 0;
    for (const std::string& g : damaged_jpegs(f, static_cast<uint32_t>(f.size()), 64))
      expect_agreement(g, e.path().filename().string() + " damaged #" + std::to_string(i++), t);
  }
  print("corpus, whole + damaged", t);
  EXPECT_GE(files, 20);
  EXPECT_GT(t.covered, 1000);
}

TEST(JpegVerify, RoundsResynchronizeALargeFileWithoutRestartMarkers) {
  const std::string f = write_jpeg(1001, 667, jpeg_samplings()[2], 0, 92, 7);
  bool covered = false;
  int rounds = -1;
  const JpegCheck c = verify_jpeg_on_host(reinterpret_cast<const uint8_t*>(f.data()), f.size(), &covered, &rounds);
  ASSERT_TRUE(covered);
  EXPECT_FALSE(c.truncated || c.corrupt);
  std::printf("%zu bytes, %zu subsequences: %d rounds after the first decode\n", f.size(),
              (f.size() + jpeg::kSubsequenceBytes - 1) / jpeg::kSubsequenceBytes, rounds);
  // Each round puts most of the rest in step: a few rounds, not one per subsequence.
  EXPECT_LE(rounds, 12);
}

// Headers that libjpeg refuses (jdmarker.c's exact lengths, an undefined
// quantization table, a marker it does not know) are left to it: the GPU
// path must never call such a file cut or whole. The first was found by
// fuzz_jpeg_verify: a scan header five bytes long too.
TEST(JpegVerify, HeadersLibjpegRefusesAreLeftToIt) {
  const std::string f = write_jpeg(33, 17, jpeg_samplings()[2], 2, 90, 3);
  auto find = [&](uint8_t marker) {
    for (size_t i = 2; i + 1 < f.size(); ++i)
      if (static_cast<uint8_t>(f[i]) == 0xff && static_cast<uint8_t>(f[i + 1]) == marker) return i;
    return std::string::npos;
  };
  // A segment lengthened by n bytes, its length field adjusted.
  auto lengthen = [&](uint8_t marker, size_t n) {
    std::string g = f;
    const size_t at = find(marker);
    const size_t len = (static_cast<uint8_t>(g[at + 2]) << 8 | static_cast<uint8_t>(g[at + 3])) + n;
    g[at + 2] = static_cast<char>(len >> 8);
    g[at + 3] = static_cast<char>(len & 0xff);
    g.insert(at + 4 + len - n - 2, std::string(n, '\0'));
    return g;
  };
  std::vector<std::pair<std::string, std::string>> cases = {
      {"scan header too long", lengthen(0xda, 5)},
      {"frame header too long", lengthen(0xc0, 3)},
      {"restart interval too long", lengthen(0xdd, 2)},
      {"quantization table too long", lengthen(0xdb, 7)},
  };
  {
    std::string g = f;  // the first component names quantization table 3, never defined
    const size_t sof = find(0xc0);
    g[sof + 4 + 6 + 2] = 3;
    cases.emplace_back("undefined quantization table", g);
  }
  {
    std::string g = f;  // the scan's second and third components swapped (found by fuzz_jpeg_verify)
    const size_t sos = find(0xda);
    ASSERT_EQ(static_cast<uint8_t>(g[sos + 4]), 3);
    std::swap(g[sos + 7], g[sos + 9]);
    std::swap(g[sos + 8], g[sos + 10]);
    cases.emplace_back("scan components out of the frame's order", g);
  }
  {
    std::string g = f;  // a reserved marker libjpeg does not know, with a plausible segment
    g.insert(2, std::string("\xff\xf3\x00\x04\x00\x00", 6));
    cases.emplace_back("unknown marker", g);
  }
  for (const auto& [what, g] : cases) {
    const auto* d = reinterpret_cast<const uint8_t*>(g.data());
    bool covered = true;
    verify_jpeg_on_host(d, g.size(), &covered);
    EXPECT_FALSE(covered) << what;
    EXPECT_FALSE(check_jpeg(d, g.size()).ok) << what << ": libjpeg takes it after all; then the check should too";
  }
  // A warning in the headers is left to libjpeg too, so that an answer's
  // warnings never depend on the decoder (also found by fuzz_jpeg_verify).
  std::string g = f;
  const size_t app0 = find(0xe0);
  ASSERT_NE(app0, std::string::npos);
  ASSERT_EQ(g.compare(app0 + 4, 5, std::string("JFIF\0", 5)), 0);
  g[app0 + 9] = 2;
  const auto* d = reinterpret_cast<const uint8_t*>(g.data());
  bool covered = true;
  verify_jpeg_on_host(d, g.size(), &covered);
  EXPECT_FALSE(covered);
  const JpegCheck lib = check_jpeg(d, g.size());
  EXPECT_TRUE(lib.ok);
  EXPECT_FALSE(lib.warnings.empty()) << "libjpeg no longer warns of a JFIF version 2";
}

// What fuzz_jpeg_verify found stays a test: every JPEG among the inputs
// fuzzers stopped on gets the same verdict from both checks.
TEST(JpegVerify, InputsTheDifferentialFuzzerStoppedOn) {
  Tally t;
  int jpegs = 0;
  for (const auto& e : std::filesystem::directory_iterator(IMGSTAT_FUZZ_CRASHES)) {
    const std::string f = slurp_file(e.path().string());
    if (f.size() < 3 || static_cast<uint8_t>(f[0]) != 0xff || static_cast<uint8_t>(f[1]) != 0xd8) continue;
    ++jpegs;
    expect_agreement(f, e.path().filename().string(), t);
  }
  EXPECT_GT(jpegs, 0);
}

}  // namespace
}  // namespace imgstat::testing
