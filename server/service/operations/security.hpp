// Who may call: transport security (TLS, mutual TLS, plaintext only where
// asked for) and bearer tokens. Tokens are checked by gRPC's auth metadata
// processor, on the call's headers, before any byte of its body reaches a
// handler: a stranger cannot make the server buffer a message.
#pragma once

#include <grpcpp/grpcpp.h>

#include <array>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace imgstat {

struct SecurityOptions {
  std::string tls_cert;       // --tls-cert: PEM chain the server presents
  std::string tls_key;        // --tls-key: its private key
  std::string tls_client_ca;  // --tls-client-ca: PEM CAs; clients must present a certificate they signed
  unsigned tls_reload_seconds = 10;  // how often the three files are looked at for a change
  bool insecure = false;             // --insecure: plaintext on an address that is not loopback
  std::string auth_token_file;       // --auth-token-file: one token per line; empty: no token needed
};

// The tokens of --auth-token-file. A line is `TOKEN [NAME [METHOD,...]]`:
// NAME names the caller in the log (never the token itself); METHODs, when
// given, are the only ones the token may call (Analyze, AnalyzeStream,
// AnalyzeBatch, GetServerInfo, ServerReflection). Blank lines and lines
// starting with # are skipped. Only SHA-256 digests are kept.
class TokenTable {
 public:
  struct Entry {
    std::array<unsigned char, 32> digest;
    std::string name;
    std::vector<std::string> methods;  // empty: every method
  };
  // Throws imgstat::Error (kInvalidArgument) naming the file and line.
  static TokenTable load(const std::string& path);
  // The entry whose token is `presented`. Every entry is compared, in
  // constant time, whether or not one matches early.
  const Entry* find(std::string_view presented) const;
  size_t size() const { return entries_.size(); }

 private:
  std::vector<Entry> entries_;
};

// The decision for one call, from its path and headers.
class Authenticator {
 public:
  enum class Port { kService, kHealthOnly };
  struct Decision {
    grpc::StatusCode code = grpc::StatusCode::OK;
    std::string message;
    std::string caller;  // the token's name, when one was checked
  };
  // Told of every call refused here: (method, request id, decision).
  using Refused = std::function<void(const std::string& method, const std::string& request_id, const Decision&)>;

  // No file: every caller of the service port is let in.
  explicit Authenticator(std::string token_file, Refused on_refused = nullptr);
  bool enabled() const { return !token_file_.empty(); }
  // Re-reads the token file (SIGHUP); on error keeps the tokens it has and throws.
  void reload();
  size_t token_count() const;

  Decision decide(Port port, std::string_view path, std::string_view authorization) const;
  // The name of the token an authorization header carries; empty when it
  // carries none of them.
  std::string caller(std::string_view authorization) const {
    return decide(Port::kService, {}, authorization).caller;
  }
  void refused(const std::string& method, const std::string& request_id, const Decision& d) const {
    if (on_refused_) on_refused_(method, request_id, d);
  }

 private:
  const std::string token_file_;
  const Refused on_refused_;
  mutable std::mutex mu_;
  std::shared_ptr<const TokenTable> tokens_;
};

// Credentials for one listening port: TLS (mutual when a client CA is set,
// reloaded when the files change) or plaintext, with the authenticator on
// the call headers. Throws imgstat::Error when the files are unusable.
std::shared_ptr<grpc::ServerCredentials> make_server_credentials(const SecurityOptions& options, bool tls,
                                                                 std::shared_ptr<Authenticator> auth,
                                                                 Authenticator::Port port);

// Checks the options against the address: TLS files readable, the key
// matching the certificate, plaintext only on loopback or with --insecure.
// Returns the one line the log should say about transport security; throws
// imgstat::Error (kInvalidArgument) when the server must not start.
std::string check_security(const SecurityOptions& options, const std::string& listen);

// The name of a certificate's subject and its expiry, for the log.
std::string describe_certificate(const std::string& pem_path);

}  // namespace imgstat
