#include "core/validate.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/limits.hpp"
#include "imgstat/binning.hpp"

namespace imgstat {
namespace {

[[noreturn]] void invalid(const std::string& m) { fail(ErrorCode::kInvalidArgument, m); }

}  // namespace

SampleType sample_type_of(v1::SampleType t) {
  switch (t) {
    case v1::SAMPLE_TYPE_UINT8: return SampleType::kUint8;
    case v1::SAMPLE_TYPE_UINT16: return SampleType::kUint16;
    case v1::SAMPLE_TYPE_INT8: return SampleType::kInt8;
    case v1::SAMPLE_TYPE_INT16: return SampleType::kInt16;
    case v1::SAMPLE_TYPE_FLOAT32: return SampleType::kFloat32;
    case v1::SAMPLE_TYPE_FLOAT64: return SampleType::kFloat64;
    case v1::SAMPLE_TYPE_UINT32:
    case v1::SAMPLE_TYPE_INT32: invalid("raw.sample_type uint32 and int32 are for label images only");
    default: invalid("raw.sample_type must be set (uint8, uint16, int8, int16, float32 or float64)");
  }
}

v1::SampleType proto_sample_type(SampleType t) {
  switch (t) {
    case SampleType::kUint8: return v1::SAMPLE_TYPE_UINT8;
    case SampleType::kUint16: return v1::SAMPLE_TYPE_UINT16;
    case SampleType::kInt8: return v1::SAMPLE_TYPE_INT8;
    case SampleType::kInt16: return v1::SAMPLE_TYPE_INT16;
    case SampleType::kFloat32: return v1::SAMPLE_TYPE_FLOAT32;
    case SampleType::kFloat64: return v1::SAMPLE_TYPE_FLOAT64;
  }
  return v1::SAMPLE_TYPE_UNSPECIFIED;
}

v1::InputKind kind_of(const v1::Input& input) {
  switch (input.kind()) {
    case v1::INPUT_KIND_UNSPECIFIED:
    case v1::INPUT_KIND_ENCODED: return v1::INPUT_KIND_ENCODED;
    case v1::INPUT_KIND_RAW:
    case v1::INPUT_KIND_BYTES: return input.kind();
    default: invalid("input.kind " + std::to_string(input.kind()) + " is not a known kind");
  }
}

namespace {

// maxiters 0: `default_maxiters` (astropy's sigma_clip: 5; Background2D: 10).
SigmaClipSpec sigma_clip_of(const v1::SigmaClip& c, const std::string& field, int32_t default_maxiters) {
  auto sigma = [&](double v, const char* name) {
    if (!(v >= 0 && std::isfinite(v)))
      invalid(field + "." + name + " must be finite and 0 or more (0: the default), got " + std::to_string(v));
  };
  sigma(c.sigma(), "sigma");
  sigma(c.sigma_lower(), "sigma_lower");
  sigma(c.sigma_upper(), "sigma_upper");
  if (c.maxiters() < -1)
    invalid(field + ".maxiters must be -1 (until nothing is left out), 0 (" + std::to_string(default_maxiters) +
            ") or more, got " + std::to_string(c.maxiters()));
  if (!v1::SigmaClip::Centre_IsValid(c.centre())) invalid(field + ".centre " + std::to_string(c.centre()) + " is not a known centre");
  if (!v1::SigmaClip::Spread_IsValid(c.spread())) invalid(field + ".spread " + std::to_string(c.spread()) + " is not a known spread");
  SigmaClipSpec out;
  const double s = c.sigma() > 0 ? c.sigma() : 3;
  out.sigma_lower = c.sigma_lower() > 0 ? c.sigma_lower() : s;
  out.sigma_upper = c.sigma_upper() > 0 ? c.sigma_upper() : s;
  out.maxiters = c.maxiters() == 0 ? default_maxiters : c.maxiters();
  out.centre_mean = c.centre() == v1::SigmaClip::CENTRE_MEAN;
  out.spread_mad_std = c.spread() == v1::SigmaClip::SPREAD_MAD_STD;
  return out;
}

}  // namespace

StatsRequest stats_request_of(const v1::Options& o) {
  StatsRequest r;
  if (o.statistics_size() > 0) {
    r.min_max = r.sum = r.stddev = r.histogram = false;
    for (int s : o.statistics()) {
      switch (s) {
        case v1::STATISTIC_MIN_MAX: r.min_max = true; break;
        case v1::STATISTIC_SUM: r.sum = true; break;
        case v1::STATISTIC_STDDEV: r.stddev = true; break;
        case v1::STATISTIC_HISTOGRAM: r.histogram = true; break;
        case v1::STATISTIC_DISTRIBUTION: r.distribution = true; break;
        case v1::STATISTIC_SHAPE: r.shape = true; break;
        case v1::STATISTIC_POSITIONS: r.positions = true; break;
        case v1::STATISTIC_UNIQUE_COLORS: r.unique_colors = true; break;
        case v1::STATISTIC_LUMINANCE: r.luminance = true; break;
        case v1::STATISTIC_SUMMARY: r.summary = true; break;
        case v1::STATISTIC_MERGE_STATE: r.merge_state = true; break;
        case v1::STATISTIC_ROBUST: r.robust = true; break;
        case v1::STATISTIC_QUALITY: r.quality = true; break;
        case v1::STATISTIC_HASHES: r.hashes = true; break;
        case v1::STATISTIC_ALL:
          r.min_max = r.sum = r.stddev = r.histogram = r.distribution = r.shape = r.positions = r.unique_colors =
              r.luminance = r.summary = true;
          break;
        default: invalid("options.statistics: unknown statistic " + std::to_string(s));
      }
    }
  }
  if (r.quality && o.has_parts())
    fail(ErrorCode::kUnimplemented, "quality measures are computed for whole images, not parts: ask for them "
                                    "without parts");
  if (r.hashes && o.has_parts())
    fail(ErrorCode::kUnimplemented, "hashes are computed for whole images, not parts: ask for them without parts");
  if (o.has_sigma_clip()) r.sigma_clip = sigma_clip_of(o.sigma_clip(), "options.sigma_clip", 5);
  if (o.has_background()) {
    if (o.has_parts())
      fail(ErrorCode::kUnimplemented, "background meshes are computed for whole images, not parts: ask for them "
                                      "without parts");
    const v1::BackgroundOptions& b = o.background();
    BackgroundSpec& spec = r.background;
    spec.enabled = true;
    if (b.box_rows() == 0) invalid("options.background.box_rows must be 1 or more (the box's height in pixels)");
    spec.box_rows = b.box_rows();
    spec.box_columns = b.box_columns() ? b.box_columns() : b.box_rows();
    spec.filter_rows = b.filter_rows() ? b.filter_rows() : 3;
    spec.filter_columns = b.filter_columns() ? b.filter_columns() : spec.filter_rows;
    if (b.has_exclude_percentile()) spec.exclude_percentile = b.exclude_percentile();
    if (b.has_sigma_clip()) spec.sigma_clip = sigma_clip_of(b.sigma_clip(), "options.background.sigma_clip", 10);
    switch (b.estimator()) {
      case v1::BackgroundOptions::ESTIMATOR_SEXTRACTOR: spec.estimator = BackgroundEstimator::kSExtractor; break;
      case v1::BackgroundOptions::ESTIMATOR_MEDIAN: spec.estimator = BackgroundEstimator::kMedian; break;
      case v1::BackgroundOptions::ESTIMATOR_MEAN: spec.estimator = BackgroundEstimator::kMean; break;
      default: invalid("options.background.estimator " + std::to_string(b.estimator()) + " is not a known estimator");
    }
  }
  if (!v1::DecoderChoice_IsValid(o.decoder()))
    invalid("options.decoder must be DECODER_CHOICE_AUTO, _CPU or _GPU, got " + std::to_string(o.decoder()));
  if (o.bins() > kMaxBins)
    invalid("options.bins must be 1 to " + std::to_string(kMaxBins) + " (0 means 256), got " + std::to_string(o.bins()));
  r.hist.bins = o.bins() ? o.bins() : 256;
  if (static_cast<size_t>(o.percentiles_size()) > kMaxPercentiles)
    invalid("options.percentiles: at most " + std::to_string(kMaxPercentiles) + ", got " +
            std::to_string(o.percentiles_size()));
  for (double p : o.percentiles()) {
    if (!(p >= 0 && p <= 100)) invalid("options.percentiles must be 0 to 100, got " + std::to_string(p));
    r.percentiles.push_back(p);
  }
  if (o.has_range()) {
    const double lo = o.range().lo(), hi = o.range().hi();
    if (!histogram_range_ok(lo, hi, r.hist.bins))
      invalid("options.range must be finite with lo < hi, hi - lo finite and wider than bins * 2^-1024, got [" + std::to_string(lo) +
              ", " + std::to_string(hi) + ")");
    r.hist.explicit_range = true;
    r.hist.lo = lo;
    r.hist.hi = hi;
  }
  switch (o.colour_space()) {
    case v1::COLOUR_SPACE_UNSPECIFIED: break;
    case v1::COLOUR_SPACE_HSV: r.colour_space = ColourSpace::kHsv; break;
    case v1::COLOUR_SPACE_HSV_FULL: r.colour_space = ColourSpace::kHsvFull; break;
    case v1::COLOUR_SPACE_HLS: r.colour_space = ColourSpace::kHls; break;
    case v1::COLOUR_SPACE_LAB: r.colour_space = ColourSpace::kLab; break;
    case v1::COLOUR_SPACE_YCRCB: r.colour_space = ColourSpace::kYCrCb; break;
    case v1::COLOUR_SPACE_GRAY: r.colour_space = ColourSpace::kGray; break;
    default: invalid("options.colour_space " + std::to_string(o.colour_space()) + " is not a known colour space");
  }
  if (o.has_joint()) {
    const v1::JointHistogramOptions& j = o.joint();
    const int axes = j.channels_size();
    if (axes < 2 || axes > static_cast<int>(kMaxJointAxes))
      invalid("options.joint.channels: a joint histogram has 2 or 3 channels, got " + std::to_string(axes));
    if (j.bins_size() != 1 && j.bins_size() != axes)
      invalid("options.joint.bins: one for every channel or one per channel, got " + std::to_string(j.bins_size()));
    if (j.ranges_size() != 0 && j.ranges_size() != axes)
      invalid("options.joint.ranges: none or one per channel, got " + std::to_string(j.ranges_size()));
    r.joint.axes = static_cast<uint32_t>(axes);
    r.joint.explicit_range = j.ranges_size() != 0;
    for (int a = 0; a < axes; ++a) {
      r.joint.channels[a] = j.channels(a);
      r.joint.bins[a] = j.bins(j.bins_size() == 1 ? 0 : a);
      if (r.joint.explicit_range) {
        r.joint.lo[a] = j.ranges(a).lo();
        r.joint.hi[a] = j.ranges(a).hi();
      }
    }
  }
  return r;
}

Layout raw_layout_of(const v1::RawLayout& raw) {
  if (raw.width() == 0 || raw.height() == 0)
    invalid("raw.width and raw.height must be at least 1, got " + std::to_string(raw.width()) + "x" +
            std::to_string(raw.height()));
  if (raw.channels() < 1 || raw.channels() > 4)
    invalid("raw.channels must be 1 to 4, got " + std::to_string(raw.channels()));
  Layout l{raw.width(), uint64_t{raw.height()} * raw_planes_of(raw), raw.channels(), sample_type_of(raw.sample_type()),
           raw.row_stride()};
  uint64_t row, least, full;
  if (!byte_extent(l, &row, &least, &full))
    invalid(l.row_stride ? "raw.row_stride " + std::to_string(l.row_stride) + " times raw.height " +
                               std::to_string(l.height) + " overflows 64 bits"
                         : "raw.width x raw.height x pixel size (" + std::to_string(l.width) + "x" +
                               std::to_string(l.height) + "x" + std::to_string(l.pixel_bytes()) + ") overflows 64 bits");
  if (l.row_stride != 0 && l.row_stride < row)
    invalid("raw.row_stride " + std::to_string(l.row_stride) + " is less than a row of " + std::to_string(row) +
            " bytes");
  return l;
}

void check_raw_size(const Layout& l, uint64_t bytes) {
  uint64_t row, least, full;
  if (!byte_extent(l, &row, &least, &full)) invalid("raw layout overflows 64 bits");  // raw_layout_of refused it
  if (bytes != full && bytes != least) {
    std::string want = std::to_string(full);
    if (least != full) want = std::to_string(least) + " or " + want;
    invalid("raw data is " + std::to_string(bytes) + " bytes but " + std::to_string(l.width) + "x" +
            std::to_string(l.height) + "x" + std::to_string(l.channels) + " " + to_string(l.type) +
            (l.row_stride ? " with row stride " + std::to_string(l.row_stride) : std::string()) + " needs " +
            want);
  }
}

Parts parts_of(const v1::Options& options, const Limits& limits) {
  Parts p;
  p.max_parts = limits.max_parts;
  p.max_answer_bytes = limits.max_message_bytes;
  if (!options.has_parts()) return p;
  const v1::Parts& in = options.parts();
  switch (in.where_case()) {
    case v1::Parts::kRectangles:
      p.kind = PartsKind::kRects;
      if (static_cast<uint64_t>(in.rectangles().rectangles_size()) > limits.max_parts)
        fail_limit(std::to_string(in.rectangles().rectangles_size()) + " rectangles is more than the limit of " +
                   std::to_string(limits.max_parts) + " parts (--max-parts)");
      for (const v1::Rectangle& r : in.rectangles().rectangles())
        p.rects.push_back(Rect{r.x(), r.y(), r.width(), r.height()});
      if (p.rects.empty()) invalid("options.parts.rectangles is empty: give at least one rectangle");
      break;
    case v1::Parts::kTiles:
      p.kind = PartsKind::kTiles;
      p.columns = in.tiles().columns();
      p.rows = in.tiles().rows();
      p.slabs = in.tiles().slabs();
      break;
    case v1::Parts::kMask:
      p.kind = PartsKind::kMask;
      if (in.mask().source_case() == v1::Mask::SOURCE_NOT_SET)
        invalid("options.parts.mask needs an image or alpha");
      if (in.mask().source_case() == v1::Mask::kAlpha && !in.mask().alpha())
        invalid("options.parts.mask.alpha is false: set it, or give a mask image");
      break;
    case v1::Parts::kLabels:
      p.kind = PartsKind::kLabels;
      if (!in.labels().has_image()) invalid("options.parts.labels needs a label image");
      if (in.labels().has_ignore()) {
        p.ignore_label = true;
        p.ignored_label = in.labels().ignore();
      }
      if (in.labels().max_labels() > 0) p.max_parts = std::min<uint64_t>(p.max_parts, in.labels().max_labels());
      break;
    default: break;
  }
  return p;
}

PartMapView raw_map_of(const v1::RawLayout& raw, const void* data, uint64_t bytes, const char* what) {
  const std::string w = what;
  MapType type;
  switch (raw.sample_type()) {
    case v1::SAMPLE_TYPE_UINT32: type = MapType::kUint32; break;
    case v1::SAMPLE_TYPE_INT32: type = MapType::kInt32; break;
    default: {
      v1::RawLayout as_image = raw;
      const Layout l = raw_layout_of(as_image);
      check_raw_size(l, bytes);
      return PartMapView{data, l.width, l.height, l.channels, 0, map_type_of(l.type), l.row_stride};
    }
  }
  // 32-bit labels: the image's checks with a 4-byte sample.
  v1::RawLayout as_image = raw;
  as_image.set_sample_type(v1::SAMPLE_TYPE_FLOAT32);
  const Layout l = raw_layout_of(as_image);
  try {
    check_raw_size(l, bytes);
  } catch (const Error& e) {
    invalid("the " + w + ": " + e.what());
  }
  return PartMapView{data, l.width, l.height, l.channels, 0, type, l.row_stride};
}

RequestPlan plan_request(const v1::Options& options, const Limits& limits) {
  const v1::Planes& planes = options.planes();
  PlaneChoice choice{planes.each(), planes.first(), planes.count(), planes.level(), std::nullopt};
  if (planes.has_series()) choice.series = planes.series();
  return RequestPlan{stats_request_of(options), parts_of(options, limits), choice};
}

StatsRequest with_rgb(StatsRequest request, const std::vector<uint32_t>& order) {
  if (order.size() >= 3)
    for (int i = 0; i < 3; ++i) request.rgb[i] = order[i];
  if (request.colour_space == ColourSpace::kNone)
    for (uint32_t a = 0; a < request.joint.axes; ++a)
      if (request.joint.channels[a] < order.size()) request.joint.channels[a] = order[request.joint.channels[a]];
  return request;
}

}  // namespace imgstat
