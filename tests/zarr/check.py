#!/usr/bin/python3
"""Zarr v2 arrays and OME-Zarr images through imgstat-client --local and a
live server, against zarr-python and numpy over the same values.

    check.py SERVER_BIN CLIENT_BIN WORK

Each store is written here by zarr-python: every dtype imgstat reads (bool,
uint8, int8, uint16, int16, uint32, int32, uint64, int64, float16, float32,
float64; either byte order), each compressor (Blosc with lz4, zstd, zlib and
blosclz, byte- and bit-shuffled; zstd, zlib, gzip, LZ4, none), C and F
order, both dimension separators, edge chunks, absent chunks (their fill
value: a number, NaN), NaN and infinities, 2- to 5-D. The values are
zarr-python's (`array[...]`): bool as uint8, float16 as float32, 32- and
64-bit integers as float64. Count, NaN counts, min, max and the integer
histogram equal, sum, mean and stddev within 1e-12 relative; each plane's
answer, and its t, c and z where OME-NGFF names them; a multiscales image's
levels (--level), a group's arrays (--series); a tar the user made of a
store. Then the refusals: complex values, filters, a compressor not read,
a damaged chunk, a 1-D array, metadata that is not JSON, planes past
--max-planes, a chunk grid past the limit, chunks whose pass of planes
needs more than the decode memory.
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from live_server import start_server  # noqa: E402
from verdicts import equal, fail, finish  # noqa: E402

try:
    import numpy as np
    import zarr
    from numcodecs import GZip, LZ4, Blosc, BZ2, Delta, Zlib, Zstd
except ImportError as e:  # scripts/install-deps installs python3-zarr
    print("skipped:", e)
    sys.exit(77)

from science import answers, check_label_parts, check_stats, command_line, refused  # noqa: E402

ENGINE = {np.bool_: "uint8", np.uint8: "uint8", np.int8: "int8", np.uint16: "uint16", np.int16: "int16",
          np.float16: "float32", np.float32: "float32", np.float64: "float64"}


def engine_type(dtype):
    return ENGINE.get(dtype.type, "float64")


def values_of(arr):
    """The values as imgstat should see them: planes of rows, in the engine's type."""
    v = arr[...]
    typ = engine_type(v.dtype)
    v = v.astype({"uint8": np.uint8, "int8": np.int8, "uint16": np.uint16, "int16": np.int16,
                  "float32": np.float32, "float64": np.float64}[typ])
    return v.reshape((-1,) + v.shape[-2:]), typ


def make_stores(work, rng):
    stores = []  # (name, path, array to compare with, axes or None, extra args)

    def put(name, data, chunks, compressor=Blosc(), order="C", fill_value=0, separator=".", absent=(), dtype=None):
        path = os.path.join(work, name + ".zarr")
        shutil.rmtree(path, ignore_errors=True)
        z = zarr.open(path, mode="w", shape=data.shape, chunks=chunks, dtype=dtype or data.dtype,
                      compressor=compressor, order=order, fill_value=fill_value, dimension_separator=separator)
        z[...] = data
        for key in absent:  # chunks never written: their fill value
            os.remove(os.path.join(path, key))
        stores.append((name, path, zarr.open(path, mode="r"), None, []))

    put("u8-blosc-lz4", rng.integers(0, 256, (131, 97), dtype=np.uint8), (64, 64))
    put("i8-blosc-zstd-bit", rng.integers(-128, 128, (3, 61, 53), dtype=np.int8), (2, 32, 32),
        Blosc(cname="zstd", clevel=3, shuffle=Blosc.BITSHUFFLE))
    put("i16-zstd", rng.integers(-32768, 32768, (5, 73, 67), dtype=np.int16), (2, 37, 41), Zstd(level=3))
    put("u16-be-zlib-F", rng.integers(0, 65536, (7, 101, 89), dtype=np.uint16).astype(">u2"), (3, 50, 50),
        Zlib(level=5), order="F")
    f32 = rng.normal(0, 100, (4, 64, 80)).astype(np.float32)
    f32[0, 3, 5] = np.nan
    f32[1, 7, 9] = np.inf
    f32[2, 0, 0] = -np.inf
    put("f32-gzip-nan-fill", f32, (1, 32, 40), GZip(level=1), fill_value=np.nan, absent=("3.1.0", "2.0.1"))
    put("f64-lz4-4d", rng.normal(5, 2, (2, 3, 45, 39)), (1, 2, 20, 20), LZ4())
    put("i32-blosc-zlib", rng.integers(-2**31, 2**31, (2, 50, 50), dtype=np.int64).astype(np.int32), (1, 25, 25),
        Blosc(cname="zlib", shuffle=Blosc.SHUFFLE))
    put("u32-none", rng.integers(0, 2**32, (40, 41), dtype=np.uint64).astype(np.uint32), (40, 41), None)
    put("u64-blosclz", rng.integers(0, 2**53, (30, 31), dtype=np.uint64), (16, 16), Blosc(cname="blosclz"))
    put("i64-be", rng.integers(-2**40, 2**40, (30, 31), dtype=np.int64).astype(">i8"), (7, 8), Zstd())
    put("bool", rng.integers(0, 2, (2, 33, 35)).astype(bool), (1, 16, 16))
    f16 = rng.normal(0, 1000, (50, 60)).astype(np.float16)
    f16[0, :4] = [np.float16(6e-8), np.float16(-0.0), np.float16(np.inf), np.float16(np.nan)]
    put("f16-nested", f16, (25, 30), separator="/")
    put("u16-fill-7", rng.integers(0, 1000, (3, 40, 40), dtype=np.uint16), (1, 20, 20), fill_value=7,
        absent=("0.0.0", "2.1.1"))
    put("const-i16", np.full((17, 19), -5, dtype=np.int16), (8, 8))

    # OME-Zarr: a t, c, z stack in two levels, as ome-zarr-py writes one.
    path = os.path.join(work, "ome.zarr")
    shutil.rmtree(path, ignore_errors=True)
    root = zarr.open_group(path, mode="w")
    full = rng.integers(0, 4096, (2, 3, 4, 64, 48), dtype=np.uint16)
    root.create_dataset("0", data=full, chunks=(1, 1, 2, 32, 32), compressor=Blosc(cname="zstd"))
    root.create_dataset("1", data=full[..., ::2, ::2], chunks=(1, 1, 4, 32, 24))
    axes = [{"name": "t", "type": "time"}, {"name": "c", "type": "channel"}, {"name": "z", "type": "space"},
            {"name": "y", "type": "space"}, {"name": "x", "type": "space"}]
    root.attrs["multiscales"] = [{"version": "0.4", "name": "cells", "axes": axes,
                                  "datasets": [{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1, 1, 1, 1, 1]}]},
                                               {"path": "1", "coordinateTransformations": [{"type": "scale", "scale": [1, 1, 1, 2, 2]}]}]}]
    stores.append(("ome", path, root["0"], "tcz", []))
    stores.append(("ome level 1", path, root["1"], "tcz", ["--level", "1"]))

    # A plain group: its arrays by path are its series.
    path = os.path.join(work, "group.zarr")
    shutil.rmtree(path, ignore_errors=True)
    g = zarr.open_group(path, mode="w")
    g.create_dataset("a", data=rng.integers(0, 256, (20, 30), dtype=np.uint8), chunks=(10, 10))
    g.create_dataset("b/deep", data=rng.normal(0, 1, (2, 10, 12)).astype(np.float32), chunks=(1, 10, 12))
    stores.append(("group series 0", path, g["a"], None, ["--series", "0"]))
    stores.append(("group series 1", path, g["b/deep"], None, ["--series", "1"]))
    return stores


def check_store(client_bin, where, name, path, arr, axes, extra, how):
    v, typ = values_of(arr)
    what = f"{name} ({how})"
    got = answers(client_bin, where, "--stats", "min_max,sum,stddev,histogram", "--planes", *extra, path)
    if len(got) != 1:
        return fail(f"{what}: {len(got)} answers")
    a = got[0]
    if "error" in a:
        return fail(f"{what}: {a['error']}")
    equal(a.get("format"), "Zarr", what + " format")
    equal(a.get("sample_type"), typ, what + " sample type")
    equal((a.get("width"), a.get("height")), (v.shape[2], v.shape[1]), what + " size")
    ch = a.get("channels", [{}])[0]
    check_stats(ch, v.astype(np.float64) if typ.startswith("float") else v, typ, what)
    planes = v.shape[0]
    if planes > 1:
        equal(a["facts"].get("planes"), planes, what + " planes")
        shape = arr.shape[:-2]
        for p in a.get("planes", []):
            k = p["index"]
            plane = v[k]
            check_stats(p["channels"][0], plane.astype(np.float64) if typ.startswith("float") else plane, typ,
                        f"{what} plane {k}")
            if axes:
                idx = np.unravel_index(k, shape)
                want = {ax: int(i) for ax, i in zip(axes, idx)}
                equal({ax: p.get(ax, 0) for ax in axes}, want, f"{what} plane {k} coordinates")
        equal(len(a.get("planes", [])), planes, what + " plane answers")
    kw = a["facts"].get("keywords", {})
    equal(kw.get("DTYPE"), arr.dtype.str, what + " DTYPE fact")
    equal(kw.get("CHUNKS"), "x".join(str(c) for c in arr.chunks), what + " CHUNKS fact")


def check_refusals(client_bin, where, work, how):
    def store(name, data, **kw):
        path = os.path.join(work, name + ".zarr")
        shutil.rmtree(path, ignore_errors=True)
        z = zarr.open(path, mode="w", shape=data.shape, dtype=data.dtype, **kw)
        z[...] = data
        return path

    refused(client_bin, where, store("complex", np.ones((4, 4), np.complex64), chunks=(4, 4)), "INVALID_ARGUMENT",
            f"complex ({how})")
    refused(client_bin, where, store("delta", np.ones((4, 4), np.int16), chunks=(4, 4), filters=[Delta(dtype="i2")]),
            "INVALID_ARGUMENT", f"filters ({how})")
    refused(client_bin, where, store("bz2", np.ones((4, 4), np.int16), chunks=(4, 4), compressor=BZ2()),
            "INVALID_ARGUMENT", f"bz2 ({how})")
    refused(client_bin, where, store("oned", np.ones(16, np.int16), chunks=(4,)), "INVALID_ARGUMENT", f"1-D ({how})")
    path = store("damaged", np.arange(64 * 64, dtype=np.uint16).reshape(64, 64), chunks=(32, 32))
    with open(os.path.join(path, "1.1"), "r+b") as f:
        f.seek(20)
        f.write(b"\xff" * 16)
    refused(client_bin, where, path, "INVALID_ARGUMENT", f"damaged chunk ({how})")
    path = store("notjson", np.ones((4, 4), np.uint8), chunks=(4, 4))
    with open(os.path.join(path, ".zarray"), "w") as f:
        f.write("{\"zarr_format\": 2, \"shape\": [4, 4")
    refused(client_bin, where, path, "INVALID_ARGUMENT", f".zarray not JSON ({how})")
    path = os.path.join(work, "planes.zarr")
    shutil.rmtree(path, ignore_errors=True)
    zarr.open(path, mode="w", shape=(10**7, 2, 2), chunks=(10**6, 2, 2), dtype=np.uint8)
    refused(client_bin, where, path, "RESOURCE_EXHAUSTED", f"planes past --max-planes ({how})")
    path = os.path.join(work, "grid.zarr")
    shutil.rmtree(path, ignore_errors=True)
    zarr.open(path, mode="w", shape=(20000, 20000), chunks=(1, 1), dtype=np.uint8)
    refused(client_bin, where, path, "RESOURCE_EXHAUSTED", f"a grid of 4e8 chunks ({how})")
    # Chunks of 4096 planes: a pass over them would hold 64 GiB, past the decode memory.
    path = os.path.join(work, "slab.zarr")
    shutil.rmtree(path, ignore_errors=True)
    zarr.open(path, mode="w", shape=(4096, 4096, 4096), chunks=(4096, 64, 64), dtype=np.uint8)
    refused(client_bin, where, path, "RESOURCE_EXHAUSTED", f"a pass past the decode memory ({how})")


def check_labels(client_bin, where, work, how, rng):
    """A label store over its image store: each label's statistics."""
    img = rng.normal(0, 1, (3, 40, 50)).astype(np.float32)
    labels = rng.integers(0, 7, img.shape).astype(np.uint16)
    for name, data in (("image.zarr", img), ("labels.zarr", labels)):
        path = os.path.join(work, name)
        shutil.rmtree(path, ignore_errors=True)
        z = zarr.open(path, mode="w", shape=data.shape, chunks=(2, 16, 16), dtype=data.dtype)
        z[...] = data
    got = answers(client_bin, where, "--stats", "min_max,sum,stddev", "--labels", os.path.join(work, "labels.zarr"),
                  os.path.join(work, "image.zarr"))
    check_label_parts(got, img, labels, "float32", f"label store ({how})")


def main():
    server_bin, client_bin, work = command_line(__doc__)
    rng = np.random.default_rng(50)
    stores = make_stores(work, rng)
    for name, path, arr, axes, extra in stores:
        check_store(client_bin, ["--local"], name, path, arr, axes, extra, "local")
    check_refusals(client_bin, ["--local"], work, "local")
    check_labels(client_bin, ["--local"], work, "local", rng)
    server, address = start_server(server_bin, work)
    try:
        for name, path, arr, axes, extra in stores:
            check_store(client_bin, ["--server", address], name, path, arr, axes, extra, "server")
        check_refusals(client_bin, ["--server", address], work, "server")
        check_labels(client_bin, ["--server", address], work, "server", rng)
        check_labels(client_bin, ["--server", address, "--no-shm"], work, "server, streamed", rng)
        # A tar the user made of a store (its folder a prefix of every member).
        name, path, arr, axes, extra = stores[4]
        tar = os.path.join(work, "user.tar")
        subprocess.run(["tar", "cf", tar, "-C", work, os.path.basename(path)], check=True)
        check_store(client_bin, ["--server", address], "user tar", tar, arr, axes, extra, "server")
        # Large enough to be streamed and spooled: 16 MiB of float32 in 2 MiB chunks.
        big = rng.normal(0, 1, (16, 512, 512)).astype(np.float32)
        path = os.path.join(work, "streamed.zarr")
        shutil.rmtree(path, ignore_errors=True)
        z = zarr.open(path, mode="w", shape=big.shape, chunks=(2, 512, 512), dtype=big.dtype, compressor=None)
        z[...] = big
        check_store(client_bin, ["--server", address, "--no-shm"], "streamed", path, zarr.open(path, mode="r"), None, [],
                    "server, streamed")
        # A folder holding stores: each store one input, not walked into; a
        # group's arrays each an answer.
        folder = os.path.join(work, "folder")
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(os.path.join(work, "ome.zarr"), os.path.join(folder, "ome.zarr"))
        shutil.copytree(os.path.join(work, "group.zarr"), os.path.join(folder, "deeper", "group.zarr"))
        got = answers(client_bin, ["--server", address], "--stats", "min_max", folder)
        equal(sorted(os.path.relpath(a["file"], folder) for a in got),
              ["deeper/group.zarr [series 0]", "deeper/group.zarr [series 1]", "ome.zarr"], "a folder's stores")
    finally:
        server.terminate()
        server.wait()
    finish(f"Zarr: {len(stores)} arrays against zarr-python and numpy, --local and a live server")


if __name__ == "__main__":
    main()
