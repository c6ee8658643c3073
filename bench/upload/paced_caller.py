#!/usr/bin/env python3
"""One AnalyzeStream call whose client sends at a set pace, as a caller on a
slower network does: how long the answer takes after the last byte is sent
(the decode a server could not overlap with receiving) and in all.

Generate the code once (protobuf-compiler-grpc, python3-grpcio):
    protoc -I proto --python_out=gen --grpc_python_out=gen \
        --plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin proto/imgstat/v1/imgstat.proto
    PYTHONPATH=gen python3 bench/upload/paced_caller.py 127.0.0.1:50051 photo.png --mb-per-s 100

Prints one line: the file, the pace, the decode_time the server reports,
seconds from the last chunk to the answer, and in all.
"""
import argparse
import os
import time

import grpc

from imgstat.v1 import imgstat_pb2 as pb
from imgstat.v1 import imgstat_pb2_grpc as rpc

CHUNK = 4 << 20  # as imgstat-client streams


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("file")
    ap.add_argument("--mb-per-s", type=float, default=100.0, help="pace of the upload, 0: as fast as it goes")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    data = open(args.file, "rb").read()
    channel = grpc.insecure_channel(args.server, options=[("grpc.max_receive_message_length", 64 << 20)])
    stub = rpc.ImageStatsStub(channel)
    for _ in range(args.runs):
        last_sent = [0.0]

        def messages():
            start = time.monotonic()
            yield pb.AnalyzeStreamRequest(header=pb.StreamHeader(input=pb.Input(name=os.path.basename(args.file)),
                                                                 total_bytes=len(data)))
            for at in range(0, len(data), CHUNK):
                if args.mb_per_s > 0:
                    due = start + at / (args.mb_per_s * 1e6)
                    if due > time.monotonic():
                        time.sleep(due - time.monotonic())
                yield pb.AnalyzeStreamRequest(chunk=data[at:at + CHUNK])
            last_sent[0] = time.monotonic()

        t0 = time.monotonic()
        r = stub.AnalyzeStream(messages())
        t1 = time.monotonic()
        decode = r.decode_time.seconds + r.decode_time.nanos / 1e9
        print(f"{os.path.basename(args.file)} {len(data) / 1e6:.1f} MB at {args.mb_per_s:g} MB/s: "
              f"decode_time {decode:.3f} s, answer {t1 - last_sent[0]:.3f} s after the last chunk, {t1 - t0:.3f} s in all",
              flush=True)


if __name__ == "__main__":
    main()
