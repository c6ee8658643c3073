#!/usr/bin/python3
"""The files of bench/science/run.sh (issue targets), written without holding
them whole:

    write.py DIR [FITS_PLANES]

- sky.fits: FITS 4096x4096 float32, FITS_PLANES planes (64: 4 GiB), 1% NaN;
- ct/: 500 DICOM slices of 512x512 (12-bit stored, int16 in HU through
  RescaleIntercept -1024), uncompressed;
- brain.nii.gz: NIfTI 256x256x256 float32, gzip;
- cells.zarr: OME-Zarr, t c z y x = 1 x 1 x ZARR_PLANES x 4096 x 4096
  uint16 (camera counts: a background with Poisson noise and bright
  cells), chunks of 16 x 1024 x 1024 (issue 50's target), Blosc zstd with
  byte shuffle (zarr-python's default level, 5).
"""
import os
import sys

import numpy as np

out = sys.argv[1]
planes = int(sys.argv[2]) if len(sys.argv) > 2 else 64
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(2026)

from astropy.io import fits  # noqa: E402

path = os.path.join(out, "sky.fits")
if not os.path.exists(path):
    header = fits.PrimaryHDU(np.zeros((1, 1, 1), dtype=np.float32)).header
    header["NAXIS1"], header["NAXIS2"], header["NAXIS3"] = 4096, 4096, planes
    with open(path, "wb") as f:
        f.write(header.tostring().encode())
        for _ in range(planes):
            plane = rng.normal(1000, 30, (4096, 4096)).astype(">f4")
            plane.ravel()[rng.integers(0, plane.size, plane.size // 100)] = np.nan
            plane.tofile(f)
        pad = -(4096 * 4096 * 4 * planes) % 2880
        f.write(b"\0" * pad)

import pydicom  # noqa: E402
from pydicom.dataset import Dataset, FileDataset, FileMetaDataset  # noqa: E402
from pydicom.uid import ExplicitVRLittleEndian, generate_uid  # noqa: E402

ct = os.path.join(out, "ct")
if not os.path.isdir(ct):
    os.makedirs(ct)
    series = generate_uid()
    y, x = np.mgrid[0:512, 0:512]
    body = ((y - 256) ** 2 + (x - 256) ** 2) < 200 ** 2
    for i in range(500):
        meta = FileMetaDataset()
        meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.2"
        meta.MediaStorageSOPInstanceUID = generate_uid()
        meta.TransferSyntaxUID = ExplicitVRLittleEndian
        ds = FileDataset(None, Dataset(), file_meta=meta, preamble=b"\0" * 128)
        ds.Modality, ds.SeriesInstanceUID, ds.InstanceNumber = "CT", series, i + 1
        ds.ImagePositionPatient, ds.ImageOrientationPatient = [0, 0, i * 1.0], [1, 0, 0, 0, 1, 0]
        ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
        ds.Rows, ds.Columns, ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 512, 512, 16, 12, 11, 0
        ds.RescaleSlope, ds.RescaleIntercept = 1, -1024
        ds.is_little_endian, ds.is_implicit_VR = True, False
        slab = np.where(body, rng.normal(1064, 40, (512, 512)), 24).clip(0, 4095).astype(np.uint16)
        ds.PixelData = slab.tobytes()
        ds.save_as(os.path.join(ct, f"slice{i:03d}.dcm"), write_like_original=False)

import nibabel as nib  # noqa: E402

path = os.path.join(out, "brain.nii.gz")
if not os.path.exists(path):
    vol = rng.normal(500, 100, (256, 256, 256)).astype(np.float32)
    nib.save(nib.Nifti1Image(vol, np.eye(4)), path)
import zarr  # noqa: E402

path = os.path.join(out, "cells.zarr")
zarr_planes = int(sys.argv[3]) if len(sys.argv) > 3 else 64
if not os.path.exists(path):
    from numcodecs import Blosc  # noqa: E402
    root = zarr.open_group(path, mode="w")
    z = root.create_dataset("0", shape=(1, 1, zarr_planes, 4096, 4096), chunks=(1, 1, 16, 1024, 1024),
                            dtype=np.uint16, compressor=Blosc(cname="zstd", clevel=5, shuffle=Blosc.SHUFFLE))
    y, x = np.mgrid[0:4096, 0:4096]
    cells = (np.sin(y / 37.0) * np.cos(x / 53.0) > 0.6) * 1500.0
    for k in range(0, zarr_planes, 16):
        n = min(16, zarr_planes - k)
        z[0, 0, k:k + n] = rng.poisson(100 + cells, (n, 4096, 4096)).astype(np.uint16)
    root.attrs["multiscales"] = [{"version": "0.4", "name": "cells",
                                  "axes": [{"name": a} for a in "tczyx"], "datasets": [{"path": "0"}]}]
print("written in", out)
