#include "service/reflection_v1.hpp"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <set>

namespace imgstat {
namespace {

namespace rv1 = grpc::reflection::v1;
using google::protobuf::Descriptor;
using google::protobuf::DescriptorPool;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptor;

// The file and every file it imports, each once, imports first.
void add_with_imports(const FileDescriptor* file, std::set<std::string>& sent, rv1::FileDescriptorResponse* out) {
  if (!file || !sent.insert(file->name()).second) return;
  for (int i = 0; i < file->dependency_count(); ++i) add_with_imports(file->dependency(i), sent, out);
  google::protobuf::FileDescriptorProto proto;
  file->CopyTo(&proto);
  proto.SerializeToString(out->add_file_descriptor_proto());
}

void not_found(rv1::ServerReflectionResponse& r, const std::string& what) {
  r.mutable_error_response()->set_error_code(static_cast<int32_t>(grpc::StatusCode::NOT_FOUND));
  r.mutable_error_response()->set_error_message(what + " not found");
}

class Reactor final
    : public grpc::ServerBidiReactor<rv1::ServerReflectionRequest, rv1::ServerReflectionResponse> {
 public:
  explicit Reactor(const ReflectionV1& service) : service_(service) { StartRead(&request_); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);
      return;
    }
    response_ = service_.answer(request_);
    StartWrite(&response_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
      return;
    }
    StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  const ReflectionV1& service_;
  rv1::ServerReflectionRequest request_;
  rv1::ServerReflectionResponse response_;
};

}  // namespace

grpc::ServerBidiReactor<rv1::ServerReflectionRequest, rv1::ServerReflectionResponse>* ReflectionV1::ServerReflectionInfo(
    grpc::CallbackServerContext*) {
  return new Reactor(*this);
}

rv1::ServerReflectionResponse ReflectionV1::answer(const rv1::ServerReflectionRequest& request) const {
  const DescriptorPool* pool = DescriptorPool::generated_pool();
  rv1::ServerReflectionResponse r;
  r.set_valid_host(request.host());
  *r.mutable_original_request() = request;
  std::set<std::string> sent;
  switch (request.message_request_case()) {
    case rv1::ServerReflectionRequest::kListServices:
      for (const std::string& name : services_) r.mutable_list_services_response()->add_service()->set_name(name);
      break;
    case rv1::ServerReflectionRequest::kFileByFilename: {
      const FileDescriptor* file = pool->FindFileByName(request.file_by_filename());
      if (!file) return not_found(r, "file " + request.file_by_filename()), r;
      add_with_imports(file, sent, r.mutable_file_descriptor_response());
      break;
    }
    case rv1::ServerReflectionRequest::kFileContainingSymbol: {
      const FileDescriptor* file = pool->FindFileContainingSymbol(request.file_containing_symbol());
      if (!file) return not_found(r, "symbol " + request.file_containing_symbol()), r;
      add_with_imports(file, sent, r.mutable_file_descriptor_response());
      break;
    }
    case rv1::ServerReflectionRequest::kFileContainingExtension: {
      const rv1::ExtensionRequest& e = request.file_containing_extension();
      const Descriptor* type = pool->FindMessageTypeByName(e.containing_type());
      const FieldDescriptor* ext = type ? pool->FindExtensionByNumber(type, e.extension_number()) : nullptr;
      if (!ext)
        return not_found(r, "extension " + std::to_string(e.extension_number()) + " of " + e.containing_type()), r;
      add_with_imports(ext->file(), sent, r.mutable_file_descriptor_response());
      break;
    }
    case rv1::ServerReflectionRequest::kAllExtensionNumbersOfType: {
      const Descriptor* type = pool->FindMessageTypeByName(request.all_extension_numbers_of_type());
      if (!type) return not_found(r, "type " + request.all_extension_numbers_of_type()), r;
      std::vector<const FieldDescriptor*> exts;
      pool->FindAllExtensions(type, &exts);
      rv1::ExtensionNumberResponse* out = r.mutable_all_extension_numbers_response();
      out->set_base_type_name(type->full_name());
      for (const FieldDescriptor* f : exts) out->add_extension_number(f->number());
      break;
    }
    default:
      r.mutable_error_response()->set_error_code(static_cast<int32_t>(grpc::StatusCode::INVALID_ARGUMENT));
      r.mutable_error_response()->set_error_message("the request names no known reflection question");
  }
  return r;
}

}  // namespace imgstat
