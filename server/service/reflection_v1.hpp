// Server reflection v1 beside gRPC's own v1alpha: tools that ask for v1
// first (grpcurl, grpcui, Postman) find the services without a fallback.
// Answers come from the process's generated descriptor pool, as v1alpha's do.
#pragma once

#include <string>
#include <vector>

#include "grpc/reflection/v1/reflection.grpc.pb.h"

namespace imgstat {

class ReflectionV1 final : public grpc::reflection::v1::ServerReflection::CallbackService {
 public:
  // services: the names list_services answers with.
  explicit ReflectionV1(std::vector<std::string> services) : services_(std::move(services)) {}

  grpc::ServerBidiReactor<grpc::reflection::v1::ServerReflectionRequest, grpc::reflection::v1::ServerReflectionResponse>*
  ServerReflectionInfo(grpc::CallbackServerContext* context) override;

  // The answer to one request: pure lookups, no blocking.
  grpc::reflection::v1::ServerReflectionResponse answer(const grpc::reflection::v1::ServerReflectionRequest& request) const;

 private:
  std::vector<std::string> services_;
};

}  // namespace imgstat
