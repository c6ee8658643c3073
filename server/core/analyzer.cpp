#include "core/analyzer.hpp"

#include <tbb/task_arena.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "core/response.hpp"
#include "core/validate.hpp"
#include "decode/decode.hpp"
#include "decode/facts.hpp"
#include "decode/sniff.hpp"
#include "imgstat/trace.hpp"

#ifndef IMGSTAT_VERSION
#define IMGSTAT_VERSION "0.0.0"
#endif

namespace imgstat {

// At most `slots` decode at once, as many as the engine has threads (decoding
// is the CPU's work, as the work queue's is): the rest of the uploads wait
// in the spool, costing no memory, until one ends. fn(true) runs in a slot;
// fn(false) when its upload ended while it waited (give_up()).
class ArrivingDecodes {
 public:
  // In an arena of `slots` threads, as the work queue's (work_queue.hpp).
  explicit ArrivingDecodes(uint32_t slots) : slots_(std::max(1u, slots)), arena_(static_cast<int>(slots_)) {}
  ~ArrivingDecodes() {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return running_ == 0; });
  }
  void start(std::function<void(bool)> fn, std::function<bool()> give_up) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++running_;
    }
    std::thread([this, fn = std::move(fn), give_up = std::move(give_up)]() mutable {
      bool slot = false;
      {
        std::unique_lock<std::mutex> lock(mu_);
        // Polled: an upload's end has no way to wake this wait.
        while (!(slot = decoding_ < slots_) && !give_up()) changed_.wait_for(lock, std::chrono::milliseconds(20));
        if (slot) ++decoding_;
      }
      give_up = nullptr;  // what it holds (the upload's file) goes with fn's answer, not after it
      arena_.execute([&] { fn(slot); });
      fn = nullptr;  // what it holds goes before the analyzer may
      std::lock_guard<std::mutex> lock(mu_);
      if (slot) --decoding_;
      --running_;
      changed_.notify_all();
    }).detach();
  }

 private:
  const uint32_t slots_;
  tbb::task_arena arena_;
  std::mutex mu_;
  std::condition_variable changed_;
  uint32_t running_ = 0, decoding_ = 0;
};

namespace {

using Clock = std::chrono::steady_clock;

void set_duration(google::protobuf::Duration* d, Clock::duration t) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t).count();
  d->set_seconds(ns / 1000000000);
  d->set_nanos(static_cast<int32_t>(ns % 1000000000));
}

struct Described {
  std::string format;
  Layout layout;
  std::vector<uint32_t> order;  // engine channel of each reported channel
  std::vector<std::string> names;
};

Described describe_pixels(const std::string& format, const Layout& layout) {
  Described d{format, layout, {}, channel_names(layout.channels)};
  for (uint32_t c = 0; c < layout.channels; ++c) d.order.push_back(c);
  return d;
}

// What the file says about itself; bit depth and colour type from the
// decoded pixels where its format did not say.
void fill_facts(v1::AnalyzeResponse& r, const uint8_t* data, size_t size, const Layout& layout,
                const std::function<void(uint64_t, uint64_t)>& release = {}) {
  const Facts f = read_facts(data, size, release);
  v1::ImageFacts* out = r.mutable_facts();
  static const char* kColorTypes[] = {"", "gray", "gray+alpha", "rgb", "rgba"};
  out->set_bit_depth(f.bit_depth ? f.bit_depth : static_cast<uint32_t>(sample_size(layout.type) * 8));
  out->set_color_type(!f.color_type.empty() ? f.color_type : layout.channels <= 4 ? kColorTypes[layout.channels] : "");
  out->set_palette_size(f.palette_size);
  out->set_jpeg_quality(f.jpeg_quality);
  out->set_chroma_subsampling(f.chroma_subsampling);
  out->set_progressive(f.progressive);
  out->set_icc_profile(f.icc_profile);
  out->set_exif_orientation(f.exif_orientation);
}

// The engine channels holding R, G and B, for the luminance.
// Joint histogram channels come as reported; the engine's own channels
// differ where a decoder stores B, G, R (a colour space's are its own).
StatsRequest with_rgb(StatsRequest request, const std::vector<uint32_t>& order) {
  if (order.size() >= 3)
    for (int i = 0; i < 3; ++i) request.rgb[i] = order[i];
  if (request.colour_space == ColourSpace::kNone)
    for (uint32_t a = 0; a < request.joint.axes; ++a)
      if (request.joint.channels[a] < order.size()) request.joint.channels[a] = order[request.joint.channels[a]];
  return request;
}

// The channels reported: a colour space's, in its order, or the image's.
Described measured(const Described& d, const StatsRequest& request) {
  if (request.colour_space == ColourSpace::kNone) return d;
  Described m = d;
  m.names = colour_channel_names(request.colour_space, d.layout.channels == 4);
  m.order.clear();
  for (uint32_t c = 0; c < m.names.size(); ++c) m.order.push_back(c);
  return m;
}

void fill_joint(v1::JointHistogram* out, const JointHistogram& joint, const Described& d) {
  for (uint32_t a = 0; a < joint.spec.axes; ++a) {
    std::string name = std::to_string(joint.spec.channels[a]);
    for (size_t i = 0; i < d.order.size(); ++i)
      if (d.order[i] == joint.spec.channels[a]) name = d.names[i];
    out->add_channels(name);
    out->add_bins(joint.spec.bins[a]);
    v1::HistogramRange* range = out->add_ranges();
    range->set_lo(joint.spec.lo[a]);
    range->set_hi(joint.spec.hi[a]);
  }
  if (joint.counts.size() <= kDenseJointBins) {
    out->mutable_counts()->Reserve(static_cast<int>(joint.counts.size()));
    for (uint64_t c : joint.counts) out->add_counts(c);
  } else {
    for (size_t i = 0; i < joint.counts.size(); ++i)
      if (joint.counts[i]) {
        out->add_nonzero_index(i);
        out->add_nonzero_count(joint.counts[i]);
      }
  }
  out->set_outside(joint.outside);
}

void fill_response(v1::AnalyzeResponse& r, const Described& image, const Result& result,
                   const StatsRequest& request, bool parts = false) {
  const Described d = measured(image, request);
  const std::vector<ChannelStats>& stats = result.channels;
  r.set_format(d.format);
  r.set_width(d.layout.width);
  r.set_height(d.layout.height);
  r.set_channel_count(d.layout.channels);
  r.set_sample_type(proto_sample_type(d.layout.type));
  r.set_engine(result.engine);
  if (result.device >= 0) r.set_device(result.device);
  for (size_t i = 0; i < d.order.size() && !stats.empty(); ++i) {  // parts but a mask: no whole-image channels
    v1::ChannelStats* c = r.add_channels();
    c->set_name(d.names[i]);
    fill_channel(c, stats.at(d.order[i]), request, d.layout.type, d.layout.width);
  }
  if (result.has_unique_colors) r.set_unique_colors(result.unique_colors);
  if (result.has_joint) fill_joint(r.mutable_joint(), result.joint, d);
  if (result.has_summary) {
    StatsRequest all = request;
    all.histogram = false;
    r.mutable_summary()->set_name("all");
    fill_channel(r.mutable_summary(), result.summary, all, d.layout.type, 0);
  }
  if (result.has_luminance) {
    r.mutable_luminance()->set_name("Y");
    fill_channel(r.mutable_luminance(), result.luminance, request, luminance_type(d.layout.type), d.layout.width);
  } else if (request.luminance) {
    r.add_warnings(d.layout.channels < 3 ? "no luminance: the image has " + std::to_string(d.layout.channels) +
                                               " channel" + (d.layout.channels == 1 ? "" : "s") + ", not R, G, B"
                   : parts ? "no luminance: it is not computed for parts of an image"
                           : "no luminance: it is not computed for streamed uploads");
  }
  if (parts && request.unique_colors && !result.has_unique_colors)
    r.add_warnings("no unique colours: they are not computed for parts of an image");
  for (const PartStats& p : result.parts) {
    v1::PartStats* out = r.add_parts();
    if (!p.has_label) {
      v1::Rectangle* roi = out->mutable_roi();
      roi->set_x(static_cast<uint32_t>(p.roi.x));
      roi->set_y(static_cast<uint32_t>(p.roi.y));
      roi->set_width(static_cast<uint32_t>(p.roi.width));
      roi->set_height(static_cast<uint32_t>(p.roi.height));
    }
    if (p.has_label) out->set_label(p.label);
    if (p.is_tile) {
      out->mutable_tile()->set_column(p.column);
      out->mutable_tile()->set_row(p.row);
    }
    for (size_t i = 0; i < d.order.size(); ++i) {
      v1::ChannelStats* c = out->add_channels();
      c->set_name(d.names[i]);
      fill_channel(c, p.channels.at(d.order[i]), request, d.layout.type, d.layout.width);
    }
    if (p.has_joint) fill_joint(out->mutable_joint(), p.joint, d);
  }
}

// An upload analyzed at its end from all its bytes: an encoded file, or
// raw pixels whose parts are asked for.
// The mask or label image a request's parts name.
v1::Input* map_input(v1::Options& options) {
  if (!options.has_parts()) return nullptr;
  v1::Parts* p = options.mutable_parts();
  if (p->has_mask() && p->mask().has_image()) return p->mutable_mask()->mutable_image();
  if (p->has_labels()) return p->mutable_labels()->mutable_image();
  return nullptr;
}

void put_map_data(v1::Options& options, std::string data) {
  v1::Input* map = map_input(options);
  if (!map) fail(ErrorCode::kInternal, "map bytes for a request without a map");
  *map->mutable_data() = std::move(data);
}

class HeldUpload final : public Upload {
 public:
  HeldUpload(const Analyzer& analyzer, MemoryBudget& budget, const v1::StreamHeader& header)
      : analyzer_(analyzer), budget_(budget) {
    *request_.mutable_input() = header.input();
    request_.mutable_input()->clear_data();
    *request_.mutable_options() = header.options();
    total_ = header.total_bytes();
  }
  // Memory grows with the bytes received, not with what the header declares,
  // and is taken from the decoded-memory budget as it grows: many large
  // uploads at once are refused rather than held past the machine's memory.
  void add(std::string_view chunk) override {
    std::string* data = request_.mutable_input()->mutable_data();
    const uint64_t need = data->size() + chunk.size();
    if (need > total_)
      fail(ErrorCode::kInvalidArgument, "chunks carry more than the header's total_bytes (" + std::to_string(total_) + ")");
    if (need > lease_.bytes()) {
      constexpr uint64_t kStep = uint64_t{16} << 20;
      const uint64_t want = std::min(total_, (need + kStep - 1) / kStep * kStep);
      if (!budget_.try_grow(lease_, want - lease_.bytes()))
        fail(ErrorCode::kResourceExhausted,
             "uploads and decodes in progress hold " + std::to_string(budget_.in_use() >> 20) + " of " +
                 std::to_string(budget_.capacity() >> 20) + " MiB of decode memory (--max-decode-memory): try again later");
    }
    data->append(chunk);
  }
  const std::string& bytes() const { return request_.input().data(); }
  void set_map_data(std::string data) override { put_map_data(*request_.mutable_options(), std::move(data)); }
  // What it held went elsewhere (the spool).
  void drop() {
    request_.mutable_input()->clear_data();
    request_.mutable_input()->mutable_data()->shrink_to_fit();
    lease_.release();
  }
  v1::AnalyzeResponse finish(const CallContext& call) override {
    const uint64_t got = request_.input().data().size();
    if (got != total_)
      fail(ErrorCode::kInvalidArgument, "stream ended after " + std::to_string(got) + " of the header's total_bytes " +
                                            std::to_string(total_));
    return analyzer_.analyze(request_, call);
  }

 private:
  const Analyzer& analyzer_;
  MemoryBudget& budget_;
  MemoryBudget::Lease lease_;  // the bytes received so far
  v1::AnalyzeRequest request_;
  uint64_t total_ = 0;
};

// An encoded upload, its format told by its first bytes. PNG and TIFF of
// kSpoolFromBytes or more go to the spool as they arrive (core/spool.hpp),
// its bytes charged to --max-spool-bytes, not to the decode memory: a PNG
// is decoded meanwhile on a thread of its own, as far as its bytes have
// come (a slow client's file is done soon after its last byte); a TIFF is
// decoded from the file once it is whole (libtiff reads the directory
// first, and libtiff's writers put it after the image data). Anything else,
// or no spool, is held in memory (HeldUpload).
class EncodedUpload final : public Upload {
 public:
  EncodedUpload(const Analyzer& analyzer, MemoryBudget& budget, const v1::StreamHeader& header, CallContext call)
      : analyzer_(analyzer), header_(header), call_(std::move(call)), held_(analyzer, budget, header) {
    total_ = header.total_bytes();
    map_follows_ = header.map_bytes() > 0;
  }
  void set_map_data(std::string data) override {
    if (!file_) return held_.set_map_data(std::move(data));
    put_map_data(*header_.mutable_options(), std::move(data));
  }
  ~EncodedUpload() override {
    if (file_) file_->abort(ErrorCode::kCancelled, "the upload ended");  // its decode ends on its own
  }
  void add(std::string_view chunk) override {
    if (file_) {
      file_->append(reinterpret_cast<const uint8_t*>(chunk.data()), chunk.size());
      if (decode_.valid() && decode_.wait_for(std::chrono::seconds(0)) == std::future_status::ready)
        early_ = decode_.get();  // a refusal ends the call now, not after the last chunk
      return;
    }
    held_.add(chunk);
    const std::string& got = held_.bytes();
    if (decided_ || (got.size() < kHeadBytes && got.size() < total_)) return;
    decided_ = true;
    const std::string format = probe(reinterpret_cast<const uint8_t*>(got.data()), got.size()).format;
    if (total_ < kSpoolFromBytes || (format != "PNG" && format != "TIFF")) return;
    file_ = analyzer_.spool().open(total_);
    if (!file_) return;
    file_->append(reinterpret_cast<const uint8_t*>(got.data()), got.size());
    held_.drop();
    if (format == "PNG" && !map_follows_) start_decode();  // a map that follows is needed before the answer
  }
  v1::AnalyzeResponse finish(const CallContext& call) override {
    if (!file_) return held_.finish(call);
    if (file_->received() != total_)
      fail(ErrorCode::kInvalidArgument, "stream ended after " + std::to_string(file_->received()) +
                                            " of the header's total_bytes " + std::to_string(total_));
    if (early_) return *early_;
    if (decode_.valid()) return decode_.get();
    std::shared_ptr<SpoolFile> file = file_;
    return analyzer_.analyze_mapped(request(), file->data(), file->size(),
                                    [file](uint64_t begin, uint64_t end) { file->release(begin, end); }, call);
  }

 private:
  static constexpr size_t kHeadBytes = 64;  // enough for probe() to tell PNG and TIFF

  v1::AnalyzeRequest request() const {
    v1::AnalyzeRequest r;
    *r.mutable_input() = header_.input();
    *r.mutable_options() = header_.options();
    return r;
  }
  // The thread's call: the stream's deadline and caller; cancelled once the
  // upload ends (the call may be gone by then).
  void start_decode() {
    auto result = std::make_shared<std::promise<v1::AnalyzeResponse>>();
    decode_ = result->get_future();
    CallContext call;
    call.deadline = call_.deadline;
    call.caller = call_.caller;
    call.same_host = call_.same_host;
    std::shared_ptr<SpoolFile> file = file_;
    call.cancelled = [file] { return file->aborted(); };
    const auto deadline = call.deadline;
    auto give_up = [file, deadline] { return file->aborted() || Clock::now() >= deadline; };
    analyzer_.start_arriving_decode([&analyzer = analyzer_, request = request(), file, call, result](bool slot) mutable {
      std::optional<v1::AnalyzeResponse> answer;
      std::exception_ptr failure;
      try {
        call.check("while waiting to decode");
        if (!slot) fail(ErrorCode::kCancelled, "the upload ended");
        answer = analyzer.analyze_mapped(
            request, file->data(), file->size(), [&file](uint64_t begin, uint64_t end) { file->release(begin, end); },
            call, [&file](uint64_t end) { return file->wait_for(end); });
      } catch (...) {
        failure = std::current_exception();
      }
      // The file goes with its upload, not after its answer.
      call = CallContext{};
      file.reset();
      if (answer) result->set_value(std::move(*answer));
      else result->set_exception(failure);
    }, std::move(give_up));
  }

  const Analyzer& analyzer_;
  v1::StreamHeader header_;
  const CallContext call_;
  HeldUpload held_;  // until the first bytes tell the format, and what is not spooled
  uint64_t total_ = 0;
  bool map_follows_ = false;
  bool decided_ = false;
  std::shared_ptr<SpoolFile> file_;
  std::future<v1::AnalyzeResponse> decode_;
  std::optional<v1::AnalyzeResponse> early_;
};

// An input in a region: a stream of its header alone, analyzed at its end.
class RegionUpload final : public Upload {
 public:
  RegionUpload(const Analyzer& analyzer, const v1::StreamHeader& header) : analyzer_(analyzer) {
    *request_.mutable_input() = header.input();
    *request_.mutable_options() = header.options();
  }
  void add(std::string_view) override {
    fail(ErrorCode::kInvalidArgument, "the header names a region: its bytes are there, send no chunks");
  }
  v1::AnalyzeResponse finish(const CallContext& call) override { return analyzer_.analyze(request_, call, &bytes_); }
  uint64_t region_bytes() const override { return bytes_; }

 private:
  const Analyzer& analyzer_;
  v1::AnalyzeRequest request_;
  uint64_t bytes_ = 0;
};

// Raw pixels and bytes go to the engine chunk by chunk as they arrive. What
// the engine's stream keeps of them (Engine::stream_bytes) is taken from the
// decode memory as it grows: refused at the header when it could never fit,
// and when the budget has no room for the next chunk's share.
class PixelUpload final : public Upload {
 public:
  PixelUpload(Engine& engine, MemoryBudget& budget, Described described, StatsRequest request, uint64_t total)
      : described_(std::move(described)), request_(request), total_(total), budget_(budget) {
    validate(described_.layout, request_);
    keeps_ = engine.stream_bytes(described_.layout, request_);
    if (keeps_ > budget.capacity())
      fail(ErrorCode::kResourceExhausted,
           "this stream's " + std::to_string(keeps_ >> 20) + " MiB of float samples are kept for their histogram "
           "over their own range, more than the decode memory limit of " + std::to_string(budget.capacity() >> 20) +
           " MiB (--max-decode-memory): give the histogram an explicit range, or send a smaller image");
    const auto t0 = Clock::now();
    stream_ = engine.open_stream(described_.layout, request_);
    compute_ += Clock::now() - t0;
  }
  void add(std::string_view chunk) override {
    if (received_ + chunk.size() > total_)
      fail(ErrorCode::kInvalidArgument, "chunks carry more than the header's total_bytes (" + std::to_string(total_) + ")");
    if (keeps_) {
      const uint64_t need = std::min(keeps_, received_ + chunk.size());
      if (need > lease_.bytes()) {
        constexpr uint64_t kStep = uint64_t{16} << 20;
        const uint64_t want = std::min(keeps_, (need + kStep - 1) / kStep * kStep);
        if (!budget_.try_grow(lease_, want - lease_.bytes()))
          fail(ErrorCode::kResourceExhausted,
               "uploads and decodes in progress hold " + std::to_string(budget_.in_use() >> 20) + " of " +
                   std::to_string(budget_.capacity() >> 20) +
                   " MiB of decode memory (--max-decode-memory), and this stream's float samples are kept for their "
                   "histogram: try again later");
      }
    }
    received_ += chunk.size();
    const auto t0 = Clock::now();
    stream_->feed(chunk.data(), chunk.size());
    compute_ += Clock::now() - t0;
  }
  void pause() override {
    const auto t0 = Clock::now();
    stream_->pause();
    compute_ += Clock::now() - t0;
  }
  v1::AnalyzeResponse finish(const CallContext&) override {
    if (received_ != total_)
      fail(ErrorCode::kInvalidArgument, "stream ended after " + std::to_string(received_) +
                                            " of the header's total_bytes " + std::to_string(total_));
    const auto t0 = Clock::now();
    const Result result = stream_->finish();
    compute_ += Clock::now() - t0;
    v1::AnalyzeResponse r;
    fill_response(r, described_, result, request_);
    set_duration(r.mutable_decode_time(), Clock::duration::zero());
    set_duration(r.mutable_compute_time(), compute_);
    return r;
  }

 private:
  Described described_;
  StatsRequest request_;
  uint64_t total_;
  uint64_t received_ = 0;
  MemoryBudget& budget_;
  uint64_t keeps_ = 0;          // bytes the stream keeps by its end
  MemoryBudget::Lease lease_;   // what it keeps so far, rounded up
  std::unique_ptr<StreamAnalysis> stream_;
  Clock::duration compute_{};
};

// An upload whose parts' mask or label image follows its input in the
// chunks (StreamHeader.map_bytes): the input's bytes go to the upload, the
// map's are held in the decode memory as they come and given to it at the end.
class MapTail final : public Upload {
 public:
  MapTail(std::unique_ptr<Upload> inner, MemoryBudget& budget, uint64_t input_bytes, uint64_t map_bytes)
      : inner_(std::move(inner)), budget_(budget), input_bytes_(input_bytes), map_bytes_(map_bytes) {}
  void add(std::string_view chunk) override {
    if (input_seen_ < input_bytes_) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), input_bytes_ - input_seen_));
      inner_->add(chunk.substr(0, n));
      input_seen_ += n;
      chunk.remove_prefix(n);
    }
    if (chunk.empty()) return;
    const uint64_t need = map_.size() + chunk.size();
    if (need > map_bytes_)
      fail(ErrorCode::kInvalidArgument, "chunks carry more than the header's total_bytes and map_bytes (" +
                                            std::to_string(input_bytes_) + " and " + std::to_string(map_bytes_) + ")");
    if (need > lease_.bytes()) {
      constexpr uint64_t kStep = uint64_t{16} << 20;
      const uint64_t want = std::min(map_bytes_, (need + kStep - 1) / kStep * kStep);
      if (!budget_.try_grow(lease_, want - lease_.bytes()))
        fail(ErrorCode::kResourceExhausted,
             "uploads and decodes in progress hold " + std::to_string(budget_.in_use() >> 20) + " of " +
                 std::to_string(budget_.capacity() >> 20) +
                 " MiB of decode memory (--max-decode-memory), and this upload's mask or label image needs room: "
                 "try again later");
      map_.reserve(static_cast<size_t>(want));
    }
    map_.append(chunk.data(), chunk.size());
  }
  void pause() override { inner_->pause(); }
  v1::AnalyzeResponse finish(const CallContext& call) override {
    if (map_.size() != map_bytes_)
      fail(ErrorCode::kInvalidArgument, "stream ended after " + std::to_string(input_seen_ + map_.size()) +
                                            " of the header's total_bytes and map_bytes (" + std::to_string(input_bytes_) +
                                            " and " + std::to_string(map_bytes_) + ")");
    inner_->set_map_data(std::move(map_));
    return inner_->finish(call);  // the lease is held until the answer
  }

 private:
  std::unique_ptr<Upload> inner_;
  MemoryBudget& budget_;
  uint64_t input_bytes_, map_bytes_;
  uint64_t input_seen_ = 0;
  std::string map_;
  MemoryBudget::Lease lease_;
};

}  // namespace

void Upload::set_map_data(std::string) {
  fail(ErrorCode::kInvalidArgument, "map_bytes: this upload takes no mask or label image");
}

Analyzer::Analyzer(std::shared_ptr<Engine> engine, Limits limits, std::shared_ptr<GpuJpegDecoder> gpu_jpeg,
                   std::shared_ptr<RegionTable> regions)
    : engine_(std::move(engine)),
      gpu_jpeg_(std::move(gpu_jpeg)),
      limits_(resolve(limits, engine_->info().threads)),
      regions_(std::move(regions)) {
  budget_ = std::make_unique<MemoryBudget>(limits_.max_decode_memory, limits_.max_queue);
  spool_ = std::make_unique<Spool>(limits_.spool_dir == "none" ? "" : limits_.spool_dir, limits_.max_spool_bytes);
  arriving_ = std::make_unique<ArrivingDecodes>(engine_->info().threads);
  configure_decoders(limits_.max_pixels);
}

Analyzer::~Analyzer() = default;

void Analyzer::start_arriving_decode(std::function<void(bool)> fn, std::function<bool()> give_up) const {
  arriving_->start(std::move(fn), std::move(give_up));
}

namespace {
// Raw pixels and bytes in a region that is read go to the engine in chunks,
// unless a statistic needs the whole image (the luminance).
bool streams_from_region(const v1::Input& input, const StatsRequest& stats, bool parts) {
  return kind_of(input) != v1::INPUT_KIND_ENCODED && !stats.luminance && !parts;
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
  return format == "PNG" || format == "TIFF";
}
}  // namespace

Clock::time_point Analyzer::memory_wait_until(const CallContext& call, Clock::time_point from) const {
  return std::min(call.deadline, from + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(limits_.queue_timeout_seconds)));
}

Analyzer::InputBytes Analyzer::bytes_of(const v1::Input& input, const StatsRequest& stats, bool parts,
                                        const CallContext& call) const {
  InputBytes out;
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
  if (kind_of(input) == v1::INPUT_KIND_ENCODED && out.region.size > static_cast<uint64_t>(INT32_MAX))
    fail(ErrorCode::kResourceExhausted, "encoded images over 2 GiB are not supported");
  if (out.region.on_device && kind_of(input) == v1::INPUT_KIND_ENCODED)
    fail(ErrorCode::kInvalidArgument, "encoded images are decoded from host memory: put the file in a memfd region, "
                                      "not GPU memory");
  out.data = out.region.data;
  out.bytes = static_cast<size_t>(out.region.size);
  out.on_device = out.region.on_device;
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

v1::AnalyzeResponse Analyzer::analyze_read_region(const v1::AnalyzeRequest& request, const RegionBytes& region,
                                                  const CallContext& call) const {
  if (region.size == 0) fail(ErrorCode::kInvalidArgument, "empty input: the region's part has no bytes");
  const v1::Input& input = request.input();
  if (kind_of(input) != v1::INPUT_KIND_ENCODED) {
    // Pixels: the engine reads them where it wants them (a GPU engine into
    // its pinned slots), on several threads, and can read them again.
    const Described d = kind_of(input) == v1::INPUT_KIND_RAW
                            ? describe_pixels("raw", raw_layout_of(input.raw()))
                            : describe_pixels("bytes", Layout{region.size, 1, 1, SampleType::kUint8, 0});
    if (kind_of(input) == v1::INPUT_KIND_RAW) check_raw_size(d.layout, region.size);
    const StatsRequest stats_request = stats_request_of(request.options());
    const auto t0 = Clock::now();
    const Result result = engine_->analyze_read(d.layout, with_rgb(stats_request, d.order),
                                                [&](uint64_t at, uint64_t n, uint8_t* out) {
                                                  call.check("while reading the region");
                                                  read_region(region, at, n, out);
                                                });
    v1::AnalyzeResponse r;
    fill_response(r, d, result, stats_request);
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
  const StatsRequest stats_request = stats_request_of(request.options());
  const bool with_parts = parts_of(request.options(), limits_).kind != PartsKind::kWhole;
  const InputBytes data = bytes_of(input, stats_request, with_parts, call);  // holds a region mapped until the engine is done
  if (input_bytes) *input_bytes = data.size();
  if (data.region.fd >= 0 && (data.spooled || streams_from_region(input, stats_request, with_parts)))
    return analyze_read_region(request, data.region, call);
  return analyze_input(request, data, {}, {}, call);
}

v1::AnalyzeResponse Analyzer::analyze_mapped(const v1::AnalyzeRequest& request, const uint8_t* bytes, size_t size,
                                             const std::function<void(uint64_t, uint64_t)>& release,
                                             const CallContext& call,
                                             const std::function<uint64_t(uint64_t)>& arrived) const {
  if (!request.input().data().empty() || request.input().has_region())
    fail(ErrorCode::kInvalidArgument, "a mapped input carries no data or region of its own");
  if (kind_of(request.input()) == v1::INPUT_KIND_ENCODED && size > static_cast<size_t>(INT32_MAX))
    fail(ErrorCode::kResourceExhausted, "encoded images over 2 GiB are not supported");
  InputBytes data;
  data.data = bytes;
  data.bytes = size;
  return analyze_input(request, data, release, arrived, call);
}

v1::AnalyzeResponse Analyzer::analyze_input(const v1::AnalyzeRequest& request, const InputBytes& data,
                                            const std::function<void(uint64_t, uint64_t)>& release,
                                            const std::function<uint64_t(uint64_t)>& arrived,
                                            const CallContext& call) const {
  const v1::Input& input = request.input();
  const StatsRequest stats_request = stats_request_of(request.options());
  Parts parts = parts_of(request.options(), limits_);
  const bool with_parts = parts.kind != PartsKind::kWhole;
  if (with_parts && data.on_device)
    fail(ErrorCode::kFailedPrecondition,
         "parts are not computed for images in GPU memory: send the image from host memory (a memfd region)");
  const uint8_t* bytes = data.data;
  v1::AnalyzeResponse r;
  Described d;
  ImageView view;
  DecodedImage decoded;
  MemoryBudget::Lease lease;  // held until the engine has read the pixels
  const auto t0 = Clock::now();
  switch (kind_of(input)) {
    case v1::INPUT_KIND_RAW:
      d = describe_pixels("raw", raw_layout_of(input.raw()));
      check_raw_size(d.layout, data.size());
      view = ImageView{bytes, d.layout};
      break;
    case v1::INPUT_KIND_BYTES:
      if (data.empty()) fail(ErrorCode::kInvalidArgument, "empty input: no bytes to count");
      d = describe_pixels("bytes", Layout{data.size(), 1, 1, SampleType::kUint8, 0});
      view = ImageView{bytes, d.layout};
      break;
    default: {
      DecodeOptions options;
      options.max_pixels = limits_.max_pixels;
      options.allow_truncated = request.options().allow_truncated();
      options.cancelled = call.cancelled;
      options.release = release;
      options.arrived = arrived;
      DecodePlan plan = plan_decode(bytes, data.size(), options);
      const auto waited_until = memory_wait_until(call, t0);
      // Bands suffice unless a statistic needs the whole image (the luminance),
      // or the engine's stream would keep every pixel anyway (floats binned
      // over their own range, on the CPU): then the whole image, in its budget.
      const Layout& bands = plan.band_layout;
      bool in_bands = plan.band_memory_bytes > 0 && !stats_request.luminance && !with_parts && bands.channels > 0;
      if (in_bands && is_float(bands.type)) {  // only floats are kept (a TIFF's: its layout is exact)
        validate(bands, stats_request);
        in_bands = engine_->stream_bytes(bands, stats_request) == 0;
      }
      // Only the banded PNG decoder reads a file as it arrives; the rest
      // waits for all of it, planned again whole (PNG's checks of every chunk).
      auto whole = [&] {
        if (!options.arrived) return;
        options.arrived(data.size());
        options.arrived = nullptr;
        plan = plan_decode(bytes, data.size(), options);
      };
      if (!in_bands || plan.format != "PNG") whole();
      lease = budget_->acquire(in_bands ? plan.band_memory_bytes : plan.memory_bytes,
                               "this " + std::to_string(plan.width) + "x" + std::to_string(plan.height) + " " + plan.format,
                               call, waited_until);
      call.check("before decoding");
      const v1::DecoderChoice choice = request.options().decoder();
      if (with_parts && choice == v1::DECODER_CHOICE_GPU)
        fail(ErrorCode::kFailedPrecondition,
             "decoder GPU was asked for, but parts of an image are computed from the CPU decoder's pixels");
      if (plan.format == "JPEG" && choice != v1::DECODER_CHOICE_CPU && !with_parts) {
        std::string why;
        if (analyze_on_gpu(bytes, data.size(), options, stats_request, call, r, &why)) return r;
        if (choice == v1::DECODER_CHOICE_GPU)
          fail(ErrorCode::kFailedPrecondition, "decoder GPU was asked for, but " + why);
      } else if (choice == v1::DECODER_CHOICE_GPU) {
        fail(ErrorCode::kFailedPrecondition, "decoder GPU was asked for, but the GPU decodes JPEG only, not " + plan.format);
      }
      // A JPEG's check is its decode on this path (decode_jpeg): one pass.
      if (in_bands && analyze_in_bands(bytes, data.size(), plan, options, stats_request, call, r)) return r;
      if (in_bands) {  // the streamed decoder did not take it after all: the whole image, in the budget
        whole();
        lease.release();
        lease = budget_->acquire(plan.memory_bytes, "this " + plan.format, call, waited_until);
      }
      {
        TraceRange range("cpu decode");
        decoded = decode_image(bytes, data.size(), plan, options);
      }
      call.check("after decoding");
      d = Described{decoded.format, decoded.view.layout, decoded.channel_order, decoded.channel_names};
      view = decoded.view;
      for (const std::string& w : decoded.warnings) r.add_warnings(w);
    }
  }
  MapInput map;  // the mask or label image, held until the engine is done
  if (with_parts) {
    const v1::Parts& p = request.options().parts();
    if (p.has_mask() && p.mask().source_case() == v1::Mask::kAlpha) {
      if (d.layout.channels != 2 && d.layout.channels != 4)
        fail(ErrorCode::kInvalidArgument, "mask alpha needs an image with alpha (2 or 4 channels); this one has " +
                                              std::to_string(d.layout.channels));
      parts.map = PartMapView{view.data, d.layout.width, d.layout.height, d.layout.channels,
                              d.order.at(d.layout.channels - 1), map_type_of(d.layout.type), d.layout.row_stride};
    } else if (p.has_mask() || p.has_labels()) {
      read_map(p.has_mask() ? p.mask().image() : p.labels().image(), p.has_mask() ? "mask" : "label image", d.layout,
               call, map);
      parts.map = map.view;
    }
  }
  // What the engine allocates beyond the pixels (Engine::working_bytes):
  // waited for by a call that holds nothing yet, else taken now or refused.
  MemoryBudget::Lease working;
  {
    const StatsRequest asked = with_rgb(stats_request, d.order);
    validate(d.layout, asked);  // a request past the engines' limits is refused as such, not as memory
    if (with_parts) validate(d.layout, parts);
    uint64_t bytes = engine_->working_bytes(d.layout, asked, with_parts ? &parts : nullptr);
    if (with_parts && parts.kind != PartsKind::kMask) bytes = std::max(bytes, engine_->working_bytes(d.layout, asked));
    if (bytes > 0) {
      const std::string what = "the analysis of this " + std::to_string(d.layout.width) + "x" +
                               std::to_string(d.layout.height) + " image (" +
                               (with_parts ? "its parts" : "its luminance or counters") + ")";
      const bool holding = lease.bytes() || map.lease.bytes() || data.lease.bytes();
      working = holding ? budget_->take_now(bytes, what) : budget_->acquire(bytes, what, call, memory_wait_until(call, t0));
    }
  }
  const auto t1 = Clock::now();
  Result result =
      with_parts       ? engine_->analyze_parts(view, parts, with_rgb(stats_request, d.order))
      : data.on_device ? engine_->analyze_device(DeviceImageView{view.data, view.layout}, with_rgb(stats_request, d.order))
                       : engine_->analyze(view, with_rgb(stats_request, d.order));
  if (with_parts && parts.kind != PartsKind::kMask) {
    // The object keeps its own channels, the whole image's, and gains the parts.
    Result whole = engine_->analyze(view, with_rgb(stats_request, d.order));
    whole.parts = std::move(result.parts);
    result = std::move(whole);
  }
  const auto t2 = Clock::now();
  fill_response(r, d, result, stats_request, with_parts);
  if (kind_of(input) == v1::INPUT_KIND_ENCODED) fill_facts(r, bytes, data.size(), d.layout, release);
  r.set_decoder(decoded.decoder);
  set_duration(r.mutable_decode_time(), t1 - t0);
  set_duration(r.mutable_compute_time(), t2 - t1);
  return r;
}

void Analyzer::read_map(const v1::Input& input, const char* what, const Layout& image, const CallContext& call,
                        MapInput& out) const {
  const std::string w = what;
  StatsRequest none;
  out.bytes = bytes_of(input, none, true, call);
  if (out.bytes.on_device)
    fail(ErrorCode::kInvalidArgument, "the " + w + " is read from host memory: not GPU memory");
  switch (kind_of(input)) {
    case v1::INPUT_KIND_RAW:
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
  DecodePlan plan;
  try {
    plan = plan_decode(out.bytes.data, out.bytes.size(), options);
  } catch (const Error& e) {
    fail(e.code(), "the " + w + ": " + e.what());
  }
  // A map of another size is refused from its header, before it is decoded.
  if (plan.width != image.width || plan.height != image.height)
    fail(ErrorCode::kInvalidArgument, "the " + w + " is " + std::to_string(plan.width) + "x" +
                                          std::to_string(plan.height) + " and the image " + std::to_string(image.width) +
                                          "x" + std::to_string(image.height) + ": they must be the same size");
  out.lease = budget_->acquire(plan.memory_bytes, "the " + w + " (" + std::to_string(plan.width) + "x" +
                                                      std::to_string(plan.height) + " " + plan.format + ")",
                               call, memory_wait_until(call, Clock::now()));
  try {
    out.decoded = decode_image(out.bytes.data, out.bytes.size(), plan, options);
  } catch (const Error& e) {
    fail(e.code(), "the " + w + ": " + e.what());
  }
  const Layout& l = out.decoded.view.layout;
  out.view = PartMapView{out.decoded.view.data, l.width, l.height, l.channels, out.decoded.channel_order.at(0),
                         map_type_of(l.type), l.row_stride};
}

bool Analyzer::analyze_on_gpu(const uint8_t* data, size_t size, const DecodeOptions& options,
                              const StatsRequest& request, const CallContext& call, v1::AnalyzeResponse& r,
                              std::string* why) const {
  if (!gpu_jpeg_) {
    *why = "this server has no GPU JPEG decoder";
    return false;
  }
  if (!engine_->takes_device_images()) {
    *why = "the GPU engine is not in use";
    return false;
  }
  const auto t0 = Clock::now();
  std::unique_ptr<GpuJpegDecoder::Ticket> ticket = gpu_jpeg_->announce();
  call.check("before decoding");
  GpuDecodedImage image;
  try {
    TraceRange range("gpu jpeg decode and check (queued and batched)");
    image = gpu_jpeg_->decode(*ticket, data, size);
  } catch (const Error& e) {
    *why = e.what();
    return false;
  }
  ticket.reset();
  // The GPU's check gives libjpeg's verdict: the CPU path's answers.
  enforce_jpeg_check(image.check, options.allow_truncated);
  if (image.check.truncated) {
    *why = "a truncated JPEG is analyzed as libjpeg fills it in, on the CPU";
    return false;
  }
  const JpegCheck& check = image.check;
  call.check("after decoding");
  const auto t1 = Clock::now();
  Result result;
  try {
    TraceRange range("analyze device image");
    result = engine_->analyze_device(image.view, request);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kInvalidArgument) throw;
    *why = e.what();  // a failing GPU: decoded again on the CPU
    return false;
  }
  const auto t2 = Clock::now();
  fill_response(r, describe_pixels("JPEG", image.view.layout), result, request);
  fill_facts(r, data, size, image.view.layout);
  r.set_decoder(image.decoder);
  for (const std::string& w : check.warnings) r.add_warnings(w);
  set_duration(r.mutable_decode_time(), t1 - t0);
  set_duration(r.mutable_compute_time(), t2 - t1);
  return true;
}

bool Analyzer::analyze_in_bands(const uint8_t* data, size_t size, const DecodePlan& plan,
                                const DecodeOptions& options, const StatsRequest& request, const CallContext& call,
                                v1::AnalyzeResponse& r) const {
  const auto t0 = Clock::now();
  TraceRange range("cpu decode in bands");
  Described d;
  std::unique_ptr<StreamAnalysis> stream;
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
    d = describe_pixels(plan.format, Layout{w, h, channels, type, 0});
    stream = engine_->open_stream(d.layout, with_rgb(request, d.order));
    rows_per_band = plan.band_rows ? std::min(plan.band_rows, h) : band_rows(d.layout.row_bytes(), h);
    for (auto& b : buffers) b.resize(size_t{rows_per_band} * d.layout.row_bytes());
    return RowBand{buffers[0].data(), rows_per_band};
  };
  sink.band = [&](const uint8_t* rows, uint32_t, uint32_t count) {
    fed();
    call.check("while decoding");
    const size_t bytes = size_t{count} * d.layout.row_bytes();
    StreamAnalysis* s = stream.get();
    feeding = std::async(std::launch::async, [s, rows, bytes] { s->feed(rows, bytes); });
    next ^= 1;
    return RowBand{buffers[next].data(), rows_per_band};
  };
  BandedDecode decoded = decode_in_bands(data, size, plan, options, sink);
  fed();
  if (!decoded.taken) return false;
  if (options.arrived) options.arrived(size);  // the facts are read from the whole file
  call.check("after decoding");
  const auto t1 = Clock::now();
  const Result result = stream->finish();
  const auto t2 = Clock::now();
  fill_response(r, d, result, request);
  fill_facts(r, data, size, d.layout, options.release);
  r.set_decoder(decoded.decoder);
  for (const std::string& w : decoded.warnings) r.add_warnings(w);
  // The computation overlaps the decode; compute_time is what follows the last row.
  set_duration(r.mutable_decode_time(), t1 - t0);
  set_duration(r.mutable_compute_time(), t2 - t1);
  return true;
}

std::unique_ptr<Upload> Analyzer::begin_upload(const v1::StreamHeader& header, const CallContext& call) const {
  const uint64_t map_bytes = header.map_bytes();
  if (map_bytes == 0) return begin_input_upload(header, call);
  v1::Options options = header.options();
  const v1::Input* map = map_input(options);
  if (!map)
    fail(ErrorCode::kInvalidArgument, "map_bytes is set, but options.parts names no mask or label image to send them for");
  if (!map->data().empty() || map->has_region())
    fail(ErrorCode::kInvalidArgument, "map_bytes is set, but the mask or label image already has its data or a region");
  if (header.input().has_region())
    fail(ErrorCode::kInvalidArgument, "map_bytes is set, but the input names a region: no chunks follow it");
  if (map_bytes > limits_.max_input_bytes)
    fail(ErrorCode::kResourceExhausted, "a mask or label image of " + std::to_string(map_bytes) +
                                            " bytes is over the upload limit of " + std::to_string(limits_.max_input_bytes));
  return std::make_unique<MapTail>(begin_input_upload(header, call), *budget_, header.total_bytes(), map_bytes);
}

std::unique_ptr<Upload> Analyzer::begin_input_upload(const v1::StreamHeader& header, const CallContext& call) const {
  const v1::Input& input = header.input();
  if (!input.data().empty())
    fail(ErrorCode::kInvalidArgument, "the stream header carries data; send it in the chunks that follow");
  if (input.has_region()) {
    if (header.total_bytes() != 0)
      fail(ErrorCode::kInvalidArgument, "the header names a region: total_bytes must be 0, as no chunks follow");
    return std::make_unique<RegionUpload>(*this, header);
  }
  const uint64_t total = header.total_bytes();
  if (total == 0) fail(ErrorCode::kInvalidArgument, "the stream header's total_bytes must be at least 1");
  if (total > limits_.max_input_bytes)
    fail(ErrorCode::kResourceExhausted, "upload of " + std::to_string(total) + " bytes is over the limit of " +
                                            std::to_string(limits_.max_input_bytes));
  const StatsRequest stats_request = stats_request_of(header.options());
  if (header.options().has_parts() && kind_of(input) != v1::INPUT_KIND_ENCODED) {
    if (kind_of(input) == v1::INPUT_KIND_RAW) check_raw_size(raw_layout_of(input.raw()), total);
    return std::make_unique<HeldUpload>(*this, *budget_, header);  // parts need the whole image
  }
  switch (kind_of(input)) {
    case v1::INPUT_KIND_RAW: {
      Described d = describe_pixels("raw", raw_layout_of(input.raw()));
      check_raw_size(d.layout, total);
      return std::make_unique<PixelUpload>(*engine_, *budget_, std::move(d), stats_request, total);
    }
    case v1::INPUT_KIND_BYTES:
      return std::make_unique<PixelUpload>(*engine_, *budget_, describe_pixels("bytes", Layout{total, 1, 1, SampleType::kUint8, 0}),
                                           stats_request, total);
    default:
      if (total > static_cast<uint64_t>(INT32_MAX))
        fail(ErrorCode::kResourceExhausted, "encoded images over 2 GiB are not supported");
      return std::make_unique<EncodedUpload>(*this, *budget_, header, call);
  }
}

void StreamAssembler::take(const v1::AnalyzeStreamRequest& message) {
  if (!upload_) {
    if (!message.has_header()) fail(ErrorCode::kInvalidArgument, "the first AnalyzeStream message must be a header");
    upload_ = analyzer_.begin_upload(message.header(), call_);
  } else if (message.has_header()) {
    fail(ErrorCode::kInvalidArgument, "AnalyzeStream received a second header");
  } else {
    upload_->add(message.chunk());
  }
}

void StreamAssembler::take_chunk(const std::vector<std::string_view>& pieces) {
  if (!upload_) fail(ErrorCode::kInvalidArgument, "the first AnalyzeStream message must be a header");
  for (std::string_view piece : pieces) upload_->add(piece);
}

void StreamAssembler::pause() {
  if (upload_) upload_->pause();
}

v1::AnalyzeResponse StreamAssembler::end(const CallContext& call) {
  if (!upload_) fail(ErrorCode::kInvalidArgument, "AnalyzeStream received no header");
  struct Count {  // also when finish() throws
    StreamAssembler& s;
    ~Count() { s.region_bytes_ = s.upload_->region_bytes(); }
  } count{*this};
  return upload_->finish(call);
}

v1::ServerInfo Analyzer::server_info() const {
  v1::ServerInfo info;
  info.set_version(IMGSTAT_VERSION);
  if (gpu_jpeg_) info.set_gpu_decoder(gpu_jpeg_->description());
  if (regions_) info.set_region_socket(region_socket_);
  v1::EngineInfo* e = info.mutable_engine();
  const EngineInfo engine = engine_->info();  // live: a lost GPU leaves the CPU engine
  e->set_kind(engine.kind);
  e->set_device_name(engine.device_name);
  e->set_device_memory_bytes(engine.device_memory_bytes);
  e->set_compute_capability(engine.compute_capability);
  e->set_threads(engine.threads);
  // Listed while the CPU engine stands in for lost GPUs too: they say why.
  if (const std::shared_ptr<Placement> placement = engine_->placement())
    for (const GpuStatus& g : placement->status()) {
      v1::Gpu* out = info.add_gpus();
      out->set_device(g.device);
      out->set_name(g.name);
      out->set_memory_bytes(g.memory_bytes);
      out->set_compute_capability(g.compute_capability);
      out->set_in_service(g.in_service);
      out->set_out_of_service_reason(g.out_of_service_reason);
      out->set_images(g.images);
      out->set_in_flight(g.in_flight);
    }
  v1::Limits* l = info.mutable_limits();
  l->set_max_message_bytes(limits_.max_message_bytes);
  l->set_max_pixels(limits_.max_pixels);
  l->set_max_input_bytes(limits_.max_input_bytes);
  l->set_max_bins(kMaxBins);
  l->set_max_decode_memory(limits_.max_decode_memory);
  l->set_max_concurrent(limits_.max_concurrent);
  l->set_batch_window(limits_.batch_window);
  l->set_max_regions(limits_.max_regions);
  l->set_max_region_bytes(limits_.max_region_bytes);
  l->set_max_parts(static_cast<uint32_t>(limits_.max_parts));
  l->set_max_spool_bytes(spool_->enabled() ? spool_->capacity() : 0);
  set_duration(l->mutable_stream_idle_timeout(), std::chrono::duration_cast<Clock::duration>(
                                                     std::chrono::duration<double>(limits_.stream_idle_timeout_seconds)));
  for (const std::string& f : supported_formats()) info.add_formats(f);
  for (auto t : {v1::SAMPLE_TYPE_UINT8, v1::SAMPLE_TYPE_UINT16, v1::SAMPLE_TYPE_INT8, v1::SAMPLE_TYPE_INT16,
                 v1::SAMPLE_TYPE_FLOAT32, v1::SAMPLE_TYPE_FLOAT64})
    info.add_sample_types(t);
  return info;
}

}  // namespace imgstat
