#include "core/uploads.hpp"

#include <chrono>
#include <future>
#include <optional>

#include "core/analyzer.hpp"
#include "core/response.hpp"
#include "core/validate.hpp"
#include "decode/sniff.hpp"

namespace imgstat {
namespace {

using Clock = std::chrono::steady_clock;

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

// An upload analyzed at its end from all its bytes: an encoded file, or
// raw pixels whose parts are asked for.
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
    if (total_ < kSpoolFromBytes || (format != "PNG" && format != "TIFF" && format != "FITS" && format != "tar")) return;
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
  PixelUpload(Engine& engine, MemoryBudget& budget, Described described, StatsRequest request, uint64_t total,
              bool each_plane)
      : described_(std::move(described)),
        request_(request),
        each_plane_(each_plane),
        total_(total),
        budget_(budget),
        engine_(engine) {
    validate(described_.layout, request_);
    keeps_ = engine.stream_bytes(described_.layout, request_);
    // A raw stack's planes, each in a stream of its own beside the whole's.
    stacked_ = each_plane_ && described_.planes > 1;
    if (stacked_) {
      plane_bytes_ = described_.plane_height() * described_.layout.stride();
      keeps_ += engine.stream_bytes(plane_layout(described_), request_);
    }
    if (keeps_ > budget.capacity())
      fail(ErrorCode::kResourceExhausted,
           "this stream's " + std::to_string(keeps_ >> 20) + " MiB of float samples are kept for their histogram "
           "over their own range, more than the decode memory limit of " + std::to_string(budget.capacity() >> 20) +
           " MiB (--max-decode-memory): give the histogram an explicit range, or send a smaller image");
    const auto t0 = Clock::now();
    stream_ = engine.open_stream(described_.layout, request_);
    if (stacked_) plane_stream_ = engine.open_stream(plane_layout(described_), request_);
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
    // The same bytes to the planes' streams, cut where a plane ends.
    for (std::string_view rest = chunk; stacked_ && !rest.empty();) {
      const uint64_t n = std::min<uint64_t>(rest.size(), plane_bytes_ - plane_fed_);
      plane_stream_->feed(rest.data(), n);
      plane_fed_ += n;
      rest.remove_prefix(n);
      if (plane_fed_ == plane_bytes_ && planes_.size() + 1 < described_.planes) {
        planes_.push_back(plane_stream_->finish());
        plane_stream_ = engine_.open_stream(plane_layout(described_), request_);
        plane_fed_ = 0;
      }
    }
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
    if (stacked_) planes_.push_back(plane_stream_->finish());
    compute_ += Clock::now() - t0;
    v1::AnalyzeResponse r;
    fill_response(r, described_, result, request_);
    if (each_plane_) fill_planes(r, described_, planes_, request_);
    if (described_.planes > 1) fill_plane_facts(r, described_.planes, described_.planes, 0);
    set_duration(r.mutable_decode_time(), Clock::duration::zero());
    set_duration(r.mutable_compute_time(), compute_);
    return r;
  }

 private:
  Described described_;
  StatsRequest request_;
  bool each_plane_ = false;
  uint64_t total_;
  uint64_t received_ = 0;
  MemoryBudget& budget_;
  uint64_t keeps_ = 0;          // bytes the stream keeps by its end
  MemoryBudget::Lease lease_;   // what it keeps so far, rounded up
  std::unique_ptr<StreamAnalysis> stream_;
  Clock::duration compute_{};
  Engine& engine_;
  bool stacked_ = false;
  uint64_t plane_bytes_ = 0, plane_fed_ = 0;
  std::unique_ptr<StreamAnalysis> plane_stream_;
  std::vector<Result> planes_;
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

std::unique_ptr<Upload> Analyzer::begin_upload(const v1::StreamHeader& header, const CallContext& call) const {
  if (!header.input().url().empty())
    fail(ErrorCode::kInvalidArgument, "a stream carries its input's bytes: name an object to fetch (Input.url) in Analyze");
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
  if (kind_of(input) != v1::INPUT_KIND_ENCODED && header.options().planes().first() > 0)
    fail(ErrorCode::kInvalidArgument, "planes from " + std::to_string(header.options().planes().first()) +
                                          " were asked for, but raw pixels and bytes are one plane (numbered 0)");
  if (header.options().has_parts() && kind_of(input) != v1::INPUT_KIND_ENCODED) {
    if (kind_of(input) == v1::INPUT_KIND_RAW) check_raw_size(describe_raw(input.raw(), limits_.max_planes).layout, total);
    return std::make_unique<HeldUpload>(*this, *budget_, header);  // parts need the whole image
  }
  switch (kind_of(input)) {
    case v1::INPUT_KIND_RAW: {
      Described d = describe_raw(input.raw(), limits_.max_planes);
      check_raw_size(d.layout, total);
      return std::make_unique<PixelUpload>(*engine_, *budget_, std::move(d), stats_request, total,
                                           header.options().planes().each());
    }
    case v1::INPUT_KIND_BYTES:
      return std::make_unique<PixelUpload>(*engine_, *budget_, describe_pixels("bytes", Layout{total, 1, 1, SampleType::kUint8, 0}),
                                           stats_request, total, header.options().planes().each());
    default:
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

}  // namespace imgstat
