#!/usr/bin/python3
"""The baselines of bench/science/run.sh: what an astropy, pydicom or nibabel
user runs for the same statistics (mean, std, min, max and a 256-bin
histogram of the finite values), printed so that the run compares them with
imgstat's answer.

    baseline.py fits FILE | dicom DIR | nifti FILE | zarr STORE | dask STORE

zarr: zarr-python reads the array whole, numpy computes; dask: dask.array
over the same chunks on every core (the threaded scheduler), as xarray and
dask-image users compute.
"""
import os
import sys

import numpy as np

kind, path = sys.argv[1], sys.argv[2]
if kind == "fits":
    from astropy.io import fits
    with fits.open(path, memmap=True) as f:
        a = f[0].data
        n = int(np.count_nonzero(np.isfinite(a)))
        lo, hi = float(np.nanmin(a)), float(np.nanmax(a))
        mean, std = float(np.nanmean(a, dtype=np.float64)), float(np.nanstd(a, dtype=np.float64))
        hist, _ = np.histogram(a[np.isfinite(a)], bins=256, range=(lo, hi))
elif kind == "dicom":
    import pydicom
    from pydicom.pixel_data_handlers.util import apply_modality_lut
    slices = [pydicom.dcmread(os.path.join(path, f)) for f in sorted(os.listdir(path))]
    slices.sort(key=lambda d: float(d.ImagePositionPatient[2]))
    a = np.stack([apply_modality_lut(d.pixel_array, d) for d in slices])
    n, lo, hi = a.size, float(a.min()), float(a.max())
    mean, std = float(a.mean()), float(a.std())
    hist, _ = np.histogram(a, bins=256, range=(lo, hi))
elif kind == "zarr":
    import zarr
    a = zarr.open(path, mode="r")["0"][...]
    n, lo, hi = a.size, int(a.min()), int(a.max())
    mean, std = float(a.mean(dtype=np.float64)), float(a.std(dtype=np.float64))
    hist = np.bincount(a.ravel() >> 8, minlength=256)
elif kind == "dask":
    import dask
    import dask.array as da
    a = da.from_zarr(os.path.join(path, "0"))
    lo, hi = dask.compute(a.min(), a.max())
    n, lo, hi = a.size, int(lo), int(hi)
    mean, std, (hist, _) = dask.compute(a.mean(dtype=np.float64), a.std(dtype=np.float64),
                                        da.histogram(a, bins=256, range=(0, 65536)))
    mean, std = float(mean), float(std)
else:
    import nibabel as nib
    a = nib.load(path).get_fdata()
    n, lo, hi = a.size, float(a.min()), float(a.max())
    mean, std = float(a.mean()), float(a.std())
    hist, _ = np.histogram(a, bins=256, range=(lo, hi))
print(f"baseline {kind}: count {n}, min {lo}, max {hi}, mean {mean:.9f}, std {std:.9f}, histogram total {int(hist.sum())}")
