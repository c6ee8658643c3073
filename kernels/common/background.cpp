#include "common/background.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

namespace imgstat {
namespace {

[[noreturn]] void invalid(const std::string& message) { fail(ErrorCode::kInvalidArgument, message); }

// A box's finite samples, ascending, as doubles. Integer and float32
// samples are sorted by their bits (LSD radix over order-keeping keys:
// 1 pass for 8 bits, 2 for 16, 3 for float32), float64 by comparison.
class BoxSorter {
 public:
  void gather(const ImageView& image, uint32_t channel, uint64_t y0, uint64_t y1, uint64_t x0, uint64_t x1,
              std::vector<double>& out) {
    switch (image.layout.type) {
      case SampleType::kUint8: return sort_keys<uint8_t>(image, channel, y0, y1, x0, x1, out);
      case SampleType::kInt8: return sort_keys<int8_t>(image, channel, y0, y1, x0, x1, out);
      case SampleType::kUint16: return sort_keys<uint16_t>(image, channel, y0, y1, x0, x1, out);
      case SampleType::kInt16: return sort_keys<int16_t>(image, channel, y0, y1, x0, x1, out);
      case SampleType::kFloat32: return sort_keys<float>(image, channel, y0, y1, x0, x1, out);
      case SampleType::kFloat64: {
        out.clear();
        each<double>(image, channel, y0, y1, x0, x1, [&](double v) {
          if (std::isfinite(v)) out.push_back(v);
        });
        std::sort(out.begin(), out.end());
        return;
      }
    }
  }

 private:
  template <class T, class F>
  static void each(const ImageView& image, uint32_t channel, uint64_t y0, uint64_t y1, uint64_t x0, uint64_t x1, F&& f) {
    const Layout& l = image.layout;
    const uint64_t pixel = l.pixel_bytes();
    const auto* base = static_cast<const uint8_t*>(image.data) + channel * sizeof(T);
    for (uint64_t y = y0; y < y1; ++y) {
      const uint8_t* p = base + y * l.stride() + x0 * pixel;
      for (uint64_t x = x0; x < x1; ++x, p += pixel) {
        T v;
        std::memcpy(&v, p, sizeof v);
        f(v);
      }
    }
  }

  // Order-keeping unsigned keys: value - type_lo for integers; floats'
  // bits with the sign flipped (negative: every bit).
  template <class T>
  static uint32_t key_of(T v) {
    if constexpr (std::is_same_v<T, float>) {
      uint32_t k;
      std::memcpy(&k, &v, sizeof k);
      return k & 0x80000000u ? ~k : k | 0x80000000u;
    } else {
      return static_cast<uint32_t>(static_cast<int64_t>(v) - (std::is_signed_v<T> ? int64_t{std::numeric_limits<T>::min()} : 0));
    }
  }
  template <class T>
  static double value_of(uint32_t k) {
    if constexpr (std::is_same_v<T, float>) {
      k = k & 0x80000000u ? k & 0x7fffffffu : ~k;
      float v;
      std::memcpy(&v, &k, sizeof v);
      return v;
    } else {
      return static_cast<double>(static_cast<int64_t>(k) + (std::is_signed_v<T> ? int64_t{std::numeric_limits<T>::min()} : 0));
    }
  }

  template <class T>
  void sort_keys(const ImageView& image, uint32_t channel, uint64_t y0, uint64_t y1, uint64_t x0, uint64_t x1,
                 std::vector<double>& out) {
    keys_.clear();
    each<T>(image, channel, y0, y1, x0, x1, [&](T v) {
      if constexpr (std::is_same_v<T, float>) {
        if (!std::isfinite(v)) return;
      }
      keys_.push_back(key_of(v));
    });
    constexpr int kBits = sizeof(T) == 1 ? 8 : sizeof(T) == 2 ? 16 : 32;
    constexpr int kDigit = kBits <= 16 ? 8 : 11;
    tmp_.resize(keys_.size());
    for (int shift = 0; shift < kBits; shift += kDigit) {
      uint32_t count[1u << kDigit] = {};
      const uint32_t mask = (1u << kDigit) - 1;
      for (uint32_t k : keys_) ++count[(k >> shift) & mask];
      uint32_t at = 0;
      for (uint32_t& c : count) {
        const uint32_t n = c;
        c = at;
        at += n;
      }
      for (uint32_t k : keys_) tmp_[count[(k >> shift) & mask]++] = k;
      keys_.swap(tmp_);
    }
    out.resize(keys_.size());
    for (size_t i = 0; i < keys_.size(); ++i) out[i] = value_of<T>(keys_[i]);
  }

  std::vector<uint32_t> keys_, tmp_;
};

// numpy's median of sorted samples [a, b): the middle one, or the mean of
// the two middle ones.
double median_of(const double* x, size_t a, size_t b) {
  const size_t n = b - a;
  return n % 2 ? x[a + n / 2] : (x[a + n / 2 - 1] + x[a + n / 2]) / 2;
}

// The sums of a box's sorted samples less one of them, as prefixes: the
// mean and std of any range [a, b) in constant time, however many rounds
// the clipping takes (summing the range again each round was most of the
// meshes' time). In long double and about a sample of the box, so that the
// differences keep what a double holds (a constant box's std: exactly 0).
class RangeSums {
 public:
  void of(const double* x, size_t n) {
    ref_ = n ? x[n / 2] : 0;
    s_.resize(n + 1);
    q_.resize(n + 1);
    s_[0] = q_[0] = 0;
    for (size_t i = 0; i < n; ++i) {
      const long double d = static_cast<long double>(x[i]) - ref_;
      s_[i + 1] = s_[i] + d;
      q_[i + 1] = q_[i] + d * d;
    }
  }
  double mean(size_t a, size_t b) const {
    return static_cast<double>(ref_ + (s_[b] - s_[a]) / static_cast<long double>(b - a));
  }
  // numpy's std (ddof 0), rounded to float64 as numpy's is.
  double stddev(size_t a, size_t b) const {
    const long double n = static_cast<long double>(b - a), s = s_[b] - s_[a];
    const long double m2 = std::max<long double>(0, (q_[b] - q_[a]) - s * s / n);
    return static_cast<double>(std::sqrt(m2 / n));
  }

 private:
  long double ref_ = 0;
  std::vector<long double> s_, q_;
};

struct BoxAnswer {
  bool kept = false;
  double background = 0, rms = 0;
};

// Steps 2 to 4 of background.hpp for one box's finite samples, sorted.
BoxAnswer measure_box(const double* x, size_t n, uint64_t box_pixels, double threshold, const BackgroundSpec& spec,
                      RangeSums& sums) {
  BoxAnswer out;
  if (n == 0 || static_cast<double>(box_pixels - n) > threshold) return out;
  sums.of(x, n);
  // As astropy's fast sigma clipping along an axis (what Background2D
  // calls): rounds narrow the samples kept; the last round's bounds then
  // keep every finite sample inside them, those an earlier round left out
  // too. A round that keeps none makes the next round's bounds NaN, which
  // leave nothing out.
  const SigmaClipSpec& clip = spec.sigma_clip;
  size_t a = 0, b = n;
  double lower = 0, upper = 0;
  for (int32_t round = 0;;) {
    if (a == b) {
      lower = upper = std::numeric_limits<double>::quiet_NaN();
      break;
    }
    const double median = median_of(x, a, b), mean = sums.mean(a, b);
    const double centre = clip.centre_mean ? mean : median;
    double spread;
    if (clip.spread_mad_std) {  // astropy's mad_std: the median of |x - median|, whatever the centre
      std::vector<double> d(b - a);
      for (size_t i = a; i < b; ++i) d[i - a] = std::fabs(x[i] - median);
      std::sort(d.begin(), d.end());
      spread = median_of(d.data(), 0, d.size()) * kMadStdScale;
    } else {
      spread = sums.stddev(a, b);
    }
    lower = centre - clip.sigma_lower * spread;
    upper = centre + clip.sigma_upper * spread;
    const size_t na = static_cast<size_t>(std::lower_bound(x + a, x + b, lower) - x);
    const size_t nb = std::max(na, static_cast<size_t>(std::upper_bound(x + na, x + b, upper) - x));
    if (na == a && nb == b) break;
    a = na, b = nb;
    if (++round, clip.maxiters >= 0 && round >= clip.maxiters) break;
  }
  if (std::isnan(lower)) {
    a = 0, b = n;
  } else {
    a = static_cast<size_t>(std::lower_bound(x, x + n, lower) - x);
    b = std::max(a, static_cast<size_t>(std::upper_bound(x + a, x + n, upper) - x));
  }
  const size_t kept = b - a;
  if (kept == 0 || static_cast<double>(box_pixels - kept) > threshold) return out;
  out.kept = true;
  const double median = median_of(x, a, b), mean = sums.mean(a, b), std = sums.stddev(a, b);
  switch (spec.estimator) {
    case BackgroundEstimator::kMedian: out.background = median; break;
    case BackgroundEstimator::kMean: out.background = mean; break;
    case BackgroundEstimator::kSExtractor:
      if (std == 0) {
        out.background = mean;
      } else {
        out.background = std::fabs(mean - median) / std < 0.3 ? 2.5 * median - 1.5 * mean : median;
      }
      break;
  }
  out.rms = std;
  return out;
}

// Step 5: each box left out takes the inverse-distance-weighted mean of the
// 10 nearest kept boxes (a kept box is its own value, as photutils' is at
// distance 0).
void fill_excluded(BackgroundMesh& m) {
  constexpr size_t kNeighbours = 10;
  const int64_t rows = static_cast<int64_t>(m.rows), cols = static_cast<int64_t>(m.columns);
  uint64_t kept_boxes = m.rows * m.columns - m.boxes_excluded;
  const size_t k = std::min<uint64_t>(kNeighbours, kept_boxes);
  std::vector<double> bkg = m.background, rms = m.rms;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, rows * cols), [&](const tbb::blocked_range<int64_t>& r) {
    struct Near {
      int64_t d2;
      int64_t at;
    };
    std::vector<Near> near;
    for (int64_t box = r.begin(); box != r.end(); ++box) {
      if (!m.excluded[static_cast<size_t>(box)]) continue;
      const int64_t i = box / cols, j = box % cols;
      // Kept boxes within a square of growing radius: once k of them lie
      // within Euclidean distance `radius`, none outside the square is nearer.
      for (int64_t radius = 1;; radius *= 2) {
        near.clear();
        for (int64_t y = std::max<int64_t>(0, i - radius); y <= std::min(rows - 1, i + radius); ++y)
          for (int64_t x = std::max<int64_t>(0, j - radius); x <= std::min(cols - 1, j + radius); ++x)
            if (!m.excluded[static_cast<size_t>(y * cols + x)])
              near.push_back({(y - i) * (y - i) + (x - j) * (x - j), y * cols + x});
        const bool whole = radius >= rows && radius >= cols;
        if (near.size() >= k || whole) {
          std::sort(near.begin(), near.end(),
                    [](const Near& p, const Near& q) { return p.d2 != q.d2 ? p.d2 < q.d2 : p.at < q.at; });
          if (whole || near[k - 1].d2 <= radius * radius) break;
        }
      }
      double w_sum = 0, b_sum = 0, r_sum = 0;
      for (size_t n = 0; n < k; ++n) {
        const double w = 1.0 / std::sqrt(static_cast<double>(near[n].d2));
        w_sum += w;
        b_sum += w * m.background[static_cast<size_t>(near[n].at)];
        r_sum += w * m.rms[static_cast<size_t>(near[n].at)];
      }
      bkg[static_cast<size_t>(box)] = b_sum / w_sum;
      rms[static_cast<size_t>(box)] = r_sum / w_sum;
    }
  });
  m.background.swap(bkg);
  m.rms.swap(rms);
}

// Step 6: scipy's generic_filter(nanmedian, size, mode="constant",
// cval=NaN): the median of the window's boxes inside the mesh.
std::vector<double> median_filter(const std::vector<double>& v, uint64_t rows, uint64_t cols, uint32_t fr,
                                  uint32_t fc) {
  std::vector<double> out(v.size());
  const int64_t hr = fr / 2, hc = fc / 2;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, static_cast<int64_t>(rows)),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      std::vector<double> w;
                      for (int64_t i = r.begin(); i != r.end(); ++i)
                        for (int64_t j = 0; j < static_cast<int64_t>(cols); ++j) {
                          w.clear();
                          for (int64_t y = std::max<int64_t>(0, i - hr);
                               y < std::min<int64_t>(static_cast<int64_t>(rows), i - hr + fr); ++y)
                            for (int64_t x = std::max<int64_t>(0, j - hc);
                                 x < std::min<int64_t>(static_cast<int64_t>(cols), j - hc + fc); ++x)
                              w.push_back(v[static_cast<size_t>(y) * cols + static_cast<size_t>(x)]);
                          std::sort(w.begin(), w.end());
                          out[static_cast<size_t>(i) * cols + static_cast<size_t>(j)] = median_of(w.data(), 0, w.size());
                        }
                    });
  return out;
}

BackgroundMesh measure_channel(const ImageView& image, uint32_t channel, const BackgroundSpec& spec) {
  const Layout& l = image.layout;
  BackgroundMesh m;
  m.box_rows = spec.box_rows;
  m.box_columns = spec.box_columns;
  m.rows = (l.height + spec.box_rows - 1) / spec.box_rows;
  m.columns = (l.width + spec.box_columns - 1) / spec.box_columns;
  const uint64_t boxes = m.rows * m.columns, box_pixels = spec.box_rows * spec.box_columns;
  double threshold = spec.exclude_percentile / 100.0 * static_cast<double>(box_pixels);
  if (spec.exclude_percentile == 100) threshold -= 1;
  std::vector<BoxAnswer> answers(boxes);
  tbb::parallel_for(tbb::blocked_range<uint64_t>(0, boxes), [&](const tbb::blocked_range<uint64_t>& r) {
    BoxSorter sorter;
    RangeSums sums;
    std::vector<double> x;
    for (uint64_t box = r.begin(); box != r.end(); ++box) {
      const uint64_t bi = box / m.columns, bj = box % m.columns;
      const uint64_t y0 = bi * spec.box_rows, y1 = std::min(l.height, y0 + spec.box_rows);
      const uint64_t x0 = bj * spec.box_columns, x1 = std::min(l.width, x0 + spec.box_columns);
      sorter.gather(image, channel, y0, y1, x0, x1, x);
      answers[box] = measure_box(x.data(), x.size(), box_pixels, threshold, spec, sums);
    }
  });
  m.excluded.assign(boxes, 0);
  m.background.assign(boxes, 0);
  m.rms.assign(boxes, 0);
  for (uint64_t b = 0; b < boxes; ++b) {
    if (!answers[b].kept) {
      m.excluded[b] = 1;
      ++m.boxes_excluded;
    }
    m.background[b] = answers[b].background;
    m.rms[b] = answers[b].rms;
  }
  if (m.boxes_excluded == boxes) {
    m.background.clear();
    m.rms.clear();
    return m;
  }
  if (m.boxes_excluded) fill_excluded(m);
  if (spec.filter_rows > 1 || spec.filter_columns > 1) {
    m.background = median_filter(m.background, m.rows, m.columns, spec.filter_rows, spec.filter_columns);
    m.rms = median_filter(m.rms, m.rows, m.columns, spec.filter_rows, spec.filter_columns);
  }
  std::vector<double> sorted = m.background;
  std::sort(sorted.begin(), sorted.end());
  m.background_median = median_of(sorted.data(), 0, sorted.size());
  sorted = m.rms;
  std::sort(sorted.begin(), sorted.end());
  m.rms_median = median_of(sorted.data(), 0, sorted.size());
  return m;
}

// Cubic B-spline coefficients of one line under scipy's "reflect"
// (half-sample symmetric) boundary: c[-1] = c[0], c[n] = c[n - 1], so the
// interpolation conditions f[i] = (c[i-1] + 4 c[i] + c[i+1]) / 6 are
// tridiagonal with 5 on the first and last diagonal; solved exactly as
// scipy's recursive filter is (its causal start sums the whole line).
void spline_coefficients(double* f, size_t n, size_t step) {
  if (n < 2) return;
  std::vector<double> c(n), d(n);  // Thomas algorithm on 6 f = tridiag(1, 4|5, 1) c
  auto diag = [&](size_t i) { return i == 0 || i == n - 1 ? 5.0 : 4.0; };
  c[0] = 1 / diag(0);
  d[0] = 6 * f[0] / diag(0);
  for (size_t i = 1; i < n; ++i) {
    const double den = diag(i) - c[i - 1];
    c[i] = 1 / den;
    d[i] = (6 * f[i * step] - d[i - 1]) / den;
  }
  f[(n - 1) * step] = d[n - 1];
  for (size_t i = n - 1; i-- > 0;) f[i * step] = d[i] - c[i] * f[(i + 1) * step];
}

// The cubic B-spline's weights at offset t in [0, 1) from its second knot.
void spline_weights(double t, double w[4]) {
  const double u = 1 - t;
  w[0] = u * u * u / 6;
  w[1] = (4 - 6 * t * t + 3 * t * t * t) / 6;
  w[2] = (4 - 6 * u * u + 3 * u * u * u) / 6;
  w[3] = t * t * t / 6;
}

// Where output index k of a zoom by `box` samples the mesh's n coefficients
// (grid mode): (k + 0.5) / box - 0.5; its four coefficients' indices,
// reflected at the ends, and their weights.
struct Tap {
  int64_t at[4];
  double w[4];
};
std::vector<Tap> taps(uint64_t out, uint64_t n, uint64_t box) {
  std::vector<Tap> t(out);
  const double zoom = static_cast<double>(n) / static_cast<double>(n * box);
  auto reflect = [&](int64_t i) {
    const int64_t len = static_cast<int64_t>(n);
    if (len == 1) return int64_t{0};
    const int64_t period = 2 * len;
    i %= period;
    if (i < 0) i += period;
    return i < len ? i : period - 1 - i;
  };
  for (uint64_t k = 0; k < out; ++k) {
    const double cc = (static_cast<double>(k) + 0.5) * zoom - 0.5;
    const double fl = std::floor(cc);
    spline_weights(cc - fl, t[k].w);
    const int64_t start = static_cast<int64_t>(fl) - 1;
    for (int h = 0; h < 4; ++h) t[k].at[h] = reflect(start + h);
  }
  return t;
}

}  // namespace

void validate_background(const Layout& layout, const BackgroundSpec& spec) {
  if (!spec.enabled) return;
  if (spec.box_rows == 0 || spec.box_columns == 0 || spec.box_rows > layout.height || spec.box_columns > layout.width)
    invalid("background boxes of " + std::to_string(spec.box_rows) + "x" + std::to_string(spec.box_columns) +
            " (rows x columns) must be at least 1 and at most the image's " + std::to_string(layout.height) + "x" +
            std::to_string(layout.width));
  if (spec.filter_rows == 0 || spec.filter_columns == 0 || spec.filter_rows % 2 == 0 || spec.filter_columns % 2 == 0)
    invalid("the background's median filter must be odd along both axes, got " + std::to_string(spec.filter_rows) +
            "x" + std::to_string(spec.filter_columns));
  if (!(spec.exclude_percentile >= 0 && spec.exclude_percentile <= 100))
    invalid("the background's exclude percentile must be from 0 to 100, got " + std::to_string(spec.exclude_percentile));
  if (spec.box_rows * spec.box_columns > kMaxBackgroundBoxPixels)
    fail(ErrorCode::kResourceExhausted,
         "background boxes of " + std::to_string(spec.box_columns) + "x" + std::to_string(spec.box_rows) +
             " pixels are past the limit of " + std::to_string(kMaxBackgroundBoxPixels) +
             " pixels a box (each thread sorts a box's samples at once): choose smaller boxes");
  const SigmaClipSpec& c = spec.sigma_clip;
  if (!(c.sigma_lower > 0 && c.sigma_upper > 0 && std::isfinite(c.sigma_lower) && std::isfinite(c.sigma_upper)))
    invalid("the background's sigma clipping needs finite sigmas above 0");
  const uint64_t rows = (layout.height + spec.box_rows - 1) / spec.box_rows;
  const uint64_t cols = (layout.width + spec.box_columns - 1) / spec.box_columns;
  if (rows > kMaxBackgroundBoxes || cols > kMaxBackgroundBoxes || rows * cols > kMaxBackgroundBoxes)
    fail(ErrorCode::kResourceExhausted,
         "background boxes of " + std::to_string(spec.box_rows) + "x" + std::to_string(spec.box_columns) + " make a " +
             std::to_string(rows) + "x" + std::to_string(cols) + " mesh, past the limit of " +
             std::to_string(kMaxBackgroundBoxes) + " boxes: choose larger boxes");
}

std::vector<BackgroundMesh> measure_background(const ImageView& image, const BackgroundSpec& spec) {
  validate_background(image.layout, spec);
  std::vector<BackgroundMesh> out;
  for (uint32_t c = 0; c < image.layout.channels; ++c) out.push_back(measure_channel(image, c, spec));
  return out;
}

uint64_t background_working_bytes(const Layout& l, const BackgroundSpec& spec, uint32_t threads) {
  if (!spec.enabled || spec.box_rows == 0 || spec.box_columns == 0) return 0;
  const uint64_t box = std::min<uint64_t>(spec.box_rows * spec.box_columns, kMaxBackgroundBoxPixels);
  const uint64_t boxes = std::min<uint64_t>(((l.height + spec.box_rows - 1) / spec.box_rows) *
                                                ((l.width + spec.box_columns - 1) / spec.box_columns),
                                            kMaxBackgroundBoxes);
  // Per box: its answer, three mesh values and a flag, the filter's and the
  // filling's copies, per channel kept in the result.
  return uint64_t{threads + 1} * box * 16 + boxes * 64 * (l.channels + 1);
}

void add_background(const ImageView& image, const StatsRequest& request, Result& result) {
  if (!request.background.enabled) return;
  result.background = measure_background(image, request.background);
}

std::vector<float> background_image(const BackgroundMesh& mesh, const std::vector<double>& values, uint64_t width,
                                    uint64_t height) {
  std::vector<float> out(width * height);
  if (values.empty()) return out;
  const auto [lo_it, hi_it] = std::minmax_element(values.begin(), values.end());
  const double lo = *lo_it, hi = *hi_it;
  if (lo == hi) {
    std::fill(out.begin(), out.end(), static_cast<float>(lo));
    return out;
  }
  const uint64_t rows = mesh.rows, cols = mesh.columns;
  std::vector<double> c = values;  // prefiltered along both axes, as scipy's spline_filter
  for (uint64_t i = 0; i < rows; ++i) spline_coefficients(&c[i * cols], cols, 1);
  for (uint64_t j = 0; j < cols; ++j) spline_coefficients(&c[j], rows, cols);
  const std::vector<Tap> ty = taps(height, rows, mesh.box_rows), tx = taps(width, cols, mesh.box_columns);
  tbb::parallel_for(tbb::blocked_range<uint64_t>(0, height), [&](const tbb::blocked_range<uint64_t>& r) {
    std::vector<double> line(cols);
    for (uint64_t y = r.begin(); y != r.end(); ++y) {
      const Tap& t = ty[y];
      for (uint64_t j = 0; j < cols; ++j) {
        double s = 0;
        for (int h = 0; h < 4; ++h) s += t.w[h] * c[static_cast<uint64_t>(t.at[h]) * cols + j];
        line[j] = s;
      }
      float* o = &out[y * width];
      for (uint64_t x = 0; x < width; ++x) {
        const Tap& u = tx[x];
        double s = 0;
        for (int h = 0; h < 4; ++h) s += u.w[h] * line[static_cast<uint64_t>(u.at[h])];
        o[x] = static_cast<float>(std::clamp(s, lo, hi));
      }
    }
  });
  return out;
}

}  // namespace imgstat
