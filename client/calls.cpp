#include "calls.hpp"

#include <google/protobuf/empty.pb.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <deque>
#include <filesystem>
#include <map>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <netdb.h>
#include <unistd.h>

#include "core/address.hpp"
#include "core/status_name.hpp"
#include "core/validate.hpp"

namespace imgstat::client {
namespace {

// Room for the request's other fields inside the server's message limit.
constexpr uint64_t kEnvelope = 64 << 10;
// Files this large go through a region to a server on this host: below it,
// the two region calls cost more than the socket saves.
constexpr uint64_t kRegionMinBytes = uint64_t{1} << 20;
// Keep-alive pings on idle and busy connections alike: a server whose host
// vanished (no FIN, no RST) is noticed within ping interval + timeout. The
// server lets pings come this often (server/core/limits.hpp).
constexpr int kKeepaliveMs = 10000;
// The CLI's own retries of a file whose call ended UNAVAILABLE after gRPC's
// (a server killed with the file's bytes past gRPC's replay buffer): in all,
// at most this many attempts, the first wait doubling each time.
constexpr int kAttempts = 5;
constexpr std::chrono::milliseconds kFirstBackoff{100};
constexpr int kKeepaliveTimeoutMs = 5000;
constexpr int kReconnectMs = 100;
// Lanes (AnalyzeBatch calls carrying small files): at most this many files
// on one at once, within the server's batch_window; an empty lane left this
// long is closed before the next file (the server ends one idle for its
// --stream-idle-timeout, 30 s by default).
constexpr size_t kLaneFiles = 16;
constexpr std::chrono::seconds kLaneIdle{2};
// A lane takes this many files in all, then closes: the lanes after it go
// to whichever server round_robin picks then (lanes opened before every
// server of a list was connected all sit on the first; a restarted server
// gets its share back).
constexpr uint64_t kLaneTurn = 64;
const char* const kUnreachable = "no server reachable: an earlier file used all its retries, and none has answered since";
// calls_to_fill(): calls in flight for each of the server's engine threads,
// and the bounds of the whole (the first when the server does not say).
constexpr unsigned kCallsPerThread = 4;
constexpr uint64_t kDefaultCalls = 16;
constexpr uint64_t kMaxCalls = 256;
// round_robin over every address of the target, and gRPC's own retries for
// unary calls that never reached a server (UNAVAILABLE before any answer);
// retry_unavailable() below covers the rest. Streaming calls get no retry
// policy: a lane that ends hands its unanswered files back to be sent again
// (lane_ended), and an upload starts over, so gRPC's replay of a stream's
// buffered messages on another server is only a second path. In one
// fresh-clone CI run a lane opened about when a server was killed sat 30 s
// with two files the live server never answered; that replay is the one
// path there that is not ours.
constexpr const char* kServiceConfig = R"({
  "loadBalancingConfig": [{"round_robin": {}}],
  "methodConfig": [{
    "name": [{"service": "imgstat.v1.ImageStats", "method": "Analyze"},
             {"service": "imgstat.v1.ImageStats", "method": "GetServerInfo"},
             {"service": "imgstat.v1.ImageStats", "method": "RegisterRegion"},
             {"service": "imgstat.v1.ImageStats", "method": "ListRegions"},
             {"service": "imgstat.v1.ImageStats", "method": "UnregisterRegion"}],
    "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.05s", "maxBackoff": "1s",
                    "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
  }]
})";

// The mask or label image the parts name, if any.
v1::Input* map_input_of(v1::Options& options) {
  if (!options.has_parts()) return nullptr;
  v1::Parts* p = options.mutable_parts();
  if (p->has_mask() && p->mask().has_image()) return p->mutable_mask()->mutable_image();
  if (p->has_labels()) return p->mutable_labels()->mutable_image();
  return nullptr;
}

uint64_t map_size(const Request& request) {
  if (request.map_file.empty()) return 0;
  std::error_code ec;
  const uint64_t n = std::filesystem::file_size(request.map_file, ec);
  return ec ? 0 : n;
}

// The options with the map's bytes in place, for one message.
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

std::string read_pem(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(std::string(flag) + " " + path + ": cannot be read");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The target gRPC is given: a list of names, resolved; anything else as it is.
std::string channel_target(const std::string& target, std::string* first_host) {
  const std::vector<std::string> all = target_addresses(target);
  const bool plain_list = all.size() > 1 && target.find(':') != std::string::npos &&
                          target.rfind("ipv4:", 0) != 0 && target.rfind("ipv6:", 0) != 0 &&
                          target.rfind("dns:", 0) != 0 && target.rfind("unix", 0) != 0;
  if (!all.empty()) {
    const std::string& a = all.front();
    *first_host = a.front() == '[' ? a.substr(1, a.find(']') - 1) : a.substr(0, a.rfind(':'));
  }
  if (!plain_list) return target;
  // gRPC's ipv4: and ipv6: targets take lists of addresses, not names: each
  // name is resolved here, once (dns:/// re-resolves, for names that move).
  std::vector<std::string> v4, v6;
  for (const std::string& a : all) {
    const size_t colon = a.rfind(':');
    if (colon == std::string::npos || colon + 1 == a.size())
      throw std::runtime_error("--server: \"" + a + "\" in the list has no port");
    std::string host = a.substr(0, colon);
    const std::string port = a.substr(colon + 1);
    if (!host.empty() && host.front() == '[') host = host.substr(1, host.size() - 2);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 || !found)
      throw std::runtime_error("--server: cannot resolve \"" + host + "\"");
    char text[INET6_ADDRSTRLEN] = "";
    const addrinfo* pick = found;
    for (const addrinfo* i = found; i; i = i->ai_next)
      if (i->ai_family == AF_INET) {
        pick = i;
        break;
      }
    if (pick->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(pick->ai_addr)->sin_addr, text, sizeof text);
      v4.push_back(std::string(text) + ":" + port);
      v6.push_back("[::ffff:" + std::string(text) + "]:" + port);
    } else {
      inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(pick->ai_addr)->sin6_addr, text, sizeof text);
      v6.push_back("[" + std::string(text) + "]:" + port);
    }
    freeaddrinfo(found);
  }
  const std::vector<std::string>& use = v4.size() == all.size() ? v4 : v6;
  std::string out = v4.size() == all.size() ? "ipv4:" : "ipv6:";
  for (size_t i = 0; i < use.size(); ++i) out += (i ? "," : "") + use[i];
  return out;
}

}  // namespace

bool Connection::uses_tls() const {
  if (!tls_ca.empty() || !tls_cert.empty() || !tls_key.empty() || !tls_server_name.empty()) return true;
  return !insecure && !is_loopback(target);
}

Remote::Remote(const Connection& c, double timeout_seconds) : timeout_(timeout_seconds) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(INT_MAX);
  args.SetMaxSendMessageSize(INT_MAX);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (c.uses_tls()) {
    if (c.tls_cert.empty() != c.tls_key.empty())
      throw std::runtime_error("a client certificate needs both --tls-cert and --tls-key");
    grpc::SslCredentialsOptions o;
    if (!c.tls_ca.empty()) o.pem_root_certs = read_pem(c.tls_ca, "--tls-ca");
    if (!c.tls_cert.empty()) {
      o.pem_cert_chain = read_pem(c.tls_cert, "--tls-cert");
      o.pem_private_key = read_pem(c.tls_key, "--tls-key");
    }
    credentials = grpc::SslCredentials(o);
    if (!c.tls_server_name.empty()) args.SetSslTargetNameOverride(c.tls_server_name);
  }
  if (!c.token.empty()) authorization_ = "Bearer " + c.token;
  // A region lives on the one server that registered it: none when calls
  // may land on several.
  use_regions_ = c.shm && is_loopback(c.target) && !names_several_servers(c.target);
  batch_ = c.batch;
  servers_ = std::max<size_t>(1, target_addresses(c.target).size());
  std::string first_host;
  const std::string target = channel_target(c.target, &first_host);
  if (c.uses_tls() && c.tls_server_name.empty() && target != c.target)
    args.SetSslTargetNameOverride(first_host);  // the servers of a list share a certificate name
  // Calls go to every server the target names in turn (round_robin; gRPC's
  // default, pick_first, would put them all on one); a call that fails
  // before it reached a server is retried by gRPC itself, and keep-alive
  // pings notice a server that went away without closing its connections.
  args.SetServiceConfigJSON(kServiceConfig);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // A server restarted mid-pass is reached again within the retries'
  // pauses (gRPC's default first reconnect waits a second).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kReconnectMs);
  channel_ = grpc::CreateCustomChannel(target, credentials, args);
  stub_ = v1::ImageStats::NewStub(channel_);
}

void Remote::prepare(grpc::ClientContext& ctx, std::chrono::system_clock::time_point until) const {
  ctx.set_deadline(until);
  if (!authorization_.empty()) ctx.AddMetadata("authorization", authorization_);
}

std::chrono::system_clock::time_point Remote::deadline() const {
  if (timeout_ <= 0) return std::chrono::system_clock::time_point::max();
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::duration<double>(timeout_));
}

bool Remote::info(v1::ServerInfo* out, std::string* error) { return info(out, error, deadline()); }

bool Remote::info(v1::ServerInfo* out, std::string* error, std::chrono::system_clock::time_point until) {
  grpc::ClientContext ctx;
  prepare(ctx, until);
  const grpc::Status s = stub_->GetServerInfo(&ctx, v1::GetServerInfoRequest(), out);
  if (!s.ok()) *error = status_code_name(s.error_code()) + ": " + s.error_message();
  return s.ok();
}

bool Remote::server_info(std::chrono::system_clock::time_point until, v1::ServerInfo* out) {
  std::lock_guard<std::mutex> lock(info_mu_);
  if (!info_asked_) {
    info_asked_ = true;
    std::string error;
    info_ok_ = info(&info_, &error, until);
  }
  if (info_ok_) *out = info_;
  return info_ok_;
}

uint64_t Remote::message_limit(std::chrono::system_clock::time_point until) {
  v1::ServerInfo info;
  // gRPC's default, when the server does not say.
  return server_info(until, &info) ? info.limits().max_message_bytes() : uint64_t{4} << 20;
}

unsigned Remote::calls_to_fill() {
  v1::ServerInfo info;
  // Four a thread: one decoding, one in the engine, two on the wire either
  // way (measured: issue 35's table in bench/NOTES.md).
  uint64_t calls = kDefaultCalls;
  if (server_info(deadline(), &info) && info.engine().threads() > 0) {
    calls = uint64_t{kCallsPerThread} * info.engine().threads();
    if (info.limits().max_concurrent() > 0) calls = std::min<uint64_t>(calls, info.limits().max_concurrent());
  }
  return static_cast<unsigned>(std::clamp<uint64_t>(calls * servers_, kDefaultCalls, kMaxCalls));
}

RegionSocketClient* Remote::region_socket(std::chrono::system_clock::time_point until) {
  std::lock_guard<std::mutex> lock(region_mu_);
  if (!region_tried_) {
    region_tried_ = true;
    v1::ServerInfo info;
    if (server_info(until, &info) && !info.region_socket().empty()) {
      try {
        region_socket_ = std::make_unique<RegionSocketClient>(info.region_socket());
      } catch (const std::exception&) {
        // Another mount namespace (a container), or regions off: the socket it is.
      }
    }
  }
  return region_socket_.get();
}

bool Remote::register_file(RegionSocketClient& socket, const std::string& path, std::chrono::system_clock::time_point until,
                           v1::Region* region) {
  // The file itself: the server reads it (it maps only sealed memfds), no copy here.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::string ticket;
  try {
    ticket = socket.pass(fd);
  } catch (const std::exception&) {
    close(fd);
    return false;
  }
  close(fd);  // the server holds its own
  v1::RegisterRegionRequest r;
  r.set_ticket(ticket);
  r.set_name(path);
  grpc::ClientContext ctx;
  prepare(ctx, until);
  return stub_->RegisterRegion(&ctx, r, region).ok();
}

bool Remote::register_file(RegionSocketClient& socket, const std::string& path, std::chrono::system_clock::time_point until,
                           std::string* region_id) {
  v1::Region region;
  if (!register_file(socket, path, until, &region)) return false;
  *region_id = region.region_id();
  return true;
}

void Remote::unregister(const std::vector<std::string>& regions, std::chrono::system_clock::time_point until) {
  for (const std::string& id : regions) {
    v1::UnregisterRegionRequest u;
    u.set_region_id(id);
    v1::UnregisterRegionResponse ignored;
    grpc::ClientContext ctx;
    prepare(ctx, until);
    stub_->UnregisterRegion(&ctx, u, &ignored);  // else it goes when this process's socket closes
  }
}

bool Remote::analyze_in_region(Source& source, const Request& request, std::chrono::system_clock::time_point until,
                               Outcome* out) {
  RegionSocketClient* socket = region_socket(until);
  if (!socket) return false;
  v1::Region region;
  if (!register_file(*socket, source.name(), until, &region)) return false;
  v1::AnalyzeRequest r;
  *r.mutable_input() = request.input;
  r.mutable_input()->mutable_region()->set_region_id(region.region_id());
  // A large mask or label image goes the same way; a small one in the message.
  std::vector<std::string> regions = {region.region_id()};
  if (map_size(request) >= kRegionMinBytes) {
    *r.mutable_options() = request.options;
    std::string map_region;
    if (!register_file(*socket, request.map_file, until, &map_region)) {
      unregister(regions, until);
      return false;
    }
    regions.push_back(map_region);
    map_input_of(*r.mutable_options())->mutable_region()->set_region_id(map_region);
  } else {
    *r.mutable_options() = options_with_map(request);
  }
  v1::AnalyzeResponse response;
  grpc::ClientContext ctx;
  prepare(ctx, until);
  const grpc::Status status = stub_->Analyze(&ctx, r, &response);
  unregister(regions, until);
  if (request.on_sent) request.on_sent(source.size());
  *out = outcome_of(source.name(), status, std::move(response));
  return true;
}

Outcome Remote::analyze(Source& source, const Request& request) {
  if (unreachable_now()) return failure(source.name(), "UNAVAILABLE", kUnreachable);
  // One deadline for all the file's calls, retries included: --timeout is the
  // longest it takes.
  const auto until = deadline();
  auto backoff = kFirstBackoff;
  for (int attempt = 1;; ++attempt) {
    Outcome o = analyze_once(source, request, until);
    // UNAVAILABLE: the server went away (killed, restarted, shutting down)
    // or none answered. Statistics are the same whoever computes them, so
    // the file is sent again, to whichever server the channel picks next.
    if (!retry_unavailable(o.code == "UNAVAILABLE", attempt, backoff, until)) return o;
    std::this_thread::sleep_for(backoff);
    backoff *= 2;
  }
}

bool Remote::retry_unavailable(bool unavailable, int attempt, std::chrono::milliseconds backoff,
                               std::chrono::system_clock::time_point until) {
  if (!unavailable) {
    unreachable_ = false;  // a server answered
    return false;
  }
  // Once a file has used all its attempts, no server is taking calls: the
  // files after it fail at once (each still tries once, and any answer
  // lifts this), not after a second and a half of pauses each.
  if (attempt < kAttempts && !unreachable_ && std::chrono::system_clock::now() + backoff < until) return true;
  unreachable_ = true;
  return false;
}

bool Remote::in_one_message(const Source& source, const Request& request,
                            std::chrono::system_clock::time_point until) {
  // gRPC moves one large message far slower than the same bytes as a stream
  // of chunks (36 MB of raw pixels, 2 cores: 1.30 s against 0.36 s), so
  // only small inputs go in one message, and raw ones that ask for the
  // luminance, which a stream does not compute.
  const bool pixels = request.input.kind() == v1::INPUT_KIND_RAW || request.input.kind() == v1::INPUT_KIND_BYTES;
  const uint64_t bytes = source.size() + map_size(request);
  const bool whole = bytes <= kStreamChunk || (pixels && stats_request_of(request.options).luminance);
  return !request.force_stream && whole && bytes + kEnvelope <= message_limit(until);
}

struct Remote::UnaryCall {
  std::string file;
  std::chrono::system_clock::time_point until;
  std::function<void(Outcome)> done;
  v1::AnalyzeRequest request;
  v1::AnalyzeResponse response;
  // One context an attempt, kept until the file is answered: an attempt's
  // call may still be winding down on gRPC's thread when the next begins.
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  int attempt = 1;
  std::chrono::milliseconds backoff = kFirstBackoff;
};

bool Remote::unreachable_now() {
  // The channel says whether a server came back (a reconnect succeeded).
  return unreachable_ && channel_->GetState(true) != GRPC_CHANNEL_READY;
}

struct Remote::BatchItem {
  std::string file;
  std::chrono::system_clock::time_point until;
  std::function<void(Outcome)> done;
  v1::BatchRequest request;  // its id unique in this process
  int attempt = 1;
  std::chrono::milliseconds backoff = kFirstBackoff;
};

// One AnalyzeBatch call carrying files as they come, each answered under its
// id in the order the server finishes them. It takes files while it is open
// and has room; it closes (WritesDone) once empty after taking no more: left
// idle, expired (with --timeout its call's deadline is --timeout from its
// start, and it takes files for the first quarter of that only, so each has
// at least three quarters of --timeout), or at the end. Its call ending
// hands back every file not yet answered (a killed server's), to go again.
//
// StartWrite and StartWritesDone are decided under mu_ and called outside
// it (a reaction may run on the calling thread); a hold keeps the call,
// and so this object, alive until no such call can come.
class Remote::Lane final : public grpc::ClientBidiReactor<v1::BatchRequest, v1::BatchResponse> {
 public:
  // until: its first file's deadline, the call's.
  Lane(Remote& owner, uint64_t id, size_t capacity, std::chrono::system_clock::time_point until)
      : owner_(owner), id_(id), capacity_(capacity) {
    if (owner.timeout_ > 0) {
      ctx_.set_deadline(until);
      const auto left = until - std::chrono::system_clock::now();
      takes_until_ = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         left - std::chrono::duration<double>(owner.timeout_ * 3 / 4));
    }
    if (!owner.authorization_.empty()) ctx_.AddMetadata("authorization", owner.authorization_);
    owner.stub_->async()->AnalyzeBatch(&ctx_, this);
    AddHold();
    StartRead(&response_);
    StartCall();
  }

  // What a lane was asked to do, done with no lock held: a reaction may run
  // on the calling thread. The lane stays alive until done: it holds its
  // call while a write is decided, and its hold goes last.
  struct Step {
    bool taken = false;
    const v1::BatchRequest* write = nullptr;
    bool writes_done = false;
    bool release = false;
  };
  void perform(const Step& step) {
    if (step.write) StartWrite(step.write);
    if (step.writes_done) StartWritesDone();
    if (step.release) RemoveHold();
  }

  // Takes the item if open and with room (then perform() sends it); a new
  // lane (first) takes it unless its call is already over. That happens:
  // with no server reachable a call can fail inside StartCall, its hold
  // given back before the first offer, and its OnDone waiting on lanes_mu_
  // to delete it.
  Step offer(const std::shared_ptr<BatchItem>& item, bool first = false) {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_ || !held_) return Step{};
    const auto now = std::chrono::steady_clock::now();
    if (!first && !closing_ &&
        (now >= takes_until_ || taken_ >= kLaneTurn || (pending_.empty() && now - last_ > kLaneIdle)))
      closing_ = true;
    if (!first && (closing_ || pending_.size() >= capacity_)) return decide();
    ++taken_;
    pending_.emplace(item->request.id(), item);
    to_write_.push_back(item);
    last_ = now;
    Step step;
    step.taken = true;
    if (!writing_) {
      writing_ = true;
      step.write = &to_write_.front()->request;
    }
    return step;
  }

  size_t load() {
    std::lock_guard<std::mutex> lock(mu_);
    return closing_ ? SIZE_MAX : pending_.size();
  }

  // Takes no more files, and closes once its files are answered.
  Step close() {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
    return decide();
  }

  uint64_t id() const { return id_; }

  void OnWriteDone(bool ok) override {
    Step step;
    {
      std::lock_guard<std::mutex> lock(mu_);
      to_write_.pop_front();
      if (!ok) {  // the call is over: the rest come back in OnDone
        closing_ = broken_ = true;
        to_write_.clear();
      }
      writing_ = !to_write_.empty();
      if (!writing_) step = decide();
      step.write = writing_ ? &to_write_.front()->request : nullptr;
    }
    perform(step);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the server finished the call: nothing more can be written either
      Step step;
      {
        std::lock_guard<std::mutex> lock(mu_);
        closing_ = broken_ = true;
        step = decide();
      }
      perform(step);
      return;
    }
    v1::BatchResponse got = std::move(response_);
    response_.Clear();
    std::shared_ptr<BatchItem> item;
    Step step;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto it = pending_.find(got.id());
      if (it != pending_.end()) {
        item = std::move(it->second);
        pending_.erase(it);
      }
      answered_ = true;
      last_ = std::chrono::steady_clock::now();
      step = decide();
    }
    StartRead(&response_);
    perform(step);
    if (!item) return;  // not ours: ignored
    if (got.has_error())
      owner_.item_done(std::move(item),
                       grpc::Status(static_cast<grpc::StatusCode>(got.error().code()), got.error().message()), {});
    else
      owner_.item_done(std::move(item), grpc::Status::OK, std::move(*got.mutable_response()));
  }

  void OnDone(const grpc::Status& status) override {
    std::vector<std::shared_ptr<BatchItem>> unanswered;
    for (auto& [id, item] : pending_) unanswered.push_back(std::move(item));
    Remote& owner = owner_;
    const uint64_t id = id_;
    const bool answered = answered_;
    {
      std::lock_guard<std::mutex> lock(owner.lanes_mu_);  // out of reach before it goes
      owner.lanes_.erase(id);
    }
    delete this;
    owner.lane_ended(id, status, answered, std::move(unanswered));
  }

 private:
  // Under mu_, with no write in flight: closing, and what that needs now.
  Step decide() {
    Step step;
    if (!closing_ || writing_) return step;
    if (!writes_done_ && !broken_ && pending_.empty()) step.writes_done = writes_done_ = true;
    if (held_ && (writes_done_ || broken_)) {
      step.release = true;
      held_ = false;
    }
    return step;
  }

  Remote& owner_;
  const uint64_t id_;
  const size_t capacity_;
  grpc::ClientContext ctx_;
  v1::BatchResponse response_;
  std::chrono::steady_clock::time_point takes_until_ = std::chrono::steady_clock::time_point::max();
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<BatchItem>> pending_;  // sent or queued, not answered
  std::deque<std::shared_ptr<BatchItem>> to_write_;           // front() is being written when writing_
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  bool writing_ = false;
  bool closing_ = false;
  bool broken_ = false;  // no more writes can go (the call is over)
  bool writes_done_ = false;
  bool held_ = true;
  bool answered_ = false;  // the server answered a file on it
  uint64_t taken_ = 0;     // files it took
};

size_t Remote::lane_capacity(std::chrono::system_clock::time_point until) {
  v1::ServerInfo info;
  const uint64_t window = server_info(until, &info) ? info.limits().batch_window() : 8;
  return static_cast<size_t>(std::clamp<uint64_t>(window, 1, kLaneFiles));
}

void Remote::send_on_lane(std::shared_ptr<BatchItem> item) {
  if (batch_refused_) {  // an older server: a call each
    auto call = std::make_shared<UnaryCall>();
    call->file = item->file;
    call->until = item->until;
    call->done = std::move(item->done);
    call->request = std::move(*item->request.mutable_request());
    call->attempt = item->attempt;
    call->backoff = item->backoff;
    call_unary(std::move(call));
    return;
  }
  const size_t capacity = lane_capacity(item->until);
  std::vector<std::pair<Lane*, Lane::Step>> steps;  // performed once lanes_mu_ is let go
  bool refused = false;
  {
    std::lock_guard<std::mutex> lock(lanes_mu_);
    std::vector<std::pair<size_t, Lane*>> open;
    for (auto& [id, l] : lanes_) open.emplace_back(l->load(), l);
    std::sort(open.begin(), open.end());
    bool taken = false;
    for (auto& [load, lane] : open) {
      if (load >= capacity) break;  // the rest are as full, or closing
      steps.emplace_back(lane, lane->offer(item));
      if ((taken = steps.back().second.taken)) break;
    }
    if (!taken) {
      const uint64_t id = next_lane_++;
      Lane* lane = new Lane(*this, id, capacity, item->until);
      lanes_.emplace(id, lane);
      ++lanes_alive_;
      steps.emplace_back(lane, lane->offer(item, true));
      refused = !steps.back().second.taken;
    }
  }
  // Only steps with something to do: a lane that had nothing to do here
  // may be gone by now.
  for (auto& [lane, step] : steps)
    if (step.write || step.writes_done || step.release) lane->perform(step);
  // A new lane whose call was over before it took the file: past the
  // file's deadline, or no server to be had. The file's call failed as a
  // unary one would have, and is retried as one.
  if (refused) {
    const bool late = std::chrono::system_clock::now() >= item->until;
    item_done(std::move(item),
              late ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded")
                   : grpc::Status(grpc::StatusCode::UNAVAILABLE, "the AnalyzeBatch call ended at once"),
              {});
  }
}

void Remote::item_done(std::shared_ptr<BatchItem> item, const grpc::Status& status, v1::AnalyzeResponse&& response) {
  if (retry_unavailable(status.error_code() == grpc::StatusCode::UNAVAILABLE, item->attempt, item->backoff,
                        item->until)) {
    ++item->attempt;
    const auto when = std::chrono::system_clock::now() + item->backoff;
    item->backoff *= 2;
    later(when, [this, item] { send_on_lane(item); });
    return;
  }
  item->done(outcome_of(item->file, status, std::move(response)));
}

void Remote::lane_ended(uint64_t, const grpc::Status& status, bool answered,
                        std::vector<std::shared_ptr<BatchItem>> unanswered) {
  // A server without AnalyzeBatch, or a token that may not call it (it may
  // call Analyze): a call a file from now on.
  if (!answered && (status.error_code() == grpc::StatusCode::UNIMPLEMENTED ||
                    status.error_code() == grpc::StatusCode::PERMISSION_DENIED))
    batch_refused_ = true;
  for (std::shared_ptr<BatchItem>& item : unanswered) {
    if (batch_refused_) {
      send_on_lane(std::move(item));
      continue;
    }
    // A call that ended well has answered everything; one that did not has
    // ended for all its files alike (a server gone: UNAVAILABLE, retried).
    const grpc::Status why = status.ok() ? grpc::Status(grpc::StatusCode::INTERNAL,
                                                        "the server ended the AnalyzeBatch call without answering")
                                         : status;
    item_done(std::move(item), why, {});
  }
  std::lock_guard<std::mutex> lock(lanes_mu_);  // last: the destructor may go on once this is 0
  --lanes_alive_;
  lanes_cv_.notify_all();
}

void Remote::start(Source& source, const Request& request, std::function<void(Outcome)> done) {
  if (unreachable_now()) {
    done(failure(source.name(), "UNAVAILABLE", kUnreachable));
    return;
  }
  const auto until = deadline();
  const bool region = use_regions_ && source.is_file() && source.size() >= kRegionMinBytes;
  if (region || !in_one_message(source, request, until)) {
    done(analyze(source, request));
    return;
  }
  if (batch_ && !batch_refused_) {
    auto item = std::make_shared<BatchItem>();
    item->file = source.name();
    item->until = until;
    item->done = std::move(done);
    item->request.set_id(std::to_string(next_item_++));
    v1::AnalyzeRequest* r = item->request.mutable_request();
    *r->mutable_input() = request.input;
    *r->mutable_options() = options_with_map(request);
    r->mutable_input()->set_data(source.read_all());
    send_on_lane(std::move(item));
    return;
  }
  auto call = std::make_shared<UnaryCall>();
  call->file = source.name();
  call->until = until;
  call->done = std::move(done);
  *call->request.mutable_input() = request.input;
  *call->request.mutable_options() = options_with_map(request);
  call->request.mutable_input()->set_data(source.read_all());
  call_unary(std::move(call));
}

void Remote::call_unary(std::shared_ptr<UnaryCall> call) {
  call->contexts.push_back(std::make_unique<grpc::ClientContext>());
  grpc::ClientContext* ctx = call->contexts.back().get();
  prepare(*ctx, call->until);
  UnaryCall* c = call.get();
  stub_->async()->Analyze(ctx, &c->request, &c->response, [this, call](grpc::Status status) {
    // As analyze() does: a call that ended UNAVAILABLE goes again, after a
    // pause, to whichever server the channel picks next.
    if (retry_unavailable(status.error_code() == grpc::StatusCode::UNAVAILABLE, call->attempt, call->backoff,
                          call->until)) {
      ++call->attempt;
      const auto when = std::chrono::system_clock::now() + call->backoff;
      call->backoff *= 2;
      call->response.Clear();
      later(when, [this, call] { call_unary(call); });
      return;
    }
    call->done(outcome_of(call->file, status, std::move(call->response)));
  });
}

void Remote::later(std::chrono::system_clock::time_point when, std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(later_mu_);
  later_.emplace(when, std::move(fn));
  if (!later_thread_.joinable()) {
    later_thread_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(later_mu_);
      for (;;) {
        if (later_.empty()) {
          if (later_stop_) return;
          later_cv_.wait(lock);
          continue;
        }
        const auto first = later_.begin();
        if (first->first > std::chrono::system_clock::now()) {
          later_cv_.wait_until(lock, first->first);
          continue;
        }
        std::function<void()> fn = std::move(first->second);
        later_.erase(first);
        lock.unlock();
        fn();
        lock.lock();
      }
    });
  }
  later_cv_.notify_one();
}

Remote::~Remote() {
  {
    std::vector<std::pair<Lane*, Lane::Step>> steps;
    {
      std::lock_guard<std::mutex> lock(lanes_mu_);
      for (auto& [id, l] : lanes_) steps.emplace_back(l, l->close());
    }
    for (auto& [lane, step] : steps) lane->perform(step);
    std::unique_lock<std::mutex> lock(lanes_mu_);
    lanes_cv_.wait(lock, [&] { return lanes_alive_ == 0; });
  }
  {
    std::lock_guard<std::mutex> lock(later_mu_);
    later_stop_ = true;
  }
  later_cv_.notify_one();
  if (later_thread_.joinable()) later_thread_.join();
}

Outcome Remote::analyze_once(Source& source, const Request& request, std::chrono::system_clock::time_point until) {
  v1::AnalyzeResponse response;
  grpc::ClientContext ctx;
  prepare(ctx, until);
  if (use_regions_ && source.is_file() && source.size() >= kRegionMinBytes) {
    Outcome o;
    if (analyze_in_region(source, request, until, &o)) return o;
  }
  if (in_one_message(source, request, until)) {
    v1::AnalyzeRequest r;
    *r.mutable_input() = request.input;
    r.mutable_input()->set_data(source.read_all());
    *r.mutable_options() = options_with_map(request);
    return outcome_of(source.name(), stub_->Analyze(&ctx, r, &response), std::move(response));
  }
  // Raw messages: a chunk is its field's tag and length, then the file's
  // piece itself, lent to gRPC as a slice and freed when gRPC lets go of it
  // (the socket may still be sending it when Write returns), never copied
  // into protobuf's serialization.
  const grpc::internal::RpcMethod method("/imgstat.v1.ImageStats/AnalyzeStream",
                                         grpc::internal::RpcMethod::CLIENT_STREAMING);
  grpc::ByteBuffer answer;
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
      grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(channel_.get(), method, &ctx, &answer));
  v1::AnalyzeStreamRequest header;
  *header.mutable_header()->mutable_input() = request.input;
  *header.mutable_header()->mutable_options() = request.options;
  header.mutable_header()->set_total_bytes(source.size());
  // The map, if any, follows the input in the same chunks.
  std::unique_ptr<Source> map;
  if (!request.map_file.empty()) {
    map = std::make_unique<Source>(request.map_file);
    header.mutable_header()->set_map_bytes(map->size());
  }
  grpc::ByteBuffer header_bytes;
  bool own = false;
  if (grpc::SerializationTraits<v1::AnalyzeStreamRequest>::Serialize(header, &header_bytes, &own).ok() &&
      writer->Write(header_bytes)) {
    const size_t piece = static_cast<size_t>(std::min<uint64_t>(kStreamChunk, message_limit(until) - kEnvelope));
    auto send = [&](std::string& c) {
      const size_t n = c.size();
      char prefix[11];
      size_t p = 0;
      prefix[p++] = '\x12';  // field 2 (chunk), length-delimited
      for (uint64_t v = n; ; v >>= 7) {
        prefix[p++] = static_cast<char>((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
        if (v < 0x80) break;
      }
      auto* lent = new std::string(std::move(c));  // the next piece is read into a new buffer
      grpc::Slice slices[2] = {grpc::Slice(prefix, p),
                               grpc::Slice(lent->data(), n, [](void* s) { delete static_cast<std::string*>(s); }, lent)};
      grpc::ByteBuffer message(slices, 2);
      if (!writer->Write(message)) return false;  // the server has answered already
      if (request.on_sent) request.on_sent(n);
      return true;
    };
    bool open = true;
    source.for_each_chunk(piece, [&](std::string& c) { return open = send(c); });
    if (map && open) map->for_each_chunk(piece, send);
    writer->WritesDone();
  }
  const grpc::Status status = writer->Finish();
  if (status.ok()) {
    grpc::ProtoBufferReader reader(&answer);
    if (!response.ParseFromZeroCopyStream(&reader))
      return failure(source.name(), "INTERNAL", "the server's answer to AnalyzeStream could not be parsed");
  }
  return outcome_of(source.name(), status, std::move(response));
}

bool Remote::health(std::string* status) {
  // HealthCheckRequest{service: ""} serializes to nothing, as Empty does; the
  // answer's field 1 (status) arrives as an unknown field of Empty.
  grpc::TemplatedGenericStub<google::protobuf::Empty, google::protobuf::Empty> stub(channel_);
  grpc::ClientContext ctx;
  prepare(ctx, deadline());
  google::protobuf::Empty request, response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) { done.set_value(s); });
  const grpc::Status s = done.get_future().get();
  if (!s.ok()) {
    *status = status_code_name(s.error_code()) + ": " + s.error_message();
    return false;
  }
  int value = 0;
  const auto& unknown = response.GetReflection()->GetUnknownFields(response);
  for (int i = 0; i < unknown.field_count(); ++i)
    if (unknown.field(i).number() == 1) value = static_cast<int>(unknown.field(i).varint());
  static const char* kNames[] = {"UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"};
  *status = value >= 0 && value <= 3 ? kNames[value] : "UNKNOWN";
  return true;
}

Local::Local(EngineKind kind) {
  EngineOptions options;
  options.kind = kind;
  Limits limits;
  limits.max_pixels = uint64_t{1} << 40;
  limits.max_input_bytes = UINT64_MAX;
  std::shared_ptr<Engine> engine = make_engine(options);
  std::shared_ptr<GpuJpegDecoder> gpu_jpeg;
  if (engine->takes_device_images()) gpu_jpeg = open_gpu_jpeg_decoder_on_first_use(GpuJpegOptions{});
  analyzer_ = std::make_unique<Analyzer>(engine, limits, std::move(gpu_jpeg));
}

namespace {

// A regular file mapped read-only; release(offset) gives back the pages
// before offset, which a later read faults in again from the file.
class MappedFile {
 public:
  MappedFile(const std::string& path, uint64_t size) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st {};
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) == size) {
      void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p != MAP_FAILED) {
        data_ = static_cast<const uint8_t*>(p);
        size_ = size;
      }
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (data_) munmap(const_cast<uint8_t*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // The whole pages inside [begin, end).
  void release(uint64_t begin, uint64_t end) {
    static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t from = (begin + page - 1) / page * page, to = std::min<uint64_t>(end, size_) / page * page;
    if (to > from) madvise(const_cast<uint8_t*>(data_) + from, to - from, MADV_DONTNEED);
  }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace

Outcome Local::analyze(Source& source, const Request& request) {
  try {
    const bool pixels = request.input.kind() == v1::INPUT_KIND_RAW || request.input.kind() == v1::INPUT_KIND_BYTES;
    // Raw inputs go to the engine in chunks as they are read, as the server
    // takes them: no copy of the whole file in memory, and 16 MiB held
    // (256 MiB took 2.1 s whole, 0.3 s in chunks, on 2 cores). The luminance
    // is computed on whole images only: those up to 256 MiB are read whole.
    const bool whole = stats_request_of(request.options).luminance && source.size() <= (uint64_t{256} << 20);
    if (!pixels && source.is_file() && source.size() > 0) {
      v1::AnalyzeRequest r;
      *r.mutable_input() = request.input;
      *r.mutable_options() = options_with_map(request);
      MappedFile file(source.name(), source.size());
      if (file.data()) {
        // Decoded from the file's pages in place; the streamed decoders say
        // how far they have read, and those pages go back (the page cache
        // keeps them): memory is what is in flight, not the file (as vips
        // reads it).
        return outcome_of(source.name(), grpc::Status::OK,
                          analyzer_->analyze_mapped(r, file.data(), file.size(),
                                                    [&](uint64_t begin, uint64_t end) { file.release(begin, end); }));
      }
    }
    if (!pixels || (!request.force_stream && whole)) {
      v1::AnalyzeRequest r;
      *r.mutable_input() = request.input;
      r.mutable_input()->set_data(source.read_all());
      *r.mutable_options() = options_with_map(request);
      return outcome_of(source.name(), grpc::Status::OK, analyzer_->analyze(r));
    }
    v1::StreamHeader header;
    *header.mutable_input() = request.input;
    *header.mutable_options() = options_with_map(request);
    header.set_total_bytes(source.size());
    auto upload = analyzer_->begin_upload(header);
    source.for_each_chunk(size_t{16} << 20, [&](std::string& c) {
      upload->add(c);
      return true;
    });
    return outcome_of(source.name(), grpc::Status::OK, upload->finish({}));
  } catch (const Error& e) {
    return failure(source.name(), status_code_name(static_cast<int>(e.code())), e.what());
  } catch (const std::exception& e) {
    return failure(source.name(), "INTERNAL", e.what());
  }
}

}  // namespace imgstat::client
