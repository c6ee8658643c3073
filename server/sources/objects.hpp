// Objects where datasets live: "https://host/path" (and "http://"), and
// "s3://bucket/key" in Amazon S3 or a store that speaks its protocol. Read
// by ranges with libcurl (HTTP/2 where offered, connections kept for the
// next request), retried with backoff on 5xx, throttling and cut
// connections (resumed from the byte where they were cut), and pinned to the
// ETag of their first answer: an object replaced while it is read is an
// error, never a mixed answer. S3 requests are signed (AWS Signature V4,
// libcurl's own) with credentials found as the AWS CLI finds them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sources/input_error.hpp"

namespace imgstat {

// "http://", "https://" or "s3://" (any case of the scheme).
bool is_object_name(const std::string& name);

// How objects are reached, read once from the environment and the AWS files
// as the AWS CLI reads them: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
// AWS_SESSION_TOKEN, else the profile (AWS_PROFILE, else "default") of
// AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials) and AWS_CONFIG_FILE
// (~/.aws/config); AWS_REGION, AWS_DEFAULT_REGION or the profile's region;
// AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or the profile's endpoint_url for a
// store other than AWS (addressed path-style: ENDPOINT/bucket/key);
// AWS_CA_BUNDLE or CURL_CA_BUNDLE for the certificates trusted.
struct ObjectSettings {
  std::string access_key;
  std::string secret_key;
  std::string session_token;
  std::string region = "us-east-1";
  std::string endpoint;   // empty: AWS (https://BUCKET.s3.REGION.amazonaws.com/KEY)
  std::string ca_bundle;  // empty: the system's
  std::string profile = "default";
  static ObjectSettings from_environment();
};

// Retries and bounds, in one place.
struct ObjectLimits {
  int attempts = 6;                    // tries of one request that makes no progress
  int first_backoff_ms = 100;          // doubled each try, with jitter, up to max_backoff_ms
  int max_backoff_ms = 5000;
  long connect_timeout_s = 10;
  long stall_s = 30;                   // a transfer slower than 1 KiB/s this long is cut and resumed
  size_t max_listing_page_bytes = size_t{16} << 20;
  uint64_t max_listed_objects = uint64_t{1} << 24;
};

// What a server may fetch (--fetch-allow): names that begin with one of
// these prefixes ("s3://bucket-a/", "https://data.example.org/images/").
// An https:// name is compared after its path's dot segments are resolved
// (as it will be requested), and one whose path hides them ("%2e", "%2f",
// a backslash) matches nothing. Its host must resolve, at each connection,
// to a public address (not loopback, link-local such as 169.254.169.254,
// private, CGNAT or multicast) unless its rule names the host by that
// address; a redirect is followed only to a name that a rule matches. An
// s3:// name goes to the server's own S3 endpoint, its key as it is.
class FetchRules {
 public:
  FetchRules() = default;
  // Throws std::invalid_argument for an entry that is no https://, http://
  // or s3:// prefix.
  explicit FetchRules(const std::vector<std::string>& prefixes);
  bool empty() const { return rules_.empty(); }
  const std::vector<std::string>& prefixes() const { return prefixes_; }
  // The rule that lets name be fetched, or nullptr.
  const std::string* match(const std::string& name) const;
  // Whether connections for name (which a rule matches) may go to any
  // address: its rule names the host by address.
  bool any_address(const std::string& name) const;

 private:
  struct Rule {
    std::string prefix;     // as compared: scheme://host:port/path for https, the name for s3
    bool by_address = false;
  };
  std::vector<Rule> rules_;
  std::vector<std::string> prefixes_;  // as given
};

// An address a fetched name may not reach unless a rule names it:
// loopback, unspecified, link-local, private, CGNAT, multicast, reserved
// (IPv4-mapped IPv6 addresses as their IPv4).
bool is_internal_address(const std::string& ip);

// An object as its first answer described it.
struct ObjectInfo {
  std::string name;  // as given
  uint64_t size = 0;
  std::string etag;  // "" where the store sends none
  const FetchRules* rules = nullptr;  // a server's fetch: every request and redirect checked
};

// An object that cannot be read is an InputError, with the gRPC status name
// that says why: NOT_FOUND (404), PERMISSION_DENIED (401, 403), DATA_LOSS
// (changed while it was read, or shorter than it said), UNAVAILABLE
// (unreachable, 5xx or throttled after every retry), INVALID_ARGUMENT (a
// name that is none), FAILED_PRECONDITION (any other answer).

// Opens an object: one request for its first `first` bytes (into *head),
// which also tells its size and ETag. An object no larger than `first` is
// then read whole.
// With rules (a server fetching), a name no rule matches, a redirect outside
// them and an internal address are PERMISSION_DENIED.
ObjectInfo open_object(const std::string& name, size_t first, std::string* head, const FetchRules* rules = nullptr);

// Bytes [at, at + n) of an object opened by open_object, each range in one
// request, resumed where a connection is cut; throws InputError DATA_LOSS
// when the object is no longer the one opened.
void read_object(const ObjectInfo& object, uint64_t at, char* out, size_t n);

// The same, several ranges of `piece` bytes in flight at once (a large
// object's whole read).
void read_object_parallel(const ObjectInfo& object, uint64_t at, char* out, size_t n, size_t piece, int in_flight);

// The objects under "s3://bucket/prefix" (every key that begins with the
// prefix; "s3://bucket/" the whole bucket), in the store's (lexicographic)
// order, through ListObjectsV2 and its pages. keep(key) says which keys are
// wanted (the rest are counted in *left_out).
std::vector<ObjectInfo> list_objects(const std::string& prefix, const std::function<bool(const std::string&)>& keep,
                                     uint64_t* left_out = nullptr);

// One page of a ListObjectsV2 answer: its objects (name: the key alone),
// whether more pages follow, and the token to ask for the next. Throws
// InputError FAILED_PRECONDITION for a page that is no listing.
struct ListingPage {
  std::vector<ObjectInfo> objects;
  bool truncated = false;
  std::string next_token;
};
ListingPage parse_listing_page(const std::string& xml);

// Where the settings come from in this process (tests set them apart).
const ObjectSettings& object_settings();
const ObjectLimits& object_limits();

}  // namespace imgstat
