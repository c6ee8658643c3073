// libFuzzer: requests with parts (rectangles, masks, label images, tiles),
// their sizes, counts and labels taken from the input, through the
// analyzer on the CPU engine. Besides "only imgstat::Error comes out", what
// the answer must hold: labels and tiles share out every pixel exactly once,
// and a mask selects no more pixels than the image has.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fuzz_support.hpp"

namespace {

struct Reader {
  const uint8_t* p;
  size_t n;
  uint32_t u8() { return n ? (--n, *p++) : 0; }
  uint32_t u16() { return u8() | u8() << 8; }
  uint32_t u32() { return u16() | u16() << 16; }
  std::string bytes(size_t k) {
    k = std::min(k, n);
    std::string s(reinterpret_cast<const char*>(p), k);
    p += k;
    n -= k;
    return s;
  }
};

const imgstat::v1::SampleType kTypes[] = {imgstat::v1::SAMPLE_TYPE_UINT8,  imgstat::v1::SAMPLE_TYPE_UINT16,
                                          imgstat::v1::SAMPLE_TYPE_INT8,   imgstat::v1::SAMPLE_TYPE_INT16,
                                          imgstat::v1::SAMPLE_TYPE_FLOAT32, imgstat::v1::SAMPLE_TYPE_FLOAT64,
                                          imgstat::v1::SAMPLE_TYPE_UINT32, imgstat::v1::SAMPLE_TYPE_INT32};
const uint32_t kSizes[] = {1, 2, 1, 2, 4, 8, 4, 4};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace imgstat;
  Reader in{data, size};
  const uint32_t w = 1 + in.u8() % 40, h = 1 + in.u8() % 40, c = 1 + in.u8() % 4;
  const uint32_t t = in.u8() % 6, kind = in.u8() % 5;
  v1::AnalyzeRequest request;
  v1::Input& image = *request.mutable_input();
  image.set_kind(v1::INPUT_KIND_RAW);
  image.mutable_raw()->set_width(w);
  image.mutable_raw()->set_height(h);
  image.mutable_raw()->set_channels(c);
  image.mutable_raw()->set_sample_type(kTypes[t]);
  v1::Options& o = *request.mutable_options();
  if (in.u8() & 1) o.add_statistics(v1::STATISTIC_ALL);
  if (in.u8() & 1) o.add_statistics(v1::STATISTIC_MERGE_STATE);
  o.set_bins(in.u8() % 3 == 0 ? in.u16() : 0);
  v1::Parts& parts = *o.mutable_parts();
  switch (kind) {
    case 0:
      for (uint32_t i = 0, n = 1 + in.u8() % 4; i < n; ++i) {
        v1::Rectangle* r = parts.mutable_rectangles()->add_rectangles();
        const bool wild = in.u8() % 8 == 0;  // anywhere in 32 bits, overflowing ones included
        r->set_x(wild ? in.u32() : in.u8() % w);
        r->set_y(wild ? in.u32() : in.u8() % h);
        r->set_width(wild ? in.u32() : in.u8() % (w + 1));
        r->set_height(wild ? in.u32() : in.u8() % (h + 1));
      }
      break;
    case 1:
      parts.mutable_tiles()->set_columns(in.u8() % 8 == 0 ? in.u32() : in.u8() % (w + 2));
      parts.mutable_tiles()->set_rows(in.u8() % 8 == 0 ? in.u32() : in.u8() % (h + 2));
      break;
    case 2:
      if (in.u8() % 4 == 0) {
        parts.mutable_mask()->set_alpha(true);
        break;
      }
      [[fallthrough]];
    default: {
      v1::Input* map = kind == 2 ? parts.mutable_mask()->mutable_image() : parts.mutable_labels()->mutable_image();
      const uint32_t mt = in.u8() % 8;
      map->set_kind(in.u8() % 16 == 0 ? v1::INPUT_KIND_ENCODED : v1::INPUT_KIND_RAW);
      const bool same = in.u8() % 8 != 0;  // sometimes another size
      map->mutable_raw()->set_width(same ? w : 1 + in.u8() % 40);
      map->mutable_raw()->set_height(same ? h : 1 + in.u8() % 40);
      map->mutable_raw()->set_channels(1 + in.u8() % 2);
      map->mutable_raw()->set_sample_type(kTypes[mt]);
      const uint64_t need = uint64_t{map->raw().width()} * map->raw().height() * map->raw().channels() * kSizes[mt];
      map->set_data(in.bytes(in.u8() % 16 == 0 ? need / 2 : need));
      if (kind != 2) {
        if (in.u8() & 1) parts.mutable_labels()->set_ignore(static_cast<int32_t>(in.u32()));
        parts.mutable_labels()->set_max_labels(in.u8() % 4 == 0 ? 1 + in.u8() % 8 : 0);
      }
    }
  }
  const uint64_t image_bytes = uint64_t{w} * h * c * kSizes[t];
  image.set_data(in.bytes(image_bytes));
  image.mutable_data()->resize(image_bytes, '\x55');
  fuzz::expect_clean([&] {
    const v1::AnalyzeResponse r = fuzz::analyzer().analyze(request);
    auto samples = [](const v1::ChannelStats& s) {
      return s.count() + s.nan_count() + s.posinf_count() + s.neginf_count();
    };
    if (kind == 1 || kind >= 3) {  // tiles and labels: every pixel (but an ignored label's) once
      for (uint32_t ch = 0; ch < c; ++ch) {
        uint64_t total = 0;
        for (const v1::PartStats& p : r.parts()) total += samples(p.channels(ch));
        const bool ignoring = kind >= 3 && parts.labels().has_ignore();
        if (ignoring ? total > uint64_t{w} * h : total != uint64_t{w} * h) {
          std::fprintf(stderr, "parts hold %llu samples of channel %u, the image %u\n",
                       static_cast<unsigned long long>(total), ch, w * h);
          std::abort();
        }
      }
    }
    if (kind == 2)
      for (const v1::ChannelStats& s : r.channels())
        if (samples(s) > uint64_t{w} * h) std::abort();
  });
  return 0;
}
