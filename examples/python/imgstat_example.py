#!/usr/bin/env python3
"""Calling imgstat from Python: an encoded image in one call, a raw pixel
buffer streamed in chunks, many images on one batch call, on the server's
own host a raw frame in shared memory (a region) that no socket carries,
and parts of the image: the pixels under a mask, each object of a label
image.

Generate the code once (Debian: python3-grpcio, protobuf-compiler-grpc):
    protoc -I proto --python_out=gen --grpc_python_out=gen \
        --plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin proto/imgstat/v1/imgstat.proto
then run with gen on the path:
    PYTHONPATH=gen python3 examples/python/imgstat_example.py localhost:50051 photo.png \
        --raw frame.raw 4096x3072x1:uint16 --batch a.png b.jpg --region frame.raw 4096x3072x1:uint16 \
        --mask mask.png --labels labels.png

The server may be one address, a comma-separated list of servers
(host1:50051,host2:50051) or a dns:/// name that resolves to many (a
Kubernetes headless Service): calls then go to each in turn (round_robin).

Prints one JSON object per answer, with the proto's field names.
"""
import argparse
import fcntl
import json
import os
import socket
import sys

import grpc
from google.protobuf import json_format

from imgstat.v1 import imgstat_pb2 as pb
from imgstat.v1 import imgstat_pb2_grpc as rpc

CHUNK = 1 << 20  # bytes per streamed message
SAMPLE_TYPES = {
    "uint8": pb.SAMPLE_TYPE_UINT8, "uint16": pb.SAMPLE_TYPE_UINT16, "int8": pb.SAMPLE_TYPE_INT8,
    "int16": pb.SAMPLE_TYPE_INT16, "float32": pb.SAMPLE_TYPE_FLOAT32, "float64": pb.SAMPLE_TYPE_FLOAT64,
}
# Every statistic, with the 1st and 99th percentiles besides the median.
OPTIONS = pb.Options(statistics=[pb.STATISTIC_ALL], percentiles=[1, 99])
# Calls spread over every address the target names (gRPC's default,
# pick_first, would put them all on one server), and retried by gRPC when
# they never reached a server.
SERVICE_CONFIG = json.dumps({
    "loadBalancingConfig": [{"round_robin": {}}],
    "methodConfig": [{"name": [{"service": "imgstat.v1.ImageStats"}],
                      "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.05s", "maxBackoff": "1s",
                                      "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]})
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 << 20),  # histograms: up to 65536 bins per channel
    ("grpc.service_config", SERVICE_CONFIG),
    # Pings notice a server whose host vanished without closing its connections;
    # imgstat's server accepts them every 5 s or more.
    ("grpc.keepalive_time_ms", 10000),
    ("grpc.keepalive_timeout_ms", 5000),
    ("grpc.keepalive_permit_without_calls", 1),
]


def channel_target(server):
    """gRPC's ipv4:/ipv6: targets list addresses, not names: a list of names is resolved here."""
    if "," not in server or server.startswith(("dns:", "ipv4:", "ipv6:", "unix:")):
        return server
    v4, v6 = [], []
    for entry in server.split(","):
        host, port = entry.rsplit(":", 1)
        found = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)
        four = [a for a in found if a[0] == socket.AF_INET]
        if four:
            v4.append(f"{four[0][4][0]}:{port}")
            v6.append(f"[::ffff:{four[0][4][0]}]:{port}")
        else:
            v6.append(f"[{found[0][4][0]}]:{port}")
    return ("ipv4:" + ",".join(v4)) if len(v4) == len(v6) else ("ipv6:" + ",".join(v6))


def analyze_file(stub, path):
    with open(path, "rb") as f:
        data = f.read()
    request = pb.AnalyzeRequest(input=pb.Input(kind=pb.INPUT_KIND_ENCODED, data=data, name=path), options=OPTIONS)
    return stub.Analyze(request, timeout=60)


def analyze_parts(stub, path, mask=None, labels=None):
    """The image's statistics under a mask (any image of its size: nonzero
    pixels count), or per label of a label image (8/16-bit PNG or TIFF; 0,
    the background, left out). Both travel in the same call as the image."""
    with open(path, "rb") as f:
        data = f.read()
    options = pb.Options()
    options.CopyFrom(OPTIONS)
    if mask:
        with open(mask, "rb") as f:
            options.parts.mask.image.data = f.read()
    else:
        with open(labels, "rb") as f:
            options.parts.labels.image.data = f.read()
        options.parts.labels.ignore = 0
    request = pb.AnalyzeRequest(input=pb.Input(kind=pb.INPUT_KIND_ENCODED, data=data, name=path), options=options)
    return stub.Analyze(request, timeout=60)


def analyze_raw_streamed(stub, path, layout):
    """A raw buffer of any size: a StreamHeader, then the bytes in order."""
    width, height, channels, sample_type = layout

    def messages():
        header = pb.StreamHeader(
            input=pb.Input(kind=pb.INPUT_KIND_RAW, name=path,
                           raw=pb.RawLayout(width=width, height=height, channels=channels, sample_type=sample_type)),
            options=OPTIONS, total_bytes=os.path.getsize(path))
        yield pb.AnalyzeStreamRequest(header=header)
        with open(path, "rb") as f:
            while block := f.read(CHUNK):
                yield pb.AnalyzeStreamRequest(chunk=block)

    return stub.AnalyzeStream(messages(), timeout=60)


def analyze_batch(stub, paths):
    """Many images on one call; answers come as they complete, matched by id."""
    def requests():
        for i, path in enumerate(paths):
            with open(path, "rb") as f:
                yield pb.BatchRequest(id=str(i), request=pb.AnalyzeRequest(
                    input=pb.Input(kind=pb.INPUT_KIND_ENCODED, data=f.read(), name=path), options=OPTIONS))

    for answer in stub.AnalyzeBatch(requests(), timeout=120):
        path = paths[int(answer.id)]
        if answer.HasField("error"):
            yield path, None, answer.error
        else:
            yield path, answer.response, None


def analyze_raw_in_region(stub, region_socket, path, layout):
    """Same host: the frame in a sealed memfd, passed once over the server's
    region socket, registered, then named by the call instead of sent."""
    width, height, channels, sample_type = layout
    fd = os.memfd_create("imgstat-frame", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        with open(path, "rb") as f:
            view = memoryview(f.read())
        while view:
            view = view[os.write(fd, view):]
        # Sealed against shrinking: the server maps it in place and no one can
        # cut it short under that mapping. (Unsealed, the server reads it instead.)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
        # The connection is the region's lifetime: it stays open while the region is used.
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(region_socket)
            socket.send_fds(s, [b"R"], [fd])
            answer = s.makefile("r").readline().strip()
            if not answer.startswith("ok "):
                raise RuntimeError(f"region socket: {answer}")
            region = stub.RegisterRegion(pb.RegisterRegionRequest(ticket=answer[3:], name=path), timeout=60)
            try:
                raw = pb.RawLayout(width=width, height=height, channels=channels, sample_type=sample_type)
                request = pb.AnalyzeRequest(input=pb.Input(kind=pb.INPUT_KIND_RAW, name=path, raw=raw,
                                                           region=pb.RegionRef(region_id=region.region_id)),
                                            options=OPTIONS)
                return stub.Analyze(request, timeout=60)
            finally:
                stub.UnregisterRegion(pb.UnregisterRegionRequest(region_id=region.region_id), timeout=60)
    finally:
        os.close(fd)


def parse_layout(spec):
    size, sample_type = spec.split(":")
    width, height, channels = (int(v) for v in size.split("x"))
    return width, height, channels, SAMPLE_TYPES[sample_type]


def status_name(number):
    """The name of a google.rpc code number, as BatchResponse errors carry them."""
    for code in grpc.StatusCode:
        if code.value[0] == number:
            return code.name
    return "UNKNOWN"


def emit(method, path, response=None, error=None):
    line = {"method": method, "file": path}
    if response is not None:
        # Zeros too: a first max at x = 0 is an answer, not a missing one.
        line["response"] = json_format.MessageToDict(response, preserving_proto_field_name=True,
                                                     including_default_value_fields=True)
    if error is not None:
        line["error"] = {"code": status_name(error.code), "message": error.message}
    print(json.dumps(line), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("server")
    parser.add_argument("image")
    parser.add_argument("--raw", nargs=2, metavar=("FILE", "WxHxC:TYPE"))
    parser.add_argument("--batch", nargs="*", default=[])
    parser.add_argument("--region", nargs=2, metavar=("FILE", "WxHxC:TYPE"),
                        help="a raw frame through shared memory (the server must be on this host)")
    parser.add_argument("--mask", help="the image's statistics under this mask")
    parser.add_argument("--labels", help="the image's statistics per label of this label image")
    args = parser.parse_args()
    channel = grpc.insecure_channel(channel_target(args.server), options=CHANNEL_OPTIONS)
    stub = rpc.ImageStatsStub(channel)
    failed = False
    try:
        emit("Analyze", args.image, analyze_file(stub, args.image))
        if args.raw:
            emit("AnalyzeStream", args.raw[0], analyze_raw_streamed(stub, args.raw[0], parse_layout(args.raw[1])))
        for path, response, error in analyze_batch(stub, args.batch):
            failed |= error is not None
            emit("AnalyzeBatch", path, response, error)
        if args.mask:
            emit("AnalyzeMask", args.image, analyze_parts(stub, args.image, mask=args.mask))
        if args.labels:
            emit("AnalyzeLabels", args.image, analyze_parts(stub, args.image, labels=args.labels))
        if args.region:
            info = stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=60)
            if not info.region_socket:
                print("imgstat: this server offers no regions", file=sys.stderr)
                return 1
            emit("AnalyzeRegion", args.region[0],
                 analyze_raw_in_region(stub, info.region_socket, args.region[0], parse_layout(args.region[1])))
    except grpc.RpcError as e:
        print(f"imgstat: {e.code().name}: {e.details()}", file=sys.stderr)
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
