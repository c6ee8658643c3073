#include "core/analyzer.hpp"

#include <chrono>

#include "core/response.hpp"
#include "decode/sniff.hpp"

#ifndef IMGSTAT_VERSION
#define IMGSTAT_VERSION "0.0.0"
#endif

namespace imgstat {

using Clock = std::chrono::steady_clock;

v1::ServerInfo Analyzer::server_info() const {
  v1::ServerInfo info;
  info.set_version(IMGSTAT_VERSION);
  if (gpu_jpeg_) info.set_gpu_decoder(gpu_jpeg_->description());
  if (regions_) info.set_region_socket(region_socket_);
  for (const std::string& prefix : fetch_rules_.prefixes()) info.add_fetch_allow(prefix);
  info.set_fetch_ranges(!fetch_rules_.empty());
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
  l->set_aggregate_inputs(kAggregateInputsPerMessage);
  l->set_max_regions(limits_.max_regions);
  l->set_max_region_bytes(limits_.max_region_bytes);
  l->set_max_parts(static_cast<uint32_t>(limits_.max_parts));
  l->set_max_planes(limits_.max_planes);
  if (!fetch_rules_.empty()) l->set_fetch_threads(limits_.fetch_threads);
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
