#include "core/analyzer.hpp"

#include "core/status_name.hpp"

#include "core/arriving.hpp"

#include <spdlog/spdlog.h>
#include <tbb/task_arena.h>
#include <tbb/task_group.h>

#include <chrono>
#include <cstring>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "core/response.hpp"
#include "core/uploads.hpp"
#include "core/validate.hpp"
#include "core/work_queue.hpp"
#include "decode/decode.hpp"
#include "decode/facts.hpp"
#include "decode/large_buffers.hpp"
#include "decode/sniff.hpp"
#include "imgstat/trace.hpp"

namespace imgstat {

using Clock = std::chrono::steady_clock;

Analyzer::Analyzer(std::shared_ptr<Engine> engine, Limits limits, std::shared_ptr<GpuJpegDecoder> gpu_jpeg,
                   std::shared_ptr<RegionTable> regions)
    : engine_(std::move(engine)),
      gpu_jpeg_(std::move(gpu_jpeg)),
      limits_(resolve(limits, engine_->info().threads)),
      regions_(std::move(regions)),
      fetch_rules_(limits_.fetch_allow) {
  budget_ = std::make_unique<MemoryBudget>(limits_.max_decode_memory, limits_.max_queue);
  spool_ = std::make_unique<Spool>(limits_.spool_dir == "none" ? "" : limits_.spool_dir, limits_.max_spool_bytes);
  arriving_ = std::make_unique<ArrivingDecodes>(engine_->info().threads);
  configure_decoders(limits_.max_pixels);
  // Every OpenCV matrix of the process: large ones outlive a request in the
  // cache, so the next large image does not fault its pages in again.
  use_large_buffer_cache(limits_.idle_decode_buffers);
}

Analyzer::~Analyzer() = default;

void Analyzer::start_arriving_decode(std::function<void(bool)> fn, std::function<bool()> give_up) const {
  arriving_->start(std::move(fn), std::move(give_up));
}

namespace {

// main() on this thread while side() runs on another of the arena's; both
// are over when it returns or throws (main's error before side's).
// Isolated: waiting here never takes up another call's work.
template <class Main, class Side>
auto alongside(Main&& main, Side&& side) {
  return tbb::this_task_arena::isolate([&] {
    tbb::task_group group;
    group.run(side);
    struct Wait {
      tbb::task_group& group;
      bool waited = false;
      ~Wait() {
        if (waited) return;
        try {
          group.wait();
        } catch (...) {  // main's error is the one thrown
        }
      }
    } wait{group};
    auto r = main();
    wait.waited = true;
    group.wait();
    return r;
  });
}

// What needs one whole plane, for the refusals of stacks.
std::string whole_image_statistics(const StatsRequest& r) {
  return r.luminance ? "the luminance is"
         : r.quality ? "quality measures are"
         : r.background.enabled ? "background meshes are"
                                : "hashes are";
}
// Raw pixels and bytes in a region that is read go to the engine in chunks,
// unless a statistic needs the whole image (the luminance).
bool streams_from_region(const v1::Input& input, const StatsRequest& stats, bool parts) {
  return kind_of(input) != v1::INPUT_KIND_ENCODED && !needs_whole_image(stats) && !parts;
}

// A PNG or TIFF in a region that is read goes to the spool as an upload
// does (EncodedUpload), its PNG decoded while it is read: not read whole
// into memory, and not mapped (the caller's file may shrink under a mapping).
bool spools_from_region(const v1::Input& input, const RegionBytes& region, const Spool& spool) {
  if (kind_of(input) != v1::INPUT_KIND_ENCODED || region.fd < 0 || !spool.enabled() || region.size < kSpoolFromBytes)
    return false;
  uint8_t head[64];
  read_region(region, 0, sizeof head, head);
  const std::string format = probe(head, sizeof head).format;
  return format == "PNG" || format == "TIFF" || format == "FITS" || format == "tar";
}
}  // namespace

Clock::time_point Analyzer::memory_wait_until(const CallContext& call, Clock::time_point from) const {
  return std::min(call.deadline, from + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(limits_.queue_timeout_seconds)));
}

Analyzer::InputBytes Analyzer::bytes_of(const v1::Input& input, const StatsRequest& stats, bool parts,
                                        const CallContext& call) const {
  InputBytes out;
  if (input.has_url_range() && input.url().empty())
    fail(ErrorCode::kInvalidArgument, "the input has a url_range and no url: name the object the range is of");
  if (!input.url().empty()) {  // fetched here where no service fetched it first (a caller of the core alone)
    Fetched fetched = fetch_object(input, call);
    out.owned = std::move(fetched.bytes);
    out.lease = std::move(fetched.lease);
    out.data = reinterpret_cast<const uint8_t*>(out.owned.data());
    out.bytes = out.owned.size();
    return out;
  }
  if (!input.has_region()) {
    out.data = reinterpret_cast<const uint8_t*>(input.data().data());
    out.bytes = input.data().size();
    return out;
  }
  if (!input.data().empty()) fail(ErrorCode::kInvalidArgument, "the input has both data and a region: send one");
  if (!regions_) fail(ErrorCode::kFailedPrecondition, "this server offers no shared-memory regions");
  // A region is a capability of processes on this host; a remote caller that
  // learned an id still has nothing to read through it.
  if (!call.same_host)
    fail(ErrorCode::kPermissionDenied, "regions may be named only by callers on the server's own host");
  out.region = regions_->resolve(input.region(), call.caller);
  if (out.region.on_device && kind_of(input) == v1::INPUT_KIND_ENCODED)
    fail(ErrorCode::kInvalidArgument, "encoded images are decoded from host memory: put the file in a memfd region, "
                                      "not GPU memory");
  out.data = out.region.data;
  out.bytes = static_cast<size_t>(out.region.size);
  out.on_device = out.region.on_device;
  // An encoded file is decoded where it lies (guarded against being cut
  // short): no copy into the spool or memory.
  if (out.region.fd >= 0 && kind_of(input) == v1::INPUT_KIND_ENCODED &&
      (out.mapped = GuardedMap::map(out.region.fd, out.region.offset, out.region.size))) {
    out.data = out.mapped->data();
    return out;
  }
  out.spooled = spools_from_region(input, out.region, *spool_);
  if (out.region.fd >= 0 && !out.spooled && !streams_from_region(input, stats, parts)) {  // a file read, not mapped: whole, for the decoder or the luminance
    out.lease = budget_->acquire(out.region.size, "this region's " + std::to_string(out.region.size >> 20) + " MiB",
                                 call, memory_wait_until(call, Clock::now()));
    out.owned.resize(static_cast<size_t>(out.region.size));
    read_region(out.region, 0, out.region.size, reinterpret_cast<uint8_t*>(out.owned.data()));
    out.data = reinterpret_cast<const uint8_t*>(out.owned.data());
  }
  return out;
}

std::vector<ObjectInfo> Analyzer::list_prefix(const std::string& prefix, const CallContext& call) const {
  if (prefix.size() < 6 || !std::equal(prefix.begin(), prefix.begin() + 5, "s3://", [](char a, char b) {
        return std::tolower(static_cast<unsigned char>(a)) == b;
      }))
    fail(ErrorCode::kInvalidArgument, "only s3:// prefixes are listed (HTTP has no listing): " + prefix.substr(0, 200));
  try {
    if (!fetch_rules_.match(prefix)) {
      std::string head;
      open_object(prefix, 0, &head, &fetch_rules_);  // refused, naming the rules
    }
    call.check("while waiting to list");
    return list_objects(prefix, [](const std::string&) { return true; });
  } catch (const InputError& e) {
    fail(static_cast<ErrorCode>(status_code_of(e.code())), e.what());
  }
}

v1::AnalyzeResponse Analyzer::analyze_arriving(const v1::AnalyzeRequest& request, const ObjectInfo& object,
                                               std::string head, const CallContext& call) const {
  v1::StreamHeader header;
  *header.mutable_input() = request.input();
  header.mutable_input()->clear_url();
  header.mutable_input()->clear_url_range();
  *header.mutable_options() = request.options();
  header.set_total_bytes(object.size);
  std::unique_ptr<Upload> upload = begin_upload(header, call);
  upload->add(head);
  // Ranges in order, a few pieces of each in flight: the upload takes each
  // as a stream's chunk.
  constexpr uint64_t kRange = uint64_t{32} << 20;
  std::string range;
  for (uint64_t at = head.size(); at < object.size; at += range.size()) {
    call.check("while fetching");
    range.resize(static_cast<size_t>(std::min(kRange, object.size - at)));
    read_object_parallel(object, at, range.data(), range.size(), size_t{8} << 20, 4);
    upload->add(range);
  }
  return upload->finish(call);
}

Analyzer::Fetched Analyzer::fetch_object(const v1::Input& input, const CallContext& call,
                                         const v1::AnalyzeRequest* request) const {
  if (!input.data().empty() || input.has_region())
    fail(ErrorCode::kInvalidArgument, "the input names an object to fetch and carries bytes too: send one");
  Fetched out;
  try {
    if (input.has_url_range()) {
      // A member of a shard the caller listed: its range alone, pinned to the
      // object the caller saw (every request asks If-Match its ETag and checks
      // the size; the rules are checked as for a whole object).
      const v1::ObjectRange& r = input.url_range();
      if (!fetch_rules_.match(input.url())) open_object(input.url(), 0, &out.bytes, &fetch_rules_);  // refused, naming the rules
      if (r.length() == 0 || r.offset() > r.object_size() || r.length() > r.object_size() - r.offset())
        fail(ErrorCode::kInvalidArgument, input.url() + ": a range of " + std::to_string(r.length()) + " bytes at " +
                                              std::to_string(r.offset()) + " of an object of " +
                                              std::to_string(r.object_size()) + " (empty or past its end)");
      if (r.length() > limits_.max_input_bytes)
        fail(ErrorCode::kResourceExhausted, input.url() + ": a range of " + std::to_string(r.length()) +
                                                " bytes, past this server's --max-input-bytes (" +
                                                std::to_string(limits_.max_input_bytes) + ")");
      ObjectInfo object;
      object.name = input.url();
      object.size = r.object_size();
      object.etag = r.etag();
      object.rules = &fetch_rules_;
      out.lease = budget_->acquire(r.length(), input.url() + "'s range of " + std::to_string(r.length() >> 20) + " MiB",
                                   call, memory_wait_until(call, Clock::now()));
      out.bytes.resize(static_cast<size_t>(r.length()));
      read_object_parallel(object, r.offset(), out.bytes.data(), out.bytes.size(), size_t{8} << 20, 8);
      return out;
    }
    // The first request brings a small object whole, and a large one's
    // size, checked before anything more is held.
    constexpr size_t kFirst = size_t{4} << 20;
    std::string head;
    const ObjectInfo object = open_object(input.url(), kFirst, &head, &fetch_rules_);
    if (object.size > limits_.max_input_bytes)
      fail(ErrorCode::kResourceExhausted, input.url() + ": " + std::to_string(object.size) +
                                              " bytes, past this server's --max-input-bytes (" +
                                              std::to_string(limits_.max_input_bytes) + ")");
    if (object.size == 0) fail(ErrorCode::kInvalidArgument, "empty input: " + input.url() + " has no bytes");
    if (request && head.size() < object.size) {
      // Larger than the first request: analyzed as it arrives, as an upload
      // is (a PNG or TIFF spooled and decoded while its ranges come), its
      // memory the upload's, not the whole object's.
      out.answered = analyze_arriving(*request, object, std::move(head), call);
      return out;
    }
    out.lease = budget_->acquire(object.size, input.url() + "'s " + std::to_string(object.size >> 20) + " MiB", call,
                                 memory_wait_until(call, Clock::now()));
    if (head.size() == object.size) {
      out.bytes = std::move(head);
    } else {
      out.bytes.resize(static_cast<size_t>(object.size));
      std::memcpy(out.bytes.data(), head.data(), head.size());
      call.check("while fetching");
      read_object_parallel(object, head.size(), out.bytes.data() + head.size(), out.bytes.size() - head.size(),
                           size_t{8} << 20, 8);
    }
  } catch (const InputError& e) {
    fail(static_cast<ErrorCode>(status_code_of(e.code())), e.what());
  }
  return out;
}

v1::AnalyzeResponse Analyzer::analyze_read_region(const v1::AnalyzeRequest& request, const RequestPlan& plan,
                                                  const RegionBytes& region, const CallContext& call) const {
  if (region.size == 0) fail(ErrorCode::kInvalidArgument, "empty input: the region's part has no bytes");
  const v1::Input& input = request.input();
  if (kind_of(input) != v1::INPUT_KIND_ENCODED && plan.planes.first > 0)
    fail(ErrorCode::kInvalidArgument, "planes from " + std::to_string(plan.planes.first) +
                                          " were asked for, but raw pixels and bytes are one plane (numbered 0)");
  if (kind_of(input) != v1::INPUT_KIND_ENCODED) {
    // Pixels: the engine reads them where it wants them (a GPU engine into
    // its pinned slots), on several threads, and can read them again.
    const Described d = kind_of(input) == v1::INPUT_KIND_RAW
                            ? describe_raw(input.raw(), limits_.max_planes)
                            : describe_pixels("bytes", Layout{region.size, 1, 1, SampleType::kUint8, 0});
    if (kind_of(input) == v1::INPUT_KIND_RAW) check_raw_size(d.layout, region.size);
    if (d.planes > 1 && plan.with_parts())  // a volume's parts are read whole (its map beside it)
      fail(ErrorCode::kInternal, "parts of a raw stack are read from a region as its bytes");
    const StatsRequest& stats_request = plan.stats;
    const StatsRequest asked = with_rgb(stats_request, d.order);
    const auto t0 = Clock::now();
    // A plane (or the whole stack) from the region: rows [row0, row0 + layout.height).
    auto read = [&](const Layout& layout, uint64_t row0) {
      return engine_->analyze_read(layout, asked, [&](uint64_t at, uint64_t n, uint8_t* out) {
        call.check("while reading the region");
        read_region(region, row0 * d.layout.stride() + at, n, out);
      });
    };
    const Result result = read(d.layout, 0);
    std::vector<Result> planes;
    if (plan.planes.each && d.planes > 1)
      for (uint64_t p = 0; p < d.planes; ++p) planes.push_back(read(plane_layout(d), p * d.plane_height()));
    v1::AnalyzeResponse r;
    fill_response(r, d, result, stats_request);
    if (plan.planes.each) fill_planes(r, d, planes, stats_request);
    if (d.planes > 1) fill_plane_facts(r, d.planes, d.planes, 0);
    set_duration(r.mutable_decode_time(), Clock::duration::zero());
    set_duration(r.mutable_compute_time(), Clock::now() - t0);
    return r;
  }
  // A file into the spool in small pieces: its decode takes it from there.
  constexpr uint64_t kChunk = uint64_t{1} << 20;
  v1::StreamHeader header;
  *header.mutable_input() = input;
  header.mutable_input()->clear_region();
  *header.mutable_options() = request.options();
  header.set_total_bytes(region.size);
  std::unique_ptr<Upload> upload = begin_upload(header, call);
  std::string chunk;
  for (uint64_t at = 0; at < region.size; at += kChunk) {
    chunk.resize(static_cast<size_t>(std::min(kChunk, region.size - at)));
    read_region(region, at, chunk.size(), reinterpret_cast<uint8_t*>(chunk.data()));
    call.check("while reading the region");
    upload->add(chunk);
  }
  return upload->finish(call);
}

v1::AnalyzeResponse Analyzer::analyze(const v1::AnalyzeRequest& request, const CallContext& call,
                                     uint64_t* input_bytes) const {
  const v1::Input& input = request.input();
  const RequestPlan plan = plan_request(request.options(), limits_);
  const InputBytes data = bytes_of(input, plan.stats, plan.with_parts(), call);  // holds a region mapped until the engine is done
  if (input_bytes) *input_bytes = data.size();
  if (data.mapped) {  // pages done with leave the process as they do from the spool
    const GuardedMap& map = *data.mapped;
    auto cut_short = [&map] {
      fail(ErrorCode::kFailedPrecondition, "the region's file was cut short while it was read: it no longer holds "
                                           "the region's " + std::to_string(map.size()) + " bytes");
    };
    v1::AnalyzeResponse r;
    try {
      r = analyze_input(request, plan, data, [&map](uint64_t begin, uint64_t end) { map.release(begin, end); }, {}, call);
    } catch (const Error&) {
      if (map.cut()) cut_short();  // the zeros read in its place were the decoder's trouble
      throw;
    }
    if (map.cut()) cut_short();
    return r;
  }
  if (data.region.fd >= 0 && (data.spooled || streams_from_region(input, plan.stats, plan.with_parts())))
    return analyze_read_region(request, plan, data.region, call);
  return analyze_input(request, plan, data, {}, {}, call);
}

v1::AnalyzeResponse Analyzer::analyze_mapped(const v1::AnalyzeRequest& request, const uint8_t* bytes, size_t size,
                                             const std::function<void(uint64_t, uint64_t)>& release,
                                             const CallContext& call,
                                             const std::function<uint64_t(uint64_t)>& arrived) const {
  if (!request.input().data().empty() || request.input().has_region())
    fail(ErrorCode::kInvalidArgument, "a mapped input carries no data or region of its own");
  InputBytes data;
  data.data = bytes;
  data.bytes = size;
  return analyze_input(request, plan_request(request.options(), limits_), data, release, arrived, call);
}

v1::AnalyzeResponse Analyzer::analyze_input(const v1::AnalyzeRequest& request, const RequestPlan& plan,
                                            const InputBytes& data,
                                            const std::function<void(uint64_t, uint64_t)>& release,
                                            const std::function<uint64_t(uint64_t)>& arrived,
                                            const CallContext& call) const {
  v1::AnalyzeResponse r = analyze_series(request, plan, data, release, arrived, call);
  const uint32_t series = r.facts().series_count();
  if (series <= 1 || plan.planes.series) return r;
  if (plan.with_parts()) {  // a map is of one series
    r.add_warnings("this file has " + std::to_string(series) +
                   " series (pages of different sizes or samples, or OME images): parts are answered for series 0 "
                   "alone; choose another with Planes.series (--series N)");
    return r;
  }
  // Every other series, one after another, from the same bytes (all have
  // arrived; a file's pages given back are read again).
  for (uint32_t k = 1; k < series; ++k) {
    call.check("between series");
    RequestPlan one = plan;
    one.planes.series = k;
    try {
      *r.add_other_series() = analyze_series(request, one, data, release, {}, call);
    } catch (const Error& e) {  // the call's answer is every series': it names the one that failed
      throw Error(e.code(), "series " + std::to_string(k) + " of " + std::to_string(series) + ": " + e.what());
    }
  }
  return r;
}

v1::AnalyzeResponse Analyzer::analyze_series(const v1::AnalyzeRequest& request, const RequestPlan& plan,
                                             const InputBytes& data,
                                             const std::function<void(uint64_t, uint64_t)>& release,
                                             const std::function<uint64_t(uint64_t)>& arrived,
                                             const CallContext& call) const {
  const v1::Input& input = request.input();
  if (plan.with_parts() && data.on_device)
    fail(ErrorCode::kFailedPrecondition,
         "parts are not computed for images in GPU memory: send the image from host memory (a memfd region)");
  if (kind_of(input) != v1::INPUT_KIND_ENCODED && plan.planes.first > 0)
    fail(ErrorCode::kInvalidArgument, "planes from " + std::to_string(plan.planes.first) + " were asked for, but " +
                                          (kind_of(input) == v1::INPUT_KIND_RAW ? "raw pixels are" : "bytes are") +
                                          " one plane (numbered 0)");
  v1::AnalyzeResponse r;
  Pixels px;
  const auto t0 = Clock::now();
  MapInput map;  // the mask or label image, held until the engine is done
  // A JPEG's mask or label image is read while the JPEG decodes: its size
  // is in the JPEG's header. Declared after map: waited for before it goes.
  Described early;
  std::future<void> early_map = read_map_early(request, plan, data, arrived, call, early, map);
  switch (kind_of(input)) {
    case v1::INPUT_KIND_RAW:
      px.d = describe_raw(input.raw(), limits_.max_planes);
      check_raw_size(px.d.layout, data.size());
      if (px.d.planes > 1 && plan.parts.kind == PartsKind::kRects)
        fail(ErrorCode::kUnimplemented, "rectangles of raw pixels of several planes (depth " +
                                            std::to_string(px.d.planes) + ") are not computed yet: give tiles, a mask or "
                                            "a label volume, or send one plane");
      px.view = ImageView{data.data, px.d.layout};
      break;
    case v1::INPUT_KIND_BYTES:
      if (data.empty()) fail(ErrorCode::kInvalidArgument, "empty input: no bytes to count");
      px.d = describe_pixels("bytes", Layout{data.size(), 1, 1, SampleType::kUint8, 0});
      px.view = ImageView{data.data, px.d.layout};
      break;
    default:
      if (!decode_encoded(request, plan, data, release, arrived, call, t0, px, r)) return r;  // answered on the way
  }
  Parts parts = plan.parts;
  // Tiles of a stack are boxes through its planes (one slab unless asked).
  if (parts.kind == PartsKind::kTiles && (px.d.planes > 1 || parts.slabs > 1)) {
    if (px.d.planes == 1)
      fail(ErrorCode::kInvalidArgument, "tiles in " + std::to_string(parts.slabs) +
                                            " slabs were asked for, but the image is one plane");
    parts.slabs = std::max<uint32_t>(parts.slabs, 1);
    parts.plane_height = px.d.plane_height();
  }
  bool map_read = false;
  if (early_map.valid()) {
    early_map.get();  // the map's own error, after the image's
    map_read = px.d.layout.width == early.layout.width && px.d.layout.height == early.layout.height && px.d.planes == 1;
    if (!map_read) map = MapInput{};  // not the size the header said (cannot be for a JPEG): read again
  }
  if (plan.with_parts()) parts.map = map_read ? map.view : map_of(request.options().parts(), px, call, map);
  // A labels map's index, found once for the engine and the boxes.
  if (parts.kind == PartsKind::kLabels)
    parts.index = map.index ? map.index : find_labels(px.d.layout, parts);
  const StatsRequest asked = with_rgb(plan.stats, px.d.order);
  MemoryBudget::Lease working =
      working_memory(asked, plan.with_parts() ? &parts : nullptr, px.d.layout,
                     px.lease.bytes() || map.lease.bytes() || data.lease.bytes(), call, t0);
  const auto t1 = Clock::now();
  auto count = [&]() -> Result {
    std::optional<Result> counted;
    if (px.on_gpu()) {
      try {
        TraceRange range("analyze device image's parts");
        if (parts.kind == PartsKind::kMask) {
          counted = engine_->analyze_parts_device(px.gpu.view, parts, asked);
        } else {  // the whole image's passes beside the parts' on the GPU
          Result whole;
          counted = alongside([&] { return engine_->analyze_parts_device(px.gpu.view, parts, asked); },
                              [&] { whole = engine_->analyze_device(px.gpu.view, asked); });
          whole.parts = std::move(counted->parts);
          counted = std::move(whole);
        }
      } catch (const Error& e) {
        if (e.code() == ErrorCode::kInvalidArgument || e.code() == ErrorCode::kResourceExhausted) throw;
        // A failing GPU: the pixels are out of reach, decoded again on the CPU.
        spdlog::warn("parts of a GPU-decoded JPEG: {}; decoded again on the CPU", e.what());
        counted.reset();
        px.gpu = GpuDecodedImage{};
        px.lease = budget_->acquire(px.plan.memory_bytes, "this JPEG", call, memory_wait_until(call, t0));
        DecodeOptions options;
        options.max_pixels = limits_.max_pixels;
        options.allow_truncated = request.options().allow_truncated();
        options.cancelled = call.cancelled;
        px.decoded = decode_image(data.data, data.size(), px.plan, options);
        px.view = px.decoded.view;
      }
    }
    Result result = counted             ? std::move(*counted)
                    : plan.with_parts() ? engine_->analyze_parts(px.view, parts, asked)
                    : data.on_device    ? engine_->analyze_device(DeviceImageView{px.view.data, px.view.layout}, asked)
                                        : engine_->analyze(px.view, asked);
    if (plan.with_parts() && parts.kind != PartsKind::kMask && !counted) {
      // The object keeps its own channels, the whole image's, and gains the parts.
      Result whole = engine_->analyze(px.view, asked);
      whole.parts = std::move(result.parts);
      result = std::move(whole);
    }
    return result;
  };
  // Each label's box is found on the host while the engine counts.
  std::vector<LabelBox> boxes;
  const Result result = parts.kind == PartsKind::kLabels
                            ? alongside(count, [&] { boxes = label_boxes(px.d.layout, parts, px.d.plane_height()); })
                            : count();
  const auto t2 = Clock::now();
  fill_response(r, px.d, result, plan.stats, plan.with_parts());
  if (parts.kind == PartsKind::kLabels) fill_boxes(r, boxes);
  if (plan.planes.each) {
    std::vector<Result> planes;  // a raw stack's, each from its rows of the view
    for (uint64_t p = 0; px.d.planes > 1 && p < px.d.planes; ++p) {
      const uint8_t* rows = static_cast<const uint8_t*>(px.view.data) + p * px.d.plane_height() * px.d.layout.stride();
      planes.push_back(data.on_device ? engine_->analyze_device(DeviceImageView{rows, plane_layout(px.d)}, asked)
                                      : engine_->analyze(ImageView{rows, plane_layout(px.d)}, asked));
    }
    fill_planes(r, px.d, planes, plan.stats);
  }
  if (kind_of(input) == v1::INPUT_KIND_RAW && px.d.planes > 1) fill_plane_facts(r, px.d.planes, px.d.planes, 0);
  if (kind_of(input) == v1::INPUT_KIND_ENCODED) {
    fill_facts(r, data.data, data.size(), px.d.layout, release);
    fill_plane_facts(r, px.plan, px.d.planes);
  }
  r.set_decoder(px.on_gpu() ? px.gpu.decoder : px.decoded.decoder);
  set_duration(r.mutable_decode_time(), t1 - t0);
  set_duration(r.mutable_compute_time(), t2 - t1);
  return r;
}

bool Analyzer::decode_encoded(const v1::AnalyzeRequest& request, const RequestPlan& plan, const InputBytes& data,
                              const std::function<void(uint64_t, uint64_t)>& release,
                              const std::function<uint64_t(uint64_t)>& arrived, const CallContext& call,
                              Clock::time_point t0, Pixels& px, v1::AnalyzeResponse& r) const {
  const uint8_t* bytes = data.data;
  const StatsRequest& stats_request = plan.stats;
  const bool with_parts = plan.with_parts();
  DecodeOptions options;
  options.max_pixels = limits_.max_pixels;
  options.allow_truncated = request.options().allow_truncated();
  options.stored_values = request.options().stored_values();
  options.cancelled = call.cancelled;
  options.release = release;
  options.arrived = arrived;
  options.max_planes = limits_.max_planes;
  options.max_expanded_bytes = limits_.max_decode_memory;
  options.first_plane = plan.planes.first;
  options.plane_count = plan.planes.count;
  options.level = plan.planes.level;
  options.series = plan.planes.series.value_or(0);
  DecodePlan decode = plan_decode(bytes, data.size(), options);
  const auto waited_until = memory_wait_until(call, t0);
  // A stack of planes goes through the engine's stream in bands, plane
  // after plane, whatever it is: never whole.
  const bool stack = decode.chosen_planes() > 1;
  // px.decoded made the image of its chosen planes (one below the other).
  auto taken = [&] {
    call.check("after decoding");
    px.d = Described{px.decoded.format, px.decoded.view.layout, px.decoded.channel_order, px.decoded.channel_names};
    px.d.planes = decode.chosen_planes();
    px.d.first_plane = decode.first_plane;
    px.plan = decode;
    px.view = px.decoded.view;
    for (const std::string& w : px.decoded.warnings) r.add_warnings(w);
    return true;
  };
  if (stack && with_parts) {  // a volume's parts: its planes gathered one below the other, in the budget
    if (request.options().parts().has_rectangles())
      fail(ErrorCode::kUnimplemented, "rectangles of a file of several planes are not computed yet (this " +
                                          decode.format + " has " + std::to_string(decode.planes) +
                                          "): choose one plane (planes, --planes N), or give tiles, a mask or a label stack");
    if (needs_whole_image(stats_request))
      fail(ErrorCode::kUnimplemented, whole_image_statistics(stats_request) + " computed for one plane at a time (this " + decode.format +
                                          " has " + std::to_string(decode.planes) + "): choose one (planes, --planes N)");
    if (options.arrived) {
      options.arrived(data.size());
      options.arrived = nullptr;
      decode = plan_decode(bytes, data.size(), options);
    }
    px.lease = budget_->acquire(stack_memory_bytes(decode),
                                "this " + std::to_string(decode.width) + "x" + std::to_string(decode.height) + " " +
                                    decode.format + " (" + std::to_string(decode.chosen_planes()) + " planes)",
                                call, waited_until);
    {
      TraceRange range("cpu decode of a stack");
      px.decoded = decode_planes(bytes, data.size(), decode, options);
    }
    return taken();
  }
  if (stack && needs_whole_image(stats_request))
    fail(ErrorCode::kUnimplemented, whole_image_statistics(stats_request) + " computed for one plane at a time (this " + decode.format + " has " +
                                        std::to_string(decode.planes) + "): choose one (planes, --planes N)");
  if (stack && decode.band_memory_bytes == 0)
    fail(ErrorCode::kInternal, decode.format + ": a stack of planes the streamed decoder does not take");
  // Bands suffice unless a statistic needs the whole image (the luminance),
  // or the engine's stream would keep every pixel anyway (floats binned
  // over their own range, on the CPU): then the whole image, in its budget.
  const Layout& bands = decode.band_layout;
  bool in_bands = decode.band_memory_bytes > 0 && !needs_whole_image(stats_request) && !with_parts && bands.channels > 0;
  uint64_t kept_bytes = 0;  // what a stack's streams keep (floats on the CPU)
  // Planes read again where they lie (decode.readable) keep nothing.
  if (in_bands && is_float(bands.type) && !decode.readable) {  // only floats are kept (a TIFF's: its layout is exact)
    validate(bands, stats_request);
    if (stack) {
      Layout all = bands;
      all.height *= decode.chosen_planes();
      kept_bytes = engine_->stream_bytes(all, stats_request) +
                   (plan.planes.each ? engine_->stream_bytes(bands, stats_request) : 0);
    } else {
      in_bands = engine_->stream_bytes(bands, stats_request) == 0;
    }
  }
  // Only the banded PNG decoder reads a file as it arrives; the rest
  // waits for all of it, planned again whole (PNG's checks of every chunk).
  auto whole = [&] {
    if (!options.arrived) return;
    options.arrived(data.size());
    options.arrived = nullptr;
    decode = plan_decode(bytes, data.size(), options);
  };
  if (!in_bands || decode.format != "PNG") whole();
  px.lease = budget_->acquire((in_bands ? decode.band_memory_bytes : decode.memory_bytes) + kept_bytes,
                              "this " + std::to_string(decode.width) + "x" + std::to_string(decode.height) + " " +
                                  decode.format +
                                  (stack ? " (" + std::to_string(decode.chosen_planes()) + " planes)" : std::string()),
                              call, waited_until);
  call.check("before decoding");
  const v1::DecoderChoice choice = request.options().decoder();
  if (decode.format == "JPEG" && choice != v1::DECODER_CHOICE_CPU && with_parts) {
    // Masks, labels and tiles of a JPEG decoded on the GPU are counted there
    // (analyze_parts_device); rectangles are the CPU's.
    std::string why = "rectangles of an image are computed from the CPU decoder's pixels";
    if (plan.parts.kind != PartsKind::kRects) {
      if (std::optional<GpuDecodedImage> image = decode_on_gpu(bytes, data.size(), options, call, &why)) {
        px.gpu = std::move(*image);
        px.lease.release();  // the pixels are in device memory, in the engine's budget
        px.d = describe_pixels("JPEG", px.gpu.view.layout);
        px.plan = decode;
        px.view = ImageView{nullptr, px.gpu.view.layout};
        for (const std::string& w : px.gpu.check.warnings) r.add_warnings(w);
        call.check("after decoding");
        return true;
      }
    }
    if (choice == v1::DECODER_CHOICE_GPU) fail(ErrorCode::kFailedPrecondition, "decoder GPU was asked for, but " + why);
  } else if (decode.format == "JPEG" && choice != v1::DECODER_CHOICE_CPU) {
    std::string why;
    if (analyze_on_gpu(bytes, data.size(), options, stats_request, plan.planes.each, call, r, &why)) return false;
    if (choice == v1::DECODER_CHOICE_GPU) fail(ErrorCode::kFailedPrecondition, "decoder GPU was asked for, but " + why);
  } else if (choice == v1::DECODER_CHOICE_GPU) {
    fail(ErrorCode::kFailedPrecondition, "decoder GPU was asked for, but the GPU decodes JPEG only, not " + decode.format);
  }
  // A JPEG's check is its decode on this path (decode_jpeg): one pass.
  if (in_bands && analyze_in_bands(bytes, data.size(), decode, options, stats_request, plan.planes.each, call, r))
    return false;
  if (in_bands) {  // the streamed decoder did not take it after all: the whole image, in the budget
    whole();
    px.lease.release();
    px.lease = budget_->acquire(decode.memory_bytes, "this " + decode.format, call, waited_until);
  }
  {
    TraceRange range("cpu decode");
    px.decoded = decode_image(bytes, data.size(), decode, options);
  }
  return taken();
}

std::future<void> Analyzer::read_map_early(const v1::AnalyzeRequest& request, const RequestPlan& plan,
                                           const InputBytes& data, const std::function<uint64_t(uint64_t)>& arrived,
                                           const CallContext& call, Described& image, MapInput& map) const {
  const v1::Parts& p = request.options().parts();
  const bool read = p.has_labels() || (p.has_mask() && p.mask().source_case() != v1::Mask::kAlpha);
  // Only a JPEG wholly here: its header gives the size, and it is one plane.
  if (!plan.with_parts() || !read || arrived || kind_of(request.input()) != v1::INPUT_KIND_ENCODED || data.size() < 3 ||
      data.data[0] != 0xff || data.data[1] != 0xd8 || data.data[2] != 0xff)
    return {};
  DecodePlan header;
  try {
    DecodeOptions options;
    options.max_pixels = limits_.max_pixels;
    header = plan_decode(data.data, data.size(), options);
  } catch (const Error&) {
    return {};  // the image's own error comes from its decode
  }
  if (header.format != "JPEG" || header.chosen_planes() != 1) return {};
  image = describe_pixels("JPEG", Layout{header.width, header.height, 1, SampleType::kUint8, 0});
  return std::async(std::launch::async, [this, &p, &image, header, &call, &map, parts = plan.parts] () mutable {
    read_map(p.has_mask() ? p.mask().image() : p.labels().image(), p.has_mask() ? "mask" : "label image", image,
             header, call, map);
    // The labels found while the JPEG still decodes, once for the engine
    // and the boxes.
    if (parts.kind == PartsKind::kLabels) {
      parts.map = map.view;
      map.index = find_labels(image.layout, parts);
    }
  });
}

PartMapView Analyzer::map_of(const v1::Parts& p, const Pixels& px, const CallContext& call, MapInput& map) const {
  const Described& d = px.d;
  if (p.has_mask() && p.mask().source_case() == v1::Mask::kAlpha) {
    if (d.layout.channels != 2 && d.layout.channels != 4)
      fail(ErrorCode::kInvalidArgument, "mask alpha needs an image with alpha (2 or 4 channels); this one has " +
                                            std::to_string(d.layout.channels));
    return PartMapView{px.view.data, d.layout.width, d.layout.height, d.layout.channels,
                       d.order.at(d.layout.channels - 1), map_type_of(d.layout.type), d.layout.row_stride};
  }
  if (p.has_mask() || p.has_labels())
    read_map(p.has_mask() ? p.mask().image() : p.labels().image(), p.has_mask() ? "mask" : "label image", d, px.plan,
             call, map);
  return map.view;
}

MemoryBudget::Lease Analyzer::working_memory(const StatsRequest& asked, const Parts* parts, const Layout& layout,
                                             bool holding, const CallContext& call, Clock::time_point t0) const {
  validate(layout, asked);  // a request past the engines' limits is refused as such, not as memory
  if (parts) validate(layout, *parts);
  uint64_t bytes = engine_->working_bytes(layout, asked, parts);
  if (parts && parts->kind != PartsKind::kMask) bytes = std::max(bytes, engine_->working_bytes(layout, asked));
  if (bytes == 0) return {};
  const std::string what = "the analysis of this " + std::to_string(layout.width) + "x" + std::to_string(layout.height) +
                           " image (" + (parts ? "its parts" : "its luminance or counters") + ")";
  return holding ? budget_->take_now(bytes, what) : budget_->acquire(bytes, what, call, memory_wait_until(call, t0));
}

void Analyzer::read_map(const v1::Input& input, const char* what, const Described& d, const DecodePlan& image_plan,
                        const CallContext& call, MapInput& out) const {
  const std::string w = what;
  const Layout image = plane_layout(d);
  // A stack's map is a stack of as many planes (a label volume), whose
  // planes are chosen as the image's are.
  auto same_planes = [&](uint64_t planes) {
    if (planes != d.planes)
      fail(ErrorCode::kInvalidArgument, "the " + w + " has " + std::to_string(planes) + (planes == 1 ? " plane" : " planes") +
                                            " and the image " + std::to_string(d.planes) + ": they must have as many");
  };
  StatsRequest none;
  out.bytes = bytes_of(input, none, true, call);
  if (out.bytes.on_device)
    fail(ErrorCode::kInvalidArgument, "the " + w + " is read from host memory: not GPU memory");
  switch (kind_of(input)) {
    case v1::INPUT_KIND_RAW:
      same_planes(raw_planes_of(input.raw()));
      out.view = raw_map_of(input.raw(), out.bytes.data, out.bytes.size(), what);
      return;
    case v1::INPUT_KIND_BYTES:
      fail(ErrorCode::kInvalidArgument, "the " + w + " must be an encoded image or raw pixels, not bytes");
    default: break;
  }
  if (out.bytes.empty()) fail(ErrorCode::kInvalidArgument, "the " + w + " has no bytes");
  DecodeOptions options;
  options.max_pixels = limits_.max_pixels;
  options.cancelled = call.cancelled;
  options.max_planes = limits_.max_planes;
  options.max_expanded_bytes = limits_.max_decode_memory;
  options.first_plane = d.planes > 1 ? image_plan.first_plane : 0;
  options.plane_count = d.planes > 1 ? d.planes : 1;
  options.level = image_plan.level;  // a label pyramid's same level
  options.map = w == "mask" ? DecodeOptions::Map::kMask : DecodeOptions::Map::kLabels;  // a DICOM SEG on the image's planes
  options.dicom_places = dicom_places_of(image_plan);
  DecodePlan plan;
  try {
    plan = plan_decode(out.bytes.data, out.bytes.size(), options);
    if (plan.series_count > 1 && image_plan.series > 0) {  // a map of as many series: the image's
      options.series = image_plan.series;
      plan = plan_decode(out.bytes.data, out.bytes.size(), options);
    }
  } catch (const Error& e) {
    fail(e.code(), "the " + w + ": " + e.what());
  }
  if (plan.planes > 1 && d.planes == 1)
    fail(ErrorCode::kInvalidArgument, "the " + w + " is a " + plan.format + " of " + std::to_string(plan.planes) +
                                          " planes, and the image one plane: they must have as many");
  if (d.planes > 1) same_planes(plan.chosen_planes());
  // A map of another size is refused from its header, before it is decoded.
  if (plan.width != image.width || plan.height != image.height)
    fail(ErrorCode::kInvalidArgument, "the " + w + " is " + std::to_string(plan.width) + "x" +
                                          std::to_string(plan.height) + " and the image " + std::to_string(image.width) +
                                          "x" + std::to_string(image.height) + ": they must be the same size");
  const bool stack = plan.chosen_planes() > 1;
  out.lease = budget_->acquire(stack ? stack_memory_bytes(plan) : plan.memory_bytes,
                               "the " + w + " (" + std::to_string(plan.width) + "x" + std::to_string(plan.height) + " " +
                                   plan.format + ")",
                               call, memory_wait_until(call, Clock::now()));
  try {
    out.decoded = stack ? decode_planes(out.bytes.data, out.bytes.size(), plan, options)
                        : decode_image(out.bytes.data, out.bytes.size(), plan, options);
  } catch (const Error& e) {
    fail(e.code(), "the " + w + ": " + e.what());
  }
  const Layout& l = out.decoded.view.layout;
  if (w == "label image" && l.channels == 1 && (l.type == SampleType::kInt16 || l.type == SampleType::kInt8)) {
    // Segmentations kept as int16 (NIfTI, DICOM) are labels as any: widened
    // to int32, exact, negative labels labels too.
    const cv::Mat narrow(static_cast<int>(l.height), static_cast<int>(l.width), l.type == SampleType::kInt16 ? CV_16S : CV_8S,
                         const_cast<void*>(out.decoded.view.data), l.stride());
    cv::Mat wide;
    narrow.convertTo(wide, CV_32S);
    out.decoded.pixels = wide;
    out.view = PartMapView{wide.data, l.width, l.height, 1, 0, MapType::kInt32, static_cast<uint64_t>(wide.step)};
    return;
  }
  out.view = PartMapView{out.decoded.view.data, l.width, l.height, l.channels, out.decoded.channel_order.at(0),
                         map_type_of(l.type), l.row_stride};
}

std::optional<GpuDecodedImage> Analyzer::decode_on_gpu(const uint8_t* data, size_t size, const DecodeOptions& options,
                                                       const CallContext& call, std::string* why) const {
  if (!gpu_jpeg_) {
    *why = "this server has no GPU JPEG decoder";
    return std::nullopt;
  }
  if (!engine_->takes_device_images()) {
    *why = "the GPU engine is not in use";
    return std::nullopt;
  }
  std::unique_ptr<GpuJpegDecoder::Ticket> ticket = gpu_jpeg_->announce();
  call.check("before decoding");
  GpuDecodedImage image;
  try {
    TraceRange range("gpu jpeg decode and check (queued and batched)");
    // No core is used while the GPU decodes a small JPEG: another call takes
    // this place, and the next batch fills from more calls than there are
    // threads.
    std::optional<WorkQueue::StepAside> aside;
    if (size <= kStepAsideJpegBytes) aside.emplace();
    image = gpu_jpeg_->decode(*ticket, data, size);
  } catch (const Error& e) {
    *why = e.what();
    return std::nullopt;
  }
  ticket.reset();
  // The GPU's check gives libjpeg's verdict: the CPU path's answers.
  enforce_jpeg_check(image.check, options.allow_truncated);
  if (image.check.truncated) {
    *why = "a truncated JPEG is analyzed as libjpeg fills it in, on the CPU";
    return std::nullopt;
  }
  return image;
}

bool Analyzer::analyze_on_gpu(const uint8_t* data, size_t size, const DecodeOptions& options,
                              const StatsRequest& request, bool each_plane, const CallContext& call,
                              v1::AnalyzeResponse& r, std::string* why) const {
  const auto t0 = Clock::now();
  std::optional<GpuDecodedImage> decoded = decode_on_gpu(data, size, options, call, why);
  if (!decoded) return false;
  const GpuDecodedImage& image = *decoded;
  const JpegCheck check = image.check;
  const Layout layout = image.view.layout;
  const std::string decoder = image.decoder;
  call.check("after decoding");
  const auto t1 = Clock::now();
  Result result;
  // The host's measures (quality, hashes, meshes) where the engine does not
  // take them on the device: outside the engine's GPU slot, the device work,
  // the pixels copied to the host and let go, then the measures on this
  // thread, while the slot serves other calls.
  const bool apart =
      needs_host_measures(request) && image.to_host && !engine_->measures_on_device(layout, request);
  std::vector<uint8_t> host;
  try {
    TraceRange range("analyze device image");
    result = engine_->analyze_device(image.view, apart ? without_host_measures(request) : request);
    if (apart) {
      host.resize(layout.pixels() * layout.pixel_bytes());
      image.to_host(host.data());
    }
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kInvalidArgument) throw;
    *why = e.what();  // a failing GPU: decoded again on the CPU
    return false;
  }
  if (apart) {
    decoded.reset();
    call.check("before the host's measures");
    add_host_measures(ImageView{host.data(), layout}, request, result);
  }
  const auto t2 = Clock::now();
  TraceRange range("device image's response");
  const Described d = describe_pixels("JPEG", layout);
  fill_response(r, d, result, request);
  if (each_plane) fill_planes(r, d, {}, request);
  fill_facts(r, data, size, layout);
  fill_plane_facts(r, 1, 1, 0);
  r.set_decoder(decoder);
  for (const std::string& w : check.warnings) r.add_warnings(w);
  set_duration(r.mutable_decode_time(), t1 - t0);
  set_duration(r.mutable_compute_time(), t2 - t1);
  return true;
}

bool Analyzer::analyze_in_bands(const uint8_t* data, size_t size, const DecodePlan& plan,
                                const DecodeOptions& options, const StatsRequest& request, bool each_plane,
                                const CallContext& call, v1::AnalyzeResponse& r) const {
  const auto t0 = Clock::now();
  TraceRange range("cpu decode in bands");
  Described d;
  Layout plane_layout;
  // The planes together in one stream (a stack: one below the other), and
  // with each_plane the plane being read in another.
  std::unique_ptr<StreamAnalysis> stream, plane_stream;
  std::vector<Result> planes;
  std::vector<uint8_t> buffers[2];
  int next = 0;
  uint32_t rows_per_band = 0;
  // While a band is in the engine the next one decodes into the other buffer.
  std::future<void> feeding;
  WaitOnExit<void> drain{feeding};
  auto fed = [&] {
    if (feeding.valid()) feeding.get();
  };
  RowSink sink;
  sink.begin = [&](uint32_t w, uint32_t h, uint32_t channels, SampleType type) {
    fed();  // a decoder starting over: the last band's feed ends before its stream goes
    plane_layout = Layout{w, h, channels, type, 0};
    d = describe_pixels(plan.format, Layout{w, uint64_t{h} * plan.chosen_planes(), channels, type, 0});
    if (!plan.channel_names.empty()) d.names = plan.channel_names;
    d.planes = plan.chosen_planes();
    d.first_plane = plan.first_plane;
    const StatsRequest asked = with_rgb(request, d.order);
    stream = engine_->open_stream(d.layout, asked);
    planes.clear();
    if (each_plane) plane_stream = engine_->open_stream(plane_layout, asked);
    rows_per_band = plan.band_rows ? std::min(plan.band_rows, h) : band_rows(plane_layout.row_bytes(), h);
    for (auto& b : buffers) b.resize(size_t{rows_per_band} * plane_layout.row_bytes());
    return RowBand{buffers[0].data(), rows_per_band};
  };
  sink.band = [&](const uint8_t* rows, uint32_t, uint32_t count) {
    fed();
    call.check("while decoding");
    const size_t bytes = size_t{count} * plane_layout.row_bytes();
    StreamAnalysis* s = stream.get();
    StreamAnalysis* p = plane_stream.get();
    feeding = std::async(std::launch::async, [s, p, rows, bytes] {
      s->feed(rows, bytes);
      if (p) p->feed(rows, bytes);
    });
    next ^= 1;
    return RowBand{buffers[next].data(), rows_per_band};
  };
  sink.takes_rows_in_place = true;  // the engine reads a file's rows where they lie when they are its pixels
  sink.release = [&] {
    // The feed's own error (if any) is thrown by the next band or the end.
    if (feeding.valid()) feeding.wait();
  };
  sink.plane = [&](uint64_t) {
    if (!each_plane) return;
    fed();
    planes.push_back(plane_stream->finish());
    plane_stream = engine_->open_stream(plane_layout, with_rgb(request, d.order));
  };
  // Planes the engine reads itself: the stack, then each plane again.
  std::optional<Result> read_result;
  sink.read_planes = [&](const Layout& plane, uint64_t count, const ByteReader& read) {
    plane_layout = plane;
    d = describe_pixels(plan.format, Layout{plane.width, plane.height * count, plane.channels, plane.type, 0});
    if (!plan.channel_names.empty()) d.names = plan.channel_names;
    d.planes = count;
    d.first_plane = plan.first_plane;
    const StatsRequest asked = with_rgb(request, d.order);
    auto checked = [&](uint64_t first_byte) {
      return [&read, &call, first_byte](uint64_t at, uint64_t n, uint8_t* out) {
        call.check("while decoding");
        read(first_byte + at, n, out);
      };
    };
    read_result = engine_->analyze_read(d.layout, asked, checked(0));
    planes.clear();
    if (each_plane && count > 1)
      for (uint64_t p = 0; p < count; ++p)
        planes.push_back(engine_->analyze_read(plane, asked, checked(p * plane.height * plane.row_bytes())));
  };
  BandedDecode decoded = decode_in_bands(data, size, plan, options, sink);
  fed();
  // A stack has no other decoder to fall back on: what refused it is the answer.
  if (!decoded.taken && plan.chosen_planes() > 1)
    invalid_data(plan.format + ": could not decode its planes (" +
                 (decoded.refusal.empty() ? std::string("corrupt or truncated data") : decoded.refusal) + ")");
  if (!decoded.taken) return false;
  if (options.arrived) options.arrived(size);  // the facts are read from the whole file
  call.check("after decoding");
  const auto t1 = Clock::now();
  const Result result = read_result ? std::move(*read_result) : stream->finish();
  if (each_plane && d.planes > 1 && !read_result) planes.push_back(plane_stream->finish());
  const auto t2 = Clock::now();
  fill_response(r, d, result, request);
  if (each_plane) fill_planes(r, d, d.planes > 1 ? planes : std::vector<Result>{}, request);
  fill_facts(r, data, size, plane_layout, options.release);
  fill_plane_facts(r, plan, plan.chosen_planes());
  r.set_decoder(decoded.decoder);
  for (const std::string& w : decoded.warnings) r.add_warnings(w);
  // The computation overlaps the decode; compute_time is what follows the last row.
  set_duration(r.mutable_decode_time(), t1 - t0);
  set_duration(r.mutable_compute_time(), t2 - t1);
  return true;
}

}  // namespace imgstat
