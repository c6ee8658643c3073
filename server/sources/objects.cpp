#include "sources/objects.hpp"

#include <arpa/inet.h>
#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

namespace imgstat {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool starts_with_ci(const std::string& s, const char* prefix) {
  const size_t n = std::strlen(prefix);
  return s.size() >= n && lower(s.substr(0, n)) == prefix;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// One section of an AWS INI file: key = value lines.
std::map<std::string, std::string> ini_section(const std::string& path, const std::string& section) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      inside = trim(line.substr(1, line.size() - 2)) == section;
      continue;
    }
    const size_t eq = line.find('=');
    if (inside && eq != std::string::npos) out[lower(trim(line.substr(0, eq)))] = trim(line.substr(eq + 1));
  }
  return out;
}

// RFC 3986 unreserved characters kept, the rest %XX, as Signature V4 wants
// them ('/' kept in a key's path).
std::string uri_encode(const std::string& s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

struct S3Name {
  std::string bucket;
  std::string key;
};

S3Name split_s3(const std::string& name) {
  const std::string rest = name.substr(5);
  const size_t slash = rest.find('/');
  S3Name n{rest.substr(0, slash), slash == std::string::npos ? "" : rest.substr(slash + 1)};
  if (n.bucket.empty()) throw InputError("INVALID_ARGUMENT", name + ": no bucket named (s3://BUCKET/KEY)");
  return n;
}

// Where a request for bucket (and key, or a query on the bucket) goes.
std::string s3_url(const ObjectSettings& s, const std::string& bucket, const std::string& path_and_query) {
  if (!s.endpoint.empty()) {
    std::string e = s.endpoint;
    while (!e.empty() && e.back() == '/') e.pop_back();
    return e + "/" + uri_encode(bucket, false) + "/" + path_and_query;
  }
  return "https://" + bucket + ".s3." + s.region + ".amazonaws.com/" + path_and_query;
}

bool contains_ci(const std::string& s, const char* what) { return lower(s).find(what) != std::string::npos; }

// An http(s) URL as it is requested: "scheme://host:port/path?query", its
// dot segments resolved and its host in lower case; "" for one that is none
// or that hides a path in escapes, a backslash or user information.
std::string canonical_http(const std::string& url, bool* host_is_address = nullptr) {
  const size_t path_at = url.find('/', url.find("://") + 3);
  const std::string path = path_at == std::string::npos ? "" : url.substr(path_at);
  if (contains_ci(path, "%2e") || contains_ci(path, "%2f") || contains_ci(path, "%5c") || url.find('\\') != std::string::npos)
    return "";
  CURLU* u = curl_url();
  if (!u) return "";
  std::string out;
  char* part = nullptr;
  auto get = [&](CURLUPart what, unsigned flags) {
    std::string v;
    if (curl_url_get(u, what, &part, flags) == CURLUE_OK && part) v = part;
    curl_free(part);
    part = nullptr;
    return v;
  };
  if (curl_url_set(u, CURLUPART_URL, url.c_str(), 0) == CURLUE_OK && get(CURLUPART_USER, 0).empty()) {
    const std::string scheme = lower(get(CURLUPART_SCHEME, 0)), host = lower(get(CURLUPART_HOST, 0));
    if ((scheme == "http" || scheme == "https") && !host.empty()) {
      const std::string query = get(CURLUPART_QUERY, 0);
      out = scheme + "://" + host + ":" + get(CURLUPART_PORT, CURLU_DEFAULT_PORT) + get(CURLUPART_PATH, 0) +
            (query.empty() ? "" : "?" + query);
      if (host_is_address) {
        unsigned char buf[16];
        *host_is_address = host.front() == '[' || inet_pton(AF_INET, host.c_str(), buf) == 1;
      }
    }
  }
  curl_url_cleanup(u);
  return out;
}

std::string request_url(const std::string& name) {
  if (!starts_with_ci(name, "s3://")) {
    const std::string url = canonical_http(name);
    if (url.empty()) throw InputError("INVALID_ARGUMENT", name + ": not a URL that can be requested");
    return url;
  }
  const S3Name n = split_s3(name);
  if (n.key.empty()) throw InputError("INVALID_ARGUMENT", name + ": no key named (s3://BUCKET/KEY)");
  return s3_url(object_settings(), n.bucket, uri_encode(n.key, true));
}

// Reused easy handles: each keeps its connections (and TLS sessions) for
// the next request, so a dataset of small objects is not a handshake each.
class HandlePool {
 public:
  CURL* take() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        CURL* h = free_.back();
        free_.pop_back();
        return h;
      }
    }
    CURL* h = curl_easy_init();
    if (!h) throw InputError("RESOURCE_EXHAUSTED", "libcurl: cannot make a handle");
    return h;
  }
  void give(CURL* h) {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.size() < 64) return free_.push_back(h);
    curl_easy_cleanup(h);
  }

 private:
  std::mutex mu_;
  std::vector<CURL*> free_;
};

HandlePool& pool() {
  static HandlePool* p = [] {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return new HandlePool;  // never freed: handles may be in use as the process exits
  }();
  return *p;
}

struct Handle {
  CURL* h = pool().take();
  ~Handle() { pool().give(h); }
};

// What one request got.
struct Reply {
  CURLcode curl = CURLE_OK;
  long status = 0;
  std::string etag;
  bool has_content_range = false;
  uint64_t range_first = 0, total = 0;  // Content-Range: bytes FIRST-LAST/TOTAL (or */TOTAL)
  int64_t content_length = -1;
  uint64_t received = 0;  // body bytes written to the sink
  std::string error_body;  // a non-2xx answer's body (S3's error XML), at most 4 KiB
  bool overflow = false;   // more body than the sink holds
  std::string curl_error;
  std::string location;  // a redirect's target (a server's fetch follows it itself)
};

struct Transfer {
  Reply* reply;
  char* out;          // where the body goes (null: into *text)
  size_t capacity;    // bytes out holds
  std::string* text;  // a listing's body
  size_t text_limit;
};

size_t on_header(char* data, size_t size, size_t n, void* p) {
  auto* t = static_cast<Transfer*>(p);
  const size_t bytes = size * n;
  std::string line(data, bytes);
  const size_t colon = line.find(':');
  if (line.rfind("HTTP/", 0) == 0) {  // a new answer (after a redirect or 100): forget the last one's headers
    t->reply->etag.clear();
    t->reply->has_content_range = false;
    t->reply->content_length = -1;
    return bytes;
  }
  if (colon == std::string::npos) return bytes;
  const std::string key = lower(trim(line.substr(0, colon)));
  const std::string value = trim(line.substr(colon + 1));
  if (key == "etag") {
    t->reply->etag = value;
  } else if (key == "content-length") {
    t->reply->content_length = std::strtoll(value.c_str(), nullptr, 10);
  } else if (key == "content-range") {
    // bytes FIRST-LAST/TOTAL, or bytes */TOTAL
    unsigned long long first = 0, last = 0, total = 0;
    if (std::sscanf(value.c_str(), "bytes %llu-%llu/%llu", &first, &last, &total) == 3) {
      t->reply->has_content_range = true;
      t->reply->range_first = first;
      t->reply->total = total;
    } else if (std::sscanf(value.c_str(), "bytes */%llu", &total) == 1) {
      t->reply->has_content_range = true;
      t->reply->range_first = 0;
      t->reply->total = total;
    }
  }
  return bytes;
}

size_t on_body(char* data, size_t size, size_t n, void* p) {
  auto* t = static_cast<Transfer*>(p);
  const size_t bytes = size * n;
  Reply& r = *t->reply;
  if (t->text) {
    if (t->text->size() + bytes > t->text_limit) {
      r.overflow = true;
      return 0;
    }
    t->text->append(data, bytes);
    r.received += bytes;
    return bytes;
  }
  if (r.received + bytes > t->capacity) {
    r.overflow = true;
    return 0;  // aborts the transfer: never more than was asked for
  }
  std::memcpy(t->out + r.received, data, bytes);
  r.received += bytes;
  return bytes;
}

// One request. body: the sink for a 2xx answer; the body of any other
// answer is kept (4 KiB) to say why.
Reply perform_once(const std::string& name, const std::string& url, bool head, const std::string& range,
                   const std::string& if_match, char* out, size_t capacity, std::string* text, size_t text_limit,
                   const FetchRules* rules) {
  const ObjectSettings& s = object_settings();
  const ObjectLimits& l = object_limits();
  Handle handle;
  CURL* h = handle.h;
  curl_easy_reset(h);
  Reply reply;
  std::string error_text;
  // A 2xx body goes to the sink; anything else into error_text (bounded).
  struct Sink {
    Transfer ok;
    Transfer bad;
    CURL* h;
  } sink{{&reply, out, capacity, text, text_limit}, {&reply, nullptr, 0, &error_text, 4096}, h};
  auto body = +[](char* data, size_t size, size_t n, void* p) -> size_t {
    auto* k = static_cast<Sink*>(p);
    long status = 0;
    curl_easy_getinfo(k->h, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 200 && status < 300) return on_body(data, size, n, &k->ok);
    const size_t bytes = size * n;
    std::string& t = *k->bad.text;
    t.append(data, std::min(bytes, 4096 - std::min<size_t>(4096, t.size())));
    return bytes;
  };
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_2TLS));
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, l.connect_timeout_s);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, l.stall_s);
  curl_easy_setopt(h, CURLOPT_USERAGENT, "imgstat");
  if (!s.ca_bundle.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, s.ca_bundle.c_str());
  const bool s3 = starts_with_ci(name, "s3://");
  // A key is sent as it is ("a/../b" is a key of its own, not "b").
  if (s3) curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
  if (!s3 && !rules) {
    // An https:// name may redirect (a CDN, a signed URL); an S3 request is
    // signed for its host and may not; a server's fetch follows redirects
    // itself, each checked against its rules (perform).
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  }
  // A server's fetch of an https:// name reaches only public addresses,
  // checked on the connection itself (a name that resolves anew each time
  // cannot slip past), unless its rule names the host by address.
  struct Where {
    bool check = false;
    std::string refused;
  } where;
  where.check = rules && !s3 && !rules->any_address(name);
  if (where.check) {
    curl_easy_setopt(h, CURLOPT_PREREQDATA, &where);
    curl_easy_setopt(h, CURLOPT_PREREQFUNCTION, +[](void* p, char* ip, char*, int, int) -> int {
      auto* w = static_cast<Where*>(p);
      if (!is_internal_address(ip)) return CURL_PREREQFUNC_OK;
      w->refused = ip;
      return CURL_PREREQFUNC_ABORT;
    });
  }
  curl_slist* headers = nullptr;
  std::string userpwd, sigv4;
  if (s3 && !s.access_key.empty()) {
    sigv4 = "aws:amz:" + s.region + ":s3";
    userpwd = s.access_key + ":" + s.secret_key;
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4.c_str());
    curl_easy_setopt(h, CURLOPT_USERPWD, userpwd.c_str());
    // S3 wants the payload's hash named; a GET's is the empty body's (libcurl signs with it too).
    headers = curl_slist_append(headers, "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    if (!s.session_token.empty()) headers = curl_slist_append(headers, ("x-amz-security-token: " + s.session_token).c_str());
  }
  if (!if_match.empty()) headers = curl_slist_append(headers, ("If-Match: " + if_match).c_str());
  // The bytes as stored: no content coding.
  headers = curl_slist_append(headers, "Accept-Encoding: identity");
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  if (!range.empty()) curl_easy_setopt(h, CURLOPT_RANGE, range.c_str());
  if (head) curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  Transfer header_sink{&reply, nullptr, 0, nullptr, 0};
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &header_sink);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
  reply.curl = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &reply.status);
  if (!where.refused.empty())
    throw InputError("PERMISSION_DENIED", name + ": its host is at " + where.refused +
                                              ", an internal address, and no --fetch-allow rule names it by address");
  char* location = nullptr;
  if (reply.status >= 300 && reply.status < 400 && curl_easy_getinfo(h, CURLINFO_REDIRECT_URL, &location) == CURLE_OK && location)
    reply.location = location;
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, nullptr);
  curl_slist_free_all(headers);
  reply.curl_error = errbuf[0] ? errbuf : curl_easy_strerror(reply.curl);
  reply.error_body = std::move(error_text);
  return reply;
}

// One request, its redirects followed: by libcurl for a client; for a
// server's fetch, each target checked against its rules first.
Reply perform(const std::string& name, const std::string& url, bool head, const std::string& range,
              const std::string& if_match, char* out, size_t capacity, std::string* text, size_t text_limit,
              const FetchRules* rules = nullptr) {
  std::string at = url;
  for (int hops = 0;; ++hops) {
    Reply r = perform_once(name, at, head, range, if_match, out, capacity, text, text_limit, rules);
    if (!rules || r.location.empty()) return r;
    if (!rules->match(r.location))
      throw InputError("PERMISSION_DENIED", name + ": redirected to " + r.location + ", which no --fetch-allow rule allows");
    if (hops == 5) throw InputError("FAILED_PRECONDITION", name + ": more than 5 redirects");
    at = canonical_http(r.location);
  }
}

// S3's <Code> and <Message>, where an error's body has them.
std::string s3_reason(const std::string& body) {
  auto tag = [&](const char* name) {
    const std::string open = std::string("<") + name + ">", close = std::string("</") + name + ">";
    const size_t a = body.find(open);
    if (a == std::string::npos) return std::string();
    const size_t b = body.find(close, a);
    return b == std::string::npos ? std::string() : body.substr(a + open.size(), b - a - open.size());
  };
  const std::string code = tag("Code"), message = tag("Message");
  if (code.empty()) return "";
  return " (" + code + (message.empty() ? "" : ": " + message) + ")";
}

bool retryable_status(long status) { return status == 408 || status == 429 || status >= 500; }

// A transport failure worth trying again (a cut, a reset, a timeout), not
// one of ours (the sink full) or one that stays (a bad certificate, a bad URL).
bool retryable_curl(CURLcode c) {
  switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_AGAIN:
      return true;
    default:
      return false;
  }
}

std::string code_for_status(long status) {
  if (status == 404) return "NOT_FOUND";
  if (status == 401 || status == 403) return "PERMISSION_DENIED";
  if (status == 412) return "DATA_LOSS";
  if (retryable_status(status)) return "UNAVAILABLE";
  return "FAILED_PRECONDITION";
}

void back_off(int attempt) {
  const ObjectLimits& l = object_limits();
  const int cap = std::min(l.max_backoff_ms, l.first_backoff_ms << std::min(attempt, 16));
  thread_local std::mt19937 random(std::random_device{}());
  // Full jitter: callers that failed together do not come back together.
  std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(cap / 2, cap)(random)));
}

[[noreturn]] void fail_status(const std::string& name, const Reply& r) {
  if (r.status == 412)
    throw InputError("DATA_LOSS", name + ": the object changed while it was read (its ETag is no longer the one first read)");
  throw InputError(code_for_status(r.status),
                    name + ": HTTP " + std::to_string(r.status) + s3_reason(r.error_body));
}

[[noreturn]] void fail_transport(const std::string& name, const Reply& r, int attempts) {
  throw InputError(retryable_curl(r.curl) ? "UNAVAILABLE" : "FAILED_PRECONDITION",
                    name + ": " + r.curl_error + (retryable_curl(r.curl) ? " (after " + std::to_string(attempts) + " tries)" : ""));
}

void check_etag(const std::string& name, const std::string& pinned, const Reply& r) {
  if (!pinned.empty() && !r.etag.empty() && r.etag != pinned)
    throw InputError("DATA_LOSS", name + ": the object changed while it was read (ETag " + pinned + ", now " + r.etag + ")");
}

// Reads [at, at + n) into out: a range (or the whole object) per request,
// resumed from the first byte not yet received when a request fails.
void read_range(const ObjectInfo& o, uint64_t at, char* out, size_t n, bool whole_allowed) {
  const std::string url = request_url(o.name);
  const ObjectLimits& l = object_limits();
  size_t done = 0;
  int attempt = 0;
  while (done < n) {
    const uint64_t from = at + done;
    const std::string range = std::to_string(from) + "-" + std::to_string(at + n - 1);
    const Reply r = perform(o.name, url, false, range, o.etag, out + done, n - done, nullptr, 0, o.rules);
    const bool answered = r.status >= 200 && r.status < 300;
    if (answered) {
      check_etag(o.name, o.etag, r);
      if (r.status == 200) {
        // A server that ignores ranges answers with the whole object: usable
        // only where that is what was asked for.
        if (!(whole_allowed && from == 0 && n == o.size))
          throw InputError("FAILED_PRECONDITION", o.name + ": the server answers no ranged requests");
      } else if (!r.has_content_range || r.range_first != from || r.total != o.size) {
        throw InputError("DATA_LOSS", o.name + ": the server answered another range than asked for (the object changed?)");
      }
      if (r.overflow) throw InputError("DATA_LOSS", o.name + ": the server sent more bytes than the object has");
    }
    const size_t before = done;
    if (answered) done += static_cast<size_t>(r.received);
    if (done == n) return;
    if (answered && r.curl == CURLE_OK)
      throw InputError("DATA_LOSS", o.name + ": shorter than the " + std::to_string(o.size) + " bytes it had");
    if (!answered && r.status != 0 && !retryable_status(r.status)) fail_status(o.name, r);
    if (r.status == 0 && !retryable_curl(r.curl)) fail_transport(o.name, r, attempt + 1);
    if (done > before) attempt = 0;  // progress: a cut, resumed from here
    if (++attempt >= l.attempts) {
      if (r.status != 0 && !answered) fail_status(o.name, r);
      fail_transport(o.name, r, attempt);
    }
    back_off(attempt - 1);
  }
}

// XML text as it was before escaping.
std::string xml_unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    const size_t semi = s.find(';', i);
    if (semi == std::string::npos) throw InputError("FAILED_PRECONDITION", "a listing that is no XML (an '&' never closed)");
    const std::string ent = s.substr(i + 1, semi - i - 1);
    if (ent == "amp") out += '&';
    else if (ent == "lt") out += '<';
    else if (ent == "gt") out += '>';
    else if (ent == "quot") out += '"';
    else if (ent == "apos") out += '\'';
    else if (ent.size() > 1 && ent[0] == '#') {
      const unsigned long c = ent[1] == 'x' ? std::strtoul(ent.c_str() + 2, nullptr, 16) : std::strtoul(ent.c_str() + 1, nullptr, 10);
      if (c == 0 || c > 0x10FFFF) throw InputError("FAILED_PRECONDITION", "a listing that is no XML (character &" + ent + ";)");
      // UTF-8
      if (c < 0x80) out += static_cast<char>(c);
      else if (c < 0x800) out += static_cast<char>(0xC0 | (c >> 6)), out += static_cast<char>(0x80 | (c & 0x3F));
      else if (c < 0x10000)
        out += static_cast<char>(0xE0 | (c >> 12)), out += static_cast<char>(0x80 | ((c >> 6) & 0x3F)),
            out += static_cast<char>(0x80 | (c & 0x3F));
      else
        out += static_cast<char>(0xF0 | (c >> 18)), out += static_cast<char>(0x80 | ((c >> 12) & 0x3F)),
            out += static_cast<char>(0x80 | ((c >> 6) & 0x3F)), out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      throw InputError("FAILED_PRECONDITION", "a listing that is no XML (entity &" + ent + ";)");
    }
    i = semi;
  }
  return out;
}

// The text of <tag>...</tag> in [from, to) of xml, from *at on; "" and npos when absent.
std::string element(const std::string& xml, const char* tag, size_t from, size_t to, size_t* end = nullptr) {
  const std::string open = std::string("<") + tag + ">", close = std::string("</") + tag + ">";
  const size_t a = xml.find(open, from);
  if (a == std::string::npos || a >= to) {
    if (end) *end = std::string::npos;
    return "";
  }
  const size_t b = xml.find(close, a + open.size());
  if (b == std::string::npos || b > to) throw InputError("FAILED_PRECONDITION", std::string("a listing that is no XML (<") + tag + "> never closed)");
  if (end) *end = b + close.size();
  return xml.substr(a + open.size(), b - a - open.size());
}

}  // namespace

bool is_internal_address(const std::string& ip) {
  unsigned char a[16];
  if (inet_pton(AF_INET, ip.c_str(), a) == 1) {
    const uint32_t v = uint32_t{a[0]} << 24 | uint32_t{a[1]} << 16 | uint32_t{a[2]} << 8 | a[3];
    auto in = [&](uint32_t net, int bits) { return (v >> (32 - bits)) == (net >> (32 - bits)); };
    return in(0x00000000, 8) || in(0x0A000000, 8) || in(0x64400000, 10) || in(0x7F000000, 8) || in(0xA9FE0000, 16) ||
           in(0xAC100000, 12) || in(0xC0000000, 24) || in(0xC0A80000, 16) || in(0xC6120000, 15) || in(0xE0000000, 4) ||
           in(0xF0000000, 4);
  }
  if (inet_pton(AF_INET6, ip.c_str(), a) != 1) return true;  // not an address at all: refused
  static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(a, mapped, 12) == 0)
    return is_internal_address(std::to_string(a[12]) + "." + std::to_string(a[13]) + "." + std::to_string(a[14]) + "." +
                               std::to_string(a[15]));
  static const unsigned char zero[16] = {0};
  const bool unspecified = std::memcmp(a, zero, 16) == 0;
  const bool loopback = std::memcmp(a, zero, 15) == 0 && a[15] == 1;
  return unspecified || loopback || (a[0] == 0xfe && (a[1] & 0xc0) == 0x80) || (a[0] & 0xfe) == 0xfc || a[0] == 0xff ||
         (a[0] == 0x20 && a[1] == 0x01 && a[2] == 0x0d && a[3] == 0xb8) || (a[0] == 0x00 && std::memcmp(a, zero, 10) == 0);
}

FetchRules::FetchRules(const std::vector<std::string>& prefixes) {
  for (const std::string& given : prefixes) {
    const std::string p = trim(given);
    if (p.empty()) continue;
    Rule r;
    if (starts_with_ci(p, "s3://")) {
      const S3Name n = split_s3(p);
      r.prefix = "s3://" + n.bucket + "/" + n.key;
    } else if (starts_with_ci(p, "https://") || starts_with_ci(p, "http://")) {
      r.prefix = canonical_http(p, &r.by_address);
      if (r.prefix.empty()) throw std::invalid_argument("--fetch-allow: " + p + " is not a URL prefix");
    } else {
      throw std::invalid_argument("--fetch-allow: " + p + " is not an https://, http:// or s3:// prefix");
    }
    rules_.push_back(std::move(r));
    prefixes_.push_back(p);
  }
}

const std::string* FetchRules::match(const std::string& name) const {
  std::string compared;
  if (starts_with_ci(name, "s3://")) {
    const size_t slash = name.find('/', 5);
    if (slash == std::string::npos) return nullptr;
    compared = "s3://" + name.substr(5);
  } else if (starts_with_ci(name, "https://") || starts_with_ci(name, "http://")) {
    compared = canonical_http(name);
    if (compared.empty()) return nullptr;
  } else {
    return nullptr;
  }
  for (size_t i = 0; i < rules_.size(); ++i)
    if (compared.compare(0, rules_[i].prefix.size(), rules_[i].prefix) == 0) return &prefixes_[i];
  return nullptr;
}

bool FetchRules::any_address(const std::string& name) const {
  const std::string* rule = match(name);
  if (!rule) return false;
  return rules_[static_cast<size_t>(rule - prefixes_.data())].by_address;
}

bool is_object_name(const std::string& name) {
  return starts_with_ci(name, "https://") || starts_with_ci(name, "http://") || starts_with_ci(name, "s3://");
}

ObjectSettings ObjectSettings::from_environment() {
  ObjectSettings s;
  if (!env("AWS_PROFILE").empty()) s.profile = env("AWS_PROFILE");
  const std::string home = env("HOME");
  std::string credentials = env("AWS_SHARED_CREDENTIALS_FILE"), config = env("AWS_CONFIG_FILE");
  if (credentials.empty() && !home.empty()) credentials = home + "/.aws/credentials";
  if (config.empty() && !home.empty()) config = home + "/.aws/config";
  auto from_config = ini_section(config, s.profile == "default" ? "default" : "profile " + s.profile);
  auto from_credentials = ini_section(credentials, s.profile);
  // Keys from the environment, else the profile's (credentials file first), all three from one place.
  auto file = [&](const char* key) {
    if (from_credentials.count(key)) return from_credentials[key];
    return from_config.count(key) ? from_config[key] : std::string();
  };
  if (!env("AWS_ACCESS_KEY_ID").empty()) {
    s.access_key = env("AWS_ACCESS_KEY_ID");
    s.secret_key = env("AWS_SECRET_ACCESS_KEY");
    s.session_token = env("AWS_SESSION_TOKEN");
  } else {
    s.access_key = file("aws_access_key_id");
    s.secret_key = file("aws_secret_access_key");
    s.session_token = file("aws_session_token");
  }
  std::string region = env("AWS_REGION");
  if (region.empty()) region = env("AWS_DEFAULT_REGION");
  if (region.empty() && from_config.count("region")) region = from_config["region"];
  if (!region.empty()) s.region = region;
  s.endpoint = env("AWS_ENDPOINT_URL_S3");
  if (s.endpoint.empty()) s.endpoint = env("AWS_ENDPOINT_URL");
  if (s.endpoint.empty() && from_config.count("endpoint_url")) s.endpoint = from_config["endpoint_url"];
  s.ca_bundle = env("AWS_CA_BUNDLE");
  if (s.ca_bundle.empty()) s.ca_bundle = env("CURL_CA_BUNDLE");
  return s;
}

const ObjectSettings& object_settings() {
  static const ObjectSettings s = ObjectSettings::from_environment();
  return s;
}

const ObjectLimits& object_limits() {
  static const ObjectLimits l;
  return l;
}

ObjectInfo open_object(const std::string& name, size_t first, std::string* head, const FetchRules* rules) {
  if (rules && !rules->match(name))
    throw InputError("PERMISSION_DENIED", name + ": outside what this server may fetch (--fetch-allow " +
                                              (rules->empty() ? std::string("not given: it fetches nothing") : [&] {
                                                std::string all;
                                                for (const std::string& p : rules->prefixes()) all += (all.empty() ? "" : ",") + p;
                                                return all;
                                              }()) + ")");
  const std::string url = request_url(name);
  const ObjectLimits& l = object_limits();
  ObjectInfo o;
  o.name = name;
  o.rules = rules;
  head->assign(std::max<size_t>(first, 1), '\0');
  for (int attempt = 1;; ++attempt) {
    const Reply r =
        perform(name, url, false, "0-" + std::to_string(head->size() - 1), "", head->data(), head->size(), nullptr, 0, rules);
    if (r.status == 416 && r.has_content_range && r.total == 0) {  // an empty object has no byte 0
      head->clear();
      o.etag = r.etag;
      return o;
    }
    const bool answered = r.status >= 200 && r.status < 300;
    if (answered && r.curl == CURLE_OK) {
      o.etag = r.etag;
      if (r.status == 206 && r.has_content_range && r.range_first == 0) {
        o.size = r.total;
        if (o.size < r.received) throw InputError("DATA_LOSS", name + ": the server sent more bytes than the object has");
      } else if (r.status == 200) {
        o.size = r.received;  // the whole object (no ranges, or no larger than asked)
      } else {
        throw InputError("FAILED_PRECONDITION", name + ": HTTP " + std::to_string(r.status) + " without the range asked for");
      }
      head->resize(static_cast<size_t>(std::min<uint64_t>(o.size, r.received)));
      if (o.size > head->size() && head->size() < std::min<uint64_t>(first, o.size))
        throw InputError("DATA_LOSS", name + ": shorter than the " + std::to_string(o.size) + " bytes it said");
      return o;
    }
    if (answered && r.overflow)  // a 200 with more than fits: the server ignores ranges
      throw InputError("FAILED_PRECONDITION", name + ": the server answers no ranged requests (the object is larger than " +
                                                   std::to_string(head->size()) + " bytes)");
    if (!answered && r.status != 0 && !retryable_status(r.status)) fail_status(name, r);
    if (r.status == 0 && !retryable_curl(r.curl)) fail_transport(name, r, attempt);
    if (attempt >= l.attempts) {
      if (r.status != 0 && !answered) fail_status(name, r);
      fail_transport(name, r, attempt);
    }
    back_off(attempt - 1);
  }
}

void read_object(const ObjectInfo& object, uint64_t at, char* out, size_t n) {
  if (n == 0) return;
  if (at > object.size || n > object.size - at)
    throw InputError("OUT_OF_RANGE", object.name + ": bytes past its " + std::to_string(object.size) + " asked for");
  read_range(object, at, out, n, true);
}

void read_object_parallel(const ObjectInfo& object, uint64_t at, char* out, size_t n, size_t piece, int in_flight) {
  piece = std::max<size_t>(piece, 1);
  const size_t pieces = (n + piece - 1) / piece;
  if (pieces <= 1 || in_flight <= 1) return read_object(object, at, out, n);
  if (at > object.size || n > object.size - at)
    throw InputError("OUT_OF_RANGE", object.name + ": bytes past its " + std::to_string(object.size) + " asked for");
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::exception_ptr failed;
  std::mutex mu;
  auto work = [&] {
    for (size_t i; !stop && (i = next++) < pieces;) {
      try {
        const size_t off = i * piece;
        read_range(object, at + off, out + off, std::min(piece, n - off), false);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!failed) failed = std::current_exception();
        stop = true;
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < std::min<size_t>(pieces, static_cast<size_t>(in_flight)); ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  if (failed) std::rethrow_exception(failed);
}

ListingPage parse_listing_page(const std::string& page) {
  ListingPage out;
  for (size_t at = 0;;) {
    size_t end = 0;
    const std::string contents = element(page, "Contents", at, page.size(), &end);
    if (end == std::string::npos) break;
    at = end;
    ObjectInfo o;
    o.name = xml_unescape(element(contents, "Key", 0, contents.size()));
    const std::string size = element(contents, "Size", 0, contents.size());
    char* size_end = nullptr;
    errno = 0;
    o.size = std::strtoull(size.c_str(), &size_end, 10);
    if (size.empty() || *size_end != '\0' || size[0] == '-' || errno == ERANGE)
      throw InputError("FAILED_PRECONDITION", "a listing with a size that is no number (" + size.substr(0, 40) + ")");
    o.etag = xml_unescape(element(contents, "ETag", 0, contents.size()));
    out.objects.push_back(std::move(o));
  }
  out.truncated = element(page, "IsTruncated", 0, page.size()) == "true";
  out.next_token = xml_unescape(element(page, "NextContinuationToken", 0, page.size()));
  return out;
}

std::vector<ObjectInfo> list_objects(const std::string& prefix, const std::function<bool(const std::string&)>& keep,
                                     uint64_t* left_out) {
  if (!starts_with_ci(prefix, "s3://"))
    throw InputError("INVALID_ARGUMENT", prefix + ": only s3:// names can be listed (an https:// name is one object)");
  const S3Name n = split_s3(prefix);
  const ObjectSettings& s = object_settings();
  const ObjectLimits& l = object_limits();
  const std::string head = "s3://" + n.bucket + "/";
  std::vector<ObjectInfo> out;
  std::string token;
  uint64_t seen = 0;
  for (;;) {
    // Parameters in Signature V4's canonical order (by name), each encoded.
    std::string query = "?";
    if (!token.empty()) query += "continuation-token=" + uri_encode(token, false) + "&";
    query += "list-type=2&prefix=" + uri_encode(n.key, false);
    const std::string url = s3_url(s, n.bucket, query);
    std::string page;
    Reply r;
    for (int attempt = 1;; ++attempt) {
      page.clear();
      r = perform(prefix, url, false, "", "", nullptr, 0, &page, l.max_listing_page_bytes);
      if (r.status == 200 && r.curl == CURLE_OK) break;
      if (r.overflow) throw InputError("RESOURCE_EXHAUSTED", prefix + ": a listing page past " + std::to_string(l.max_listing_page_bytes) + " bytes");
      if (r.status != 0 && r.status != 200 && !retryable_status(r.status)) fail_status(prefix, r);
      if (r.status == 0 && !retryable_curl(r.curl)) fail_transport(prefix, r, attempt);
      if (attempt >= l.attempts) {
        if (r.status != 0 && r.status != 200) fail_status(prefix, r);
        fail_transport(prefix, r, attempt);
      }
      back_off(attempt - 1);
    }
    ListingPage parsed = parse_listing_page(page);
    for (ObjectInfo& o : parsed.objects) {
      const std::string key = o.name;
      if (++seen > l.max_listed_objects)
        throw InputError("RESOURCE_EXHAUSTED", prefix + ": more than " + std::to_string(l.max_listed_objects) + " objects");
      if (key.empty() || key.back() == '/' || !keep(key)) {  // folder markers and keys not wanted
        if (left_out && !(key.empty() || key.back() == '/')) ++*left_out;
        continue;
      }
      o.name = head + key;
      out.push_back(std::move(o));
    }
    if (!parsed.truncated) break;
    if (parsed.next_token.empty() || parsed.next_token == token)
      throw InputError("FAILED_PRECONDITION", prefix + ": a listing that says it goes on but gives no token to go on from");
    token = parsed.next_token;
  }
  return out;
}

}  // namespace imgstat
