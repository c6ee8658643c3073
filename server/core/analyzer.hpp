// The service's work without its transport: a request in, a response out.
// The gRPC handlers and the CLI's --local mode both run through here.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/budget.hpp"
#include "core/guarded_map.hpp"
#include "core/call_context.hpp"
#include "core/limits.hpp"
#include "core/regions.hpp"
#include "core/response.hpp"
#include "core/spool.hpp"
#include "core/uploads.hpp"
#include "core/validate.hpp"
#include "decode/decode.hpp"
#include "decode/jpeg/gpu.hpp"
#include "imgstat/engine.hpp"
#include "imgstat/v1/imgstat.pb.h"
#include "sources/objects.hpp"

namespace imgstat {

class ArrivingDecodes;  // core/arriving.hpp

class Analyzer {
 public:
  // Limits left at 0 take the machine's defaults (resolve()). gpu_jpeg, when
  // set, decodes JPEG into the engine's GPU memory (engines that take device
  // images only). regions, when set, are the shared-memory regions inputs
  // may name (the server's; --local has none).
  Analyzer(std::shared_ptr<Engine> engine, Limits limits, std::shared_ptr<GpuJpegDecoder> gpu_jpeg = nullptr,
           std::shared_ptr<RegionTable> regions = nullptr);
  ~Analyzer();

  // Each throws imgstat::Error naming what is wrong with the request, or
  // kCancelled / kDeadlineExceeded when the call ended first.
  // input_bytes, if given, learns the input's size once it is known: the
  // message's data, or the region's part (for the log and the metrics).
  v1::AnalyzeResponse analyze(const v1::AnalyzeRequest& request, const CallContext& call = {},
                              uint64_t* input_bytes = nullptr) const;
  // The same for an input whose bytes (request.input().data() left empty)
  // are a file's pages the caller has mapped (the CLI's --local): decoded in
  // place; release(begin, end) hears which bytes a streamed decoder (PNG,
  // TIFF) is done with for now (DecodeOptions::release), so that the caller
  // may drop those pages.
  // arrived, if given: the bytes are still arriving (DecodeOptions::arrived).
  v1::AnalyzeResponse analyze_mapped(const v1::AnalyzeRequest& request, const uint8_t* data, size_t size,
                                     const std::function<void(uint64_t, uint64_t)>& release,
                                     const CallContext& call = {},
                                     const std::function<uint64_t(uint64_t)>& arrived = {}) const;
  // call: the stream's (StreamAssembler).
  std::unique_ptr<Upload> begin_upload(const v1::StreamHeader& header, const CallContext& call = {}) const;

  v1::ServerInfo server_info() const;
  const Limits& limits() const { return limits_; }
  // An object a request names (Input.url), read whole where --fetch-allow
  // allows it (PERMISSION_DENIED naming the rules when not), its bytes held
  // in the decode memory until the lease goes; a failed read is its status
  // (NOT_FOUND, UNAVAILABLE, DATA_LOSS...). The service fetches on threads
  // of their own (CallEnv::submit_request) and hands the bytes on as data.
  // With request, an object larger than the first request is analyzed as it
  // arrives, as AnalyzeStream's uploads are (PNG and TIFF spooled and decoded
  // while the rest comes): then answered holds the answer, and bytes nothing.
  struct Fetched {
    std::string bytes;
    MemoryBudget::Lease lease;
    std::optional<v1::AnalyzeResponse> answered;
  };
  Fetched fetch_object(const v1::Input& input, const CallContext& call, const v1::AnalyzeRequest* request = nullptr) const;
  // The objects under an s3:// prefix that --fetch-allow covers, listed with
  // the server's credentials (ListObjects): PERMISSION_DENIED naming the
  // rules for one they do not cover, INVALID_ARGUMENT for no s3:// prefix.
  std::vector<ObjectInfo> list_prefix(const std::string& prefix, const CallContext& call) const;
  // An object opened (its first bytes in head) analyzed as an upload of its ranges.
  v1::AnalyzeResponse analyze_arriving(const v1::AnalyzeRequest& request, const ObjectInfo& object, std::string head,
                                       const CallContext& call) const;
  const MemoryBudget& budget() const { return *budget_; }
  Spool& spool() const { return *spool_; }
  // Runs fn on a thread of its own once one of the engine's-threads-many
  // decode slots is free: fn(true); fn(false) if give_up() said so first.
  // ~Analyzer waits for these threads.
  void start_arriving_decode(std::function<void(bool)> fn, std::function<bool()> give_up) const;
  RegionTable* regions() const { return regions_.get(); }
  const std::shared_ptr<RegionTable>& shared_regions() const { return regions_; }
  // Where the server takes region descriptors, for ServerInfo.
  void set_region_socket(std::string path) { region_socket_ = std::move(path); }

 private:
  // An input's bytes: its data, or the part of a region it names (then held
  // mapped while this lives).
  struct InputBytes {
    const uint8_t* data = nullptr;
    size_t bytes = 0;
    bool on_device = false;  // in a GPU region: data is a device address
    bool spooled = false;    // a PNG or TIFF in a region that cannot be mapped: read into the spool, as an upload
    RegionBytes region;
    // An encoded file in a region that is read: mapped where it lies (a
    // decoder reads it there; cut short meanwhile, the call fails)...
    std::unique_ptr<GuardedMap> mapped;
    // ... or (pixels for the luminance, a mapping refused) its bytes, in the budget.
    std::string owned;
    MemoryBudget::Lease lease;
    size_t size() const { return bytes; }
    bool empty() const { return bytes == 0; }
  };
  // Every series of a file unless one is chosen (AnalyzeResponse.other_series).
  v1::AnalyzeResponse analyze_input(const v1::AnalyzeRequest& request, const RequestPlan& plan, const InputBytes& data,
                                    const std::function<void(uint64_t, uint64_t)>& release,
                                    const std::function<uint64_t(uint64_t)>& arrived, const CallContext& call) const;
  // One series (plan.planes.series, else series 0).
  v1::AnalyzeResponse analyze_series(const v1::AnalyzeRequest& request, const RequestPlan& plan, const InputBytes& data,
                                     const std::function<void(uint64_t, uint64_t)>& release,
                                     const std::function<uint64_t(uint64_t)>& arrived, const CallContext& call) const;
  // An input's pixels for the engine: raw ones where they lie, or an
  // encoded one's decoded (in the budget, until the engine has read them).
  struct Pixels {
    Described d;
    ImageView view;
    DecodedImage decoded;
    MemoryBudget::Lease lease;
    DecodePlan plan;  // an encoded input's
    // A JPEG decoded on the GPU for its parts: the pixels stay there (view
    // has no data then).
    GpuDecodedImage gpu;
    bool on_gpu() const { return gpu.memory != nullptr; }
  };
  // An encoded input decoded into px; false when r is the whole answer
  // already (decoded on the GPU, or on the CPU in bands into the engine).
  bool decode_encoded(const v1::AnalyzeRequest& request, const RequestPlan& plan, const InputBytes& data,
                      const std::function<void(uint64_t, uint64_t)>& release,
                      const std::function<uint64_t(uint64_t)>& arrived, const CallContext& call,
                      CallContext::Clock::time_point t0, Pixels& px, v1::AnalyzeResponse& r) const;
  // What the engine allocates beside the pixels (Engine::working_bytes), in
  // the budget: waited for by a call that holds nothing yet, else now or never.
  MemoryBudget::Lease working_memory(const StatsRequest& asked, const Parts* parts, const Layout& layout, bool holding,
                                     const CallContext& call, CallContext::Clock::time_point t0) const;
  // parts: the input must be read whole (a region is not streamed).
  InputBytes bytes_of(const v1::Input& input, const StatsRequest& stats, bool parts, const CallContext& call) const;

  // A mask or label image, decoded (in the budget) or raw, and its view.
  struct MapInput {
    InputBytes bytes;
    DecodedImage decoded;
    MemoryBudget::Lease lease;
    PartMapView view;
    std::shared_ptr<const PartIndex> index;  // a labels map's, found beside the image's decode
  };
  void read_map(const v1::Input& input, const char* what, const Described& image, const DecodePlan& image_plan,
                const CallContext& call,
                MapInput& out) const;
  // A JPEG's mask or label image read into map on a thread of its own while
  // the JPEG decodes (image: the size its header gives); invalid where the
  // map is read after the image (other formats, an alpha mask, bytes still
  // arriving).
  std::future<void> read_map_early(const v1::AnalyzeRequest& request, const RequestPlan& plan, const InputBytes& data,
                                   const std::function<uint64_t(uint64_t)>& arrived, const CallContext& call,
                                   Described& image, MapInput& map) const;
  // The parts' map for the image: its own alpha, or a mask or label image read into map.
  PartMapView map_of(const v1::Parts& parts, const Pixels& px, const CallContext& call, MapInput& map) const;
  // How long a call may wait for decode memory: its deadline, or the queue
  // timeout from `from`.
  CallContext::Clock::time_point memory_wait_until(const CallContext& call, CallContext::Clock::time_point from) const;
  // Raw pixels or bytes in a region that is read (not mapped): read by the
  // engine (Engine::analyze_read); a PNG or TIFF into the spool as an
  // upload is (EncodedUpload).
  v1::AnalyzeResponse analyze_read_region(const v1::AnalyzeRequest& request, const RequestPlan& plan,
                                          const RegionBytes& region, const CallContext& call) const;

  // An upload of the input alone (begin_upload adds its map, if it has one).
  std::unique_ptr<Upload> begin_input_upload(const v1::StreamHeader& header, const CallContext& call) const;

  // The GPU path for one JPEG; false (with *why) when it should go to the CPU.
  // *check keeps libjpeg's check pass for the CPU path to reuse.
  // A JPEG decoded on the GPU and checked there (libjpeg's verdict);
  // nothing where it cannot be (why says so): the CPU decodes it.
  std::optional<GpuDecodedImage> decode_on_gpu(const uint8_t* data, size_t size, const DecodeOptions& options,
                                               const CallContext& call, std::string* why) const;
  bool analyze_on_gpu(const uint8_t* data, size_t size, const DecodeOptions& options, const StatsRequest& request,
                      bool each_plane, const CallContext& call, v1::AnalyzeResponse& r, std::string* why) const;
  // A streamed decode (decode_in_bands: Gray or YCbCr JPEG, plain PNG, TIFF
  // and its stacks of planes) on the CPU into the engine in bands; false
  // when the decoder did not take it. each_plane: every plane answered apart too.
  bool analyze_in_bands(const uint8_t* data, size_t size, const DecodePlan& plan, const DecodeOptions& options,
                        const StatsRequest& request, bool each_plane, const CallContext& call,
                        v1::AnalyzeResponse& r) const;

  std::shared_ptr<Engine> engine_;
  std::shared_ptr<GpuJpegDecoder> gpu_jpeg_;
  Limits limits_;
  std::unique_ptr<MemoryBudget> budget_;
  std::shared_ptr<RegionTable> regions_;
  std::string region_socket_;
  FetchRules fetch_rules_;  // limits_.fetch_allow
  std::unique_ptr<Spool> spool_;
  // Last: its threads end before anything they use goes.
  std::unique_ptr<ArrivingDecodes> arriving_;
};

}  // namespace imgstat
