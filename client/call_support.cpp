#include "call_support.hpp"

#include <filesystem>
#include <stdexcept>

#include "core/status_name.hpp"
#include "shards.hpp"

namespace imgstat::client {

v1::Input* map_input_of(v1::Options& options) {
  if (!options.has_parts()) return nullptr;
  v1::Parts* p = options.mutable_parts();
  if (p->has_mask() && p->mask().has_image()) return p->mutable_mask()->mutable_image();
  if (p->has_labels()) return p->mutable_labels()->mutable_image();
  return nullptr;
}

uint64_t map_size(const Request& request) {
  if (request.map_file.empty()) return 0;
  if (is_shard_member(request.map_file)) return shard_member_size(request.map_file);
  std::error_code ec;
  // A map of several files (a Zarr store): the size of their tar.
  if (std::filesystem::is_directory(request.map_file, ec)) return Source(request.map_file).size();
  const uint64_t n = std::filesystem::file_size(request.map_file, ec);
  return ec ? 0 : n;
}

v1::Options options_with_map(const Request& request) {
  v1::Options o = request.options;
  if (request.map_file.empty()) return o;
  v1::Input* map = map_input_of(o);
  if (!map) throw std::runtime_error("a map file without a mask or labels to send it for");
  Source source(request.map_file);
  map->set_data(source.read_all());
  return o;
}

Outcome failure(const std::string& file, const std::string& code, const std::string& error) {
  Outcome o;
  o.file = file;
  o.code = code;
  o.error = error;
  return o;
}

Outcome outcome_of(const std::string& file, const grpc::Status& status, v1::AnalyzeResponse&& response) {
  if (!status.ok()) return failure(file, status_code_name(status.error_code()), status.error_message());
  Outcome o;
  o.file = file;
  o.ok = true;
  o.response = std::move(response);
  return o;
}


}  // namespace imgstat::client
