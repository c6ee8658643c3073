// gRPC addresses as the server and the CLI read them.
#pragma once

#include <string>

namespace imgstat {

// localhost, 127.0.0.0/8, [::1] and unix: sockets: where plaintext is the
// default, as nothing crosses a network.
bool is_loopback(const std::string& address);

}  // namespace imgstat
