// imgstat.v1.ImageStats on gRPC's callback API: one reactor per RPC kind,
// each thin: admit, hand the work to the queue, answer. No reaction blocks:
// decoding, engine passes and waits all run on the work queue's threads.
#pragma once

#include <memory>

#include "core/analyzer.hpp"
#include "core/work_queue.hpp"
#include "imgstat/v1/imgstat.grpc.pb.h"
#include "service/call_support.hpp"

namespace imgstat {

// AnalyzeStream is a raw method: its chunks' bytes are read from gRPC's
// slices (stream_reactor.cpp).
class ImageStatsService final
    : public v1::ImageStats::WithRawCallbackMethod_AnalyzeStream<v1::ImageStats::CallbackService> {
 public:
  // metrics may be null.
  ImageStatsService(const Analyzer& analyzer, WorkQueue& queue, Metrics* metrics, const Authenticator* auth);
  ~ImageStatsService() override;

  grpc::ServerUnaryReactor* Analyze(grpc::CallbackServerContext* ctx, const v1::AnalyzeRequest* request,
                                    v1::AnalyzeResponse* response) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* AnalyzeStream(grpc::CallbackServerContext* ctx,
                                                            grpc::ByteBuffer* response) override;
  grpc::ServerBidiReactor<v1::BatchRequest, v1::BatchResponse>* AnalyzeBatch(
      grpc::CallbackServerContext* ctx) override;
  grpc::ServerReadReactor<v1::AggregateRequest>* Aggregate(grpc::CallbackServerContext* ctx,
                                                           v1::AggregateResponse* response) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* ctx, const v1::GetServerInfoRequest* request,
                                          v1::ServerInfo* response) override;
  grpc::ServerWriteReactor<v1::ListObjectsResponse>* ListObjects(grpc::CallbackServerContext* ctx,
                                                                const v1::ListObjectsRequest* request) override;
  grpc::ServerUnaryReactor* RegisterRegion(grpc::CallbackServerContext* ctx, const v1::RegisterRegionRequest* request,
                                           v1::Region* response) override;
  grpc::ServerUnaryReactor* ListRegions(grpc::CallbackServerContext* ctx, const v1::ListRegionsRequest* request,
                                        v1::ListRegionsResponse* response) override;
  grpc::ServerUnaryReactor* UnregisterRegion(grpc::CallbackServerContext* ctx,
                                             const v1::UnregisterRegionRequest* request,
                                             v1::UnregisterRegionResponse* response) override;

  // From now on new calls are refused with UNAVAILABLE; those in progress go on.
  void stop_admitting() { admission_.close(); }
  uint32_t calls_in_progress() const { return admission_.active(); }
  // Blocks until every fetch started has handed its request to the workers (or failed).
  void drain_fetches() {
    if (fetch_queue_) fetch_queue_->drain();
  }

 private:
  Admission admission_;
  IdleWatch idle_;
  std::unique_ptr<WorkQueue> fetch_queue_;  // with --fetch-allow: objects fetched before their analysis is queued
  CallEnv env_;
};

// The reactors, one file each. Each has entered env.admission and leaves it
// when done.
grpc::ServerReadReactor<grpc::ByteBuffer>* make_stream_reactor(grpc::CallbackServerContext* ctx,
                                                              grpc::ByteBuffer* response, CallEnv& env);
grpc::ServerBidiReactor<v1::BatchRequest, v1::BatchResponse>* make_batch_reactor(grpc::CallbackServerContext* ctx,
                                                                                 CallEnv& env);
grpc::ServerReadReactor<v1::AggregateRequest>* make_aggregate_reactor(grpc::CallbackServerContext* ctx,
                                                                      v1::AggregateResponse* response, CallEnv& env);
grpc::ServerWriteReactor<v1::ListObjectsResponse>* make_list_reactor(grpc::CallbackServerContext* ctx,
                                                                     const v1::ListObjectsRequest* request,
                                                                     CallEnv& env);

}  // namespace imgstat
