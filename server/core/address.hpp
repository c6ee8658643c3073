// gRPC addresses as the server and the CLI read them.
#pragma once

#include <string>
#include <vector>

namespace imgstat {

// localhost, 127.0.0.0/8, [::1] and unix: sockets: where plaintext is the
// default, as nothing crosses a network. A list of servers is loopback when
// every one of them is.
bool is_loopback(const std::string& address);

// The addresses a target names: "host:port" alone, a comma-separated list
// "host1:port1,host2:port2", or gRPC's own forms with a scheme (ipv4: and
// ipv6: lists, dns:///name:port, unix:path), each address without it.
std::vector<std::string> target_addresses(const std::string& target);
// Whether calls to the target may land on several servers: a list, or a DNS
// name, which may resolve to many (a Kubernetes headless Service).
bool names_several_servers(const std::string& target);

}  // namespace imgstat
