// The compute engines' one interface: a typed image view in, per-channel
// statistics out. No gRPC, no OpenCV: the server and the CLI adapt to this.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "imgstat/colour.hpp"
#include "imgstat/error.hpp"
#include "imgstat/float_moments.hpp"
#include "imgstat/placement.hpp"
#include "imgstat/types.hpp"

namespace imgstat {

// Shape of pixels in memory: little-endian samples, channels interleaved.
struct Layout {
  uint64_t width = 0;
  uint64_t height = 0;
  uint32_t channels = 1;
  SampleType type = SampleType::kUint8;
  uint64_t row_stride = 0;  // bytes from one row to the next; 0 = packed

  uint64_t pixel_bytes() const { return channels * sample_size(type); }
  uint64_t row_bytes() const { return width * pixel_bytes(); }
  uint64_t stride() const { return row_stride ? row_stride : row_bytes(); }
  uint64_t pixels() const { return width * height; }
  // Fewest bytes that hold the image: the last row needs no padding.
  uint64_t min_bytes() const {
    return height == 0 ? 0 : stride() * (height - 1) + row_bytes();
  }
};

// The one place layout sizes are multiplied from untrusted numbers: the bytes
// a row holds, the fewest bytes that hold the image (the last row needs no
// padding) and stride * height. False when any of them overflows 64 bits,
// the outputs then unset. Every entry point checks a layout through this
// (validate() below, the server's request checks) before using the
// unchecked accessors above.
bool byte_extent(const Layout& layout, uint64_t* row_bytes, uint64_t* least, uint64_t* full);

struct ImageView {
  const void* data = nullptr;
  Layout layout;
};

// Pixels already in the engine's GPU memory (a GPU decoder's output), packed
// (row_stride 0), 16-byte aligned, and ready: the work that wrote them has
// finished. The CPU engine never receives these.
struct DeviceImageView {
  const void* data = nullptr;
  Layout layout;
  // The CUDA ordinal of the GPU holding the pixels; -1: the engine's first.
  int device = -1;
};

struct HistogramSpec {
  uint32_t bins = 256;
  bool explicit_range = false;  // false: the automatic range
  double lo = 0;
  double hi = 0;
};

// Sigma clipping as astropy's sigma_clip (proto SigmaClip); maxiters < 0:
// until no sample is left out.
struct SigmaClipSpec {
  double sigma_lower = 3;
  double sigma_upper = 3;
  int32_t maxiters = 5;
  bool centre_mean = false;   // else the median
  bool spread_mad_std = false;  // else the standard deviation
};

// A background mesh as photutils' Background2D makes it (StatsRequest::
// background; common/background.hpp says how, step by step).
enum class BackgroundEstimator : uint8_t {
  kSExtractor,  // 2.5 median - 1.5 mean, the median where (mean - median) / std >= 0.3, the mean where std = 0
  kMedian,
  kMean,
};
struct BackgroundSpec {
  bool enabled = false;
  uint64_t box_rows = 0, box_columns = 0;        // each 1 to the image's size
  uint32_t filter_rows = 3, filter_columns = 3;  // odd; 1 x 1: no filter
  double exclude_percentile = 10;                // a box with more of its pixels masked or clipped is left out
  SigmaClipSpec sigma_clip{3, 3, 10, false, false};
  BackgroundEstimator estimator = BackgroundEstimator::kSExtractor;
};

// astropy's mad_std: the median absolute deviation times 1 / Phi^-1(3/4).
constexpr double kMadStdScale = 1.482602218505602;

// Which statistics to produce; counts of finite, NaN and Inf samples always are.
struct StatsRequest {
  bool min_max = true;
  bool sum = true;  // sum and mean
  bool stddev = true;
  bool histogram = true;
  HistogramSpec hist;
  // Median, the percentiles below, mode and entropy: exact for integer
  // samples (from the count of every value), from kFineBins bins over
  // [min, max] for floats.
  bool distribution = false;
  std::vector<double> percentiles;  // each 0 to 100
  bool shape = false;               // skewness and excess kurtosis
  bool positions = false;           // where min and max first occur
  bool unique_colors = false;       // 8-bit samples only
  bool luminance = false;           // 3 or 4 channels, whole images only
  uint32_t rgb[3] = {0, 1, 2};      // the channels holding R, G and B (OpenCV stores B, G, R)
  bool summary = false;             // all channels together
  // Each channel's merge state (ChannelStats::value_counts or ::moments):
  // what merging it with other images' gives, exactly, the statistics of all
  // their pixels at once.
  bool merge_state = false;
  // Sigma-clipped mean, median, stddev and the MAD (ChannelStats::robust):
  // 8- and 16-bit integer samples from the count of every value; float
  // samples of one whole image from every finite sample, sorted.
  bool robust = false;
  SigmaClipSpec sigma_clip;
  // Measures of the image's quality (Result::quality): whole 8- and 16-bit
  // images of one plane, not parts.
  bool quality = false;
  // Hashes of the pixels for finding duplicates (Result::hashes): whole
  // images of one plane, not parts.
  bool hashes = false;
  // Background and background RMS meshes of each channel (Result::
  // background): whole images of one plane, not parts.
  BackgroundSpec background;
  // In what: the image's channels, or a colour space's (RGB and RGBA
  // images, uint8 or float32; alpha stays the last channel), in which every
  // statistic above is taken; histograms of a space's channels default to
  // each channel's range (colour_channel_range()).
  ColourSpace colour_space = ColourSpace::kNone;
  // A joint histogram of 2 or 3 of those channels (axes 0: none).
  JointSpec joint;
  // Per channel of the measured image, when channels differ in range (a
  // colour space's); empty: `hist` for every channel. Set by
  // measured_request(), never by callers.
  std::vector<HistogramSpec> channel_hists;
};

// The histogram of one channel: its own where it has one.
inline const HistogramSpec& hist_of(const StatsRequest& request, uint32_t channel) {
  return channel < request.channel_hists.size() ? request.channel_hists[channel] : request.hist;
}

// Float samples: the distribution's bins over [min, max]; a percentile,
// median or mode is the middle of its bin, within half a bin of the exact
// value.
constexpr uint32_t kFineBins = 65536;
// The most bins a histogram may have (HistogramSpec::bins), on every engine.
constexpr uint32_t kMaxBins = 65536;
constexpr size_t kMaxPercentiles = 100;

struct Histogram {
  std::vector<uint64_t> counts;
  double lo = 0;
  double hi = 0;
  uint64_t underflow = 0;
  uint64_t overflow = 0;
};

// Fields a StatsRequest did not ask for are left at their defaults; min, max,
// mean and stddev are meaningful only when count > 0.
struct ChannelStats {
  uint64_t count = 0;  // finite samples
  uint64_t nan_count = 0;
  uint64_t posinf_count = 0;
  uint64_t neginf_count = 0;
  double min = 0;
  double max = 0;
  double sum = 0;
  bool has_sum_int = false;  // integer sample types: sum_int is exact
  int64_t sum_int = 0;
  double mean = 0;
  double stddev = 0;  // population
  Histogram histogram;
  // distribution: value = the smallest sample with at least p% of the
  // samples at or below it (numpy's method="inverted_cdf").
  bool has_distribution = false;
  double median = 0;
  std::vector<std::pair<double, double>> percentiles;  // (p, value)
  double mode = 0;       // the most frequent value (the smallest of equals)
  double entropy = 0;    // bits, over the values (integers) or the fine bins (floats)
  double bin_error = 0;  // bound on |median, percentile or mode - exact|: 0 for integers
  // shape: population skewness m3 / m2^1.5 and excess kurtosis m4 / m2^2 - 3
  // (m_k: mean of (v - mean)^k); unset when all samples are equal.
  bool has_shape = false;
  double skewness = 0;
  double kurtosis = 0;
  // positions: row-major pixel indices of the first min and the first max.
  bool has_positions = false;
  uint64_t min_at = 0;
  uint64_t max_at = 0;
  // merge_state: integer samples, the count of every value (value_counts[i]
  // samples of type_lo + i); float samples, their moments (NaN and Inf
  // counts included).
  bool has_merge_state = false;
  std::vector<uint64_t> value_counts;
  FloatMoments moments;
  // robust: of the samples sigma clipping keeps (RobustStats in the proto).
  struct Robust {
    double mean = 0, median = 0, stddev = 0;
    uint64_t count = 0, clipped_low = 0, clipped_high = 0;
    uint32_t iterations = 0;
    double lower_bound = 0, upper_bound = 0;
    double mad = 0, mad_std = 0;
  };
  bool has_robust = false;
  Robust robust;
};

// Quality measures of a whole image (StatsRequest::quality); how each is
// computed, and whose it is, in common/quality.hpp.
struct QualityStats {
  double laplacian_variance = 0;  // of the grey image
  double rms_contrast = 0;        // the grey image's stddev / the type's largest value
  bool has_colourfulness = false;  // 3 and 4 channel images
  double colourfulness = 0;
  // Per channel, in stored order: the share of samples at the type's
  // lowest and highest value.
  std::vector<double> share_at_min, share_at_max;
  // cleanvision's image properties, scores and issues at its defaults
  // (8-bit images), named as it names them.
  struct Cleanvision {
    double brightness = 0;
    std::vector<std::pair<double, double>> brightness_percentiles;  // (p, value)
    double dark_score = 0, light_score = 0;
    bool is_dark_issue = false, is_light_issue = false;
    double blurriness = 0, blurriness_grayscale_std = 0, blurry_score = 0;
    bool is_blurry_issue = false;
    double entropy = 0, low_information_score = 0;
    bool is_low_information_issue = false;
    double aspect_ratio = 0;  // min(w / h, h / w): the odd_aspect_ratio score
    bool is_odd_aspect_ratio_issue = false;
    double size = 0;  // sqrt(w) sqrt(h): odd_size is a dataset's verdict
    bool is_grayscale_issue = false;
  };
  bool has_cleanvision = false;
  Cleanvision cleanvision;
};

// An image's hashes (StatsRequest::hashes); how each is made in
// common/hashes.hpp.
struct ImageHashes {
  std::array<uint8_t, 16> pixels{};  // XXH3-128 of the decoded pixels, canonical (big-endian) bytes
  bool has_phash = false;            // 8-bit images
  uint64_t phash = 0;                // imagehash's phash, bit 63 its first
};

// One channel's background meshes (StatsRequest::background): rows x
// columns boxes, row-major; box (i, j) covers rows [i box_rows, (i + 1)
// box_rows) and columns likewise, the last ones padded past the image.
struct BackgroundMesh {
  uint64_t rows = 0, columns = 0;
  uint64_t box_rows = 0, box_columns = 0;
  // After the excluded boxes are filled (inverse distance weighting of the
  // 10 nearest kept boxes) and the median filter: photutils'
  // background_mesh and background_rms_mesh.
  std::vector<double> background, rms;
  // Whether each box was left out (too many of its pixels masked, not
  // finite or clipped) and filled from its neighbours.
  std::vector<uint8_t> excluded;
  uint64_t boxes_excluded = 0;
  double background_median = 0, rms_median = 0;  // of the meshes
  // Every box left out: no meshes (the vectors empty).
  bool empty() const { return background.empty(); }
};

// Whether a request needs the whole image at once, not bands or a stream
// (the luminance, the quality measures, background meshes, hashes).
inline bool needs_whole_image(const StatsRequest& r) {
  return r.luminance || r.quality || r.background.enabled || r.hashes;
}

// The measures every engine takes on the host from the whole image (quality
// measures, background meshes, hashes): whether a request has any, the
// request without them, and adding them to a result (the same code on
// every engine, so the same bits). A caller holding a device image may
// analyze it without them, copy it to the host, let the device pixels go
// and add them there (add_host_measures, below), outside the engine's GPU
// slot.
inline bool needs_host_measures(const StatsRequest& r) { return r.quality || r.hashes || r.background.enabled; }
inline StatsRequest without_host_measures(StatsRequest r) {
  r.quality = r.hashes = r.background.enabled = false;
  return r;
}

// Whether a request needs the count of every integer value (distribution,
// shape, merge state, robust statistics).
inline bool counts_every_value(const StatsRequest& r) {
  return r.distribution || r.shape || r.merge_state || r.robust;
}

// Where in an image to measure. kWhole: every pixel. kRects: each
// rectangle, one answer each, in the order given (they may overlap).
// kMask: the pixels whose map sample is nonzero (NaN counts as nonzero),
// answered as the image's own channels. kLabels: each distinct label of the
// map, in ascending order, one answer each. kTiles: a grid of columns x
// rows tiles; tile (c, r) spans x from floor(c W / columns) to
// floor((c + 1) W / columns), and y likewise.
enum class PartsKind { kWhole, kRects, kMask, kLabels, kTiles };

struct Rect {
  uint64_t x = 0;
  uint64_t y = 0;
  uint64_t width = 0;
  uint64_t height = 0;
};

// The samples of a mask or label image: the image types and, for labels,
// 32-bit integers.
enum class MapType : uint8_t { kUint8, kUint16, kInt8, kInt16, kFloat32, kFloat64, kUint32, kInt32 };
size_t map_sample_size(MapType t);
const char* to_string(MapType t);
MapType map_type_of(SampleType t);

// A mask or label image beside the image: the same width and height, its
// `channel` read (a mask of the image's own alpha: the image itself and its
// last channel).
struct PartMapView {
  const void* data = nullptr;
  uint64_t width = 0;
  uint64_t height = 0;
  uint32_t channels = 1;
  uint32_t channel = 0;
  MapType type = MapType::kUint8;
  uint64_t row_stride = 0;  // 0: packed
  uint64_t stride() const { return row_stride ? row_stride : width * channels * map_sample_size(type); }
};

// Defaults of the two limits parts have (the server's --max-parts and its
// largest message).
constexpr uint64_t kDefaultMaxParts = 65536;
constexpr uint64_t kDefaultMaxAnswerBytes = uint64_t{64} << 20;

class PartIndex;

struct Parts {
  PartsKind kind = PartsKind::kWhole;
  std::vector<Rect> rects;
  uint32_t columns = 0;  // tiles
  uint32_t rows = 0;
  // Tiles of a volume (planes one below the other, each plane_height rows):
  // columns x rows x slabs boxes, the planes cut into slabs as the rows are
  // cut into tile rows. 0: tiles of one image.
  uint32_t slabs = 0;
  uint64_t plane_height = 0;
  // Saturates: 2^32 columns, rows and slabs are past 64 bits.
  uint64_t tile_count() const {
    const unsigned __int128 n = static_cast<unsigned __int128>(uint64_t{columns} * rows) * (slabs ? slabs : 1);
    return n > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(n);
  }
  PartMapView map;       // mask and labels
  bool ignore_label = false;
  int64_t ignored_label = 0;
  // Rectangles, labels or tiles past this are refused (kResourceExhausted)
  // before anything is counted per part.
  uint64_t max_parts = kDefaultMaxParts;
  // An answer estimated larger than this (answer_bytes()) is refused before
  // its counts are allocated.
  uint64_t max_answer_bytes = kDefaultMaxAnswerBytes;
  // Labels: the map's index where the caller built it already (the server
  // builds it beside the image's decode), so that neither the engine nor
  // the label boxes look for the labels again; used where it serves these
  // parts (PartIndex::serves), else built anew.
  std::shared_ptr<const PartIndex> index;
};

// One part's answer. roi: the rectangle or tile; label: the label.
struct PartStats {
  Rect roi;
  bool has_label = false;
  int64_t label = 0;
  bool is_tile = false;
  uint32_t column = 0;
  uint32_t row = 0;
  // A volume's tile: its slab, and the planes it holds [z, z + depth) (roi
  // is its rectangle in each).
  uint32_t slab = 0;
  uint64_t z = 0, depth = 0;
  std::vector<ChannelStats> channels;
  bool has_joint = false;
  JointHistogram joint;
};

// A label's bounding box in an image, or a volume of planes one below the
// other (x, y within a plane; z the plane): first x, y, z and the extent.
struct LabelBox {
  int64_t label = 0;
  uint64_t x = 0, y = 0, z = 0;
  uint64_t width = 0, height = 0, depth = 0;
};
// The box of every label parts.kind kLabels answers, in the order it
// answers them (ascending), over `layout` (its map's size) whose planes are
// plane_height rows each. Every label answered has a pixel: no box is empty.
std::vector<LabelBox> label_boxes(const Layout& layout, const Parts& parts, uint64_t plane_height);
// A labels map's index for Parts::index: its distinct labels found (on
// every thread of the caller's arena) and checked against parts.max_parts.
std::shared_ptr<const PartIndex> find_labels(const Layout& layout, const Parts& parts);

// About how many bytes `parts` answers of `channels` channels take in a
// response: what max_answer_bytes is checked against.
uint64_t answer_bytes(uint64_t parts, uint32_t channels, SampleType type, const StatsRequest& request);

// Checks parts against the image before anything is counted: rectangles
// inside it and not empty, the map's size equal to the image's, the grid
// within the image, the counts within max_parts. Throws InvalidArgument
// (kResourceExhausted for limits) naming the problem.
void validate(const Layout& layout, const Parts& parts);

// What an analysis returns: per-channel statistics, in the image's stored
// channel order, and which engine computed them ("cpu" or "cuda"; a CUDA
// engine that falls back to the CPU says so here).
struct Result {
  std::vector<ChannelStats> channels;
  std::string engine;
  int device = -1;  // the GPU (CUDA ordinal) that computed it; -1: none did

  // Distinct colours, 8-bit images: values of gray, or of R, G, B together;
  // alpha is not part of a colour.
  bool has_unique_colors = false;
  uint64_t unique_colors = 0;
  // All channels' samples together (no histogram, no positions).
  bool has_summary = false;
  ChannelStats summary;
  // Rec. 709 luminance of 3 or 4 channel images as one more channel (see
  // luminance.hpp for its exact arithmetic).
  bool has_luminance = false;
  ChannelStats luminance;
  // Parts other than a mask (which answers in channels): one entry each, in
  // the order Parts defines; each part's positions are of the whole image.
  std::vector<PartStats> parts;
  // StatsRequest::joint, of the image (a mask: of its pixels).
  bool has_joint = false;
  JointHistogram joint;
  // StatsRequest::quality.
  bool has_quality = false;
  QualityStats quality;
  // StatsRequest::background: one mesh per channel, in stored order.
  std::vector<BackgroundMesh> background;
  // StatsRequest::hashes.
  bool has_hashes = false;
  ImageHashes hashes;
};

// Adds the host's measures a request asks for (needs_host_measures) to a
// result, from the whole image in host memory.
void add_host_measures(const ImageView& image, const StatsRequest& request, Result& result);

struct EngineInfo {
  std::string kind;  // "cpu" or "cuda"
  std::string device_name;
  uint64_t device_memory_bytes = 0;
  std::string compute_capability;
  uint32_t threads = 0;
};

// What an engine holds now, for monitoring; zeros where it has no GPU.
struct EngineUsage {
  uint64_t device_bytes_held = 0;   // held by the engine: workspaces and calls in progress
  uint64_t device_bytes_free = 0;   // free on its device, all processes counted
  uint64_t device_bytes_total = 0;
  uint64_t cpu_fallbacks = 0;       // images the GPU could not take, computed on the CPU
  bool gpu_lost = false;            // the GPU failed: the CPU takes every image
};

// An analysis fed by consecutive byte ranges of one image laid out as the
// Layout says (row padding included), as they arrive.
class StreamAnalysis {
 public:
  virtual ~StreamAnalysis() = default;
  virtual void feed(const void* data, size_t bytes) = 0;
  // The caller has no more bytes at hand and will wait for them (its client
  // has not sent the next chunk): the engine gives back what other calls
  // could use meanwhile (a GPU workspace, its pinned and device buffers) and
  // keeps only what it has counted. feed() may follow as before.
  virtual void pause() {}
  // Throws InvalidArgument when fewer than layout.min_bytes() were fed.
  virtual Result finish() = 0;
};

// Reads bytes [at, at + n) of an image (laid out as its Layout says, row
// padding included) into out. Called from several threads at once, for
// ranges that do not overlap; throws to end the analysis (its source cut
// short, its call cancelled).
using ByteReader = std::function<void(uint64_t at, uint64_t n, uint8_t* out)>;

// A reader and whether it has thrown: an engine that carries on elsewhere
// after a fault of its own (FallbackEngine, a placed engine's next GPU) must
// not carry on after its source's.
class WatchedReader {
 public:
  explicit WatchedReader(const ByteReader& read) : read_(read) {}
  ByteReader reader() {
    return [this](uint64_t at, uint64_t n, uint8_t* out) {
      try {
        read_(at, n, out);
      } catch (...) {
        failed_ = true;
        throw;
      }
    };
  }
  bool failed() const { return failed_; }

 private:
  const ByteReader& read_;
  std::atomic<bool> failed_{false};
};

// read(at, n, out) in pieces of `piece` bytes, on several threads (TBB's).
void read_in_pieces(const ByteReader& read, uint64_t at, uint64_t n, uint8_t* out, uint64_t piece);

// A read image goes to a stream in chunks, the next read while the last is
// counted; a chunk is read in pieces on several threads (one core copies
// from the page cache at about 4 GB/s, sixteen at 40). Two chunks of 4 MiB
// stay in cache and fault few fresh pages: 16 MiB ones cost a 64 MiB FITS
// frame's min_max 0.24 s instead of 0.18 on 2 cores.
inline constexpr uint64_t kReadChunkBytes = uint64_t{4} << 20;
inline constexpr uint64_t kReadPieceBytes = uint64_t{1} << 20;

// Feeds layout.min_bytes() from read() to stream that way, and finishes it.
Result read_into(StreamAnalysis& stream, const Layout& layout, const ByteReader& read);

class Engine {
 public:
  virtual ~Engine() = default;
  virtual EngineInfo info() const = 0;
  virtual Result analyze(const ImageView& image, const StatsRequest& request) = 0;
  virtual std::unique_ptr<StreamAnalysis> open_stream(
      const Layout& layout, const StatsRequest& request) = 0;
  // Statistics of an image that can be read again (a file), its
  // layout.min_bytes() from read(). A GPU engine reads it on several
  // threads straight into its pinned staging slots, and a fault part way
  // starts it over elsewhere from its first byte, so no engine keeps a copy
  // of what it read (the CPU engine reads floats binned over their own range
  // twice). What read() throws ends the call as it is, never retried. The
  // default reads it into open_stream(), a chunk ahead.
  virtual Result analyze_read(const Layout& layout, const StatsRequest& request, const ByteReader& read);
  // Statistics of parts of an image (Parts). A mask answers in channels (and
  // the summary and unique colours, as a whole image would); the other kinds
  // in parts, each with its channels only. The luminance is not computed.
  // Every integer result equals what analyze() gives for the same pixels.
  virtual Result analyze_parts(const ImageView& image, const Parts& parts, const StatsRequest& request);
  // False once the engine can no longer compute (a lost GPU).
  virtual bool usable() const { return true; }
  virtual EngineUsage usage() const { return {}; }
  // Whether analyze_device() may be called now: a GPU engine whose device is usable.
  virtual bool takes_device_images() const { return false; }
  // Statistics of pixels in device memory; throws kFailedPrecondition on
  // engines without a GPU and kUnavailable when the GPU fails (the pixels
  // are then out of reach: the caller decodes again on the CPU).
  virtual Result analyze_device(const DeviceImageView& image, const StatsRequest& request);
  // Whether analyze_device() computes the request's host measures (quality,
  // hashes) of such an image on the device, with no copy of it to the host.
  virtual bool measures_on_device(const Layout&, const StatsRequest&) const { return false; }
  // analyze_parts() of pixels in device memory (the map in host memory),
  // the same answers; throws as analyze_device() does, and kUnimplemented
  // for parts the GPU does not compute (floats, rectangles, a volume's tiles).
  virtual Result analyze_parts_device(const DeviceImageView& image, const Parts& parts, const StatsRequest& request);
  // Host memory that stays put and is read often (a shared-memory region):
  // a GPU engine page-locks it for DMA, read-only, so analyze() sends it at
  // the pinned-copy rate without staging. The registration lasts while the
  // returned handle lives; null where nothing was done (no GPU, or the
  // driver refused: analyze() then stages the memory as any other).
  virtual std::shared_ptr<void> pin_host_memory(const void* data, size_t bytes);
  // Another process's GPU memory (a CUDA IPC memory handle of that
  // process's cudaIpcGetMemHandle), opened on this engine's device and
  // checked to hold at least `bytes`; get() is the device address, closed
  // when the handle goes. Throws kInvalidArgument naming the driver's reason,
  // kFailedPrecondition on engines without a GPU.
  virtual std::shared_ptr<void> open_ipc_memory(const std::string& handle, uint64_t bytes);
  // How work is spread over the engine's GPUs; null for an engine without one.
  virtual std::shared_ptr<Placement> placement() const { return nullptr; }

  // Host memory one analyze() or analyze_parts() of this layout (parts null:
  // a whole image) allocates beyond the pixels it is given: a luminance
  // plane, a colour-converted copy, gathered part pixels, part counters. A
  // server takes it from its decode-memory budget before the call, so that
  // what a request declares is refused, not allocated. An upper bound.
  virtual uint64_t working_bytes(const Layout& layout, const StatsRequest& request, const Parts* parts = nullptr) const;
  // Host memory a stream of this layout keeps until its end beyond the
  // chunk it is fed: every pixel, where its statistics need a second pass
  // (floats binned over their own range) and the engine keeps them on the
  // host. It grows with the bytes fed, never ahead of them. 0: none.
  virtual uint64_t stream_bytes(const Layout& layout, const StatsRequest& request) const;
};

enum class EngineKind { kAuto, kCpu, kCuda };

// How a host thread waits for the GPU: spinning answers soonest and burns a
// core for the whole wait; yielding spins but gives the core to any thread
// that wants it (decoding, parsing); blocking sleeps until the GPU signals.
enum class CudaWait { kSpin, kYield, kBlock };

struct EngineOptions {
  EngineKind kind = EngineKind::kAuto;
  uint32_t cpu_threads = 0;        // 0: all cores
  int cuda_device = 0;
  // The GPUs to compute on, one engine each (a GPU listed twice gets two);
  // empty: cuda_device alone. every_cuda_device: all the machine has.
  std::vector<int> cuda_devices;
  bool every_cuda_device = false;
  uint64_t cuda_memory_limit = 0;  // device bytes each GPU's engine may hold; 0: no limit
  // Every GPU workspace (pinned staging ring, device slots, result buffers)
  // made at start, within cuda_memory_limit: a server's memory is then its
  // idle figure, not something callers at once can make it commit. Else the
  // first at start and the others when calls at once first need them (a
  // process that analyzes one image, as the CLI's --local, pins a quarter).
  bool cuda_workspaces_at_start = false;
  // Images each GPU's engine analyzes at once, a workspace each (24 MiB of
  // pinned host memory, 96 MiB of device memory); more wait for one.
  int cuda_workspaces = 4;
  CudaWait cuda_wait = CudaWait::kSpin;
  // Told why, each time the CUDA engine hands an image to the CPU engine.
  std::function<void(const std::string&)> on_fallback;
  // Told of device errors that cannot be thrown (while freeing an image's
  // device memory, say): logged, never swallowed.
  std::function<void(const std::string&)> on_error;
};

// kCpu: the CPU engine. kCuda: a CUDA engine on each GPU listed, each call
// placed on the least loaded one, backed by the CPU engine for images no GPU
// can take (out of memory, failed or lost devices); throws imgstat::Error
// (kUnavailable) when no device is usable. A GPU that cannot be opened at
// start is left out, and *note says so. kAuto: as kCuda
// when a device is usable, else the CPU engine, with *note saying why and
// *gpu_absent true when that is simply a machine without a GPU (nothing to
// warn about) rather than a GPU that failed.
std::unique_ptr<Engine> make_engine(const EngineOptions& options, std::string* note = nullptr,
                                    bool* gpu_absent = nullptr);
std::unique_ptr<Engine> make_cpu_engine(uint32_t threads = 0);
// Several engines of one kind, one per slot of `placement` (engines[i] on
// its slot i), as one: each call goes to the least loaded slot in service;
// a slot whose engine fails and is no longer usable is taken out and the
// call tried on the others, then it fails as the last one did (a
// FallbackEngine above then takes it to the CPU).
std::unique_ptr<Engine> make_placed_engine(std::vector<std::unique_ptr<Engine>> engines,
                                           std::shared_ptr<Placement> placement);
// The CUDA devices this process sees; 0 without a driver or a CUDA build.
int cuda_device_count();
// The bare CUDA engine, no fallback; null when this build has no CUDA engine
// or no device is usable, with *why_not saying why (and *absent true when
// there is no GPU or no NVIDIA driver at all).
std::unique_ptr<Engine> make_cuda_engine(const EngineOptions& options, std::string* why_not, bool* absent = nullptr);

// Checks a layout and request against what the engines support; throws
// InvalidArgument naming the problem.
void validate(const Layout& layout, const StatsRequest& request);

// The image a request's statistics are taken of: `layout` itself, or with
// a colour space its converted pixels (the space's channels, alpha last).
Layout measured_layout(const Layout& layout, const StatsRequest& request);
// The request as it applies to the measured image: no colour space; with
// one and no explicit histogram range, each channel's range in
// channel_hists; the joint histogram's ranges filled in.
StatsRequest measured_request(const StatsRequest& request, const Layout& layout);

}  // namespace imgstat
