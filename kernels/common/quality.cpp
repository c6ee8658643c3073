#include "common/quality.hpp"

#include "common/pil_resample.hpp"
#include "common/quality_rows.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <limits>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

namespace imgstat {

namespace {


// cleanvision's defaults (ImagePropertyIssueManager.get_default_params,
// constants.py).
constexpr double kDarkThreshold = 0.32;
constexpr double kLightThreshold = 0.05;
constexpr double kOddAspectRatioThreshold = 0.35;
constexpr double kLowInformationThreshold = 0.3, kLowInformationNormalizing = 0.1;
constexpr double kBlurryThreshold = 0.29, kBlurryNormalizing = 0.01, kBlurryColorThreshold = 0.18;
constexpr double kBlurryMaxResolution = 64;
constexpr int kBrightnessPercentiles[] = {1, 5, 10, 15, 90, 95, 99};

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// OpenCV's borderInterpolate for BORDER_REFLECT_101 one step outside.
inline uint64_t reflect101(int64_t i, uint64_t n) {
  if (n == 1) return 0;
  if (i < 0) return 1;
  if (static_cast<uint64_t>(i) >= n) return n - 2;
  return static_cast<uint64_t>(i);
}

// (n sum_sq - sum^2) / n^2: a population variance from exact integer sums.
double variance_of(__int128 sum, __int128 sum_sq, uint64_t n) {
  const __int128 num = static_cast<__int128>(n) * sum_sq - sum * sum;
  const long double nn = static_cast<long double>(n);
  return static_cast<double>(static_cast<long double>(num) / (nn * nn));
}

struct Sums {
  __int128 grey = 0, grey_sq = 0, lap = 0, lap_sq = 0, rg = 0, rg_sq = 0, yb2 = 0, yb2_sq = 0;
  std::array<__int128, 4> channel{};
  std::array<uint64_t, 4> at_min{}, at_max{};
  // 8-bit images: each channel's histogram (their sums, ends and PIL's
  // entropy come from it).
  std::vector<std::array<uint64_t, 256>> hist;
  bool equal_rgb = true;
  void add(const Sums& o) {
    grey += o.grey, grey_sq += o.grey_sq, lap += o.lap, lap_sq += o.lap_sq;
    rg += o.rg, rg_sq += o.rg_sq, yb2 += o.yb2, yb2_sq += o.yb2_sq;
    for (int c = 0; c < 4; ++c) channel[c] += o.channel[c], at_min[c] += o.at_min[c], at_max[c] += o.at_max[c];
    for (size_t c = 0; c < hist.size() && c < o.hist.size(); ++c)
      for (int v = 0; v < 256; ++v) hist[c][v] += o.hist[c][v];
    equal_rgb = equal_rgb && o.equal_rgb;
  }
};

// Sums of one stretch of a row, in 64-bit integers: at most this many
// pixels, so that 16-bit squares cannot overflow them.
constexpr uint64_t kStretch = 1 << 16;

// Images of at most this many pixels are measured on one thread.
constexpr uint64_t kSequentialPixels = uint64_t{1} << 21;

// A buffer of this thread's kept for its next image where small: mapping
// and unmapping them image after image cost more than their work.
constexpr size_t kKeptScratchBytes = size_t{16} << 20;

template <class T, int kSlot>
class Scratch {
 public:
  // The thread's kept buffer is taken, not shared: a task TBB runs on this
  // thread while this one waits in a parallel loop (another image's) finds
  // none and makes its own.
  explicit Scratch(size_t n) : keep_(n * sizeof(T) <= kKeptScratchBytes) {
    if (keep_) buffer_.swap(kept());
    if (buffer_.size() < n) buffer_.resize(n);
  }
  ~Scratch() {
    if (keep_) kept().swap(buffer_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* data() { return buffer_.data(); }

 private:
  static std::vector<T>& kept() {
    thread_local std::vector<T> k;
    return k;
  }
  bool keep_;
  std::vector<T> buffer_;
};

// ---- cleanvision's pieces, as PIL and numpy compute them ----

// Python's float floor division (float_floor_div).
double py_floordiv(double vx, double wx) {
  double mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0) {
    if ((wx < 0) != (mod < 0)) div -= 1.0;
  }
  if (div != 0) {
    double f = std::floor(div);
    if (div - f > 0.5) f += 1.0;
    return f;
  }
  return std::copysign(0.0, vx / wx);
}

// numpy's pairwise summation of float64 (pairwise_sum in loops_utils).
double numpy_pairwise_sum(const double* a, uint64_t n) {
  if (n < 8) {
    double res = 0.;
    for (uint64_t i = 0; i < n; ++i) res += a[i];
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (int j = 0; j < 8; ++j) r[j] = a[j];
    uint64_t i;
    for (i = 8; i < n - (n % 8); i += 8)
      for (int j = 0; j < 8; ++j) r[j] += a[i + j];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  uint64_t n2 = n / 2;
  n2 -= n2 % 8;
  return numpy_pairwise_sum(a, n2) + numpy_pairwise_sum(a + n2, n - n2);
}

// numpy's np.std of integer counts (ddof 0).
double numpy_std(const std::vector<uint64_t>& v) {
  std::vector<double> x(v.begin(), v.end());
  const double mean = numpy_pairwise_sum(x.data(), x.size()) / static_cast<double>(x.size());
  for (double& e : x) e = (e - mean) * (e - mean);
  return std::sqrt(numpy_pairwise_sum(x.data(), x.size()) / static_cast<double>(x.size()));
}

// numpy's _lerp for the linear method.
double numpy_lerp(double a, double b, double t) {
  const double d = b - a;
  return t >= 0.5 ? b - d * (1 - t) : a + d * t;
}

// The image cleanvision's blurriness is measured on: an 8-bit image as PIL
// holds it, shrunk to at most 64 pixels a side.
PilImage blurriness_image(const ImageView& image, const uint32_t* rgb) {
  const Layout& l = image.layout;
  const auto* base = static_cast<const uint8_t*>(image.data);
  const bool colour = l.channels >= 3;
  const bool alpha = l.channels == 4;
  // As PIL holds it: RGB, RGBA (alpha premultiplied for the resize, as
  // Image.resize does with RGBa), or L (gray+alpha's gray).
  PilImage im;
  im.w = static_cast<int>(l.width), im.h = static_cast<int>(l.height), im.bands = colour ? (alpha ? 4 : 3) : 1;
  const size_t bytes = static_cast<size_t>(im.w) * im.h * im.bands;
  thread_local std::vector<uint8_t> kept;  // the next image's, where small
  if (bytes <= kKeptScratchBytes) im.px.swap(kept);
  im.px.resize(bytes);
  int xs = im.w, ys = im.h;
  const bool resize = blurriness_size(l.width, l.height, &xs, &ys);
  const QualityRows* rows8 = alpha ? nullptr : quality_rows(l.channels, rgb);
  for (uint64_t y = 0; y < l.height; ++y) {
    if (rows8) {
      rows8->pil_rgb(base + y * l.stride(), l.width, &im.px[y * l.width * 3]);
      continue;
    }
    const uint8_t* row = base + y * l.stride();
    for (uint64_t x = 0; x < l.width; ++x) {
      const uint8_t* p = row + x * l.channels;
      uint8_t* o = &im.px[(y * l.width + x) * im.bands];
      if (!colour) {
        o[0] = p[0];
        continue;
      }
      o[0] = p[rgb[0]], o[1] = p[rgb[1]], o[2] = p[rgb[2]];
      if (alpha) {
        const uint32_t a = p[3];
        o[3] = static_cast<uint8_t>(a);
        if (resize)
          for (int b = 0; b < 3; ++b) {
            const uint32_t tmp = o[b] * a + 128;
            o[b] = static_cast<uint8_t>(((tmp >> 8) + tmp) >> 8);
          }
      }
    }
  }
  if (resize) {
    if (xs != im.w || ys != im.h) {
      PilImage small = pil_resize(im, xs, ys, PilFilter::kBicubic);
      if (bytes <= kKeptScratchBytes) kept.swap(im.px);
      im = std::move(small);
    }
    if (alpha)  // back from premultiplied (RGBa to RGBA)
      for (size_t i = 0; i < im.px.size(); i += 4) {
        const uint32_t a = im.px[i + 3];
        if (a == 255 || a == 0) continue;
        for (int b = 0; b < 3; ++b) im.px[i + b] = static_cast<uint8_t>(std::min<uint32_t>(255, (255 * im.px[i + b]) / a));
      }
  }
  return im;
}

}  // namespace

bool blurriness_size(uint64_t width, uint64_t height, int* xs, int* ys) {
  const double ratio = static_cast<double>(std::max(width, height)) / kBlurryMaxResolution;
  *xs = static_cast<int>(width), *ys = static_cast<int>(height);
  if (ratio <= 1) return false;
  *xs = std::max(static_cast<int>(py_floordiv(static_cast<double>(width), ratio)), 1);
  *ys = std::max(static_cast<int>(py_floordiv(static_cast<double>(height), ratio)), 1);
  return true;
}

namespace {

// cleanvision's blurriness and blurriness_grayscale_std of blurriness_image().
void blurriness_of(const PilImage& im, QualityStats::Cleanvision& out) {
  std::vector<uint8_t> grey(static_cast<size_t>(im.w) * im.h);
  for (size_t i = 0; i < grey.size(); ++i) {
    const uint8_t* p = &im.px[i * im.bands];
    grey[i] = im.bands == 1 ? p[0] : pil_l(p[0], p[1], p[2]);
  }
  // FIND_EDGES: 8 c - the 8 neighbours, clipped to 0..255; the first and
  // last rows and columns copied; an image under 3x3 copied whole.
  std::vector<uint8_t> edges = grey;
  if (im.w >= 3 && im.h >= 3)
    for (int y = 1; y < im.h - 1; ++y)
      for (int x = 1; x < im.w - 1; ++x) {
        int s = 0;
        for (int dy = -1; dy <= 1; ++dy)
          for (int dx = -1; dx <= 1; ++dx) s -= grey[static_cast<size_t>(y + dy) * im.w + (x + dx)];
        s += 9 * grey[static_cast<size_t>(y) * im.w + x];
        edges[static_cast<size_t>(y) * im.w + x] = static_cast<uint8_t>(s <= 0 ? 0 : s >= 255 ? 255 : s);
      }
  // ImageStat.Stat(edges).var[0] from the histogram, in Python floats.
  std::vector<uint64_t> eh(256, 0), gh(256, 0);
  for (uint8_t v : edges) ++eh[v];
  for (uint8_t v : grey) ++gh[v];
  double sum = 0, sum2 = 0;
  for (int j = 0; j < 256; ++j) {
    sum += static_cast<double>(j) * static_cast<double>(eh[j]);
    sum2 += static_cast<double>(j * j) * static_cast<double>(eh[j]);
  }
  const double n = static_cast<double>(edges.size());
  const double var = (sum2 - (sum * sum) / n) / n;
  out.blurriness = std::sqrt(var);
  out.blurriness_grayscale_std = numpy_std(gh);
  const double blur_score = 1 - std::exp(-1 * out.blurriness * kBlurryNormalizing);
  double std_score = 1 - std::exp(-1 * out.blurriness_grayscale_std * kBlurryNormalizing);
  if (std_score <= kBlurryColorThreshold) std_score = 0;
  out.blurry_score = std::min(blur_score + std_score, 1.0);
  out.is_blurry_issue = out.blurry_score < kBlurryThreshold;
}

// cleanvision's brightness of one pixel, in its order of float operations.
inline double cv_brightness(double r, double g, double b) {
  return std::sqrt(0.241 * (r * r) + 0.691 * (g * g) + 0.068 * (b * b)) / 255;
}

// The percentiles from the wanted buckets (brightness_wanted()) and the
// colours (r | g << 8 | b << 16) of every pixel in them, in any order.
// Grey images: from their histogram.
std::vector<double> percentiles_of(uint64_t n, bool colour, const std::array<uint64_t, 256>& grey_counts,
                                   const std::vector<BrightnessBucket>& wanted, const uint32_t* colours, size_t m) {
  const auto ranks = brightness_ranks(n);
  std::vector<double> at(ranks.size());
  if (!colour) {
    std::vector<uint64_t> cum(257, 0);
    for (int v = 0; v < 256; ++v) cum[v + 1] = cum[v] + grey_counts[v];
    for (size_t i = 0; i < ranks.size(); ++i) {
      const int v = static_cast<int>(std::upper_bound(cum.begin(), cum.end(), ranks[i]) - cum.begin()) - 1;
      at[i] = v / 255.0;
    }
  } else {
    std::vector<std::vector<double>> keys(wanted.size());
    for (size_t i = 0; i < m; ++i) {
      const uint32_t r = colours[i] & 255, g = (colours[i] >> 8) & 255, b = colours[i] >> 16;
      const uint32_t k = brightness_key(r, g, b) >> kBrightnessShift;
      const auto it = std::lower_bound(wanted.begin(), wanted.end(), k,
                                       [](const BrightnessBucket& w, uint32_t key) { return w.bucket < key; });
      if (it == wanted.end() || it->bucket != k) fail(ErrorCode::kInternal, "a colour outside the brightness buckets asked for");
      // numpy's order is the floats': equal keys of other colours may
      // round an ulp apart.
      keys[it - wanted.begin()].push_back(cv_brightness(r, g, b));
    }
    for (size_t s = 0; s < keys.size(); ++s) {
      if (keys[s].size() != wanted[s].count) fail(ErrorCode::kInternal, "the brightness bucket's colours are not its count");
      std::sort(keys[s].begin(), keys[s].end());
    }
    for (size_t i = 0; i < ranks.size(); ++i) {
      size_t s = 0;
      while (s < wanted.size() && !(wanted[s].first <= ranks[i] && ranks[i] < wanted[s].first + wanted[s].count)) ++s;
      if (s == wanted.size()) fail(ErrorCode::kInternal, "a brightness rank outside the buckets asked for");
      at[i] = keys[s][ranks[i] - wanted[s].first];
    }
  }
  std::vector<double> out;
  for (size_t j = 0; j < std::size(kBrightnessPercentiles); ++j) {
    const double vi = static_cast<double>(n - 1) * (kBrightnessPercentiles[j] / 100.0);
    const double lo = std::floor(vi);
    out.push_back(numpy_lerp(at[2 * j], at[2 * j + 1], vi >= static_cast<double>(n - 1) ? 0.0 : vi - lo));
  }
  return out;
}

// The colours of an 8-bit image's pixels in the wanted buckets.
void gather_colours(const ImageView& image, const uint32_t* rgb, const std::vector<BrightnessBucket>& wanted,
                    std::vector<uint32_t>& out) {
  const Layout& l = image.layout;
  thread_local std::vector<uint8_t> is_wanted;  // small: read for every pixel
  is_wanted.assign(kBrightnessBuckets, 0);
  for (const BrightnessBucket& b : wanted) is_wanted[b.bucket] = 1;
  const auto* base = static_cast<const uint8_t*>(image.data);
  out.clear();
  if (const QualityRows* rows8 = quality_rows(l.channels, rgb)) {
    uint16_t keys[kColourRowPiece];
    for (uint64_t y = 0; y < l.height; ++y)
      for (uint64_t x0 = 0; x0 < l.width; x0 += kColourRowPiece) {
        const uint8_t* p = base + y * l.stride() + x0 * l.channels;
        const uint64_t m = std::min(kColourRowPiece, l.width - x0);
        rows8->keys(p, m, keys);
        for (uint64_t i = 0; i < m; ++i)
          if (is_wanted[keys[i]]) {
            const uint8_t* q = p + i * l.channels;
            out.push_back(q[rgb[0]] | q[rgb[1]] << 8 | q[rgb[2]] << 16);
          }
      }
    return;
  }
  for (uint64_t y = 0; y < l.height; ++y) {
    const uint8_t* p = base + y * l.stride();
    for (uint64_t x = 0; x < l.width; ++x, p += l.channels) {
      const uint32_t r = p[rgb[0]], g = p[rgb[1]], b = p[rgb[2]];
      if (is_wanted[brightness_key(r, g, b) >> kBrightnessShift]) out.push_back(r | g << 8 | b << 16);
    }
  }
}

QualityStats finish_quality(const Layout& l, const uint32_t* rgb, const Sums& s,
                            const std::vector<std::array<uint64_t, 256>>* hist,
                            const std::vector<BrightnessBucket>& wanted, const uint32_t* colours, size_t m,
                            const PilImage& thumbnail);

template <class T>
QualityStats measure(const ImageView& image, const uint32_t* rgb, const std::vector<std::array<uint64_t, 256>>* known) {
  const Layout& l = image.layout;
  const auto* base = static_cast<const uint8_t*>(image.data);
  const uint64_t w = l.width, h = l.height, n = l.pixels();
  const uint32_t ch = l.channels;
  const bool colour = ch >= 3;
  constexpr bool k8 = sizeof(T) == 1;
  constexpr int64_t kMax = std::numeric_limits<T>::max();
  const QualityRows* rows8 = k8 ? quality_rows(ch, rgb) : nullptr;
  // Packed, aligned copies of the rows: the grey plane, and the pixels
  // where a row of them is not aligned for T.
  Scratch<T, 0> grey_buffer(n);
  T* const grey = grey_buffer.data();
  const bool aligned = reinterpret_cast<uintptr_t>(base) % alignof(T) == 0 && l.stride() % alignof(T) == 0;
  std::vector<T> pixels(aligned ? 0 : n * ch);
  auto row_of = [&](uint64_t y) {
    return aligned ? reinterpret_cast<const T*>(base + y * l.stride()) : pixels.data() + y * w * ch;
  };
  auto grey_rows = [&](const tbb::blocked_range<uint64_t>& rows) {
    for (uint64_t y = rows.begin(); y != rows.end(); ++y) {
      if (!aligned) std::memcpy(pixels.data() + y * w * ch, base + y * l.stride(), w * ch * sizeof(T));
      const T* p = row_of(y);
      T* out = grey + y * w;
      if constexpr (k8) {
        if (rows8) {  // the vector loop: 3 or 4 channels, RGB or BGR
          rows8->grey(p, w, out);
          continue;
        }
      }
      if (!colour) {
        for (uint64_t x = 0; x < w; ++x) out[x] = p[x * ch];
      } else {
        const uint32_t r = rgb[0], g = rgb[1], b = rgb[2];
        for (uint64_t x = 0; x < w; ++x, p += ch)
          out[x] = static_cast<T>(quality_grey(p[r], p[g], p[b]));
      }
    }
  };
  const bool count_hist = k8 && !known;
  Sums init;
  if (count_hist) init.hist.assign(ch, {});
  // cleanvision's brightness keys in buckets (colour, 8-bit).
  const bool bucket_keys = k8 && colour;
  auto sum_rows = [&](const tbb::blocked_range<uint64_t>& rows, Sums& acc, uint64_t* buckets) {
    for (uint64_t y = rows.begin(); y != rows.end(); ++y) {
      const T* mid = grey + y * w;
      const T* up = grey + reflect101(static_cast<int64_t>(y) - 1, h) * w;
      const T* down = grey + reflect101(static_cast<int64_t>(y) + 1, h) * w;
      const T* px = row_of(y);
      if constexpr (k8) {
        if (rows8) {  // the vector loops: 3 or 4 channels, RGB or BGR
          LaplacianRowSums ls;
          laplacian_row(up, mid, down, w, &ls);
          acc.grey += ls.grey, acc.grey_sq += ls.grey_sq, acc.lap += ls.lap, acc.lap_sq += ls.lap_sq;
          ColourRowSums cs;
          uint16_t keys[kColourRowPiece];
          for (uint64_t x0 = 0; x0 < w; x0 += kColourRowPiece) {
            const uint64_t m = std::min(kColourRowPiece, w - x0);
            rows8->colour(px + x0 * ch, m, &cs, keys);
            for (uint64_t i = 0; i < m; ++i) ++buckets[keys[i]];
          }
          if (count_hist) {
            const T* p = px;
            for (uint64_t x = 0; x < w; ++x, p += ch)
              for (uint32_t c = 0; c < ch; ++c) ++acc.hist[c][p[c]];
          }
          acc.rg += cs.rg, acc.rg_sq += cs.rg_sq, acc.yb2 += cs.yb2, acc.yb2_sq += cs.yb2_sq;
          acc.equal_rgb = acc.equal_rgb && !cs.unequal;
          continue;
        }
      }
      for (uint64_t x0 = 0; x0 < w; x0 += kStretch) {
        const uint64_t x1 = std::min(w, x0 + kStretch);
        int64_t gs = 0, gsq = 0, ls = 0, lsq = 0;
        auto lap_at = [&](uint64_t x, int64_t left, int64_t right) {
          const int64_t v = mid[x];
          const int64_t lap = left + right + up[x] + down[x] - 4 * v;
          gs += v, gsq += v * v, ls += lap, lsq += lap * lap;
        };
        uint64_t x = x0;
        if (x == 0) {  // the left border, reflected (a one-pixel row: the pixel itself)
          const int64_t side = w > 1 ? mid[1] : mid[0];
          lap_at(0, side, side);
          x = 1;
        }
        const uint64_t inner_end = std::min(x1, w - 1);
        for (; x < inner_end; ++x) lap_at(x, mid[x - 1], mid[x + 1]);
        if (x1 == w && w > 1) lap_at(w - 1, mid[w - 2], mid[w - 2]);
        acc.grey += gs, acc.grey_sq += gsq, acc.lap += ls, acc.lap_sq += lsq;
        const T* p = px + x0 * ch;
        if (count_hist) {
          for (uint64_t i = 0; i < (x1 - x0); ++i, p += ch)
            for (uint32_t c = 0; c < ch; ++c) ++acc.hist[c][p[c]];
        } else if constexpr (!k8) {
          std::array<int64_t, 4> cs{};
          for (uint64_t i = 0; i < (x1 - x0); ++i, p += ch)
            for (uint32_t c = 0; c < ch; ++c) {
              const int64_t v = p[c];
              cs[c] += v;
              acc.at_min[c] += v == 0;
              acc.at_max[c] += v == kMax;
            }
          for (uint32_t c = 0; c < ch; ++c) acc.channel[c] += cs[c];
        }
        if (colour) {
          const uint32_t ri = rgb[0], gi = rgb[1], bi = rgb[2];
          int64_t rg = 0, rgq = 0, yb = 0, ybq = 0;
          bool equal = true;
          p = px + x0 * ch;
          for (uint64_t i = 0; i < (x1 - x0); ++i, p += ch) {
            const int64_t r = p[ri], g = p[gi], b = p[bi];
            const int64_t d = r - g, e = r + g - 2 * b;
            rg += d, rgq += d * d, yb += e, ybq += e * e;
            equal &= (d == 0) & (e == 0);
          }
          acc.rg += rg, acc.rg_sq += rgq, acc.yb2 += yb, acc.yb2_sq += ybq;
          acc.equal_rgb = acc.equal_rgb && equal;
          if (bucket_keys) {
            p = px + x0 * ch;
            for (uint64_t i = 0; i < (x1 - x0); ++i, p += ch)
              ++buckets[brightness_key(p[ri], p[gi], p[bi]) >> kBrightnessShift];
          }
        }
      }
    }
  };
  // A small image on its calling thread: a server measures many at once,
  // and splitting one made each thread that stole a piece zero, fill and
  // merge buckets of its own (3.5x the work on a 16-core host).
  Scratch<uint64_t, 1> buckets(bucket_keys ? kBrightnessBuckets : 0);
  if (bucket_keys) std::fill_n(buckets.data(), kBrightnessBuckets, 0);
  Sums s = init;
  const tbb::blocked_range<uint64_t> all(0, h);
  if (n <= kSequentialPixels) {
    grey_rows(all);
    sum_rows(all, s, buckets.data());
  } else {
    tbb::parallel_for(all, grey_rows);
    tbb::enumerable_thread_specific<std::vector<uint64_t>> key_buckets(
        [&] { return std::vector<uint64_t>(bucket_keys ? kBrightnessBuckets : 0, 0); });
    s = tbb::parallel_reduce(
        all, init,
        [&](const tbb::blocked_range<uint64_t>& rows, Sums acc) {
          sum_rows(rows, acc, key_buckets.local().data());
          return acc;
        },
        [](Sums a, const Sums& b) {
          a.add(b);
          return a;
        });
    if (bucket_keys)
      for (const std::vector<uint64_t>& local : key_buckets)
        for (uint32_t i = 0; i < kBrightnessBuckets; ++i) buckets.data()[i] += local[i];
  }
  if constexpr (k8) {
    const std::vector<std::array<uint64_t, 256>>& hist = known ? *known : s.hist;
    thread_local std::vector<uint32_t> colours;
    colours.clear();
    std::vector<BrightnessBucket> wanted;
    if (bucket_keys) {
      wanted = brightness_wanted(buckets.data(), n);
      gather_colours(image, rgb, wanted, colours);
    }
    const PilImage thumbnail = blurriness_image(image, rgb);
    return finish_quality(l, rgb, s, &hist, wanted, colours.data(), colours.size(), thumbnail);
  } else {
    return finish_quality(l, rgb, s, nullptr, {}, nullptr, 0, PilImage{});
  }
}

// The measures from a pass's sums (8-bit: with each channel's histogram,
// the brightness buckets, the colours of the wanted buckets' pixels and the
// blurriness image).
QualityStats finish_quality(const Layout& l, const uint32_t* rgb, const Sums& s,
                            const std::vector<std::array<uint64_t, 256>>* hist,
                            const std::vector<BrightnessBucket>& wanted, const uint32_t* colours, size_t m,
                            const PilImage& thumbnail) {
  const bool k8 = hist != nullptr;
  const uint64_t w = l.width, h = l.height, n = l.pixels();
  const uint32_t ch = l.channels;
  const bool colour = ch >= 3;
  const double kMax = k8 ? 255 : 65535;
  std::array<__int128, 4> channel_sum = s.channel;
  std::array<uint64_t, 4> at_min = s.at_min, at_max = s.at_max;
  if (k8)
    for (uint32_t c = 0; c < ch; ++c) {
      channel_sum[c] = 0;
      for (int v = 0; v < 256; ++v) channel_sum[c] += static_cast<__int128>(v) * (*hist)[c][v];
      at_min[c] = (*hist)[c][0];
      at_max[c] = (*hist)[c][255];
    }
  QualityStats q;
  const double nd = static_cast<double>(n);
  q.laplacian_variance = variance_of(s.lap, s.lap_sq, n);
  q.rms_contrast = std::sqrt(variance_of(s.grey, s.grey_sq, n)) / kMax;
  if (colour) {
    q.has_colourfulness = true;
    const double var = variance_of(s.rg, s.rg_sq, n) + variance_of(s.yb2, s.yb2_sq, n) / 4;
    const double mrg = static_cast<double>(static_cast<long double>(s.rg) / n);
    const double myb = static_cast<double>(static_cast<long double>(s.yb2) / (2.0L * n));
    q.colourfulness = std::sqrt(var) + 0.3 * std::sqrt(mrg * mrg + myb * myb);
  }
  for (uint32_t c = 0; c < ch; ++c) {
    q.share_at_min.push_back(static_cast<double>(at_min[c]) / nd);
    q.share_at_max.push_back(static_cast<double>(at_max[c]) / nd);
  }
  if (k8) {
    q.has_cleanvision = true;
    QualityStats::Cleanvision& cv = q.cleanvision;
    // ImageStat's means: (R, G, B) of an RGB image, else the first band's
    // thrice (cleanvision's fallback where the means are not three).
    auto mean = [&](uint32_t c) { return static_cast<double>(static_cast<uint64_t>(channel_sum[c])) / nd; };
    cv.brightness = ch == 3 ? cv_brightness(mean(rgb[0]), mean(rgb[1]), mean(rgb[2]))
                            : cv_brightness(mean(colour ? rgb[0] : 0), mean(colour ? rgb[0] : 0),
                                            mean(colour ? rgb[0] : 0));
    const std::vector<double> perc = percentiles_of(n, colour, (*hist)[0], wanted, colours, m);
    for (size_t j = 0; j < perc.size(); ++j) cv.brightness_percentiles.emplace_back(kBrightnessPercentiles[j], perc[j]);
    cv.dark_score = perc.back();
    cv.is_dark_issue = cv.dark_score < kDarkThreshold;
    cv.light_score = 1 - perc[1];
    cv.is_light_issue = cv.light_score < kLightThreshold;
    blurriness_of(thumbnail, cv);
    // PIL's entropy: over the bands' histograms laid end to end, R G B (A).
    const double total = static_cast<double>(n * ch);
    double e = 0.0;
    const uint32_t order[4] = {colour ? rgb[0] : 0, colour ? rgb[1] : 1, colour ? rgb[2] : 2, 3};
    for (uint32_t c = 0; c < ch; ++c)
      for (uint64_t count : (*hist)[order[c]])
        if (count) {
          const double p = static_cast<double>(count) / total;
          e += p * (std::log(p) * M_LOG2E);
        }
    cv.entropy = -e;
    cv.low_information_score = std::min(kLowInformationNormalizing * cv.entropy, 1.0);
    cv.is_low_information_issue = cv.low_information_score < kLowInformationThreshold;
    const double wd = static_cast<double>(w), hd = static_cast<double>(h);
    cv.aspect_ratio = std::min(wd / hd, hd / wd);
    cv.is_odd_aspect_ratio_issue = cv.aspect_ratio < kOddAspectRatioThreshold;
    cv.size = std::sqrt(wd) * std::sqrt(hd);
    cv.is_grayscale_issue = !colour || s.equal_rgb;
  }
  return q;
}

}  // namespace

std::array<uint64_t, kBrightnessRanks> brightness_ranks(uint64_t n) {
  static_assert(std::size(kBrightnessPercentiles) * 2 == kBrightnessRanks);
  std::array<uint64_t, kBrightnessRanks> ranks{};
  for (size_t j = 0; j < std::size(kBrightnessPercentiles); ++j) {
    const double vi = static_cast<double>(n - 1) * (kBrightnessPercentiles[j] / 100.0);
    const uint64_t lo = static_cast<uint64_t>(std::floor(vi));
    ranks[2 * j] = std::min(lo, n - 1);
    ranks[2 * j + 1] = std::min(lo + 1, n - 1);
  }
  return ranks;
}

std::vector<BrightnessBucket> brightness_wanted(const uint64_t* buckets, uint64_t n) {
  std::vector<BrightnessBucket> wanted;
  const auto ranks = brightness_ranks(n);  // ascending
  size_t i = 0;
  uint64_t first = 0;
  for (uint32_t b = 0; b < kBrightnessBuckets && i < ranks.size(); first += buckets[b], ++b) {
    if (ranks[i] >= first + buckets[b]) continue;
    wanted.push_back(BrightnessBucket{b, first, buckets[b]});
    while (i < ranks.size() && ranks[i] < first + buckets[b]) ++i;
  }
  return wanted;
}

bool engine_histograms(const Result& result, const Layout& l, const StatsRequest& request,
                       std::vector<std::array<uint64_t, 256>>* out) {
  if (l.type != SampleType::kUint8 || request.colour_space != ColourSpace::kNone || result.channels.size() != l.channels)
    return false;
  // The 256-bin histograms asked for, or the value counts of a partial
  // (--aggregate asks for those instead).
  const bool histograms = request.histogram && !request.hist.explicit_range && request.hist.bins == 256 &&
                          request.channel_hists.empty();
  out->assign(l.channels, {});
  for (uint32_t c = 0; c < l.channels; ++c) {
    const ChannelStats& stats = result.channels[c];
    const std::vector<uint64_t>* h = histograms ? &stats.histogram.counts
                                     : stats.has_merge_state ? &stats.value_counts
                                                             : nullptr;
    if (!h || h->size() != 256) return false;
    std::copy(h->begin(), h->end(), (*out)[c].begin());
  }
  return true;
}

QualityStats quality_of_counts(const Layout& layout, const uint32_t* rgb, const QualityCounts& c) {
  if (layout.type != SampleType::kUint8 || c.hist.size() != layout.channels)
    fail(ErrorCode::kInternal, "quality counts of an image they do not fit");
  Sums s;
  s.grey = c.grey, s.grey_sq = c.grey_sq, s.lap = c.lap, s.lap_sq = c.lap_sq;
  s.rg = c.rg, s.rg_sq = c.rg_sq, s.yb2 = c.yb2, s.yb2_sq = c.yb2_sq;
  s.equal_rgb = c.equal_rgb;
  return finish_quality(layout, rgb, s, &c.hist, c.wanted, c.colours.data(), c.colours.size(), c.thumbnail);
}

QualityStats measure_quality(const ImageView& image, const uint32_t* rgb,
                             const std::vector<std::array<uint64_t, 256>>* histograms) {
  switch (image.layout.type) {
    case SampleType::kUint8: return measure<uint8_t>(image, rgb, histograms);
    case SampleType::kUint16: return measure<uint16_t>(image, rgb, nullptr);
    default:
      fail(ErrorCode::kUnimplemented, std::string("quality measures are computed for 8- and 16-bit unsigned samples; ") +
                                          to_string(image.layout.type) + " samples are not yet");
  }
}

uint64_t quality_working_bytes(const Layout& l, uint32_t threads) {
  const uint64_t n = l.pixels(), sample = sample_size(l.type);
  return n * sample + n * l.channels * sample + n * 4 + uint64_t{threads + 1} * kBrightnessBuckets * 8;
}

void add_quality(const ImageView& image, const StatsRequest& request, Result& result) {
  if (!request.quality) return;
  std::vector<std::array<uint64_t, 256>> known;
  const bool have = engine_histograms(result, image.layout, request, &known);
  result.quality = measure_quality(image, request.rgb, have ? &known : nullptr);
  result.has_quality = true;
}

}  // namespace imgstat
