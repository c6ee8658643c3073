#!/usr/bin/env python3
"""The Python package against the CLI, in the same run and on the same
server (issue 36's targets):

  array    analyze() of a 1 GiB uint8 numpy array  vs  the CLI on the same bytes as a file (--raw)
  shared   analyze() of a 1 GiB imgstat.shared_array  vs  the same CLI command
  many     analyze_many() over N small JPEG paths  vs  imgstat-client --json over them
  import   `import imgstat`, and with the Client loaded  vs  `python -c pass`
  cuda     analyze() of a 1 GiB device array by CUDA IPC (--engine cuda, a GPU here):
           the first call (registration) and the next ones  vs  the CLI's file region

    bench.py SERVER_BIN CLIENT_BIN [--engine cpu|cuda] [--rounds 3] [--files 2000] [--only array,shared,...]

The imgstat package must be importable (pip install ./client/python, or
PYTHONPATH). Client times are whole commands (process start included);
Python times are the call itself in a warm process, since that is what a
script calling it pays. The table comes last.
"""
import argparse
import ctypes
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import imgstat

GIB = 1 << 30
rows = []


def row(case, what, seconds, baseline, unit_count=None, unit=""):
    ratio = seconds / baseline if baseline else float("nan")
    rate = f"{unit_count / seconds:,.0f} {unit}" if unit_count else ""
    rows.append(f"{case:<8} {what:<52} {seconds * 1e3:9.1f} ms  {ratio:5.2f}x  {rate}")
    print(rows[-1], flush=True)


def start(server_bin, engine, work):
    log = open(os.path.join(work, f"server-{engine}.log"), "w")
    p = subprocess.Popen([server_bin, "--listen", "127.0.0.1:0", "--engine", engine,
                          "--region-socket", os.path.join(work, f"regions-{engine}.sock")],
                         stdout=subprocess.DEVNULL, stderr=log)
    for _ in range(600):
        m = re.search(r"listening on \S+:(\d+)", open(log.name).read())
        if m:
            return p, f"127.0.0.1:{m.group(1)}"
        time.sleep(0.05)
    raise SystemExit("server did not start: " + open(log.name).read())


def timed(cmd):
    t = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True)
    took = time.perf_counter() - t
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])}: {out.stderr.decode()[-500:]}")
    return took


def big_array():
    block = np.random.default_rng(1).integers(0, 256, 16 << 20, dtype=np.uint8)
    return np.tile(block, GIB // block.size).reshape(32768, 32768)


def versus_cli(case, what, first, x, cmd, client, rounds, baseline):
    """client.analyze(x) against the CLI's cmd, round by round."""
    for r in range(rounds):
        base = timed(cmd)
        t = time.perf_counter()
        got = client.analyze(x)
        took = time.perf_counter() - t
        assert got.channels[0].count == GIB
        row(case, f"{what}, round {r + 1}" + (f" ({first})" if r == 0 else ""), took, base)
        row(case, f"  the CLI, {baseline}", base, base)


def case_array(client, cli, work, rounds):
    a = big_array()
    path = os.path.join(work, "big.raw")
    a.tofile(path)
    cmd = [*cli, "--raw", "32768x32768x1:uint8", "--json", path]
    timed(cmd)  # the file in the page cache, the server warm
    versus_cli("array", "1 GiB numpy uint8", "first: memfd made", a, cmd, client, rounds,
               "same bytes as a file (--raw, a file region)")
    return path, a


def case_shared(client, cli, work, rounds, path, a):
    s = imgstat.shared_array(a.shape, a.dtype)
    s[:] = a
    cmd = [*cli, "--raw", "32768x32768x1:uint8", "--json", path]
    versus_cli("shared", "1 GiB imgstat.shared_array", "registers it", s, cmd, client, rounds,
               "same bytes as a file")


def make_jpegs(work, n):
    try:
        from PIL import Image

        def save(img, p):
            Image.fromarray(img).save(p, quality=90)
    except ImportError:  # the GPU machine has OpenCV's module instead
        import cv2

        def save(img, p):
            cv2.imwrite(p, img[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, 90])
    folder = os.path.join(work, "jpegs")
    if os.path.isdir(folder) and len(os.listdir(folder)) >= n:
        return sorted(os.path.join(folder, f) for f in os.listdir(folder))[:n]
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(3)
    y, x = np.mgrid[0:240, 0:320]
    paths = []
    for i in range(n):
        img = np.stack([(x + i) % 256, (y * 2 + i) % 256, (x + y + 3 * i) % 256], axis=2).astype(np.int16)
        img = np.clip(img + rng.integers(-8, 9, img.shape), 0, 255).astype(np.uint8)
        p = os.path.join(folder, f"f{i:05d}.jpg")
        save(img, p)
        paths.append(p)
    return paths


def case_many(client, cli, work, rounds, n):
    paths = make_jpegs(work, n)
    list_file = os.path.join(work, "jpegs.txt")
    timed([*cli, "--json", *paths])
    for r in range(rounds):
        base = timed([*cli, "--json", *paths])
        t = time.perf_counter()
        results = list(client.analyze_many(paths))
        took = time.perf_counter() - t
        assert len(results) == n
        t = time.perf_counter()
        for x in client.analyze_many(paths):
            x.to_dict()
        took_dict = time.perf_counter() - t
        row("many", f"analyze_many, {n} JPEGs, round {r + 1}", took, base, n, "images/s")
        row("many", "  the same, each result's to_dict() too", took_dict, base, n, "images/s")
        row("many", "  the CLI, --json over the same paths", base, base, n, "images/s")
    del list_file


def case_import(rounds):
    py = sys.executable
    for what, code in (("python -c pass", "pass"), ("import imgstat", "import imgstat"),
                       ("import imgstat; imgstat.Client (gRPC, numpy, protobuf)", "import imgstat; imgstat.Client")):
        best = min(timed([py, "-c", code]) for _ in range(max(rounds, 5)))
        if what == "python -c pass":
            base = best
        row("import", what, best, base)


def case_cuda(server_bin, client, cli, work, rounds):
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    lib.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
    device, context = ctypes.c_int(), ctypes.c_void_p()
    assert lib.cuInit(0) == 0 and lib.cuDeviceGet(ctypes.byref(device), 0) == 0
    assert lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) == 0 and lib.cuCtxSetCurrent(context) == 0
    a = big_array()
    pointer = ctypes.c_uint64()
    assert lib.cuMemAlloc_v2(ctypes.byref(pointer), GIB) == 0
    assert lib.cuMemcpyHtoD_v2(pointer, a.ctypes.data_as(ctypes.c_void_p), GIB) == 0

    class Device:
        __cuda_array_interface__ = {"shape": a.shape, "typestr": "|u1", "data": (pointer.value, False),
                                    "strides": None, "version": 3}
    path = os.path.join(work, "big.raw")
    if not os.path.exists(path):
        a.tofile(path)
    cmd = [*cli, "--raw", "32768x32768x1:uint8", "--json", path]
    timed(cmd)
    want = client.analyze(a).to_dict()["channels"]
    for r in range(rounds):
        base = timed(cmd)
        times = []
        for k in range(11):
            t = time.perf_counter()
            got = client.analyze(Device())
            times.append(time.perf_counter() - t)
        assert got.engine == "cuda" and got.to_dict()["channels"] == want
        if r == 0:
            row("cuda", "1 GiB device array, first call (registers it)", times[0], base)
        row("cuda", f"1 GiB device array, median of 10 after, round {r + 1}", statistics.median(times[1:]), base)
        row("cuda", "  best of those 10", min(times[1:]), base, 1, "GiB/s")
        row("cuda", "  the CLI, same bytes as a file region", base, base)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server_bin")
    ap.add_argument("client_bin")
    ap.add_argument("--engine", default="cpu")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--only", default="array,shared,many,import,cuda")
    ap.add_argument("--work", default=tempfile.gettempdir() + "/imgstat-pybench")
    args = ap.parse_args()
    only = set(args.only.split(","))
    os.makedirs(args.work, exist_ok=True)
    server, address = start(args.server_bin, args.engine, args.work)
    cli = [args.client_bin, "--server", address]
    print(f"{os.cpu_count()} cores, engine {args.engine}, imgstat {imgstat.__version__}, "
          f"python {sys.version.split()[0]}, {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC", flush=True)
    try:
        with imgstat.Client(address) as client:
            path = a = None
            if "array" in only:
                path, a = case_array(client, cli, args.work, args.rounds)
            if "shared" in only:
                if a is None:
                    a = big_array()
                    path = os.path.join(args.work, "big.raw")
                    a.tofile(path)
                case_shared(client, cli, args.work, args.rounds, path, a)
            del a
            if "many" in only:
                case_many(client, cli, args.work, args.rounds, args.files)
            if "import" in only:
                case_import(args.rounds)
            if "cuda" in only and args.engine == "cuda":
                case_cuda(args.server_bin, client, cli, args.work, args.rounds)
    finally:
        server.terminate()
        server.wait()
    import resource
    mine = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cli_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print("\n== figures (case, what, time, ratio to the baseline below it, rate)")
    print("\n".join(rows))
    print(f"peak RSS: this Python process {mine:,.0f} MiB (every case it ran); the largest child "
          f"{cli_peak:,.0f} MiB (a CLI run, or the server)")


if __name__ == "__main__":
    main()
