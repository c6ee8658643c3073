// Encoded uploads spooled as they arrive (core/spool.hpp): a PNG decoded
// while its chunks come, a TIFF from the whole file, anything else held in
// memory. What a caller relies on: the same answer as one message, errors
// with the same words, memory that is not the file's, and a call that ends
// early leaving nothing behind.
#include <gtest/gtest.h>

#include <opencv2/imgcodecs.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <filesystem>
#include <random>
#include <thread>

#include "core/analyzer.hpp"
#include "core/guarded_map.hpp"
#include "core/spool.hpp"
#include "error_code.hpp"
#include "png_samples.hpp"

namespace imgstat::testing {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("imgstat-spool-test-" + std::to_string(::getpid()) + "-" +
                                        std::to_string(std::random_device{}()));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::unique_ptr<Analyzer> analyzer_with(const std::string& spool_dir, uint64_t max_spool_bytes = 0,
                                        uint64_t max_pixels = uint64_t{1} << 30) {
  Limits limits;
  limits.spool_dir = spool_dir;
  limits.max_spool_bytes = max_spool_bytes;
  limits.max_pixels = max_pixels;
  return std::make_unique<Analyzer>(make_cpu_engine(), limits);
}

// The answer without its timings.
std::string answer_of(v1::AnalyzeResponse r) {
  r.clear_decode_time();
  r.clear_compute_time();
  return r.DebugString();
}

struct Outcome {
  bool ok = false;
  std::string answer;  // or the error's words
  ErrorCode code = ErrorCode::kInternal;
};

Outcome whole(const Analyzer& a, const std::string& file) {
  Outcome o;
  v1::AnalyzeRequest r;
  r.mutable_input()->set_data(file);
  try {
    o.answer = answer_of(a.analyze(r));
    o.ok = true;
  } catch (const Error& e) {
    o.code = e.code();
    o.answer = e.what();
  }
  return o;
}

// The file in chunks of random sizes (up to 256 KiB), as AnalyzeStream brings it.
// during(upload, sent) runs after each chunk.
Outcome streamed(const Analyzer& a, const std::string& file, std::mt19937& rng,
                 const std::function<void(uint64_t)>& during = {}) {
  Outcome o;
  try {
    v1::StreamHeader header;
    header.set_total_bytes(file.size());
    std::unique_ptr<Upload> upload = a.begin_upload(header);
    for (size_t at = 0; at < file.size();) {
      const size_t n = std::min<size_t>(file.size() - at, 1 + rng() % (256 << 10));
      upload->add(file.substr(at, n));
      at += n;
      if (during) during(at);
    }
    o.answer = answer_of(upload->finish({}));
    o.ok = true;
  } catch (const Error& e) {
    o.code = e.code();
    o.answer = e.what();
  }
  return o;
}

std::string png_of(uint32_t w, uint32_t h, int depth, int colour, std::mt19937& rng) {
  PngSpec p = random_png(w, h, depth, colour, rng);
  p.idat_piece = 1 + rng() % (96 << 10);
  return write_png(p, rng);
}

std::string tiff_of(int w, int h, int type, std::mt19937& rng) {
  cv::Mat m(h, w, type);
  cv::randu(m, 0, 255);
  for (int y = 0; y < h; y += 3) m.row(y).setTo(cv::Scalar::all(static_cast<double>(y % 251)));
  std::vector<uint8_t> out;
  cv::imencode(".tiff", m, out, {cv::IMWRITE_TIFF_COMPRESSION, 8 /* deflate */});
  (void)rng;
  return std::string(out.begin(), out.end());
}

TEST(Spool, WaitsForBytesAndWakesWhenAborted) {
  TempDir dir;
  Spool spool(dir.path.string(), uint64_t{1} << 30);
  std::shared_ptr<SpoolFile> file = spool.open(3 << 20);
  ASSERT_TRUE(file);
  std::atomic<bool> got{false};
  std::thread reader([&] {
    file->wait_for(2 << 20);
    got = true;
  });
  const std::string part(1 << 20, 'x');
  file->append(reinterpret_cast<const uint8_t*>(part.data()), part.size());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(got);  // 1 of 2 MiB there
  file->append(reinterpret_cast<const uint8_t*>(part.data()), part.size());
  reader.join();
  EXPECT_TRUE(got);
  EXPECT_EQ(file->data()[(2 << 20) - 1], 'x');
  EXPECT_EQ(spool.in_use(), uint64_t{3} << 20);  // charged in steps, at most the total

  std::thread waiter([&] {
    EXPECT_EQ(code_of([&] { file->wait_for(3 << 20); }), ErrorCode::kCancelled);
  });
  file->abort(ErrorCode::kCancelled, "gone");
  waiter.join();
  EXPECT_EQ(code_of([&] { file->wait_for(3 << 20); }), ErrorCode::kCancelled);
  const std::string more(2 << 20, 'y');
  EXPECT_EQ(code_of([&] { file->append(reinterpret_cast<const uint8_t*>(more.data()), more.size()); }),
            ErrorCode::kInvalidArgument);  // past the total
  file.reset();
  EXPECT_EQ(spool.in_use(), 0u);
  EXPECT_TRUE(fs::is_empty(dir.path));  // unlinked from the start
}

// PNG (serial zlib and the parallel inflater, 8- and 16-bit), TIFF, and a
// JPEG (held in memory): streamed in random chunks, the answer of one
// message, with the spool, without it, and with a spool that cannot be written.
TEST(SpooledUpload, AnswersAsOneMessage) {
  TempDir dir;
  std::mt19937 rng(5);
  const auto spooled = analyzer_with(dir.path.string(), uint64_t{3} << 30);
  const auto in_memory = analyzer_with("none");
  EXPECT_EQ(spooled->server_info().limits().max_spool_bytes(), uint64_t{3} << 30);
  EXPECT_EQ(in_memory->server_info().limits().max_spool_bytes(), 0u);
  const auto unwritable = analyzer_with((dir.path / "missing").string());
  std::vector<std::pair<std::string, std::string>> files = {
      {"PNG RGB8 1.6 MB (zlib)", png_of(1000, 800, 8, 2, rng)},
      {"PNG RGB8 6 MB (parallel inflater)", png_of(2000, 1000, 8, 2, rng)},
      {"PNG RGBA16 4 MB", png_of(800, 640, 16, 6, rng)},
      {"PNG palette", png_of(1900, 1000, 8, 3, rng)},
      {"TIFF deflate", tiff_of(1500, 1100, CV_8UC3, rng)},
      {"TIFF 16-bit", tiff_of(1300, 1000, CV_16UC1, rng)},
  };
  {
    cv::Mat m(1200, 1600, CV_8UC3);
    cv::randu(m, 0, 255);
    std::vector<uint8_t> out;
    cv::imencode(".jpg", m, out, {cv::IMWRITE_JPEG_QUALITY, 97});
    files.emplace_back("JPEG (held)", std::string(out.begin(), out.end()));
  }
  for (const auto& [name, file] : files) {
    SCOPED_TRACE(name);
    ASSERT_GE(file.size(), kSpoolFromBytes);
    const Outcome want = whole(*spooled, file);
    ASSERT_TRUE(want.ok) << want.answer;
    const bool spools = name.rfind("JPEG", 0) != 0;
    uint64_t most_spooled = 0, most_decode_memory = 0;
    const Outcome got = streamed(*spooled, file, rng, [&](uint64_t) {
      most_spooled = std::max(most_spooled, spooled->spool().in_use());
      most_decode_memory = std::max(most_decode_memory, spooled->budget().in_use());
    });
    EXPECT_EQ(got.answer, want.answer);
    if (spools) {
      EXPECT_GE(most_spooled, file.size() / 2);  // the bytes went to the spool...
      EXPECT_EQ(spooled->spool().in_use(), 0u);
    } else {
      EXPECT_EQ(most_spooled, 0u);
      EXPECT_GE(most_decode_memory, file.size() / 2);  // ... or into decode memory, held
    }
    EXPECT_EQ(streamed(*in_memory, file, rng).answer, want.answer);
    EXPECT_EQ(streamed(*unwritable, file, rng).answer, want.answer);
  }
  EXPECT_TRUE(fs::is_empty(dir.path));
}

// A PNG still arriving is walked chunk by chunk: damage met late gives up
// rows, and the whole file goes to OpenCV as it does from one message.
TEST(SpooledUpload, DamagedAndDeclinedPngsGetTheSameVerdict) {
  TempDir dir;
  std::mt19937 rng(6);
  const auto a = analyzer_with(dir.path.string());
  const std::string base = png_of(1400, 900, 8, 2, rng);
  // Where the last IDAT chunk's data starts and how long it is.
  size_t last = 0, at = 8;
  uint32_t last_n = 0;
  while (at + 12 <= base.size()) {
    const auto* q = reinterpret_cast<const uint8_t*>(base.data()) + at;
    const uint32_t n = uint32_t{q[0]} << 24 | uint32_t{q[1]} << 16 | uint32_t{q[2]} << 8 | q[3];
    if (std::memcmp(q + 4, "IDAT", 4) == 0) last = at, last_n = n;
    at += size_t{n} + 12;
  }
  std::vector<std::pair<std::string, std::string>> files;
  {
    std::string f = base;
    f[last + 8 + last_n / 2] ^= 0x40;  // its CRC now wrong
    files.emplace_back("a bad CRC in the last IDAT", f);
    files.emplace_back("the last IDAT's data changed, CRC right",
                       f.replace(last, last_n + 12, png_chunk("IDAT", f.substr(last + 8, last_n))));
  }
  {
    std::string f = base;
    files.emplace_back("a chunk after the image data",
                       f.insert(f.size() - 12, png_chunk("tEXt", std::string("Comment\0late", 12))));
  }
  files.emplace_back("cut before IEND", base.substr(0, base.size() - 12));
  files.emplace_back("cut in the image data", base.substr(0, base.size() * 2 / 3));
  {
    std::string f = base;  // a taller header: too little image data
    for (int i = 0; i < 4; ++i) f[20 + i] = static_cast<char>(901 >> (24 - 8 * i));
    files.emplace_back("too little image data", f.replace(8, 25, png_chunk("IHDR", f.substr(16, 13))));
  }
  for (const auto& [name, file] : files) {
    SCOPED_TRACE(name);
    const Outcome want = whole(*a, file), got = streamed(*a, file, rng);
    EXPECT_EQ(got.ok, want.ok);
    EXPECT_EQ(got.code, want.code);
    EXPECT_EQ(got.answer, want.answer);
  }
  EXPECT_EQ(a->spool().in_use(), 0u);
}

// A refusal the header already gives ends the upload before its last chunk.
TEST(SpooledUpload, RefusalsComeWhileTheUploadGoesOn) {
  TempDir dir;
  std::mt19937 rng(7);
  const auto a = analyzer_with(dir.path.string(), 0, /*max_pixels=*/1 << 20);
  const std::string file = png_of(1600, 1200, 8, 2, rng);  // 1.92 MP
  v1::StreamHeader header;
  header.set_total_bytes(file.size());
  std::unique_ptr<Upload> upload = a->begin_upload(header);
  ErrorCode code = ErrorCode::kInternal;
  std::string words;
  try {
    upload->add(file.substr(0, 65536));
    // The rest is not sent: the header's refusal comes with the next
    // message (empty ones here), not at the end.
    for (int i = 0; i < 2000; ++i) {
      upload->add("");
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  } catch (const Error& e) {
    code = e.code();
    words = e.what();
  }
  EXPECT_EQ(code, ErrorCode::kResourceExhausted);
  EXPECT_NE(words.find("over the limit"), std::string::npos) << words;
}

TEST(SpooledUpload, EndsShortFullOrAbandonedLeaveNothingBehind) {
  TempDir dir;
  std::mt19937 rng(8);
  const std::string file = png_of(1500, 1000, 8, 2, rng);
  v1::StreamHeader header;
  header.set_total_bytes(file.size());
  {
    const auto a = analyzer_with(dir.path.string());
    std::unique_ptr<Upload> upload = a->begin_upload(header);
    upload->add(file.substr(0, file.size() / 2));
    const std::string words = [&] {
      try {
        upload->finish({});
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string();
    }();
    EXPECT_NE(words.find("stream ended after " + std::to_string(file.size() / 2)), std::string::npos) << words;
    // Abandoned halfway, the decode waiting for the rest: the upload and
    // the analyzer go at once, their thread with them.
    std::unique_ptr<Upload> second = a->begin_upload(header);
    second->add(file.substr(0, file.size() / 3));
    upload.reset();
    second.reset();
    // Their decodes end on their own, the files with them.
    for (int i = 0; i < 500 && a->spool().in_use() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(a->spool().in_use(), 0u);
  }
  {
    const auto small = analyzer_with(dir.path.string(), /*max_spool_bytes=*/file.size() / 2);
    std::unique_ptr<Upload> upload = small->begin_upload(header);
    std::string words;
    ErrorCode code = ErrorCode::kInternal;
    try {
      for (size_t at = 0; at < file.size(); at += 65536) upload->add(file.substr(at, 65536));
    } catch (const Error& e) {
      code = e.code();
      words = e.what();
    }
    EXPECT_EQ(code, ErrorCode::kResourceExhausted);
    EXPECT_NE(words.find("--max-spool-bytes"), std::string::npos) << words;
  }
  EXPECT_TRUE(fs::is_empty(dir.path));
}

}  // namespace
}  // namespace imgstat::testing

namespace imgstat::testing {
namespace {

// A caller's file mapped where it lies (core/guarded_map.hpp), at an
// unaligned offset: its bytes as the file holds them; cut short under the
// mapping, what lies past the new end reads as zeros in every thread that
// touches it, the mapping says it was cut, and the process lives on.
TEST(GuardedMap, ReadsTheFileAndSurvivesItBeingCutShort) {
  const std::string path = (std::filesystem::temp_directory_path() / "imgstat-guarded-map").string();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::string bytes(page * 40 + 123, '\0');
  std::mt19937 rng(5);
  for (char& b : bytes) b = static_cast<char>(rng() % 255 + 1);  // no zeros: a zero read is a page replaced
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  std::filesystem::remove(path);
  const uint64_t offset = 1001, size = bytes.size() - offset;
  {
    auto map = GuardedMap::map(fd, offset, size);
    ASSERT_TRUE(map);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(map->data()), size), bytes.substr(offset));
    map->release(0, size);  // read again from the file when touched
    EXPECT_EQ(map->data()[size - 1], static_cast<uint8_t>(bytes.back()));
    EXPECT_FALSE(map->cut());
  }
  auto map = GuardedMap::map(fd, offset, size);
  ASSERT_TRUE(map);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(page * 10)), 0);
  std::atomic<uint64_t> zeros{0}, equal{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t)
    readers.emplace_back([&, t] {
      for (uint64_t i = t; i < size; i += 4) (map->data()[i] == 0 ? zeros : equal)++;
    });
  for (std::thread& r : readers) r.join();
  EXPECT_TRUE(map->cut());
  EXPECT_EQ(equal.load(), page * 10 - offset);  // the bytes the file still holds
  EXPECT_EQ(zeros.load(), size - (page * 10 - offset));
  close(fd);
}

}  // namespace
}  // namespace imgstat::testing
