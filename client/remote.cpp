#include "calls.hpp"
#include "call_support.hpp"

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
#include "shards.hpp"

namespace imgstat::client {
namespace {

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
    // A server that fetches waits on its store, not its threads: one call more for each fetch it runs at once.
    calls += info.limits().fetch_threads();
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
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool registered = register_descriptor(socket, fd, 0, 0, path, until, region);
  close(fd);  // the server holds its own
  return registered;
}

bool Remote::register_descriptor(RegionSocketClient& socket, int fd, uint64_t offset, uint64_t size,
                                 const std::string& name, std::chrono::system_clock::time_point until,
                                 v1::Region* region, bool pageable) {
  // The file itself: the server reads it (it maps only sealed memfds), no copy here.
  std::string ticket;
  try {
    ticket = socket.pass(fd);
  } catch (const std::exception&) {
    return false;
  }
  v1::RegisterRegionRequest r;
  r.set_ticket(ticket);
  r.set_offset(offset);
  r.set_size(size);
  r.set_name(name);
  r.set_pageable(pageable);
  grpc::ClientContext ctx;
  prepare(ctx, until);
  return stub_->RegisterRegion(&ctx, r, region).ok();
}

namespace {
// A file, or a plain tar's member, of 1 MiB or more goes to a server on
// this host in a region: the server reads it where it lies (a member's
// bytes in its archive). So does a tar of several files, made in shared
// memory, up to a quarter of this host's memory (past that it streams, and
// the server spools it to disk).
bool in_region(const Source& source) {
  if (source.descriptor() >= 0) return source.size() >= kRegionMinBytes;  // a file, a plain tar's member
  if (!source.is_tar()) return false;
  static const uint64_t memory = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return source.size() >= kRegionMinBytes && source.size() <= memory / 4;
}
}  // namespace

bool Remote::register_tar(RegionSocketClient& socket, const Source& source, std::chrono::system_clock::time_point until,
                          v1::Region* region) {
  // Made where the server maps it: a memfd, written by the threads reading
  // the files, then sealed against shrinking (the server maps only that).
  const int fd = memfd_create("imgstat-tar", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return false;
  struct Close {
    int fd;
    ~Close() { close(fd); }
  } close_fd{fd};
  if (ftruncate(fd, static_cast<off_t>(source.size())) != 0) return false;
  void* p = mmap(nullptr, source.size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return false;
  try {
    source.read_into(static_cast<char*>(p));
  } catch (...) {
    munmap(p, source.size());
    throw;
  }
  munmap(p, source.size());
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) return false;
  std::string ticket;
  try {
    ticket = socket.pass(fd);
  } catch (const std::exception&) {
    return false;
  }
  v1::RegisterRegionRequest r;
  r.set_ticket(ticket);
  r.set_name(source.name());
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
  if (!(source.is_tar() ? register_tar(*socket, source, until, &region)
                        : register_descriptor(*socket, source.descriptor(), source.offset_in_file(), source.size(),
                                              source.name(), until, &region)))
    return false;
  v1::AnalyzeRequest r;
  *r.mutable_input() = request.input;
  r.mutable_input()->mutable_region()->set_region_id(region.region_id());
  // A large mask or label image goes the same way; a small one in the message.
  std::vector<std::string> regions = {region.region_id()};
  if (map_size(request) >= kRegionMinBytes) {
    *r.mutable_options() = request.options;
    std::string map_region;
    const Source map(request.map_file);
    v1::Region tar_region;
    const bool registered = map.is_tar() ? register_tar(*socket, map, until, &tar_region)
                                         : register_file(*socket, request.map_file, until, &map_region);
    if (map.is_tar()) map_region = tar_region.region_id();
    if (!registered) {
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
  const bool whole = bytes <= kStreamChunk || (pixels && needs_whole_image(stats_request_of(request.options)));
  return !request.force_stream && whole && bytes + kEnvelope <= message_limit(until);
}


bool Remote::unreachable_now() {
  // The channel says whether a server came back (a reconnect succeeded).
  return unreachable_ && channel_->GetState(true) != GRPC_CHANNEL_READY;
}


void Remote::start(Source& source, const Request& request, std::function<void(Outcome)> done) {
  if (unreachable_now()) {
    done(failure(source.name(), "UNAVAILABLE", kUnreachable));
    return;
  }
  const auto until = deadline();
  const bool region = use_regions_ && in_region(source);
  if (region || !in_one_message(source, request, until)) {
    done(analyze(source, request));
    return;
  }
  send_in_one_message(source.name(), request, until, std::move(done),
                      [&](v1::Input& input) { input.set_data(source.read_all()); });
}

void Remote::send_in_one_message(const std::string& name, const Request& request,
                                 std::chrono::system_clock::time_point until, std::function<void(Outcome)> done,
                                 const std::function<void(v1::Input&)>& fill) {
  v1::AnalyzeRequest* r = nullptr;
  std::shared_ptr<BatchItem> item;
  std::shared_ptr<UnaryCall> call;
  if (batch_ && !batch_refused_) {  // on a lane's AnalyzeBatch stream
    item = std::make_shared<BatchItem>();
    item->file = name;
    item->until = until;
    item->done = std::move(done);
    item->request.set_id(std::to_string(next_item_++));
    r = item->request.mutable_request();
  } else {
    call = std::make_shared<UnaryCall>(this);
    call->file = name;
    call->until = until;
    call->done = std::move(done);
    r = &call->request;
  }
  *r->mutable_input() = request.input;
  *r->mutable_options() = options_with_map(request);
  fill(*r->mutable_input());
  if (item)
    send_on_lane(std::move(item));
  else
    call_unary(std::move(call));
}

bool Remote::fetches(const std::string& name) {
  // A member of a shard in a bucket is no object of its own: a server that
  // reads ranges reads an uncompressed tar's members there, else this client.
  MemberRange range;
  const bool member = is_shard_member(name);
  if (!is_object_name(name) || (member && !member_range(name, &range))) return false;
  v1::ServerInfo info;
  if (!server_info(deadline(), &info) || info.fetch_allow().empty() || (member && !info.fetch_ranges())) return false;
  return covered(info, member ? range.url : name);
}

bool Remote::covered(const v1::ServerInfo& info, const std::string& name) {
  std::lock_guard<std::mutex> lock(info_mu_);
  if (!fetch_rules_) {
    try {
      fetch_rules_ = std::make_unique<FetchRules>(std::vector<std::string>(info.fetch_allow().begin(), info.fetch_allow().end()));
    } catch (const std::exception&) {
      fetch_rules_ = std::make_unique<FetchRules>();  // rules this client cannot read: it fetches for itself
    }
  }
  return fetch_rules_->match(name) != nullptr;
}

std::optional<std::vector<std::string>> Remote::list_on_server(const std::string& prefix) {
  v1::ServerInfo info;
  if (!server_info(deadline(), &info) || info.fetch_allow().empty() || !covered(info, prefix)) return std::nullopt;
  grpc::ClientContext ctx;
  prepare(ctx, deadline());
  v1::ListObjectsRequest request;
  request.set_prefix(prefix);
  std::unique_ptr<grpc::ClientReader<v1::ListObjectsResponse>> reader = stub_->ListObjects(&ctx, request);
  v1::ListObjectsResponse page;
  std::vector<std::string> names;
  std::string stray;
  while (reader->Read(&page)) {
    for (const v1::ListedObject& o : page.objects()) {
      // A server's answer is checked as a store's is: only names under the
      // prefix asked for, and no more than a listing may hold.
      if (o.name().size() < 5 || o.name().compare(5, prefix.size() - 5, prefix, 5) != 0) {  // past "s3://", any case
        if (stray.empty()) stray = o.name().substr(0, 200);
        continue;
      }
      if (names.size() >= object_limits().max_listed_objects) {
        ctx.TryCancel();
        (void)reader->Finish();
        throw InputError("RESOURCE_EXHAUSTED", "more than " + std::to_string(object_limits().max_listed_objects) +
                                                   " objects under " + prefix);
      }
      names.push_back(o.name());
    }
  }
  const grpc::Status status = reader->Finish();
  if (!status.ok()) throw InputError(status_code_name(status.error_code()), status.error_message());
  if (!stray.empty()) throw InputError("INTERNAL", "the server listed " + stray + ", which is not under " + prefix);
  return names;
}

void Remote::start_fetch(const std::string& name, const Request& request, std::function<void(Outcome)> done) {
  if (unreachable_now()) {
    done(failure(name, "UNAVAILABLE", kUnreachable));
    return;
  }
  MemberRange range;
  if (!member_range(name, &range)) {
    send_in_one_message(name, request, deadline(), std::move(done), [&](v1::Input& input) { input.set_url(name); });
    return;
  }
  send_in_one_message(name, request, deadline(), std::move(done), [&](v1::Input& input) {
    input.set_url(range.url);
    v1::ObjectRange* r = input.mutable_url_range();
    r->set_offset(range.offset);
    r->set_length(range.length);
    r->set_object_size(range.object_size);
    r->set_etag(range.etag);
  });
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

void Remote::unary_started() {
  std::lock_guard<std::mutex> lock(unary_mu_);
  ++unary_alive_;
}

void Remote::unary_ended() {
  std::lock_guard<std::mutex> lock(unary_mu_);
  if (--unary_alive_ == 0) unary_cv_.notify_all();
}

Remote::~Remote() {
  close_lanes();
  {
    std::lock_guard<std::mutex> lock(later_mu_);
    later_stop_ = true;
  }
  later_cv_.notify_one();
  if (later_thread_.joinable()) later_thread_.join();
  // A call's done() has run, but its context may still be going on gRPC's
  // thread: a channel (or gRPC) gone before it aborted the client
  // (ref_counted.h "prior > 0", about one run in five of
  // Lanes.SmallFilesRide... with --no-batch).
  std::unique_lock<std::mutex> lock(unary_mu_);
  unary_cv_.wait(lock, [&] { return unary_alive_ == 0; });
}

Outcome Remote::analyze_once(Source& source, const Request& request, std::chrono::system_clock::time_point until) {
  v1::AnalyzeResponse response;
  grpc::ClientContext ctx;
  prepare(ctx, until);
  if (use_regions_ && in_region(source)) {
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
    try {
      source.for_each_chunk(piece, [&](std::string& c) { return open = send(c); });
      if (map && open) map->for_each_chunk(piece, send);
    } catch (...) {
      // Not readable to its end (an object cut or replaced past every
      // retry): the call is cancelled, the server drops what came, and the
      // read's failure is the answer.
      ctx.TryCancel();
      writer->Finish();
      throw;
    }
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


}  // namespace imgstat::client
