// libFuzzer, differential: wherever decode_png takes a file, libpng through
// OpenCV must give the same samples and the same warnings. Every chunk's CRC
// is made right first, so that mutations reach the zlib data, the filters
// and the palette instead of stopping at the first CRC. A disagreement would
// make a caller's answer depend on which decoder ran: it aborts like a crash.
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "decode/library_messages.hpp"
#include "decode/png/png.hpp"
#include "fuzz_support.hpp"

namespace {

uint32_t be32(const uint8_t* p) { return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3]; }

void fix_crcs(std::vector<uint8_t>& f) {
  size_t at = 8;
  while (f.size() - at >= 12) {
    const uint32_t n = be32(&f[at]);
    if (n > f.size() - at - 12) break;
    const uint32_t crc = static_cast<uint32_t>(crc32(0, &f[at + 4], n + 4));
    for (int i = 0; i < 4; ++i) f[at + 8 + n + i] = static_cast<uint8_t>(crc >> (24 - 8 * i));
    at += size_t{n} + 12;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace imgstat;
  if (size < 33 || std::memcmp(data, "\x89PNG\r\n\x1a\n", 8) != 0) return -1;
  if (uint64_t{be32(data + 16)} * be32(data + 20) > (uint64_t{1} << 20)) return -1;  // small: parsing, not memory
  static const bool caught = [] {
    catch_library_messages([](const std::string&) {});
    return true;
  }();
  (void)caught;
  std::vector<uint8_t> f(data, data + size);
  fix_crcs(f);
  // Refused before libpng on the decode path (plan_decode): libpng would
  // zero the chunk's declared size first, on either side of the comparison.
  if (!png_chunk_past_end(f.data(), f.size()).empty()) return 0;
  fuzz::expect_clean([&] {
    cv::Mat ours;
    RowSink sink;
    sink.begin = [&](uint32_t w, uint32_t h, uint32_t c, SampleType t) {
      ours.create(static_cast<int>(h), static_cast<int>(w),
                  CV_MAKETYPE(t == SampleType::kUint16 ? CV_16U : CV_8U, static_cast<int>(c)));
      return RowBand{ours.data, h};
    };
    sink.band = [](const uint8_t*, uint32_t, uint32_t) { return RowBand{}; };
    const PngDecode png = decode_png(f.data(), f.size(), {}, sink);
    if (!png.taken) return;
    cv::Mat theirs;
    std::vector<std::string> said;
    {
      LibraryMessages messages;
      try {
        theirs = cv::imdecode(cv::Mat(1, static_cast<int>(f.size()), CV_8U, f.data()), cv::IMREAD_UNCHANGED);
      } catch (const cv::Exception&) {
      }
      said = messages.lines();
    }
    std::string why;
    if (theirs.empty()) {
      why = "libpng refuses it";
    } else if (theirs.size() != ours.size() || theirs.type() != ours.type()) {
      why = "size or type differs";
    } else {
      if (theirs.channels() >= 3) {  // OpenCV's BGR(A) to R,G,B(,A)
        std::vector<cv::Mat> planes;
        cv::split(theirs, planes);
        std::swap(planes[0], planes[2]);
        cv::merge(planes, theirs);
      }
      if (cv::norm(theirs, ours, cv::NORM_INF) != 0) why = "samples differ";
      else if (said != png.warnings) why = "warnings differ";
    }
    if (!why.empty()) {
      std::ostream& out = program_stderr();  // stderr itself is caught
      out << "decode_png and libpng disagree: " << why << "\n";
      for (const auto& w : said) out << "  libpng: " << w << "\n";
      for (const auto& w : png.warnings) out << "  ours: " << w << "\n";
      out.flush();
      std::abort();
    }
  });
  return 0;
}
