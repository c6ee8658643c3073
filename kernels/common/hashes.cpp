#include "common/hashes.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "common/pil_resample.hpp"
#include "common/xxh3_long.hpp"
#include "common/quality_rows.hpp"

namespace imgstat {

// xxh3_avx2.cpp: the same update, compiled for AVX2.
void xxh3_128_update_avx2(XXH3_state_t* state, const void* data, size_t bytes);

namespace {

// XXH3's update, by its AVX2 loop where the CPU has one (the same hash).
void xxh3_update(XXH3_state_t* state, const void* data, size_t bytes) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2)
    xxh3_128_update_avx2(state, data, bytes);
  else
    XXH3_128bits_update(state, data, bytes);
}

// The reported channel order: R, G, B (rgb), then the rest as stored.
std::vector<uint32_t> reported_order(uint32_t channels, const uint32_t* rgb) {
  std::vector<uint32_t> order;
  if (channels < 3) {
    for (uint32_t c = 0; c < channels; ++c) order.push_back(c);
    return order;
  }
  order = {rgb[0], rgb[1], rgb[2]};
  for (uint32_t c = 0; c < channels; ++c)
    if (std::find(order.begin(), order.end(), c) == order.end()) order.push_back(c);
  return order;
}

}  // namespace

std::vector<uint8_t> pixel_hash_header(const Layout& l) {
  std::vector<uint8_t> header(20);
  const uint64_t w = l.width, h = l.height;
  const uint32_t c = l.channels;
  std::memcpy(header.data(), &w, 8);
  std::memcpy(header.data() + 8, &h, 8);
  std::memcpy(header.data() + 16, &c, 4);
  const char* type = to_string(l.type);
  header.insert(header.end(), type, type + std::strlen(type) + 1);
  return header;
}

const uint8_t* xxh3_default_secret() {
  static_assert(sizeof(XXH3_kSecret) == kXxh3SecretSize);
  return XXH3_kSecret;
}

void pixel_hash_bytes(uint64_t low, uint64_t high, uint8_t out[16]) {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH128_hash_t{low, high});
  std::memcpy(out, canonical.digest, 16);
}

void pixel_hash(const ImageView& image, const uint32_t* rgb, uint8_t out[16]) {
  const Layout& l = image.layout;
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  const std::vector<uint8_t> header = pixel_hash_header(l);
  xxh3_update(&state, header.data(), header.size());
  const std::vector<uint32_t> order = reported_order(l.channels, rgb);
  bool identity = true;
  for (uint32_t i = 0; i < order.size(); ++i) identity &= order[i] == i;
  const size_t sample = sample_size(l.type), pixel = l.pixel_bytes();
  std::vector<uint8_t> row(identity ? 0 : l.row_bytes());
  const auto* base = static_cast<const uint8_t*>(image.data);
  for (uint64_t y = 0; y < l.height; ++y) {
    const uint8_t* in = base + y * l.stride();
    if (identity) {
      xxh3_update(&state, in, l.row_bytes());
      continue;
    }
    for (uint64_t x = 0; x < l.width; ++x)
      for (uint32_t i = 0; i < order.size(); ++i)
        std::memcpy(&row[x * pixel + i * sample], in + x * pixel + order[i] * sample, sample);
    xxh3_update(&state, row.data(), row.size());
  }
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits_digest(&state));
  std::memcpy(out, canonical.digest, 16);
}

namespace {

uint64_t perceptual_hash(const ImageView& image, const uint32_t* rgb) {
  const Layout& l = image.layout;
  constexpr int kSide = kPhashSide;
  PilImage grey;
  grey.w = static_cast<int>(l.width), grey.h = static_cast<int>(l.height), grey.bands = 1;
  grey.px.resize(l.pixels());
  const auto* base = static_cast<const uint8_t*>(image.data);
  const QualityRows* rows8 = quality_rows(l.channels, rgb);
  for (uint64_t y = 0; y < l.height; ++y) {
    const uint8_t* p = base + y * l.stride();
    uint8_t* o = &grey.px[y * l.width];
    if (rows8) {
      rows8->pil_l(p, l.width, o);
      continue;
    }
    for (uint64_t x = 0; x < l.width; ++x, p += l.channels)
      o[x] = l.channels >= 3 ? pil_l(p[rgb[0]], p[rgb[1]], p[rgb[2]]) : p[0];
  }
  return perceptual_hash_of(grey.w == kSide && grey.h == kSide ? grey : pil_resize(grey, kSide, kSide, PilFilter::kLanczos));
}

}  // namespace

uint64_t perceptual_hash_of(const PilImage& small) {
  constexpr int kSide = kPhashSide, kLow = 8;
  if (small.w != kSide || small.h != kSide || small.bands != 1) fail(ErrorCode::kInternal, "not a 32x32 grey image");
  // DCT-II along the columns (axis 0), then the rows: 2 sum x cos(pi k (2n + 1) / 2N).
  // Made once: 256 long double cosines cost as much as the transform.
  struct Cosines {
    long double at[kLow][kSide];
    Cosines() {
      for (int k = 0; k < kLow; ++k)
        for (int n = 0; n < kSide; ++n) at[k][n] = std::cos(static_cast<long double>(M_PI) * k * (2 * n + 1) / (2 * kSide));
    }
  };
  static const Cosines table;
  const auto& cosines = table.at;
  long double columns[kLow][kSide];
  for (int u = 0; u < kLow; ++u)
    for (int x = 0; x < kSide; ++x) {
      long double s = 0;
      for (int y = 0; y < kSide; ++y) s += small.px[static_cast<size_t>(y) * kSide + x] * cosines[u][y];
      columns[u][x] = 2 * s;
    }
  long double exact[kLow * kLow], largest = 0;
  for (int u = 0; u < kLow; ++u)
    for (int v = 0; v < kLow; ++v) {
      long double s = 0;
      for (int x = 0; x < kSide; ++x) s += columns[u][x] * cosines[v][x];
      exact[u * kLow + v] = 2 * s;
      largest = std::max(largest, std::fabs(2 * s));
    }
  // Coefficients that are 0 (a flat image's, a symmetric pattern's) come
  // out as rounding noise of either sign; as 0 they compare as scipy's
  // exact zeros do.
  double low[kLow * kLow];
  for (int i = 0; i < kLow * kLow; ++i)
    low[i] = std::fabs(exact[i]) <= largest * 1e-12L ? 0.0 : static_cast<double>(exact[i]);
  double sorted[kLow * kLow];
  std::copy(low, low + kLow * kLow, sorted);
  std::sort(sorted, sorted + kLow * kLow);
  const double median = (sorted[kLow * kLow / 2 - 1] + sorted[kLow * kLow / 2]) / 2;
  uint64_t bits = 0;
  for (int i = 0; i < kLow * kLow; ++i)
    if (low[i] > median) bits |= uint64_t{1} << (63 - i);
  return bits;
}

ImageHashes hash_image(const ImageView& image, const uint32_t* rgb) {
  ImageHashes h;
  pixel_hash(image, rgb, h.pixels.data());
  if (image.layout.type == SampleType::kUint8 && image.layout.pixels() > 0) {
    h.has_phash = true;
    h.phash = perceptual_hash(image, rgb);
  }
  return h;
}

void add_hashes(const ImageView& image, const StatsRequest& request, Result& result) {
  if (!request.hashes) return;
  result.hashes = hash_image(image, request.rgb);
  result.has_hashes = true;
}

}  // namespace imgstat
