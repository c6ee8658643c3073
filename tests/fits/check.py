#!/usr/bin/python3
"""FITS files through imgstat-client --local and a live server, against
astropy.io.fits and numpy over the same values.

    check.py SERVER_BIN CLIENT_BIN WORK

Each file is written here by astropy: every BITPIX, the scalings that keep
an integer type (BZERO -128, 32768, 2^31) and those that do not, BLANK with
and without scaling, NaN and infinities, cubes and 4-D images (NAXIS3 and
NAXIS4 as planes), several image HDUs with a table between them (series),
each tile compression (Rice, GZIP 1 and 2, HCOMPRESS, PLIO, quantized floats
with dithering) and a gzip-compressed file. The values are BZERO + BSCALE *
stored in float64 with BLANK pixels NaN (astropy's own scaled data agrees
to its float32 rounding); count, NaN and infinity counts, min, max and the
integer histogram equal, sum, mean and stddev within 1e-12 relative; each
plane's answer against its plane; the header facts as written. Then the
refusals: a truncated file, a damaged header, a cube over --max-planes, an
image over the pixel limit, a gzip bomb.
"""
import gzip
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from live_server import start_server  # noqa: E402
from verdicts import close, equal, fail, finish  # noqa: E402

try:
    import numpy as np
    from astropy.io import fits
except ImportError as e:  # scripts/install-deps installs python3-numpy and python3-astropy
    print("skipped:", e)
    sys.exit(77)
from science import answers, check_stats, command_line, refused  # noqa: E402

def values_of(hdu_raw, hdu_scaled):
    """(float64 values with BLANK pixels NaN, the type imgstat should answer in)."""
    raw = np.asarray(hdu_raw.data)
    h = hdu_raw.header
    bitpix = h["BITPIX"] if "ZBITPIX" not in h else h["ZBITPIX"]
    bzero, bscale = float(h.get("BZERO", 0)), float(h.get("BSCALE", 1))
    blank = h.get("BLANK") if bitpix > 0 else None
    if bitpix < 0:
        typ = "float32" if bitpix == -32 and (bzero, bscale) == (0, 1) else "float64"
    else:
        unscaled = (bzero, bscale) == (0, 1)
        offset = bscale == 1 and (bitpix, bzero) in ((8, -128), (16, 32768))
        if blank is not None:
            typ = "float32" if bitpix <= 16 and (unscaled or offset) else "float64"
        else:
            typ = {(8, True): "uint8", (16, True): "int16"}.get((bitpix, unscaled))
            typ = typ or {(8, True): "int8", (16, True): "uint16"}.get((bitpix, offset)) or "float64"
    v = raw.astype(np.float64) * bscale + bzero if bitpix > 0 else raw.astype(np.float64)
    if bitpix < 0 and (bzero, bscale) != (0, 1):
        v = raw.astype(np.float64) * bscale + bzero
    if blank is not None:
        v[raw == blank] = np.nan
    # astropy's own reading of the values (float32 for scaled 8- and 16-bit
    # data: within its rounding; BLANK of 0 it leaves as 0, an astropy quirk).
    s = np.asarray(hdu_scaled.data, dtype=np.float64)
    if not (blank == 0):
        ok = np.isfinite(v)
        if not np.array_equal(np.isnan(s), np.isnan(v)) or (ok.any() and not np.allclose(s[ok], v[ok], rtol=1e-6)):
            fail(f"the test's values disagree with astropy's scaled data (HDU of BITPIX {bitpix})")
    return v, typ


def make_files(work, rng):
    """[(name, path)]: the files every check reads."""
    files = []

    def put(name, hdus):
        path = os.path.join(work, name)
        fits.HDUList(hdus).writeto(path, overwrite=True)
        files.append((name, path))

    def header(hdu, **cards):
        for k, v in cards.items():
            hdu.header[k.replace("_", "-")] = v
        return hdu

    u8 = rng.integers(0, 256, (31, 37), dtype=np.uint8)
    u8[0, 0], u8[1, 1] = 0, 255
    put("uint8.fits", [header(fits.PrimaryHDU(u8), OBJECT="NGC 1300", TELESCOP="VLT", INSTRUME="FORS2",
                              FILTER="R_SPECIAL", EXPTIME=120.5, DATE_OBS="2026-11-27T01:02:03", BUNIT="adu")])
    put("int8.fits", [fits.PrimaryHDU(rng.integers(-128, 128, (17, 19), dtype=np.int8))])
    put("int16-cube.fits", [fits.PrimaryHDU(rng.integers(-32768, 32768, (3, 41, 29), dtype=np.int16))])
    put("uint16.fits", [fits.PrimaryHDU(rng.integers(0, 65536, (23, 59), dtype=np.uint16))])
    put("int32.fits", [fits.PrimaryHDU(rng.integers(-2**31, 2**31, (13, 11), dtype=np.int32))])
    put("uint32.fits", [fits.PrimaryHDU(rng.integers(0, 2**32, (7, 13), dtype=np.uint32))])
    put("int64.fits", [fits.PrimaryHDU(rng.integers(-2**52, 2**52, (5, 7), dtype=np.int64))])
    f32 = rng.normal(1000, 50, (2, 3, 29, 31)).astype(np.float32)  # NAXIS4: planes over NAXIS3 then NAXIS4
    f32[0, 1, 2, 3], f32[1, 2, 0, 0], f32[0, 0, 5, 5], f32[1, 0, 7, 1] = np.nan, np.nan, np.inf, -np.inf
    put("float32-4d.fits", [fits.PrimaryHDU(f32)])
    f64 = rng.normal(-3, 1e-3, (43, 47))
    f64[10:12, 10:20] = np.nan
    put("float64.fits", [fits.PrimaryHDU(f64)])
    blank = rng.integers(-1000, 1000, (19, 21), dtype=np.int16)
    blank[3, :] = -32768
    h = fits.PrimaryHDU(blank)
    h.header["BLANK"] = -32768
    put("blank-int16.fits", [h])
    h = fits.PrimaryHDU(blank.copy(), do_not_scale_image_data=True)
    h.header["BSCALE"], h.header["BZERO"], h.header["BLANK"] = 0.25, 17.5, -32768
    put("scaled-blank-int16.fits", [h])
    h = fits.PrimaryHDU(rng.integers(-10**6, 10**6, (9, 10), dtype=np.int32), do_not_scale_image_data=True)
    h.header["BSCALE"], h.header["BZERO"] = 1e-3, -2.5
    put("scaled-int32.fits", [h])
    # Several image HDUs and a table among them: each image a series.
    table = fits.BinTableHDU.from_columns([fits.Column(name="flux", format="E", array=np.arange(4.0))])
    put("mef.fits", [fits.PrimaryHDU(), fits.ImageHDU(rng.normal(0, 1, (12, 14)).astype(np.float32), name="SCI"),
                     table, fits.ImageHDU(rng.integers(0, 4096, (2, 9, 8), dtype=np.int16), name="DQ")])
    # Tile compression, as fpack and astropy write it.
    i16 = rng.integers(-2000, 2000, (64, 67), dtype=np.int16)
    for kind in ("RICE_1", "GZIP_1", "GZIP_2", "HCOMPRESS_1"):
        put(f"{kind.lower()}.fits.fz", [fits.PrimaryHDU(), fits.CompImageHDU(i16, compression_type=kind)])
    put("plio_1.fits.fz", [fits.PrimaryHDU(), fits.CompImageHDU(np.abs(i16).astype(np.int32), compression_type="PLIO_1")])
    qf = rng.normal(100, 10, (48, 53)).astype(np.float32)
    qf[4, 4] = np.nan
    put("rice-quantized.fits.fz", [fits.PrimaryHDU(), fits.CompImageHDU(qf, compression_type="RICE_1",
                                                                          quantize_level=16,
                                                                          quantize_method=1)])
    put("gzip-lossless-float.fits.fz", [fits.PrimaryHDU(), fits.CompImageHDU(qf, compression_type="GZIP_2",
                                                                               quantize_level=0)])
    # A gzip-compressed file, as archives serve them.
    with open(os.path.join(work, "float64.fits"), "rb") as f:
        raw = f.read()
    path = os.path.join(work, "float64.fits.gz")
    with gzip.open(path, "wb") as f:
        f.write(raw)
    files.append(("float64.fits.gz", path))
    return files


def image_hdus(path):
    """[(raw HDU, scaled HDU)] of each image HDU with data, as imgstat's series."""
    raw = fits.open(path, do_not_scale_image_data=True, uint=False)
    scaled = fits.open(path)
    out = [(r, s) for r, s in zip(raw, scaled)
           if (r.is_image or isinstance(r, fits.CompImageHDU)) and r.data is not None and r.data.size]
    return out


def check_file(client_bin, where, name, path, how):
    hdus = image_hdus(path)
    got = answers(client_bin, where, "--stats", "min_max,sum,stddev,histogram", "--planes", path)
    equal(len(got), len(hdus), f"{name} ({how}) entries, one per image HDU")
    for k, (answer, (r, s)) in enumerate(zip(got, hdus)):
        what = f"{name} ({how}) series {k}"
        v, typ = values_of(r, s)
        equal(answer.get("format"), "FITS", what + " format")
        equal(answer.get("sample_type"), typ, what + " sample type")
        equal((answer.get("width"), answer.get("height")), (v.shape[-1], v.shape[-2] if v.ndim > 1 else 1), what + " size")
        if not answer.get("channels"):
            fail(what + ": no channels")
            continue
        check_stats(answer["channels"][0], v, typ, what)
        planes = v.reshape(-1, v.shape[-2] if v.ndim > 1 else 1, v.shape[-1])
        if planes.shape[0] > 1:
            equal(answer["facts"].get("planes"), planes.shape[0], what + " planes")
            got_planes = answer.get("planes", [])
            equal(len(got_planes), planes.shape[0], what + " plane answers")
            for p, plane in zip(got_planes, planes):
                check_stats(p["channels"][0], plane, typ, f"{what} plane {p['index']}")
        bitpix = r.header.get("ZBITPIX", r.header["BITPIX"])
        equal(answer["facts"].get("bit_depth"), abs(bitpix), what + " bit_depth (BITPIX)")
        kw = answer["facts"].get("keywords", {})
        equal(kw.get("BITPIX"), str(bitpix), what + " BITPIX fact")
        for key in ("OBJECT", "TELESCOP", "INSTRUME", "FILTER", "DATE-OBS", "BUNIT", "EXTNAME"):
            if key in s.header and not (key == "EXTNAME" and isinstance(s, fits.CompImageHDU)):
                equal(kw.get(key), str(s.header[key]), f"{what} {key} fact")
        if "EXPTIME" in s.header:
            close(float(kw.get("EXPTIME", "nan")), float(s.header["EXPTIME"]), 0, what + " EXPTIME fact")


def check_refusals(client_bin, where, work, rng, how):
    u = rng.integers(0, 100, (64, 64), dtype=np.int16)
    path = os.path.join(work, "whole.fits")
    fits.PrimaryHDU(u).writeto(path, overwrite=True)
    with open(path, "rb") as f:
        whole = f.read()
    cut = os.path.join(work, "truncated.fits")
    with open(cut, "wb") as f:
        f.write(whole[: 2880 + 1000])
    refused(client_bin, where, cut, "INVALID_ARGUMENT", f"truncated FITS ({how})")
    bad = os.path.join(work, "bad-header.fits")
    with open(bad, "wb") as f:
        f.write(whole[:80] + b"NAXIS   = 'not a number'" + b" " * 56 + whole[160:])
    refused(client_bin, where, bad, "INVALID_ARGUMENT", f"damaged header ({how})")
    # Headers declaring what no file holds: refused before anything is allocated.
    def header_only(cards):
        text = "".join(f"{c:<80}" for c in cards + ["END"])
        return (text + " " * (-len(text) % 2880)).encode()
    huge = os.path.join(work, "huge-naxis.fits")
    with open(huge, "wb") as f:
        f.write(header_only(["SIMPLE  =                    T", "BITPIX  =                  -32", "NAXIS   =                    3",
                             "NAXIS1  =                 1000", "NAXIS2  =                 1000",
                             "NAXIS3  =            100000000"]))
    refused(client_bin, where, huge, "RESOURCE_EXHAUSTED", f"NAXIS3 past --max-planes ({how})")
    wide = os.path.join(work, "wide.fits")
    with open(wide, "wb") as f:
        f.write(header_only(["SIMPLE  =                    T", "BITPIX  =                   16", "NAXIS   =                    2",
                             "NAXIS1  =           2000000000", "NAXIS2  =           2000000000"]))
    refused(client_bin, where, wide, "RESOURCE_EXHAUSTED", f"NAXIS1 x NAXIS2 past the pixel limit ({how})")
    # 256 MiB of zeros in a tiny gzip file: past --max-decode-memory of 64 MiB on the server below.
    return huge, wide


def main():
    server_bin, client_bin, work = command_line(__doc__)
    rng = np.random.default_rng(50)
    files = make_files(work, rng)
    for name, path in files:
        check_file(client_bin, ["--local"], name, path, "local")
    check_refusals(client_bin, ["--local"], work, rng, "local")
    # Series chosen by --series: the DQ image of mef.fits alone.
    got = answers(client_bin, ["--local"], "--series", "1", "--stats", "min_max", os.path.join(work, "mef.fits"))
    equal([g["facts"].get("keywords", {}).get("EXTNAME") for g in got], ["DQ"], "mef.fits --series 1 is its DQ image")
    server, address = start_server(server_bin, work)
    try:
        for name, path in files:
            check_file(client_bin, ["--server", address], name, path, "server")
        check_refusals(client_bin, ["--server", address], work, rng, "server")
        # A FITS of 4 MiB and more is streamed to the server and spooled.
        big = rng.normal(0, 1, (8, 256, 512)).astype(np.float32)
        big[3, 100, 100] = np.nan
        path = os.path.join(work, "streamed.fits")
        fits.PrimaryHDU(big).writeto(path, overwrite=True)
        check_file(client_bin, ["--server", address, "--no-shm"], "streamed.fits", path, "server, streamed")
    finally:
        server.terminate()
        server.wait()
    bomb = os.path.join(work, "bomb.fits.gz")
    with gzip.open(bomb, "wb") as f:
        f.write(b"SIMPLE  =                    T" + b" " * 50)
        zeros = bytes(1 << 20)
        for _ in range(256):
            f.write(zeros)
    server, address = start_server(server_bin, work, "--max-decode-memory", str(64 << 20), log_name="server-small.log")
    try:
        refused(client_bin, ["--server", address], bomb, "RESOURCE_EXHAUSTED", "a gzip FITS inflating past the decode memory")
        got = answers(client_bin, ["--server", address], "--stats", "min_max", os.path.join(work, "uint8.fits"))
        equal(len(got), 1, "the server answers after the bomb")
    finally:
        server.terminate()
        server.wait()
    finish(f"FITS: {len(files)} files against astropy and numpy, --local and a live server")


if __name__ == "__main__":
    main()
