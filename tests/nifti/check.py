#!/usr/bin/python3
"""NIfTI-1 and NIfTI-2 volumes through imgstat-client --local and a live
server, against nibabel and numpy over the same values.

    check.py SERVER_BIN CLIENT_BIN WORK

Each file is written here by nibabel: every datatype imgstat reads (uint8,
int8, uint16, int16, int32, uint32, int64, uint64, float32, float64, RGB24,
RGBA32), with and without scl_slope/scl_inter, big- and little-endian,
NIfTI-1 and -2, gzip-compressed, .hdr/.img pairs (the .hdr named), 3-D (z planes) and 4-D (t points). The
values are nibabel's: get_fdata() where scaled or wider than an engine type
(float64), the stored type otherwise. Count, NaN counts, min, max and the
integer histogram equal, sum, mean and stddev within 1e-12 relative; each
plane's answer and its z and t; each time point's volume (--tiles 1x1xT);
the header facts. Then the refusals: complex data, a pair's .hdr without
its .img, a pair whose .img is short, a truncated file, dim[0] of 9, dimensions whose planes pass --max-planes.
"""
import gzip
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from live_server import start_server  # noqa: E402
from verdicts import equal, fail, finish  # noqa: E402

try:
    import numpy as np
    import nibabel as nib
except ImportError as e:  # scripts/install-deps installs python3-numpy and python3-nibabel
    print("skipped:", e)
    sys.exit(77)

from science import answers, check_label_parts, check_stats, command_line, refused  # noqa: E402


def patch_scaling(path, slope, inter, big):
    """scl_slope and scl_inter written into a saved file's header."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = bytearray(f.read())
    order = ">" if big else "<"
    if int.from_bytes(raw[:4], "big" if big else "little") == 348:
        raw[112:120] = struct.pack(order + "ff", slope, inter)
    else:
        raw[176:192] = struct.pack(order + "dd", slope, inter)
    with opener(path, "wb") as f:
        f.write(raw)


def make_files(work, rng):
    """[(name, path, values (z..., y, x[, c]) as imgstat should see them, type)]."""
    files = []

    def put(name, data, typ, values=None, slope=None, inter=None, cls=nib.Nifti1Image, big=False):
        img = cls(data, np.eye(4), dtype=data.dtype)
        if big:
            img = cls(data, np.eye(4), header=img.header.as_byteswapped(">"), dtype=data.dtype)
        img.header["descrip"] = b"imgstat test " + name.encode()
        img.header.set_xyzt_units("mm", "sec")
        img.header.set_zooms((0.5, 0.75, 2.0, 1.5)[: data.ndim])
        path = os.path.join(work, name)
        nib.save(img, path)
        if slope is not None:  # nibabel sets its own scaling as it writes: patched after
            patch_scaling(path, slope, inter, big)
        files.append((name, path, typ))

    shape = (37, 23, 5)  # x, y, z: planes are z
    put("uint8.nii", rng.integers(0, 256, shape, dtype=np.uint8), "uint8")
    put("int8.nii", rng.integers(-128, 128, shape, dtype=np.int8), "int8")
    put("uint16.nii", rng.integers(0, 65536, shape, dtype=np.uint16), "uint16")
    put("int16-big-endian.nii", rng.integers(-32768, 32768, shape, dtype=np.int16), "int16", big=True)
    put("int32.nii", rng.integers(-2**31, 2**31, shape, dtype=np.int32), "float64")
    put("uint32.nii", rng.integers(0, 2**32, shape, dtype=np.uint32), "float64")
    put("int64.nii", rng.integers(-2**52, 2**52, shape, dtype=np.int64), "float64")
    put("uint64.nii", rng.integers(0, 2**53, shape, dtype=np.uint64), "float64")
    f32 = rng.normal(0, 1, (29, 31, 3, 4)).astype(np.float32)  # 4-D: 3 z by 4 t
    f32[1, 2, 0, 1], f32[3, 3, 2, 3], f32[0, 0, 1, 0] = np.nan, np.inf, -np.inf
    put("float32-4d.nii.gz", f32, "float32")
    f64 = rng.normal(5, 2, shape)
    f64[2, 2, 2] = np.nan
    put("float64-big-endian.nii", f64, "float64", big=True)
    put("int16-scaled.nii.gz", rng.integers(-3000, 3000, shape, dtype=np.int16), "float64", slope=0.125, inter=-1024)
    put("uint8-slope-zero.nii", rng.integers(0, 256, shape, dtype=np.uint8), "uint8", slope=0.0, inter=5)
    put("float32-scaled-nifti2.nii", rng.normal(0, 1, shape).astype(np.float32), "float64", slope=3.0, inter=0.5,
        cls=nib.Nifti2Image)
    put("int16-nifti2.nii.gz", rng.integers(-32768, 32768, (16, 9, 2, 2), dtype=np.int16), "int16", cls=nib.Nifti2Image)
    rgb = np.zeros((13, 11, 3), dtype=[("R", "u1"), ("G", "u1"), ("B", "u1")])
    for k in "RGB":
        rgb[k] = rng.integers(0, 256, rgb.shape, dtype=np.uint8)
    put("rgb24.nii", rgb, "uint8")
    rgba = np.zeros((7, 5, 2), dtype=[("R", "u1"), ("G", "u1"), ("B", "u1"), ("A", "u1")])
    for k in "RGBA":
        rgba[k] = rng.integers(0, 256, rgba.shape, dtype=np.uint8)
    put("rgba32.nii", rgba, "uint8")
    # Pairs: the .hdr named, its .img sent with it.
    put("int16-pair.hdr", rng.integers(-32768, 32768, (19, 17, 3), dtype=np.int16), "int16", cls=nib.Nifti1Pair)
    put("uint16-scaled-pair.hdr", rng.integers(0, 4000, (8, 9, 2, 2), dtype=np.uint16), "float64", slope=0.5,
        inter=-100, cls=nib.Nifti1Pair, big=True)
    put("float32-nifti2-pair.hdr", rng.normal(0, 1, (12, 10, 4)).astype(np.float32), "float32", cls=nib.Nifti2Pair)
    return files


def values_of(path):
    """(values (planes, y, x, channels) as imgstat should see them), from nibabel."""
    img = nib.load(path)
    raw = np.asanyarray(img.dataobj)
    if raw.dtype.names:  # RGB24, RGBA32: the channels, unscaled
        v = np.stack([raw[k] for k in raw.dtype.names], axis=-1)
    else:
        slope, inter = img.header.get_slope_inter()
        scaled = slope is not None and (slope, inter) != (1.0, 0.0)
        v = img.get_fdata() if scaled or raw.dtype.itemsize > 4 or raw.dtype in (np.int32, np.uint32) else raw
        v = v[..., None]
    # nibabel's (x, y, z, t, c) to planes of rows: z fastest, then t.
    x, y = v.shape[0], v.shape[1]
    rest = v.shape[2:-1]
    v = v.reshape((x, y, int(np.prod(rest)) if rest else 1, v.shape[-1]), order="F")
    return np.ascontiguousarray(v.transpose(2, 1, 0, 3)), img


def check_file(client_bin, where, name, path, typ, how):
    v, img = values_of(path)
    what = f"{name} ({how})"
    got = answers(client_bin, where, "--stats", "min_max,sum,stddev,histogram", "--planes", path)
    if len(got) != 1:
        return fail(f"{what}: {len(got)} answers")
    a = got[0]
    equal(a.get("format"), "NIfTI", what + " format")
    equal(a.get("sample_type"), typ, what + " sample type")
    equal((a.get("width"), a.get("height")), (v.shape[2], v.shape[1]), what + " size")
    channels = a.get("channels", [])
    equal(len(channels), v.shape[3], what + " channels")
    for c, ch in enumerate(channels[: v.shape[3]]):
        check_stats(ch, v[..., c].astype(np.float64) if typ.startswith("float") else v[..., c], typ, f"{what} {ch['name']}")
    planes = v.shape[0]
    if planes > 1:
        equal(a["facts"].get("planes"), planes, what + " planes")
        dims = img.header["dim"]
        z = int(dims[3])
        for p in a.get("planes", []):
            k = p["index"]
            equal((p.get("z", 0), p.get("t", 0)), (k % z, k // z), f"{what} plane {k} z, t")
            ch = p["channels"][0]
            plane = v[k, ..., 0]
            check_stats(ch, plane.astype(np.float64) if typ.startswith("float") else plane, typ, f"{what} plane {k}")
        t = planes // z
        if t > 1:  # each time point's volume: the stack cut into t slabs
            vols = answers(client_bin, where, "--stats", "min_max,sum,stddev", "--tiles", f"1x1x{t}", path)
            parts = vols[0].get("parts", []) if vols else []
            equal(len(parts), t, what + " one part per time point")
            for i, part in enumerate(parts):
                vol = v[i * z:(i + 1) * z, ..., 0]
                check_stats(part["channels"][0], vol.astype(np.float64) if typ.startswith("float") else vol, typ,
                            f"{what} volume t={i}")
    kw = a["facts"].get("keywords", {})
    if not img.header["descrip"].tobytes().startswith(b"imgstat test"):
        return
    equal(kw.get("descrip"), "imgstat test " + name, what + " descrip fact")
    equal(kw.get("xyz_units"), "mm", what + " xyz_units fact")
    zooms = img.header.get_zooms()
    equal([float(s) for s in kw.get("pixdim", "").split()], [float(s) for s in zooms], what + " pixdim fact")


def check_refusals(client_bin, where, work, how):
    c64 = nib.Nifti1Image(np.ones((4, 4, 2), dtype=np.complex64), np.eye(4))
    path = os.path.join(work, "complex.nii")
    nib.save(c64, path)
    refused(client_bin, where, path, "INVALID_ARGUMENT", f"complex64 ({how})")
    pair = nib.Nifti1Pair(np.ones((4, 4, 2), dtype=np.int16), np.eye(4))
    nib.save(pair, os.path.join(work, "pair.img"))
    with open(os.path.join(work, "pair.hdr"), "rb") as f, open(os.path.join(work, "lonely.hdr"), "wb") as g:
        g.write(f.read())
    refused(client_bin, where, os.path.join(work, "lonely.hdr"), "INVALID_ARGUMENT", f".hdr without its .img ({how})")
    with open(os.path.join(work, "pair.img"), "r+b") as f:
        f.truncate(20)
    refused(client_bin, where, os.path.join(work, "pair.hdr"), "INVALID_ARGUMENT", f"a pair's short .img ({how})")
    ok = nib.Nifti1Image(np.ones((64, 64, 8), dtype=np.float32), np.eye(4))
    nib.save(ok, os.path.join(work, "whole.nii"))
    raw = open(os.path.join(work, "whole.nii"), "rb").read()
    with open(os.path.join(work, "truncated.nii"), "wb") as f:
        f.write(raw[: len(raw) // 2])
    refused(client_bin, where, os.path.join(work, "truncated.nii"), "INVALID_ARGUMENT", f"truncated ({how})")
    bad = bytearray(raw[:352 + 64])
    bad[40:42] = (9).to_bytes(2, "little")  # dim[0] = 9
    with open(os.path.join(work, "dim0.nii"), "wb") as f:
        f.write(bad)
    refused(client_bin, where, os.path.join(work, "dim0.nii"), "INVALID_ARGUMENT", f"dim[0] 9 ({how})")
    huge = bytearray(raw[:352 + 64])
    for i, d in enumerate((7, 10, 10, 30000, 30000, 30000, 1, 1)):
        huge[40 + 2 * i:42 + 2 * i] = d.to_bytes(2, "little")
    with open(os.path.join(work, "huge.nii"), "wb") as f:
        f.write(huge)
    refused(client_bin, where, os.path.join(work, "huge.nii"), "RESOURCE_EXHAUSTED", f"planes past --max-planes ({how})")


def check_labels(client_bin, where, work, how, rng):
    """A segmentation over its volume (uint8 and int16 labels, as tools save them): each label's statistics."""
    img = rng.normal(100, 10, (20, 18, 6)).astype(np.float32)
    seg = rng.integers(-1, 5, (20, 18, 6)).astype(np.int16)
    nib.save(nib.Nifti1Image(img, np.eye(4)), os.path.join(work, "volume.nii.gz"))
    for name, labels in (("seg-uint8.nii.gz", np.abs(seg).astype(np.uint8)), ("seg-int16.nii.gz", seg)):
        nib.save(nib.Nifti1Image(labels, np.eye(4)), os.path.join(work, name))
        got = answers(client_bin, where, "--stats", "min_max,sum,stddev", "--labels", os.path.join(work, name),
                      os.path.join(work, "volume.nii.gz"))
        check_label_parts(got, img, labels, "float32", f"{name} ({how})")


def main():
    server_bin, client_bin, work = command_line(__doc__)
    rng = np.random.default_rng(51)
    files = make_files(work, rng)
    for name, path, typ in files:
        check_file(client_bin, ["--local"], name, path, typ, "local")
    check_refusals(client_bin, ["--local"], work, "local")
    check_labels(client_bin, ["--local"], work, "local", rng)
    server, address = start_server(server_bin, work)
    try:
        for name, path, typ in files:
            check_file(client_bin, ["--server", address], name, path, typ, "server")
        check_refusals(client_bin, ["--server", address], work, "server")
        check_labels(client_bin, ["--server", address], work, "server", rng)
        # Large enough to be streamed: a 4-D .nii.gz of 8 MiB.
        big = rng.normal(0, 1, (128, 128, 16, 8)).astype(np.float32)
        path = os.path.join(work, "streamed.nii.gz")
        nib.save(nib.Nifti1Image(big, np.eye(4)), path)
        check_file(client_bin, ["--server", address, "--no-shm"], "streamed.nii.gz", path, "float32", "server, streamed")
    finally:
        server.terminate()
        server.wait()
    finish(f"NIfTI: {len(files)} volumes against nibabel and numpy, --local and a live server")


if __name__ == "__main__":
    main()
