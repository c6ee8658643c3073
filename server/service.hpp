// imgstat.v1.ImageStats on gRPC's callback API: one reactor per RPC kind,
// each thin: check, hand the work to the workers, answer.
#pragma once

#include "analyzer.hpp"
#include "imgstat/v1/imgstat.grpc.pb.h"
#include "workers.hpp"

namespace imgstat {

class ImageStatsService final : public v1::ImageStats::CallbackService {
 public:
  ImageStatsService(const Analyzer& analyzer, Workers& workers) : analyzer_(analyzer), workers_(workers) {}

  grpc::ServerUnaryReactor* Analyze(grpc::CallbackServerContext* ctx, const v1::AnalyzeRequest* request,
                                    v1::AnalyzeResponse* response) override;
  grpc::ServerReadReactor<v1::AnalyzeStreamRequest>* AnalyzeStream(grpc::CallbackServerContext* ctx,
                                                                     v1::AnalyzeResponse* response) override;
  grpc::ServerBidiReactor<v1::BatchRequest, v1::BatchResponse>* AnalyzeBatch(
      grpc::CallbackServerContext* ctx) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* ctx, const v1::GetServerInfoRequest* request,
                                          v1::ServerInfo* response) override;

 private:
  const Analyzer& analyzer_;
  Workers& workers_;
};

// The reactors, one file each.
grpc::ServerReadReactor<v1::AnalyzeStreamRequest>* make_stream_reactor(grpc::CallbackServerContext* ctx,
                                                                      v1::AnalyzeResponse* response,
                                                                      const Analyzer& analyzer, Workers& workers);
grpc::ServerBidiReactor<v1::BatchRequest, v1::BatchResponse>* make_batch_reactor(grpc::CallbackServerContext* ctx,
                                                                                 const Analyzer& analyzer,
                                                                                 Workers& workers);

}  // namespace imgstat
