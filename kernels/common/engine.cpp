#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <future>
#include <memory>
#include <string>

#include "common/parts.hpp"
#include "common/background.hpp"
#include "common/hashes.hpp"
#include "common/quality.hpp"
#include "imgstat/binning.hpp"
#include "imgstat/engine.hpp"

namespace imgstat {

const char* to_string(SampleType t) {
  switch (t) {
    case SampleType::kUint8: return "uint8";
    case SampleType::kUint16: return "uint16";
    case SampleType::kInt8: return "int8";
    case SampleType::kInt16: return "int16";
    case SampleType::kFloat32: return "float32";
    case SampleType::kFloat64: return "float64";
  }
  return "unknown";
}

bool parse_sample_type(const char* name, SampleType* out) {
  for (SampleType t : {SampleType::kUint8, SampleType::kUint16, SampleType::kInt8, SampleType::kInt16,
                       SampleType::kFloat32, SampleType::kFloat64}) {
    if (std::strcmp(name, to_string(t)) == 0) {
      *out = t;
      return true;
    }
  }
  return false;
}

// 2^40 samples per channel keep the exact integer moments inside 128 bits.
constexpr uint64_t kMaxPixels = uint64_t{1} << 40;

bool byte_extent(const Layout& l, uint64_t* row_bytes, uint64_t* least, uint64_t* full) {
  uint64_t row, stride, rows_before_last, all, last;
  if (__builtin_mul_overflow(l.width, l.pixel_bytes(), &row)) return false;
  stride = l.row_stride ? l.row_stride : row;
  if (l.height == 0) {
    *row_bytes = row;
    *least = *full = 0;
    return true;
  }
  if (__builtin_mul_overflow(stride, l.height - 1, &rows_before_last)) return false;
  if (__builtin_add_overflow(rows_before_last, row, &last)) return false;
  if (__builtin_mul_overflow(stride, l.height, &all)) return false;
  *row_bytes = row;
  *least = last;
  *full = all;
  return true;
}

void validate(const Layout& layout, const StatsRequest& request) {
  auto invalid = [](const std::string& m) { fail(ErrorCode::kInvalidArgument, m); };
  if (layout.channels < 1 || layout.channels > 4)
    invalid("channels must be 1 to 4, got " + std::to_string(layout.channels));
  if (layout.width == 0 || layout.height == 0)
    invalid("width and height must be at least 1, got " + std::to_string(layout.width) + "x" +
            std::to_string(layout.height));
  if (layout.width > kMaxPixels || layout.height > kMaxPixels || layout.height > kMaxPixels / layout.width)
    fail(ErrorCode::kResourceExhausted, "images of more than 2^40 pixels are not supported");
  uint64_t row, least, full;
  if (!byte_extent(layout, &row, &least, &full))
    invalid("row stride " + std::to_string(layout.row_stride) + " times height " + std::to_string(layout.height) +
            " overflows 64 bits");
  if (layout.row_stride != 0 && layout.row_stride < layout.row_bytes())
    invalid("row stride " + std::to_string(layout.row_stride) + " is less than a row (" +
            std::to_string(layout.row_bytes()) + " bytes)");
  if (request.histogram) {
    const HistogramSpec& h = request.hist;
    if (h.bins < 1 || h.bins > kMaxBins)
      invalid("bins must be 1 to " + std::to_string(kMaxBins) + ", got " + std::to_string(h.bins));
    if (h.explicit_range && !histogram_range_ok(h.lo, h.hi, h.bins))
      invalid("histogram range must be finite with lo < hi, and hi - lo and bins / (hi - lo) finite");
  }
  if (request.percentiles.size() > kMaxPercentiles)
    invalid("at most " + std::to_string(kMaxPercentiles) + " percentiles, got " +
            std::to_string(request.percentiles.size()));
  for (double p : request.percentiles)
    if (!(p >= 0 && p <= 100)) invalid("percentiles must be 0 to 100, got " + std::to_string(p));
  if (request.robust) {
    const SigmaClipSpec& c = request.sigma_clip;
    if (!(c.sigma_lower > 0 && c.sigma_upper > 0 && std::isfinite(c.sigma_lower) && std::isfinite(c.sigma_upper)))
      invalid("sigma clipping's sigmas must be finite and above 0, got " + std::to_string(c.sigma_lower) + " and " +
              std::to_string(c.sigma_upper));
    const SampleType t = request.colour_space == ColourSpace::kNone ? layout.type : measured_layout(layout, request).type;
    if (!is_float(t) && sample_size(t) > 2)
      fail(ErrorCode::kUnimplemented, std::string("robust statistics (sigma clipping) are computed for 8- and 16-bit "
                                                  "integer and float samples; ") + to_string(t) + " samples are not yet");
  }
  validate_background(layout, request.background);
  if (request.background.enabled && request.colour_space != ColourSpace::kNone)
    invalid("background meshes are of the image's own channels, not a colour space's");
  if (request.quality && !quality_measured(layout.type))
    fail(ErrorCode::kUnimplemented, std::string("quality measures are computed for 8- and 16-bit unsigned samples; ") +
                                        to_string(layout.type) + " samples are not yet");
  if (request.colour_space != ColourSpace::kNone) {
    const std::string space = to_string(request.colour_space);
    if (layout.channels < 3)
      invalid("colour space " + space + " needs an RGB or RGBA image; this one has " + std::to_string(layout.channels) +
              " channel" + (layout.channels == 1 ? "" : "s"));
    if (layout.type != SampleType::kUint8 && layout.type != SampleType::kFloat32)
      invalid("colour space " + space + " is defined for uint8 and float32 samples, not " + to_string(layout.type));
    for (uint32_t c : request.rgb)
      if (c >= 3) invalid("colour conversion needs R, G and B among the first three channels");
  }
  const JointSpec& j = request.joint;
  if (j.axes != 0) {
    const Layout measured = measured_layout(layout, request);
    if (j.axes < 2 || j.axes > kMaxJointAxes)
      invalid("a joint histogram has 2 or 3 channels, got " + std::to_string(j.axes));
    uint64_t total = 1;
    std::string shape;
    for (uint32_t a = 0; a < j.axes; ++a) {
      if (j.channels[a] >= measured.channels)
        invalid("joint histogram channel " + std::to_string(j.channels[a]) + " is past the " +
                std::to_string(measured.channels) + " channels measured");
      if (j.bins[a] < 1) invalid("joint histogram bins must be at least 1 per channel, got 0");
      total *= j.bins[a];  // at most (2^32)^3: checked per step below
      shape += (a ? "x" : "") + std::to_string(j.bins[a]);
      if (total > kMaxJointBins)
        invalid("a joint histogram of " + shape + (a + 1 < j.axes ? "x..." : "") + " bins is more than the " +
                std::to_string(kMaxJointBins) + " (2^24) allowed");
      if (j.explicit_range && !histogram_range_ok(j.lo[a], j.hi[a], j.bins[a]))
        invalid("joint histogram range " + std::to_string(a) + " must be finite with lo < hi");
    }
    if (!j.explicit_range && is_float(measured.type) && request.colour_space == ColourSpace::kNone)
      invalid("a joint histogram of float samples needs its ranges (--joint-range)");
  }
}

Layout measured_layout(const Layout& layout, const StatsRequest& request) {
  if (request.colour_space == ColourSpace::kNone) return layout;
  Layout out = layout;
  out.channels = colour_channels(request.colour_space) + (layout.channels == 4 ? 1 : 0);
  out.row_stride = 0;
  return out;
}

StatsRequest measured_request(const StatsRequest& request, const Layout& layout) {
  const Layout measured = measured_layout(layout, request);
  StatsRequest out = request;
  out.colour_space = ColourSpace::kNone;
  out.rgb[0] = 0;
  out.rgb[1] = 1;
  out.rgb[2] = 2;
  if (request.colour_space != ColourSpace::kNone && !request.hist.explicit_range) {
    out.channel_hists.assign(measured.channels, request.hist);
    for (uint32_t c = 0; c < measured.channels; ++c) {
      out.channel_hists[c].explicit_range = true;
      colour_channel_range(request.colour_space, c, measured.type, &out.channel_hists[c].lo, &out.channel_hists[c].hi);
    }
  }
  JointSpec& j = out.joint;
  if (j.axes && !j.explicit_range) {
    for (uint32_t a = 0; a < j.axes; ++a) {
      if (request.colour_space != ColourSpace::kNone) {
        colour_channel_range(request.colour_space, j.channels[a], measured.type, &j.lo[a], &j.hi[a]);
      } else {  // integers: the type's range
        j.lo[a] = static_cast<double>(type_lo(measured.type));
        j.hi[a] = j.lo[a] + static_cast<double>(uint64_t{1} << type_bits(measured.type));
      }
    }
    j.explicit_range = true;
  }
  return out;
}

void read_in_pieces(const ByteReader& read, uint64_t at, uint64_t n, uint8_t* out, uint64_t piece) {
  if (n <= piece) {
    if (n) read(at, n, out);
    return;
  }
  tbb::parallel_for(uint64_t{0}, (n + piece - 1) / piece, [&](uint64_t k) {
    read(at + k * piece, std::min(piece, n - k * piece), out + k * piece);
  });
}

Result Engine::analyze_read(const Layout& layout, const StatsRequest& request, const ByteReader& read) {
  return read_into(*open_stream(layout, request), layout, read);
}

void add_host_measures(const ImageView& image, const StatsRequest& request, Result& result) {
  add_quality(image, request, result);
  add_background(image, request, result);
  add_hashes(image, request, result);
}

uint64_t Engine::working_bytes(const Layout&, const StatsRequest&, const Parts*) const { return 0; }
uint64_t Engine::stream_bytes(const Layout&, const StatsRequest&) const { return 0; }

Result read_into(StreamAnalysis& into, const Layout& layout, const ByteReader& read) {
  StreamAnalysis* stream = &into;
  const uint64_t total = layout.min_bytes();
  // Not value-initialized: zeroing 32 MiB of fresh pages cost more than
  // the reads that fill them (the min_max of a 64 MiB FITS frame, 2 cores).
  const size_t chunk = static_cast<size_t>(std::min(kReadChunkBytes, total));
  std::unique_ptr<uint8_t[]> buffers[2] = {std::unique_ptr<uint8_t[]>(new uint8_t[chunk]),
                                           std::unique_ptr<uint8_t[]>(total > chunk ? new uint8_t[chunk] : nullptr)};
  std::future<void> feeding;
  // A feed in flight reads a buffer: it ends before the buffers go, whatever is thrown.
  struct Drain {
    std::future<void>& f;
    ~Drain() {
      if (f.valid()) f.wait();
    }
  } drain{feeding};
  int next = 0;
  for (uint64_t at = 0; at < total; at += kReadChunkBytes) {
    uint8_t* b = buffers[next].get();
    const uint64_t n = std::min(kReadChunkBytes, total - at);
    read_in_pieces(read, at, n, b, kReadPieceBytes);
    if (feeding.valid()) feeding.get();
    StreamAnalysis* s = stream;
    feeding = std::async(std::launch::async, [s, b, n] { s->feed(b, n); });
    next ^= 1;
  }
  if (feeding.valid()) feeding.get();
  return stream->finish();
}

std::shared_ptr<void> Engine::pin_host_memory(const void*, size_t) { return nullptr; }

std::shared_ptr<void> Engine::open_ipc_memory(const std::string&, uint64_t) {
  fail(ErrorCode::kFailedPrecondition, "the " + info().kind + " engine cannot read GPU memory (CUDA IPC regions)");
}

Result Engine::analyze_parts(const ImageView&, const Parts&, const StatsRequest&) {
  fail(ErrorCode::kUnimplemented, "the " + info().kind + " engine does not compute parts of images");
}

Result Engine::analyze_device(const DeviceImageView&, const StatsRequest&) {
  fail(ErrorCode::kFailedPrecondition, "the " + info().kind + " engine does not take images in GPU memory");
}

Result Engine::analyze_parts_device(const DeviceImageView&, const Parts&, const StatsRequest&) {
  fail(ErrorCode::kFailedPrecondition, "the " + info().kind + " engine does not take images in GPU memory");
}

}  // namespace imgstat
