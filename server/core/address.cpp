#include "core/address.hpp"

#include <algorithm>

namespace imgstat {

bool is_loopback(const std::string& address) {
  if (address.rfind("unix:", 0) == 0 || address.rfind("unix-abstract:", 0) == 0) return true;
  std::string host = address;
  for (const char* scheme : {"dns:///", "ipv4:", "ipv6:"})
    if (host.rfind(scheme, 0) == 0) host = host.substr(std::string(scheme).size());
  if (!host.empty() && host.front() == '[') {
    host = host.substr(1, host.find(']') - 1);  // [::1]:50051
  } else if (std::count(host.begin(), host.end(), ':') == 1) {
    host = host.substr(0, host.find(':'));  // localhost:50051, 127.0.0.1:50051
  }
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0 || host.rfind("::ffff:127.", 0) == 0;
}

}  // namespace imgstat
