#!/usr/bin/env python3
"""Calling imgstat from Python with the imgstat package (client/python):
an encoded image, a raw frame as a numpy array, many images at once, the
pixels under a mask and per label of a label image, and a frame in an
imgstat.shared_array, which a server on this host reads in place.

Install the package once (Debian: python3-grpcio, python3-numpy,
protobuf-compiler-grpc):
    python3 -m venv --system-site-packages ~/.venvs/imgstat
    ~/.venvs/imgstat/bin/pip install ./client/python
then:
    ~/.venvs/imgstat/bin/python examples/python/imgstat_example.py localhost:50051 photo.png \
        --raw frame.raw 4096x3072x1:uint16 --batch a.png b.jpg --shared frame.raw 4096x3072x1:uint16 \
        --mask mask.png --labels labels.png

The server may be one address, a comma-separated list of servers
(host1:50051,host2:50051) or a dns:/// name that resolves to many (a
Kubernetes headless Service): calls then go to each in turn.

Prints one JSON object per answer: {"method", "file", "response"} with the
response as imgstat-client --json writes it, or {"method", "file", "error"}.
"""
import argparse
import json
import sys

import numpy as np

import imgstat

# Every statistic, with the 1st and 99th percentiles besides the median.
OPTIONS = dict(stats="all", percentiles=[1, 99])


def read_frame(path, spec):
    """A raw file as a numpy array: WxHxC:TYPE, e.g. 4096x3072x1:uint16."""
    size, dtype = spec.split(":")
    width, height, channels = (int(v) for v in size.split("x"))
    return np.fromfile(path, dtype=np.dtype(dtype).newbyteorder("<")).reshape(height, width, channels)


def emit(method, name, call):
    line = {"method": method, "file": name}
    try:
        line["response"] = call().to_dict()
    except imgstat.Error as e:
        line["error"] = {"code": e.code, "message": e.message}
    print(json.dumps(line), flush=True)
    return "error" not in line


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("server")
    parser.add_argument("image")
    parser.add_argument("--raw", nargs=2, metavar=("FILE", "WxHxC:TYPE"))
    parser.add_argument("--batch", nargs="*", default=[])
    parser.add_argument("--shared", nargs=2, metavar=("FILE", "WxHxC:TYPE"),
                        help="a raw frame in shared memory (read in place by a server on this host)")
    parser.add_argument("--mask", help="the image's statistics under this mask")
    parser.add_argument("--labels", help="the image's statistics per label of this label image")
    args = parser.parse_args()
    ok = True
    with imgstat.Client(args.server) as client:
        ok &= emit("Analyze", args.image, lambda: client.analyze(args.image, **OPTIONS))
        if args.raw:
            frame = read_frame(*args.raw)
            ok &= emit("AnalyzeArray", args.raw[0], lambda: client.analyze(frame, name=args.raw[0], **OPTIONS))
        # Results in input order; a bad file is an Error in its place.
        for path, result in zip(args.batch, client.analyze_many(args.batch, errors="return", **OPTIONS)):
            ok &= emit("AnalyzeMany", path, lambda: result if not isinstance(result, imgstat.Error) else _raise(result))
        if args.mask:
            ok &= emit("AnalyzeMask", args.image, lambda: client.analyze(args.image, mask=args.mask, **OPTIONS))
        if args.labels:
            ok &= emit("AnalyzeLabels", args.image,
                       lambda: client.analyze(args.image, labels=args.labels, ignore_label=0, **OPTIONS))
        if args.shared:
            frame = read_frame(*args.shared)
            shared = imgstat.shared_array(frame.shape, frame.dtype)
            shared[:] = frame  # from here on, analyzing it copies nothing
            ok &= emit("AnalyzeShared", args.shared[0], lambda: client.analyze(shared, name=args.shared[0], **OPTIONS))
    return 0 if ok else 1


def _raise(error):
    raise error


if __name__ == "__main__":
    sys.exit(main())
