"""How the package reaches servers: the CLI's target forms, channel settings,
TLS and token rules (client/calls.cpp), so that a script and the CLI behave
alike against the same --server."""
import json
import os
import socket

# The CLI's settings: every address of the target in turn (round_robin),
# gRPC's own retries for calls that never reached a server, keep-alive pings
# that notice a server whose host vanished, and a quick first reconnect.
# Unary methods only: a stream that ends UNAVAILABLE starts over from this
# package's own retries, not from gRPC's replay of its buffered messages.
SERVICE_CONFIG = json.dumps({
    "loadBalancingConfig": [{"round_robin": {}}],
    "methodConfig": [{"name": [{"service": "imgstat.v1.ImageStats", "method": m}
                               for m in ("Analyze", "GetServerInfo", "RegisterRegion", "ListRegions",
                                         "UnregisterRegion")],
                      "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.05s", "maxBackoff": "1s",
                                      "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]})
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    ("grpc.service_config", SERVICE_CONFIG),
    ("grpc.keepalive_time_ms", 10000),
    ("grpc.keepalive_timeout_ms", 5000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.initial_reconnect_backoff_ms", 100),
]
DEFAULT_TARGET = "localhost:50051"


def target_addresses(target):
    if target.startswith(("unix:", "unix-abstract:")):
        return [target]
    for scheme in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        if target.startswith(scheme):
            target = target[len(scheme):]
            break
    return [a for a in target.split(",") if a]


def names_several_servers(target):
    return target.startswith("dns:") or len(target_addresses(target)) > 1


def _one_is_loopback(host):
    if host.startswith("["):
        host = host[1:host.find("]")]
    elif host.count(":") == 1:
        host = host.split(":")[0]
    return host in ("localhost", "::1") or host.startswith(("127.", "::ffff:127."))


def is_loopback(target):
    if target.startswith(("unix:", "unix-abstract:")):
        return True
    every = target_addresses(target)
    return bool(every) and all(_one_is_loopback(a) for a in every)


def channel_target(target):
    """(what gRPC is given, the first host): a list of names is resolved here,
    since gRPC's ipv4:/ipv6: targets take addresses, not names."""
    every = target_addresses(target)
    first_host = ""
    if every:
        a = every[0]
        first_host = a[1:a.find("]")] if a.startswith("[") else a.rsplit(":", 1)[0]
    plain_list = (len(every) > 1 and ":" in target
                  and not target.startswith(("ipv4:", "ipv6:", "dns:", "unix")))
    if not plain_list:
        return target, first_host
    v4, v6 = [], []
    for a in every:
        host, sep, port = a.rpartition(":")
        if not sep or not port:
            raise ValueError(f"target: {a!r} in the list has no port")
        host = host.strip("[]")
        try:
            found = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        except (OSError, ValueError) as e:
            raise ValueError(f"target: cannot resolve {host!r}: {e}") from None
        four = [f for f in found if f[0] == socket.AF_INET]
        if four:
            v4.append(f"{four[0][4][0]}:{port}")
            v6.append(f"[::ffff:{four[0][4][0]}]:{port}")
        else:
            v6.append(f"[{found[0][4][0]}]:{port}")
    if len(v4) == len(every):
        return "ipv4:" + ",".join(v4), first_host
    return "ipv6:" + ",".join(v6), first_host


def uses_tls(target, tls_ca, tls_cert, tls_key, tls_server_name, insecure):
    if tls_ca or tls_cert or tls_key or tls_server_name:
        return True
    return not insecure and not is_loopback(target)


def _read(path, what):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ValueError(f"{what} {path}: cannot be read ({e.strerror})") from None


def resolve_token(token):
    """The token given, else $IMGSTAT_TOKEN, without trailing white space."""
    if token is None:
        token = os.environ.get("IMGSTAT_TOKEN", "")
    return token.rstrip()


def make_channel(grpc_module, target, *, tls_ca=None, tls_cert=None, tls_key=None, tls_server_name=None,
                 insecure=False):
    """A channel as the CLI makes one; grpc_module is grpc or grpc.aio."""
    import grpc
    options = list(CHANNEL_OPTIONS)
    given, first_host = channel_target(target)
    if uses_tls(target, tls_ca, tls_cert, tls_key, tls_server_name, insecure):
        if bool(tls_cert) != bool(tls_key):
            raise ValueError("a client certificate needs both tls_cert and tls_key")
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read(tls_ca, "tls_ca") if tls_ca else None,
            private_key=_read(tls_key, "tls_key") if tls_key else None,
            certificate_chain=_read(tls_cert, "tls_cert") if tls_cert else None)
        if tls_server_name:
            options.append(("grpc.ssl_target_name_override", tls_server_name))
        elif given != target:
            options.append(("grpc.ssl_target_name_override", first_host))  # the servers of a list share a name
        return grpc_module.secure_channel(given, credentials, options=options)
    return grpc_module.insecure_channel(given, options=options)
