#include "core/address.hpp"

#include <algorithm>

namespace imgstat {

namespace {

bool one_is_loopback(std::string host) {
  if (!host.empty() && host.front() == '[') {
    host = host.substr(1, host.find(']') - 1);  // [::1]:50051
  } else if (std::count(host.begin(), host.end(), ':') == 1) {
    host = host.substr(0, host.find(':'));  // localhost:50051, 127.0.0.1:50051
  }
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0 || host.rfind("::ffff:127.", 0) == 0;
}

}  // namespace

std::vector<std::string> target_addresses(const std::string& target) {
  if (target.rfind("unix:", 0) == 0 || target.rfind("unix-abstract:", 0) == 0) return {target};
  std::string rest = target;
  for (const char* scheme : {"dns:///", "dns:", "ipv4:", "ipv6:"})
    if (rest.rfind(scheme, 0) == 0) {
      rest = rest.substr(std::string(scheme).size());
      break;
    }
  std::vector<std::string> out;
  for (size_t at = 0;;) {
    const size_t comma = rest.find(',', at);
    std::string one = rest.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (!one.empty()) out.push_back(one);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

bool names_several_servers(const std::string& target) {
  return target.rfind("dns:", 0) == 0 || target_addresses(target).size() > 1;
}

bool is_loopback(const std::string& address) {
  if (address.rfind("unix:", 0) == 0 || address.rfind("unix-abstract:", 0) == 0) return true;
  const std::vector<std::string> all = target_addresses(address);
  return !all.empty() && std::all_of(all.begin(), all.end(), one_is_loopback);
}

}  // namespace imgstat
