#include "service/operations/request_log.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <random>

#include "core/limits.hpp"
#include "core/status_name.hpp"
#include "core/text.hpp"
#include "core/validate.hpp"
#include "service/operations/security.hpp"

namespace imgstat {
namespace {

constexpr const char* kRequestLogger = "request";

// {"time":…,"level":…,"msg":…} per line; a request's line carries its own
// fields instead of a message.
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const auto t = msg.time;
    const auto secs = std::chrono::time_point_cast<std::chrono::seconds>(t);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - secs).count();
    const std::time_t tt = std::chrono::system_clock::to_time_t(t);
    std::tm utc{};
    gmtime_r(&tt, &utc);
    char stamp[40];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &utc);
    const auto level = spdlog::level::to_string_view(msg.level);
    std::string head = fmt::format(R"({{"time":"{}.{:03}Z","level":"{}",)", stamp, ms,
                                   std::string_view(level.data(), level.size()));
    const std::string_view payload(msg.payload.data(), msg.payload.size());
    if (msg.logger_name == kRequestLogger && !payload.empty() && payload.front() == '{') {
      head.append(payload.substr(1));
    } else {
      head += R"("msg":)" +
              nlohmann::json(std::string(payload)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
              "}";
    }
    head += '\n';
    dest.append(head.data(), head.data() + head.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<JsonFormatter>(); }
};

LogFormat g_format = LogFormat::kText;

// Before configure_logging (in tests), the default logger.
std::shared_ptr<spdlog::logger> request_logger() {
  auto logger = spdlog::get(kRequestLogger);
  return logger ? logger : spdlog::default_logger();
}

bool id_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("._:/+=~-").find(c) != std::string_view::npos;
}

std::string dump(const nlohmann::ordered_json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

}  // namespace

void configure_logging(LogFormat format, const std::string& level) {
  g_format = format;
  std::shared_ptr<spdlog::sinks::sink> sink;
  if (format == LogFormat::kJson) {
    sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
    sink->set_formatter(std::make_unique<JsonFormatter>());
  } else {
    sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    sink->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  }
  auto main_logger = std::make_shared<spdlog::logger>("imgstat", sink);
  auto requests = std::make_shared<spdlog::logger>(kRequestLogger, sink);
  for (auto& l : {main_logger, requests}) {
    l->set_level(spdlog::level::from_str(level));
    l->flush_on(spdlog::level::trace);  // a line per request, written as it happens
  }
  spdlog::register_logger(requests);
  spdlog::set_default_logger(main_logger);
}

std::string accept_request_id(std::string_view given) {
  if (!given.empty() && given.size() <= 128 && std::all_of(given.begin(), given.end(), id_char))
    return std::string(given);
  thread_local std::mt19937_64 random{std::random_device{}()};
  return fmt::format("{:016x}{:016x}", random(), random());
}

std::string take_request_id(grpc::CallbackServerContext* ctx) {
  const auto& md = ctx->client_metadata();
  const auto it = md.find("x-request-id");
  const std::string id =
      accept_request_id(it == md.end() ? std::string_view() : std::string_view(it->second.data(), it->second.size()));
  ctx->AddInitialMetadata("x-request-id", id);
  return id;
}

std::string caller_of(const grpc::CallbackServerContext* ctx, const Authenticator* auth) {
  if (auth && auth->enabled()) {
    const auto& md = ctx->client_metadata();
    const auto it = md.find("authorization");
    if (it != md.end()) {
      const std::string name = auth->caller(std::string_view(it->second.data(), it->second.size()));
      if (!name.empty()) return printable(name, 200);
    }
  }
  const auto context = ctx->auth_context();
  if (!context) return {};
  const auto values = context->GetPeerIdentity();  // a client certificate's name
  return values.empty() ? std::string() : printable(std::string_view(values.front().data(), values.front().size()), 200);
}

namespace {

double ms(const google::protobuf::Duration& d) { return d.seconds() * 1e3 + d.nanos() * 1e-6; }

}  // namespace

void log_request(const RequestRecord& r) {
  const std::string name = r.input_name.empty() ? "-" : printable(r.input_name, kMaxLoggedNameBytes);
  const std::string code = status_code_name(r.status.error_code());
  const v1::AnalyzeResponse* a = r.status.ok() ? r.response : nullptr;
  const auto logger = request_logger();
  if (!logger) return;
  if (g_format == LogFormat::kJson) {
    nlohmann::ordered_json j;
    j["msg"] = "request";
    j["method"] = r.method;
    j["request_id"] = r.id;
    if (!r.item.empty()) j["item"] = printable(r.item, 128);
    j["peer"] = r.peer;
    if (!r.caller.empty()) j["caller"] = r.caller;
    j["input"] = name;
    j["input_bytes"] = r.input_bytes;
    if (a) {
      j["format"] = a->format();
      j["width"] = a->width();
      j["height"] = a->height();
      j["channels"] = a->channel_count();
      j["sample_type"] = to_string(sample_type_of(a->sample_type()));
      j["engine"] = a->engine();
      if (a->has_device()) j["device"] = a->device();
      if (!a->decoder().empty()) j["decoder"] = a->decoder();
      j["decode_ms"] = ms(a->decode_time());
      j["compute_ms"] = ms(a->compute_time());
    }
    j["queue_ms"] = r.queue_ms;
    j["total_ms"] = r.total_ms;
    j["status"] = code;
    if (!r.status.ok()) j["error"] = printable(r.status.error_message(), 1000);
    logger->info(dump(j));
    return;
  }
  std::string line = fmt::format("{} id={}", r.method, r.id);
  if (!r.item.empty()) line += fmt::format(" item=\"{}\"", printable(r.item, 128));
  line += fmt::format(" peer={}", r.peer);
  if (!r.caller.empty()) line += fmt::format(" caller=\"{}\"", r.caller);
  if (!r.input_name.empty() || r.input_bytes) line += fmt::format(" input=\"{}\" bytes={}", name, r.input_bytes);
  if (r.status.ok() && !a) {
    line += fmt::format(" total={:.3f}ms OK", r.total_ms);
  } else if (a) {
    line += fmt::format(" {} {}x{}x{} {} engine={}{} decoder={} queue={:.3f}ms decode={:.3f}ms "
                        "compute={:.3f}ms total={:.3f}ms OK",
                        a->format(), a->width(), a->height(), a->channel_count(),
                        to_string(sample_type_of(a->sample_type())), a->engine(),
                        a->has_device() ? fmt::format(" device={}", a->device()) : std::string(),
                        a->decoder().empty() ? "-" : a->decoder(), r.queue_ms, ms(a->decode_time()),
                        ms(a->compute_time()), r.total_ms);
  } else {
    line += fmt::format(" queue={:.3f}ms total={:.3f}ms {}: {}", r.queue_ms, r.total_ms, code,
                        printable(r.status.error_message(), 1000));
  }
  logger->info(line);
}

void log_refused(std::string_view method, std::string_view id, grpc::StatusCode code, std::string_view message) {
  const auto logger = request_logger();
  if (!logger) return;
  const std::string m = printable(method, 128);
  if (g_format == LogFormat::kJson) {
    nlohmann::ordered_json j;
    j["msg"] = "refused";
    j["method"] = m;
    j["request_id"] = id;
    j["status"] = status_code_name(code);
    j["error"] = std::string(message);
    logger->info(dump(j));
  } else {
    logger->info("{} id={} refused {}: {}", m, id, status_code_name(code), message);
  }
}

}  // namespace imgstat
