#include "call_support.hpp"

#include <spdlog/spdlog.h>

#include <new>

#include "imgstat/error.hpp"
#include "status_name.hpp"
#include "validate.hpp"

namespace imgstat {

grpc::Status status_of_current_exception() {
  try {
    throw;
  } catch (const Error& e) {
    return grpc::Status(static_cast<grpc::StatusCode>(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::exception& e) {
    return grpc::Status(grpc::StatusCode::INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "internal error");
  }
}

namespace {

double ms(const google::protobuf::Duration& d) { return d.seconds() * 1e3 + d.nanos() * 1e-6; }

}  // namespace

void log_request(const char* method, const std::string& peer, const v1::Input& input,
                 const v1::AnalyzeResponse* r, const grpc::Status& status,
                 std::chrono::steady_clock::time_point started) {
  const double total_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  const std::string name = input.name().empty() ? "-" : input.name();
  if (status.ok() && r) {
    spdlog::info("{} peer={} input=\"{}\" {} {}x{}x{} {} engine={} decode={:.3f}ms compute={:.3f}ms total={:.3f}ms OK",
                 method, peer, name, r->format(), r->width(), r->height(), r->channel_count(),
                 to_string(sample_type_of(r->sample_type())), r->engine(), ms(r->decode_time()), ms(r->compute_time()),
                 total_ms);
  } else {
    spdlog::info("{} peer={} input=\"{}\" total={:.3f}ms {}: {}", method, peer, name, total_ms,
                 status_code_name(status.error_code()), status.error_message());
  }
}

}  // namespace imgstat
