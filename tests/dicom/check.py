#!/usr/bin/python3
"""DICOM files through imgstat-client --local and a live server, against
pydicom and numpy over the same values.

    check.py SERVER_BIN CLIENT_BIN WORK

Each file is written here by pydicom: CT with RescaleIntercept -1024
(Hounsfield units, int16), MR unscaled, a non-integral slope (float64),
MONOCHROME1 (inverted), Pixel Padding Value and its range (missing),
multi-frame (planes), a private sequence in a UN element of undefined
length (CP-246: its items in implicit VR), a file meta group without its
group length, RGB chunky and planar, YBR_FULL, PALETTE COLOR
(16-bit tables, uncompressed and RLE; packed 8-bit tables mapped from
100, values below and past them; segmented tables of 8 and 16 bits with
discrete, linear and indirect segments; an alpha table; against
apply_color_lut), 1-bit frames
that start inside a byte, signed 8-bit, each
uncompressed transfer syntax (explicit and implicit little endian, explicit
big endian, deflated explicit little endian) and RLE Lossless (pydicom's encoder). The values are pydicom's
pixel_array through apply_modality_lut, then the inversion and padding as
imgstat documents them; --stored-values gives pixel_array itself. Count,
NaN counts, min, max and the integer histogram equal, sum, mean and stddev
within 1e-12 relative; each frame; the facts. Personal data stays out: the
patient's name, ID and birth date written into every file are searched for
in every answer (JSON and table), the server's log and its metrics, and
found nowhere. Then the refusals: a truncated file, one declaring 10^6
frames, a file without pixel data, a deflated data set damaged or cut short,
a segmented palette whose indirect segment replays itself. Then a study folder read with
--dicom-series: two series (a CT whose slices lie along a tilted normal,
named and numbered against their order; an MR with InstanceNumber only and
rescales that differ), each a volume equal to pydicom's slices grouped by
SeriesInstanceUID and ordered as the geometry says, plane by plane. Then
segmentations (SEG, BINARY) over that CT as label volumes and masks: frames
placed by their source image or their position, shuffled, segments missing
from planes; overlapping segments, a frame on no slice and a SEG over raw
pixels refused.
"""
import json
import os
import struct
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from live_server import start_server  # noqa: E402
from verdicts import equal, fail, finish  # noqa: E402

try:
    import numpy as np
    import pydicom
    from pydicom.dataset import Dataset, FileDataset, FileMetaDataset
    from pydicom.pixel_data_handlers.numpy_handler import pack_bits
    from pydicom.pixel_data_handlers.util import apply_color_lut, apply_modality_lut
    from pydicom.uid import (DeflatedExplicitVRLittleEndian, ExplicitVRBigEndian, ExplicitVRLittleEndian,
                             ImplicitVRLittleEndian, RLELossless, generate_uid)
except ImportError as e:  # scripts/install-deps installs python3-numpy and python3-pydicom
    print("skipped:", e)
    sys.exit(77)
from science import answers, check_label_parts, check_stats, command_line, refused  # noqa: E402

SECRETS = ["Doe^Jane", "PID-31337", "19700101", "Saint Elsewhere"]


def dataset(pixels, syntax=ExplicitVRLittleEndian, photometric="MONOCHROME2", signed=False, bits_stored=None,
            planar=0, **attributes):
    """A FileDataset of pixels ((frames,) rows, cols(, 3)) with the patient's data written in."""
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.2"
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = syntax
    ds = FileDataset(None, Dataset(), file_meta=meta, preamble=b"\0" * 128)
    ds.PatientName, ds.PatientID, ds.PatientBirthDate, ds.InstitutionName = SECRETS
    ds.SOPClassUID = meta.MediaStorageSOPClassUID
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.SeriesInstanceUID = generate_uid()
    ds.Modality = attributes.pop("Modality", "OT")
    colour = pixels.ndim == (4 if "NumberOfFrames" in attributes else 3) and pixels.shape[-1] == 3
    ds.SamplesPerPixel = 3 if colour else 1
    ds.PhotometricInterpretation = photometric
    if colour:
        ds.PlanarConfiguration = planar
    frames = attributes.pop("NumberOfFrames", None)
    if frames:
        ds.NumberOfFrames = frames
    shape = pixels.shape[1:] if frames else pixels.shape
    ds.Rows, ds.Columns = shape[0], shape[1]
    ds.BitsAllocated = pixels.dtype.itemsize * 8
    ds.BitsStored = bits_stored or ds.BitsAllocated
    ds.HighBit = ds.BitsStored - 1
    ds.PixelRepresentation = 1 if signed else 0
    for k, v in attributes.items():
        setattr(ds, k, v)
    ds.is_little_endian = syntax != ExplicitVRBigEndian
    ds.is_implicit_VR = syntax == ImplicitVRLittleEndian
    data = pixels
    if colour and planar:
        data = np.moveaxis(pixels, -1, -3)  # RRR GGG BBB
    data = np.ascontiguousarray(data)
    if syntax == ExplicitVRBigEndian:
        data = data.byteswap()
    ds.PixelData = data.tobytes()
    return ds


def palette(ds, descriptor, tables):
    """ds with PALETTE COLOR lookup tables: a descriptor for each and the tables' data."""
    for k, colour in enumerate(("Red", "Green", "Blue")):
        setattr(ds, f"{colour}PaletteColorLookupTableDescriptor", descriptor)
        setattr(ds, f"{colour}PaletteColorLookupTableData", np.ascontiguousarray(tables[k]).tobytes())
    return ds


def add_un_sequence(path):
    """Gives the file a private sequence as CP-246 carries one whose VR is not known: a UN element of
    undefined length, its item's elements in implicit VR (read as explicit, the first has no VR)."""
    raw = open(path, "rb").read()
    at = 132
    while struct.unpack_from("<H", raw, at)[0] <= 0x0009:
        if raw[at + 4:at + 6] in (b"OB", b"OW", b"OF", b"SQ", b"UN", b"UT", b"UC", b"UR", b"OD", b"OL"):
            at += 12 + struct.unpack_from("<I", raw, at + 8)[0]
        else:
            at += 8 + struct.unpack_from("<H", raw, at + 6)[0]
    creator = struct.pack("<HH2sH", 0x0009, 0x0010, b"LO", 8) + b"IMGSTAT "
    item = struct.pack("<HHI", 0x0009, 0x1011, 6) + b"ABCDEF" + struct.pack("<HHI", 0x0009, 0x1012, 2) + b"XY"
    un = (struct.pack("<HH2sHI", 0x0009, 0x1010, b"UN", 0, 0xFFFFFFFF) + struct.pack("<HHI", 0xFFFE, 0xE000, 0xFFFFFFFF)
          + item + struct.pack("<HHI", 0xFFFE, 0xE00D, 0) + struct.pack("<HHI", 0xFFFE, 0xE0DD, 0))
    with open(path, "wb") as f:
        f.write(raw[:at] + creator + un + raw[at:])


def drop_group_length(path):
    """Leaves out the file meta group's length (0002,0000), as some writers do."""
    raw = open(path, "rb").read()
    assert struct.unpack_from("<HH2s", raw, 132) == (0x0002, 0x0000, b"UL")
    with open(path, "wb") as f:
        f.write(raw[:132] + raw[132 + 12:])


def make_files(work, rng):
    """[(name, path, pixel values as imgstat should see them (frames, rows, cols, channels), type)]."""
    files = []

    def put(name, ds, values, typ):
        path = os.path.join(work, name)
        ds.save_as(path, write_like_original=False)
        files.append((name, path, values, typ))

    stored = rng.integers(0, 4096, (37, 41), dtype=np.uint16)  # 12 bits stored
    ct = dataset(stored, Modality="CT", bits_stored=12, RescaleSlope=1, RescaleIntercept=-1024,
                 BodyPartExamined="CHEST", SeriesDescription="AXIAL 1mm", PixelSpacing=[0.5, 0.5], SliceThickness=1.0)
    put("ct-hu.dcm", ct, stored.astype(np.int64) - 1024, "int16")
    put("ct-un-sequence.dcm", ct, stored.astype(np.int64) - 1024, "int16")
    add_un_sequence(files[-1][1])
    mr = rng.integers(0, 65536, (23, 29), dtype=np.uint16)
    put("mr-implicit.dcm", dataset(mr, ImplicitVRLittleEndian, Modality="MR"), mr, "uint16")
    put("mr-big-endian.dcm", dataset(mr, ExplicitVRBigEndian, Modality="MR"), mr, "uint16")
    put("ct-deflated.dcm", dataset(stored, DeflatedExplicitVRLittleEndian, Modality="CT", bits_stored=12, RescaleSlope=1,
                                   RescaleIntercept=-1024), stored.astype(np.int64) - 1024, "int16")
    put("mr-implicit-no-group-length.dcm", dataset(mr, ImplicitVRLittleEndian, Modality="MR"), mr, "uint16")
    drop_group_length(files[-1][1])
    s16 = rng.integers(-2000, 2000, (19, 17), dtype=np.int16)
    put("pt-slope.dcm", dataset(s16, signed=True, Modality="PT", RescaleSlope="0.25", RescaleIntercept="3.5"),
        s16 * 0.25 + 3.5, "float64")
    cr = rng.integers(0, 1024, (31, 33), dtype=np.uint16)
    put("cr-monochrome1.dcm", dataset(cr, photometric="MONOCHROME1", bits_stored=10, Modality="CR"), 1023 - cr.astype(np.int64),
        "uint16")
    pad = rng.integers(0, 3000, (29, 31), dtype=np.uint16)
    pad[0, :] = 0
    pad[1, :5] = 5  # within the padding range 0..7
    ds = dataset(pad, Modality="CT", bits_stored=12, RescaleSlope=1, RescaleIntercept=-1024)
    ds.add_new(0x00280120, "US", 0)
    ds.add_new(0x00280121, "US", 7)
    v = pad.astype(np.float64) - 1024
    v[pad <= 7] = np.nan
    put("ct-padding.dcm", ds, v, "float32")
    frames = rng.integers(0, 256, (4, 13, 15), dtype=np.uint8)
    put("multiframe.dcm", dataset(frames, NumberOfFrames=4, Modality="XA"), frames, "uint8")
    # Deflated, an odd number of deflated bytes (pydicom pads one) and colour.
    put("multiframe-deflated.dcm", dataset(frames, DeflatedExplicitVRLittleEndian, NumberOfFrames=4, Modality="XA"),
        frames, "uint8")
    rgb = rng.integers(0, 256, (11, 9, 3), dtype=np.uint8)
    put("rgb.dcm", dataset(rgb, photometric="RGB", Modality="XC"), rgb, "uint8")
    put("rgb-planar.dcm", dataset(rgb, photometric="RGB", planar=1, Modality="XC"), rgb, "uint8")
    put("ybr-full.dcm", dataset(rgb, photometric="YBR_FULL", Modality="XC"), rgb, "uint8")
    s8 = rng.integers(-128, 128, (7, 9), dtype=np.int8)
    put("int8.dcm", dataset(s8, signed=True), s8, "int8")
    # Bits above BitsStored set (an overlay's, or garbage): not the value, as the standard says
    # (pydicom 2.3 keeps them; GDCM and DCMTK mask them): masked, and a signed value sign-extended.
    high = stored | (rng.integers(0, 16, stored.shape, dtype=np.uint16) << 12)
    put("ct-high-bits.dcm", dataset(high, Modality="CT", bits_stored=12, RescaleSlope=1, RescaleIntercept=-1024),
        stored.astype(np.int64) - 1024, "int16")
    signed12 = rng.integers(-2048, 2048, (21, 19)).astype(np.int16)
    put("signed-12-bits.dcm", dataset(signed12 & 0x0FFF | np.int16(0x5000), signed=True, bits_stored=12, Modality="MR"),
        signed12, "int16")
    # PALETTE COLOR: stored values through the file's tables to R, G, B, as viewers show them.
    index8 = rng.integers(0, 256, (17, 23), dtype=np.uint8)
    tables16 = rng.integers(0, 65536, (3, 256), dtype=np.uint16)
    put("palette-16.dcm", palette(dataset(index8, photometric="PALETTE COLOR", Modality="US"), [256, 0, 16], tables16),
        np.stack([t[index8] for t in tables16], axis=-1), "uint16")
    rle_palette = palette(dataset(index8, photometric="PALETTE COLOR", Modality="US"), [256, 0, 16], tables16)
    rle_palette.compress(RLELossless, index8)
    put("palette-rle.dcm", rle_palette, np.stack([t[index8] for t in tables16], axis=-1), "uint16")
    # 8-bit entries packed, 200 of them from stored value 100: values below take the first
    # entry, past the last the last; 12 bits stored in 16.
    index12 = rng.integers(0, 356, (3, 19, 13), dtype=np.uint16)
    tables8 = rng.integers(0, 256, (3, 200), dtype=np.uint8)
    at = np.clip(index12.astype(np.int64) - 100, 0, 199)
    put("palette-8-from-100.dcm",
        palette(dataset(index12, photometric="PALETTE COLOR", bits_stored=12, NumberOfFrames=3, Modality="US"),
                [200, 100, 8], tables8),
        np.stack([t[at] for t in tables8], axis=-1), "uint8")
    # Segmented tables (PS3.3 C.7.9.2): discrete, linear (halves to even, as numpy rounds) and indirect
    # segments, 16-bit and 8-bit entries; and an alpha table (RGBA). The reference is pydicom's
    # apply_color_lut over the file as read back.
    for bits, name in ((16, "palette-segmented-16.dcm"), (8, "palette-segmented-8.dcm")):
        top = 65535 if bits == 16 else 255
        tables = []
        for k in range(3):
            lo, hi = int(rng.integers(1, top // 3)), int(rng.integers(top // 2, top))
            x = int(rng.integers(0, top - 2))
            # ... then x + 0.5, x + 1, x + 1.5, x + 2: two halves, to even
            seg = [0, 3, lo, hi, lo + 1, 1, 97, hi, 1, 40, lo, 0, 1, x, 1, 4, x + 2]
            if bits == 16:
                seg += [2, 2, 0, 0]  # the first two segments again, from entry 0
                tables.append(np.array(seg, dtype="<u2").tobytes())
            else:
                seg += [2, 2, 0, 0, 0, 0]
                tables.append(np.array(seg, dtype=np.uint8).tobytes())
        entries = 3 + 97 + 40 + 1 + 4 + 3 + 97
        index = rng.integers(0, entries + 20, (2, 13, 11), dtype=np.uint16)
        ds = dataset(index, photometric="PALETTE COLOR", bits_stored=9, NumberOfFrames=2, Modality="NM")
        for k, colour in enumerate(("Red", "Green", "Blue")):
            setattr(ds, f"{colour}PaletteColorLookupTableDescriptor", [entries, 10, bits])
            setattr(ds, f"Segmented{colour}PaletteColorLookupTableData", tables[k])
        path = os.path.join(work, name)
        ds.save_as(path, write_like_original=False)
        back = pydicom.dcmread(path)
        files.append((name, path, apply_color_lut(back.pixel_array, back), f"uint{bits}"))
    alpha = palette(dataset(index8, photometric="PALETTE COLOR", Modality="US"), [256, 0, 16], tables16)
    alpha_table = rng.integers(0, 65536, 256, dtype=np.uint16)
    alpha.AlphaPaletteColorLookupTableData = alpha_table.tobytes()
    put("palette-alpha.dcm", alpha, np.stack([t[index8] for t in (*tables16, alpha_table)], axis=-1), "uint16")
    # 1-bit (a binary segmentation): 3 frames of 7x5, so every frame after the first starts inside a byte.
    seg = (rng.random((3, 7, 5)) < 0.4).astype(np.uint8)
    one_bit = dataset(seg, NumberOfFrames=3, Modality="SEG")
    one_bit.BitsAllocated, one_bit.BitsStored, one_bit.HighBit = 1, 1, 0
    one_bit.PixelData = pack_bits(seg)
    put("seg-1-bit.dcm", one_bit, seg, "uint8")
    rle = dataset(stored.astype(np.uint16), Modality="CT", bits_stored=12, RescaleSlope=1, RescaleIntercept=-1024)
    rle.compress(RLELossless, stored.astype(np.uint16))
    put("ct-rle.dcm", rle, stored.astype(np.int64) - 1024, "int16")
    return files


def as_frames(values, multi):
    v = np.asarray(values)
    if not multi:
        v = v[None]
    if v.ndim == 3:
        v = v[..., None]
    return v


def reference(path):
    """pydicom's modality values of a file, and its stored values."""
    ds = pydicom.dcmread(path)
    arr = ds.pixel_array
    return apply_modality_lut(arr, ds), arr, ds


def check_file(client_bin, where, name, path, values, typ, how, texts):
    what = f"{name} ({how})"
    modality, stored, ds = reference(path)
    multi = int(getattr(ds, "NumberOfFrames", 1) or 1) > 1
    is_palette = ds.PhotometricInterpretation == "PALETTE COLOR"
    if is_palette:
        modality = apply_color_lut(stored, ds)
    v = as_frames(values, multi)
    # The test's values against pydicom's (before imgstat's inversion and padding).
    pyd = as_frames(modality, multi).astype(np.float64)
    ok = np.isfinite(v.astype(np.float64))
    masked = name in ("ct-high-bits.dcm", "signed-12-bits.dcm")  # pydicom keeps the bits above BitsStored
    if not masked and ds.PhotometricInterpretation != "MONOCHROME1" and not np.array_equal(pyd[ok], v.astype(np.float64)[ok]):
        fail(f"{what}: the test's values are not pydicom's")
    got = answers(client_bin, where, "--stats", "min_max,sum,stddev,histogram", "--planes", path)
    texts.append(str(got))
    if len(got) != 1:
        return fail(f"{what}: {len(got)} answers")
    a = got[0]
    equal(a.get("format"), "DICOM", what + " format")
    equal(a.get("sample_type"), typ, what + " sample type")
    equal((a.get("width"), a.get("height")), (v.shape[2], v.shape[1]), what + " size")
    chans = a.get("channels", [])
    equal(len(chans), v.shape[3], what + " channels")
    for c, ch in enumerate(chans[: v.shape[3]]):
        x = v[..., c]
        check_stats(ch, x.astype(np.float64) if typ.startswith("float") else x, typ, f"{what} {ch['name']}")
    if v.shape[0] > 1:
        for p in a.get("planes", []):
            x = v[p["index"], ..., 0]
            check_stats(p["channels"][0], x, typ, f"{what} frame {p['index']}")
    kw = a["facts"].get("keywords", {})
    equal(kw.get("Modality"), ds.Modality, what + " Modality fact")
    equal(kw.get("TransferSyntaxUID"), str(ds.file_meta.TransferSyntaxUID), what + " transfer syntax fact")
    # Its name as the standard (PS3.6) gives it; pydicom's may leave off what follows a colon.
    equal(kw.get("TransferSyntax", "").split(":")[0], ds.file_meta.TransferSyntaxUID.name, what + " transfer syntax name")
    if "BodyPartExamined" in ds:
        equal(kw.get("BodyPartExamined"), ds.BodyPartExamined, what + " BodyPartExamined fact")
    if (v.shape[3] == 1 and ds.PhotometricInterpretation.startswith("MONO") or is_palette) and not masked:
        # --stored-values: pixel_array as pydicom gives it (a palette's indices).
        raw = answers(client_bin, where, "--stored-values", "--stats", "min_max,sum,stddev", path)
        texts.append(str(raw))
        if raw:
            st = as_frames(stored, multi)[..., 0]
            st = st.astype(st.dtype.newbyteorder("="))
            styp = {np.dtype(np.uint8): "uint8", np.dtype(np.int8): "int8", np.dtype(np.uint16): "uint16",
                    np.dtype(np.int16): "int16"}[st.dtype]
            equal(raw[0].get("sample_type"), styp, what + " stored values' type")
            check_stats(raw[0]["channels"][0], st, styp, what + " stored values")
    table = subprocess.run([client_bin, *where, path], capture_output=True, text=True, timeout=600)
    texts.append(table.stdout + table.stderr)


def check_refusals(client_bin, where, work, how):
    ok = dataset(np.ones((64, 64), dtype=np.uint16))
    path = os.path.join(work, "whole.dcm")
    ok.save_as(path, write_like_original=False)
    raw = open(path, "rb").read()
    with open(os.path.join(work, "truncated.dcm"), "wb") as f:
        f.write(raw[: len(raw) - 4000])
    refused(client_bin, where, os.path.join(work, "truncated.dcm"), "INVALID_ARGUMENT", f"truncated ({how})")
    many = dataset(np.ones((2, 4, 4), dtype=np.uint8), NumberOfFrames=2)
    many.NumberOfFrames = 1000000
    many.save_as(os.path.join(work, "many-frames.dcm"), write_like_original=False)
    refused(client_bin, where, os.path.join(work, "many-frames.dcm"), "INVALID_ARGUMENT", f"10^6 frames declared ({how})")

    short = palette(dataset(np.ones((4, 4), dtype=np.uint8), photometric="PALETTE COLOR"), [300, 0, 16],
                    np.ones((3, 256), dtype=np.uint16))
    short.save_as(os.path.join(work, "palette-short.dcm"), write_like_original=False)
    refused(client_bin, where, os.path.join(work, "palette-short.dcm"), "INVALID_ARGUMENT",
            f"palette tables shorter than their descriptor ({how})")

    deflated = dataset(np.arange(4096, dtype=np.uint16).reshape(64, 64), DeflatedExplicitVRLittleEndian)
    deflated.save_as(os.path.join(work, "deflated.dcm"), write_like_original=False)
    raw = bytearray(open(os.path.join(work, "deflated.dcm"), "rb").read())
    meta_end = 132 + 12 + struct.unpack_from("<I", raw, 132 + 8)[0]  # after (0002,0000) and the group it counts
    raw[meta_end] |= 0x06  # the first block's type 3, which no deflate stream has
    with open(os.path.join(work, "deflated-damaged.dcm"), "wb") as f:
        f.write(raw)
    refused(client_bin, where, os.path.join(work, "deflated-damaged.dcm"), "INVALID_ARGUMENT",
            f"a damaged deflated data set ({how})")
    with open(os.path.join(work, "deflated-cut.dcm"), "wb") as f:
        f.write(raw[: len(raw) - 300])
    refused(client_bin, where, os.path.join(work, "deflated-cut.dcm"), "INVALID_ARGUMENT",
            f"a deflated data set cut short ({how})")

    # An indirect segment that replays the table from its start, itself included: refused, not followed
    # for ever.
    looping = dataset(np.ones((4, 4), dtype=np.uint8), photometric="PALETTE COLOR")
    for colour in ("Red", "Green", "Blue"):
        setattr(looping, f"{colour}PaletteColorLookupTableDescriptor", [8, 0, 16])
        setattr(looping, f"Segmented{colour}PaletteColorLookupTableData", np.array([0, 1, 5, 2, 2, 0, 0], "<u2").tobytes())
    looping.save_as(os.path.join(work, "palette-looping.dcm"), write_like_original=False)
    refused(client_bin, where, os.path.join(work, "palette-looping.dcm"), "INVALID_ARGUMENT",
            f"a segmented palette replaying itself ({how})")

    nopix = dataset(np.ones((4, 4), dtype=np.uint8))
    del nopix.PixelData
    nopix.save_as(os.path.join(work, "no-pixels.dcm"), write_like_original=False)
    refused(client_bin, where, os.path.join(work, "no-pixels.dcm"), "INVALID_ARGUMENT", f"no pixel data ({how})")


def make_series(work, rng):
    """A study folder of two series, file names shuffled: a CT whose slices lie along a tilted normal
    (InstanceNumber against their order), and an MR with InstanceNumber only, whose rescales differ
    between slices. Returns the folder and, per series in the order its first file comes, the
    reference volume (pydicom's modality values, ordered as the standard's geometry says) and type."""
    folder = os.path.join(work, "study")
    if os.path.isdir(folder):
        import shutil
        shutil.rmtree(folder)
    os.makedirs(os.path.join(folder, "mr"))
    a = 0.3
    row, col = np.array([np.cos(a), np.sin(a), 0.0]), np.array([0.0, 0.0, -1.0])
    normal = np.cross(row, col)
    names = [f"{n:08x}" for n in rng.permutation(1 << 20)[:12]]
    ct = generate_uid()
    for k, z in enumerate(rng.permutation(12)):
        pixels = rng.integers(0, 4096, (40, 36), dtype=np.uint16)
        ds = dataset(pixels, Modality="CT", bits_stored=12, RescaleSlope=1, RescaleIntercept=-1024,
                     ImageOrientationPatient=[float(v) for v in (*row, *col)],
                     ImagePositionPatient=[float(v) for v in (np.array([10.0, -5.0, 3.0]) + 2.5 * float(z) * normal)],
                     InstanceNumber=int(12 - k))
        ds.SeriesInstanceUID = ct
        ds.save_as(os.path.join(folder, names[k] + (".dcm" if k % 2 else "")), write_like_original=False)
    mr = generate_uid()
    for k in range(5):
        pixels = rng.integers(0, 1000, (40, 36), dtype=np.uint16)
        ds = dataset(pixels, Modality="MR", RescaleSlope=0.5 if k % 2 else 1, RescaleIntercept=0,
                     InstanceNumber=int((k * 3) % 5 + 1))
        ds.SeriesInstanceUID = mr
        ds.save_as(os.path.join(folder, "mr", f"im{k}.dcm"), write_like_original=False)
    with open(os.path.join(folder, "notes.txt"), "w") as f:
        f.write("not an image")
    # The reference: pydicom's values, grouped and ordered.
    found = []
    for root, _, files in os.walk(folder):
        for f in files:
            rel = os.path.relpath(os.path.join(root, f), folder)
            if f.endswith(".txt"):
                continue
            ds = pydicom.dcmread(os.path.join(folder, rel))
            found.append((rel, ds))
    found.sort(key=lambda x: x[0])
    uids = []
    for _, ds in found:
        if ds.SeriesInstanceUID not in uids:
            uids.append(ds.SeriesInstanceUID)
    series = []
    for uid in uids:
        group = [ds for _, ds in found if ds.SeriesInstanceUID == uid]
        if all("ImagePositionPatient" in d for d in group):
            o = np.array(group[0].ImageOrientationPatient, dtype=float)
            n = np.cross(o[:3], o[3:])
            group.sort(key=lambda d: float(np.dot(np.array(d.ImagePositionPatient, dtype=float), n)))
            order = "ImagePositionPatient"
        else:
            group.sort(key=lambda d: int(d.InstanceNumber))
            order = "InstanceNumber"
        vol = np.stack([apply_modality_lut(d.pixel_array, d) for d in group])
        # Integral rescales keep integers (the CT: int16 HU); the MR's 0.5 in some slices makes all float64.
        integral = all(float(d.RescaleSlope).is_integer() and float(d.RescaleIntercept).is_integer() for d in group)
        typ = "int16" if integral else "float64"
        series.append((vol, typ, order, len(group)))
    return folder, series


def check_series(client_bin, where, work, how, texts, made):
    folder, series = made
    what = f"series ({how})"
    got = answers(client_bin, where, "--dicom-series", "--planes", "--stats", "min_max,sum,stddev,histogram", folder)
    texts.append(json.dumps(got))
    equal([a.get("file") for a in got], [f"{folder} [series {i}]" for i in range(len(series))], what + " answers")
    for i, (a, (vol, typ, order, slices)) in enumerate(zip(got, series)):
        w = f"{what} {i}"
        equal(a.get("sample_type"), typ, w + " type")
        kw = a["facts"].get("keywords", {})
        equal((kw.get("SliceOrder"), kw.get("Slices")), (order, str(slices)), w + " order and slices")
        v = vol.astype(np.float64) if typ == "float64" else vol.astype(np.int16)
        check_stats(a["channels"][0], v, typ, w)
        planes = a.get("planes", [])
        equal(len(planes), vol.shape[0], w + " plane answers")
        for p in planes:
            k = p["index"]
            equal(p.get("z"), k, f"{w} plane {k} z")
            check_stats(p["channels"][0], v[k], typ, f"{w} plane {k}")
    # The CT's files named one by one: the same volume.
    vol, typ, order, slices = series[0]
    files = sorted(os.path.join(folder, f) for f in os.listdir(folder) if os.path.isfile(os.path.join(folder, f))
                   and not f.endswith(".txt"))
    got = answers(client_bin, where, "--dicom-series", "--planes", "--stats", "min_max,sum,stddev,histogram", *files)
    equal(len(got), 1, what + " a list of files is one input")
    if got:
        v = vol.astype(np.int16)
        check_stats(got[0]["channels"][0], v, typ, what + " list")
        for p in got[0].get("planes", []):
            check_stats(p["channels"][0], v[p["index"]], typ, f"{what} list plane {p['index']}")


def ordered_ct(folder):
    """The study's CT slices (series 0) as pydicom reads them, ordered along their normal, and their paths."""
    found = []
    for f in sorted(os.listdir(folder)):
        path = os.path.join(folder, f)
        if os.path.isfile(path) and not f.endswith(".txt"):
            ds = pydicom.dcmread(path)
            if ds.Modality == "CT":
                found.append((path, ds))
    o = np.array(found[0][1].ImageOrientationPatient, dtype=float)
    n = np.cross(o[:3], o[3:])
    found.sort(key=lambda x: float(np.dot(np.array(x[1].ImagePositionPatient, dtype=float), n)))
    return [p for p, _ in found], [d for _, d in found]


def segmentation(path, ct, labels, rng, by_source=True, by_position=True, extra=()):
    """A BINARY SEG (as highdicom writes one) of labels (planes, rows, cols: segment numbers) over the
    ordered CT slices: one frame a segment a plane where it has pixels, the frames shuffled; extra
    frames (segment, plane or None, position, pixels) appended before the shuffle."""
    frames = []
    numbers = sorted(int(s) for s in set(labels.ravel().tolist()) - {0})
    for s in numbers:
        for z in range(labels.shape[0]):
            if (labels[z] == s).any():
                frames.append((s, z, [float(v) for v in ct[z].ImagePositionPatient], labels[z] == s))
    frames += list(extra)
    frames = [frames[i] for i in rng.permutation(len(frames))]
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.66.4"
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = FileDataset(None, Dataset(), file_meta=meta, preamble=b"\0" * 128)
    ds.PatientName, ds.PatientID, ds.PatientBirthDate, ds.InstitutionName = SECRETS
    ds.SOPClassUID, ds.SOPInstanceUID = meta.MediaStorageSOPClassUID, meta.MediaStorageSOPInstanceUID
    ds.SeriesInstanceUID = generate_uid()
    ds.Modality = "SEG"
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.Rows, ds.Columns = labels.shape[1], labels.shape[2]
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 1, 1, 0, 0
    ds.SegmentationType = "BINARY"
    ds.NumberOfFrames = len(frames)
    segments = []
    for s in sorted(set(numbers) | {f[0] for f in extra}):
        item = Dataset()
        item.SegmentNumber, item.SegmentLabel, item.SegmentAlgorithmType = s, f"organ {s}", "MANUAL"
        segments.append(item)
    ds.SegmentSequence = segments
    shared, orientation = Dataset(), Dataset()
    orientation.ImageOrientationPatient = ct[0].ImageOrientationPatient
    shared.PlaneOrientationSequence = [orientation]
    ds.SharedFunctionalGroupsSequence = [shared]
    per = []
    for s, z, position, _ in frames:
        f = Dataset()
        if by_source and z is not None:
            source, derivation = Dataset(), Dataset()
            source.ReferencedSOPClassUID, source.ReferencedSOPInstanceUID = ct[z].SOPClassUID, ct[z].SOPInstanceUID
            derivation.SourceImageSequence = [source]
            f.DerivationImageSequence = [derivation]
        if by_position or z is None:
            plane = Dataset()
            plane.ImagePositionPatient = position
            f.PlanePositionSequence = [plane]
        identification = Dataset()
        identification.ReferencedSegmentNumber = s
        f.SegmentIdentificationSequence = [identification]
        per.append(f)
    ds.PerFrameFunctionalGroupsSequence = per
    ds.PixelData = pack_bits(np.stack([m for _, _, _, m in frames]).astype(np.uint8))
    ds.is_little_endian, ds.is_implicit_VR = True, False
    ds.save_as(path, write_like_original=False)
    return ds


def check_segmentations(client_bin, where, work, how, texts, rng):
    """DICOM SEGs over the study's CT series as label volumes and masks: frames placed by their source
    image, by their position alone, shuffled, planes without a frame background; each segment's
    statistics equal numpy's over the HU values it covers. Refused: overlapping segments as labels (a
    mask takes their union), a frame that lies on no slice, a SEG over an image that is not DICOM."""
    files, ct = ordered_ct(os.path.join(work, "study"))
    vol = np.stack([apply_modality_lut(d.pixel_array, d) for d in ct]).astype(np.int16)
    planes, rows, cols = vol.shape
    labels = np.zeros(vol.shape, dtype=np.uint16)
    labels[2:7, 5:20, 3:30] = 1
    labels[4:10][rng.random((6, rows, cols)) < 0.3] = 2
    labels[0] = 3  # a whole plane; planes 10 and 11 have no frame at all
    labels[7, 0, 0] = 4  # one pixel
    stats = ("--stats", "min_max,sum,stddev,histogram")
    for name, by_source, by_position in (("seg.dcm", True, True), ("seg-by-source.dcm", True, False),
                                          ("seg-by-position.dcm", False, True)):
        path = os.path.join(work, name)
        segmentation(path, ct, labels, rng, by_source, by_position)
        what = f"{name} ({how})"
        got = answers(client_bin, where, "--dicom-series", "--labels", path, *stats, *files)
        texts.append(json.dumps(got))
        check_label_parts(got, vol, labels, "int16", what)
        got = answers(client_bin, where, "--dicom-series", "--labels", path, "--ignore-label", "0", "--planes", "3-8",
                      *stats, *files)
        if got:
            parts = got[0].get("parts", [])
            present = sorted(set(labels[3:9].ravel().tolist()) - {0})
            equal([p.get("label") for p in parts], present, what + " planes 3-8 labels")
            for p in parts:
                check_stats(p["channels"][0], vol[3:9][labels[3:9] == p["label"]], "int16",
                            f"{what} planes 3-8 label {p['label']}")
        got = answers(client_bin, where, "--dicom-series", "--mask", path, *stats, *files)
        if got:
            check_stats(got[0]["channels"][0], vol[labels != 0], "int16", what + " as a mask")
    # The SEG analyzed alone: its frames as 0 and 1, its segments named.
    got = answers(client_bin, where, *stats, os.path.join(work, "seg.dcm"))
    if got:
        kw = got[0]["facts"].get("keywords", {})
        equal((kw.get("SegmentationType"), kw.get("Segments")), ("BINARY", "1 organ 1, 2 organ 2, 3 organ 3, 4 organ 4"),
              f"SEG alone ({how}) facts")
        equal(got[0]["channels"][0]["count"], int(sum((labels[z] == s).any() for s in (1, 2, 3, 4)
                                                      for z in range(planes))) * rows * cols, f"SEG alone ({how}) count")
    # Overlapping segments: refused as labels, their union as a mask.
    overlap = (2, 3, [float(v) for v in ct[3].ImagePositionPatient], labels[3] == 1)
    path = os.path.join(work, "seg-overlap.dcm")
    segmentation(path, ct, labels, rng, extra=[overlap])
    refused(client_bin, where, files[0], "INVALID_ARGUMENT", f"overlapping segments as labels ({how})",
            "--dicom-series", "--labels", path, *files[1:])
    got = answers(client_bin, where, "--dicom-series", "--mask", path, *stats, *files)
    if got:
        check_stats(got[0]["channels"][0], vol[labels != 0], "int16", f"overlapping segments as a mask ({how})")
    # A frame off every slice.
    off = np.array(ct[-1].ImagePositionPatient, dtype=float) + 40.0
    path = os.path.join(work, "seg-elsewhere.dcm")
    segmentation(path, ct, labels, rng, extra=[(1, None, [float(v) for v in off], labels[2] == 1)])
    out = subprocess.run([client_bin, *where, "--dicom-series", "--labels", path, *files], capture_output=True,
                         text=True, timeout=600)
    equal((out.returncode != 0, "INVALID_ARGUMENT" in out.stderr, "lies on no plane" in out.stderr), (True, True, True),
          f"a frame off every slice ({how}): {out.stderr[-300:]}")
    # Over an image that is not DICOM.
    raw = os.path.join(work, "ct.raw")
    vol.tofile(raw)
    refused(client_bin, where, raw, "INVALID_ARGUMENT", f"a SEG over raw pixels ({how})",
            "--raw", f"{cols}x{rows}x1x{planes}:int16", "--labels", os.path.join(work, "seg.dcm"))


def main():
    server_bin, client_bin, work = command_line(__doc__)
    rng = np.random.default_rng(52)
    files = make_files(work, rng)
    texts = []
    for name, path, values, typ in files:
        check_file(client_bin, ["--local"], name, path, values, typ, "local", texts)
    check_refusals(client_bin, ["--local"], work, "local")
    made = make_series(work, rng)
    check_series(client_bin, ["--local"], work, "local", texts, made)
    check_segmentations(client_bin, ["--local"], work, "local", texts, np.random.default_rng(53))
    server, address = start_server(server_bin, work, "--metrics-listen", "127.0.0.1:0", "--log-level", "debug")
    try:
        for name, path, values, typ in files:
            check_file(client_bin, ["--server", address], name, path, values, typ, "server", texts)
        check_refusals(client_bin, ["--server", address], work, "server")
        check_series(client_bin, ["--server", address], work, "server", texts, made)
        check_segmentations(client_bin, ["--server", address], work, "server", texts, np.random.default_rng(53))
        log = open(os.path.join(work, "server.log")).read()
        texts.append(log)
        import re
        m = re.search(r"metrics on http://[^:]+:(\d+)/metrics", log)
        if m:
            texts.append(urllib.request.urlopen(f"http://127.0.0.1:{m.group(1)}/metrics", timeout=10).read().decode())
        else:
            fail("the server's log names no metrics port")
    finally:
        server.terminate()
        server.wait()
    joined = "\n".join(texts)
    for secret in SECRETS:
        if secret in joined:
            fail(f"personal data {secret!r} appears in an answer, a log line or a metric")
    equal(len(joined) > 1000, True, "answers, logs and metrics were searched")
    finish(f"DICOM: {len(files)} files against pydicom and numpy, --local and a live server; no personal data out")


if __name__ == "__main__":
    main()
