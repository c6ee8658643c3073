#include "service/operations/security.hpp"

#include <grpc/grpc_security.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <fstream>
#include <sstream>

#include "core/address.hpp"
#include "imgstat/error.hpp"
#include "service/operations/request_log.hpp"

namespace imgstat {
namespace {

std::array<unsigned char, 32> sha256(std::string_view text) {
  std::array<unsigned char, 32> d{};
  unsigned int n = 0;
  EVP_Digest(text.data(), text.size(), d.data(), &n, EVP_sha256(), nullptr);
  return d;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, sep))
    if (!part.empty()) out.push_back(part);
  return out;
}

const char* const kMethods[] = {"Analyze",       "AnalyzeStream", "AnalyzeBatch",    "Aggregate",
                                "GetServerInfo", "ListObjects",   "ServerReflection"};

// "/imgstat.v1.ImageStats/Analyze" -> "Analyze"; both reflection versions
// are "ServerReflection".
std::string method_of(std::string_view path) {
  const size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

bool is_health(std::string_view path) { return path.rfind("/grpc.health.v1.Health/", 0) == 0; }

std::string read_file(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCode::kInvalidArgument, std::string(flag) + " " + path + ": cannot be read");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string view(const grpc_slice& s) {
  return std::string(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(s)), GRPC_SLICE_LENGTH(s));
}

struct ProcessorState {
  std::shared_ptr<Authenticator> auth;
  Authenticator::Port port;
};

// gRPC's C processor: non-blocking, answered on the calling thread. It
// writes nothing into `context`: that is the connection's, shared by all its
// calls, some running at once (grpc/grpc#28809), so the handler names the
// caller from the call's own header (caller_of).
void process(void* state, grpc_auth_context* /*context*/, const grpc_metadata* md, size_t n,
             grpc_process_auth_metadata_done_cb done, void* user_data) {
  const auto* s = static_cast<const ProcessorState*>(state);
  std::string path, authorization, request_id;
  for (size_t i = 0; i < n; ++i) {
    const std::string key = view(md[i].key);
    if (key == ":path") path = view(md[i].value);
    else if (key == "x-request-id") request_id = view(md[i].value);
    else if (key == "authorization") authorization = view(md[i].value);
  }
  const Authenticator::Decision d = s->auth->decide(s->port, path, authorization);
  if (d.code != grpc::StatusCode::OK) {
    s->auth->refused(method_of(path), accept_request_id(request_id), d);
    done(user_data, nullptr, 0, nullptr, 0, static_cast<grpc_status_code>(d.code), d.message.c_str());
    return;
  }
  done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
}

// ServerCredentials around C-core credentials: the C++ API offers no
// processor on plaintext ports, and gRPC's C core does.
class CoreCredentials final : public grpc::ServerCredentials {
 public:
  CoreCredentials(grpc_server_credentials* creds, std::shared_ptr<Authenticator> auth, Authenticator::Port port)
      : creds_(creds) {
    // Without tokens the service port lets every call in: no processor, as a
    // processor costs every call a pass through gRPC's server auth filter.
    if (port == Authenticator::Port::kService && !auth->enabled()) return;
    auto* state = new ProcessorState{std::move(auth), port};
    grpc_server_credentials_set_auth_metadata_processor(
        creds_, {process, [](void* p) { delete static_cast<ProcessorState*>(p); }, state});
  }
  ~CoreCredentials() override { grpc_server_credentials_release(creds_); }
  void SetAuthMetadataProcessor(const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {
    fail(ErrorCode::kInternal, "imgstat's credentials carry their own processor");
  }

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    return grpc_server_add_http2_port(server, addr.c_str(), creds_);
  }
  grpc_server_credentials* creds_;
};

struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};

std::unique_ptr<X509, X509Free> first_certificate(const std::string& pem, const std::string& path, const char* flag) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  std::unique_ptr<X509, X509Free> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) fail(ErrorCode::kInvalidArgument, std::string(flag) + " " + path + ": no PEM certificate in it");
  return cert;
}

std::string one_line_name(X509_NAME* name) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  X509_NAME_print_ex(bio.get(), name, 0, XN_FLAG_ONELINE & ~ASN1_STRFLGS_ESC_MSB);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

}  // namespace

TokenTable TokenTable::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(ErrorCode::kInvalidArgument, "--auth-token-file " + path + ": cannot be read");
  TokenTable t;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::istringstream fields(line);
    std::string token, name, methods, extra;
    fields >> token >> name >> methods >> extra;
    if (token.empty() || token[0] == '#') continue;
    const std::string where = "--auth-token-file " + path + " line " + std::to_string(number);
    if (!extra.empty()) fail(ErrorCode::kInvalidArgument, where + ": more than TOKEN NAME METHODS");
    if (token.size() < 16) fail(ErrorCode::kInvalidArgument, where + ": a token needs at least 16 characters");
    Entry e{sha256(token), name.empty() ? "token" + std::to_string(t.entries_.size() + 1) : name, split(methods, ',')};
    for (const std::string& m : e.methods)
      if (std::find(std::begin(kMethods), std::end(kMethods), m) == std::end(kMethods))
        fail(ErrorCode::kInvalidArgument, where + ": unknown method " + m +
                                              " (Analyze, AnalyzeStream, AnalyzeBatch, Aggregate, GetServerInfo, ListObjects, "
                                              "ServerReflection)");
    t.entries_.push_back(std::move(e));
  }
  if (t.entries_.empty()) fail(ErrorCode::kInvalidArgument, "--auth-token-file " + path + ": no token in it");
  return t;
}

const TokenTable::Entry* TokenTable::find(std::string_view presented) const {
  // Digests have one length whatever was sent, and every entry is compared.
  const auto digest = sha256(presented);
  const Entry* found = nullptr;
  for (const Entry& e : entries_)
    if (CRYPTO_memcmp(e.digest.data(), digest.data(), digest.size()) == 0) found = &e;
  return found;
}

Authenticator::Authenticator(std::string token_file, Refused on_refused)
    : token_file_(std::move(token_file)), on_refused_(std::move(on_refused)) {
  if (enabled()) tokens_ = std::make_shared<TokenTable>(TokenTable::load(token_file_));
}

void Authenticator::reload() {
  if (!enabled()) return;
  auto fresh = std::make_shared<TokenTable>(TokenTable::load(token_file_));
  std::lock_guard<std::mutex> lock(mu_);
  tokens_ = std::move(fresh);
}

size_t Authenticator::token_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tokens_ ? tokens_->size() : 0;
}

Authenticator::Decision Authenticator::decide(Port port, std::string_view path, std::string_view authorization) const {
  using grpc::StatusCode;
  if (is_health(path)) return {};
  if (port == Port::kHealthOnly)
    return {StatusCode::PERMISSION_DENIED, "this port serves grpc.health.v1.Health only (--health-listen)", {}};
  std::shared_ptr<const TokenTable> tokens;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tokens = tokens_;
  }
  if (!tokens) return {};
  // RFC 6750: the scheme is case-insensitive.
  constexpr std::string_view kScheme = "bearer ";
  std::string scheme(authorization.substr(0, kScheme.size()));
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (authorization.empty())
    return {StatusCode::UNAUTHENTICATED, "a token is required: send metadata 'authorization: Bearer TOKEN'", {}};
  if (scheme != kScheme)
    return {StatusCode::UNAUTHENTICATED, "the authorization metadata must be 'Bearer TOKEN'", {}};
  const TokenTable::Entry* e = tokens->find(authorization.substr(kScheme.size()));
  if (!e) return {StatusCode::UNAUTHENTICATED, "the token is not valid", {}};
  std::string method = method_of(path);
  if (path.find("ServerReflection") != std::string_view::npos) method = "ServerReflection";
  if (!e->methods.empty() && std::find(e->methods.begin(), e->methods.end(), method) == e->methods.end())
    return {StatusCode::PERMISSION_DENIED, "the token of " + e->name + " may not call " + method, e->name};
  return {StatusCode::OK, {}, e->name};
}

std::shared_ptr<grpc::ServerCredentials> make_server_credentials(const SecurityOptions& o, bool tls,
                                                                 std::shared_ptr<Authenticator> auth,
                                                                 Authenticator::Port port) {
  if (!tls) return std::make_shared<CoreCredentials>(grpc_insecure_server_credentials_create(), std::move(auth), port);
  // gRPC's file watcher reloads the key, the chain and the client CAs when
  // they change, keeping what it has while they are unreadable or unmatched.
  grpc_tls_certificate_provider* provider = grpc_tls_certificate_provider_file_watcher_create(
      o.tls_key.c_str(), o.tls_cert.c_str(), o.tls_client_ca.empty() ? nullptr : o.tls_client_ca.c_str(),
      o.tls_reload_seconds);
  grpc_tls_credentials_options* options = grpc_tls_credentials_options_create();
  grpc_tls_credentials_options_set_certificate_provider(options, provider);
  grpc_tls_certificate_provider_release(provider);
  grpc_tls_credentials_options_watch_identity_key_cert_pairs(options);
  if (o.tls_client_ca.empty()) {
    grpc_tls_credentials_options_set_cert_request_type(options, GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    grpc_tls_credentials_options_watch_root_certs(options);
    grpc_tls_credentials_options_set_cert_request_type(options,
                                                       GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  grpc_server_credentials* creds = grpc_tls_server_credentials_create(options);
  if (!creds) fail(ErrorCode::kInvalidArgument, "gRPC refused the TLS options");
  return std::make_shared<CoreCredentials>(creds, std::move(auth), port);
}

std::string describe_certificate(const std::string& path) {
  const auto cert = first_certificate(read_file(path, "--tls-cert"), path, "--tls-cert");
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  ASN1_TIME_print(bio.get(), X509_get0_notAfter(cert.get()));
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return one_line_name(X509_get_subject_name(cert.get())) + ", valid until " + std::string(data, static_cast<size_t>(n));
}

std::string check_security(const SecurityOptions& o, const std::string& listen) {
  const bool tls = !o.tls_cert.empty() || !o.tls_key.empty();
  if (tls && (o.tls_cert.empty() || o.tls_key.empty()))
    fail(ErrorCode::kInvalidArgument, "TLS needs both --tls-cert and --tls-key");
  if (!o.tls_client_ca.empty() && !tls)
    fail(ErrorCode::kInvalidArgument, "--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key");
  if (tls && o.insecure) fail(ErrorCode::kInvalidArgument, "--insecure and --tls-cert contradict each other");
  if (o.tls_reload_seconds == 0) fail(ErrorCode::kInvalidArgument, "--tls-reload-interval must be at least 1 s");
  if (!tls) {
    if (is_loopback(listen)) return "plaintext on loopback " + listen;
    if (!o.insecure)
      fail(ErrorCode::kInvalidArgument,
           "refusing plaintext on " + listen +
               ", which is not a loopback address: give --tls-cert and --tls-key, or --insecure to accept it");
    return "WARNING: plaintext on " + listen +
           " (--insecure): images, results and tokens cross the network unencrypted and unauthenticated";
  }
  const std::string pem = read_file(o.tls_cert, "--tls-cert");
  const std::string key_pem = read_file(o.tls_key, "--tls-key");
  const auto cert = first_certificate(pem, o.tls_cert, "--tls-cert");
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
  std::unique_ptr<EVP_PKEY, KeyFree> key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!key) fail(ErrorCode::kInvalidArgument, "--tls-key " + o.tls_key + ": no PEM private key in it (or encrypted)");
  if (X509_check_private_key(cert.get(), key.get()) != 1)
    fail(ErrorCode::kInvalidArgument, "--tls-key " + o.tls_key + " does not match the certificate in " + o.tls_cert);
  std::string line = "TLS on " + listen + ": " + describe_certificate(o.tls_cert);
  if (!o.tls_client_ca.empty()) {
    first_certificate(read_file(o.tls_client_ca, "--tls-client-ca"), o.tls_client_ca, "--tls-client-ca");
    line += "; client certificates required, signed by " + o.tls_client_ca;
  }
  return line + "; files re-read when they change (every " + std::to_string(o.tls_reload_seconds) + " s)";
}

}  // namespace imgstat
