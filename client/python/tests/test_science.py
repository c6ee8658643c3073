"""The formats science keeps its images in, through the package: a FITS
file's image HDUs as series with their header facts, a NIfTI volume's
planes, DICOM's modality and stored values; each as the CLI answers it."""
import numpy as np
import pytest

import imgstat
from conftest import comparable


@pytest.fixture(scope="module")
def client(server):
    with imgstat.Client(server.address) as c:
        yield c


def test_fits_series_facts_and_blank_as_the_cli(client, cli, tmp_path):
    fits = pytest.importorskip("astropy.io.fits")
    rng = np.random.default_rng(500)
    sci = rng.normal(100, 5, (21, 34)).astype(np.float32)
    sci[3, 4] = np.nan
    dq = rng.integers(-50, 50, (2, 9, 8), dtype=np.int16)
    dq[0, 0, :] = -32768
    hdu = fits.ImageHDU(dq, name="DQ")
    hdu.header["BLANK"] = -32768
    path = str(tmp_path / "mef.fits")
    fits.HDUList([fits.PrimaryHDU(), fits.ImageHDU(sci, name="SCI"), hdu]).writeto(path)
    got = client.analyze(path, stats="min_max,sum,stddev")
    assert got.facts["series_count"] == 2 and got.facts["keywords"]["EXTNAME"] == "SCI"
    assert got["Gray"].nan_count == 1 and got["Gray"].count == sci.size - 1
    assert got["Gray"].sum == pytest.approx(float(np.nansum(sci.astype(np.float64))), rel=1e-12)
    (other,) = got.other_series
    assert other.sample_type == "float32" and other["Gray"].nan_count == 8  # BLANK pixels are missing
    assert other["Gray"].sum == float(dq[dq != -32768].astype(np.int64).sum())
    assert comparable(client.analyze(path, stats="min_max,sum,stddev", series=1).to_dict()) == \
        comparable(cli("--json", "--stats", "min_max,sum,stddev", "--series", "1", path)[0])


def test_nifti_volume_planes(client, tmp_path):
    nib = pytest.importorskip("nibabel")
    rng = np.random.default_rng(501)
    vol = rng.integers(-1000, 1000, (17, 13, 5), dtype=np.int16)
    path = str(tmp_path / "vol.nii.gz")
    nib.save(nib.Nifti1Image(vol, np.eye(4)), path)
    got = client.analyze(path, stats="min_max,sum", planes=True)
    assert got.facts["planes"] == 5 and [p.z for p in got.planes] == list(range(5))
    assert got["Gray"].sum == int(vol.astype(np.int64).sum())
    assert [p["Gray"].sum for p in got.planes] == [int(vol[..., z].astype(np.int64).sum()) for z in range(5)]


def test_dicom_modality_and_stored_values(client, tmp_path):
    pydicom = pytest.importorskip("pydicom")
    from pydicom.dataset import Dataset, FileDataset, FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid
    rng = np.random.default_rng(502)
    stored = rng.integers(0, 4096, (19, 23), dtype=np.uint16)
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.2"
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = FileDataset(None, Dataset(), file_meta=meta, preamble=b"\0" * 128)
    ds.Modality, ds.SamplesPerPixel, ds.PhotometricInterpretation = "CT", 1, "MONOCHROME2"
    ds.Rows, ds.Columns, ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 19, 23, 16, 12, 11, 0
    ds.RescaleSlope, ds.RescaleIntercept = 1, -1024
    ds.is_little_endian, ds.is_implicit_VR = True, False
    ds.PixelData = stored.tobytes()
    path = str(tmp_path / "ct.dcm")
    ds.save_as(path, write_like_original=False)
    hu = client.analyze(path, stats="min_max,sum")
    assert hu.sample_type == "int16" and hu.facts["keywords"]["Modality"] == "CT"
    assert (hu["Gray"].min, hu["Gray"].sum) == (int(stored.min()) - 1024, int(stored.astype(np.int64).sum()) - 1024 * stored.size)
    raw = client.analyze(path, stats="min_max,sum", stored_values=True)
    assert raw.sample_type == "uint16" and raw["Gray"].sum == int(stored.astype(np.int64).sum())
    assert pydicom.dcmread(path).pixel_array.sum() == raw["Gray"].sum


def test_zarr_store_as_the_cli(client, cli, tmp_path):
    zarr = pytest.importorskip("zarr")
    rng = np.random.default_rng(502)
    path = str(tmp_path / "cells.zarr")
    root = zarr.open_group(path, mode="w")
    full = rng.integers(0, 4096, (2, 3, 40, 30), dtype=np.uint16)
    root.create_dataset("0", data=full, chunks=(1, 2, 16, 16))
    root.create_dataset("1", data=full[..., ::2, ::2], chunks=(1, 3, 20, 15))
    axes = [{"name": a} for a in "czyx"]
    root.attrs["multiscales"] = [{"version": "0.4", "axes": axes, "datasets": [{"path": "0"}, {"path": "1"}]}]
    got = client.analyze(path, stats="min_max,sum,stddev,histogram")
    assert got.format == "Zarr" and got.sample_type == "uint16" and (got.width, got.height) == (30, 40)
    assert got["Gray"].sum == int(full.astype(np.int64).sum()) and got["Gray"].count == full.size
    level = client.analyze(path, stats="min_max,sum", level=1)
    assert level["Gray"].sum == int(full[..., ::2, ::2].astype(np.int64).sum())
    assert comparable(got.to_dict()) == \
        comparable(cli("--json", "--stats", "min_max,sum,stddev,histogram", path)[0])


def test_nifti_pair_as_the_cli(client, cli, tmp_path):
    nib = pytest.importorskip("nibabel")
    rng = np.random.default_rng(503)
    a = rng.integers(-1000, 1000, (11, 7, 3), dtype=np.int16)
    path = str(tmp_path / "pair.hdr")
    nib.save(nib.Nifti1Pair(a, np.eye(4)), path)
    got = client.analyze(path, stats="min_max,sum,stddev")
    assert got.format == "NIfTI" and got["Gray"].sum == int(a.astype(np.int64).sum())
    assert comparable(got.to_dict()) == comparable(cli("--json", "--stats", "min_max,sum,stddev", path)[0])


def write_ct_series(folder, seed):
    """Three CT slices of one series, named against their order along z:
    [(z, HU values)] of them."""
    pydicom = pytest.importorskip("pydicom")
    from pydicom.dataset import Dataset, FileDataset, FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid
    rng = np.random.default_rng(seed)
    series, slices = generate_uid(), []
    for k, z in enumerate((2, 0, 1)):
        meta = FileMetaDataset()
        meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.2"
        meta.MediaStorageSOPInstanceUID = generate_uid()
        meta.TransferSyntaxUID = ExplicitVRLittleEndian
        ds = FileDataset(None, Dataset(), file_meta=meta, preamble=b"\0" * 128)
        ds.Modality, ds.SeriesInstanceUID = "CT", series
        ds.ImageOrientationPatient, ds.ImagePositionPatient = [1, 0, 0, 0, 1, 0], [0, 0, float(z)]
        ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
        ds.Rows, ds.Columns, ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 9, 7, 16, 12, 11, 0
        ds.RescaleSlope, ds.RescaleIntercept = 1, -1024
        ds.is_little_endian, ds.is_implicit_VR = True, False
        pixels = rng.integers(0, 4096, (9, 7), dtype=np.uint16)
        ds.PixelData = pixels.tobytes()
        ds.save_as(str(folder / f"s{k}.dcm"), write_like_original=False)
        slices.append((z, pixels.astype(np.int64) - 1024))
    return slices


def test_dicom_folder_is_its_series_as_the_cli(client, cli, tmp_path):
    slices = write_ct_series(tmp_path, 504)
    got = client.analyze(str(tmp_path), stats="min_max,sum", planes=True)
    assert got.format == "DICOM" and got.sample_type == "int16"
    assert [p["Gray"].sum for p in got.planes] == [int(v.sum()) for _, v in sorted(slices, key=lambda s: s[0])]
    assert comparable(got.to_dict()) == \
        comparable(cli("--json", "--dicom-series", "--stats", "min_max,sum", "--planes", str(tmp_path))[0])


def test_dicom_files_listed_are_one_volume_as_the_cli(client, cli, tmp_path):
    slices = write_ct_series(tmp_path, 505)
    files = [str(tmp_path / f"s{k}.dcm") for k in (1, 0, 2)]  # named in no order of theirs
    got = client.analyze(files, stats="min_max,sum", planes=True)
    assert got.file == f"{files[0]} .. {files[-1]} (3 files)"
    assert [p["Gray"].sum for p in got.planes] == [int(v.sum()) for _, v in sorted(slices, key=lambda s: s[0])]
    (theirs,) = cli("--json", "--dicom-series", "--stats", "min_max,sum", "--planes", *files)
    assert theirs["file"] == got.file and comparable(got.to_dict()) == comparable(theirs)
    # The same volume as the folder's; a slice named twice is one slice.
    folder = client.analyze(str(tmp_path), stats="min_max,sum", planes=True)
    assert [p["Gray"].sum for p in client.analyze(files + files[:1], stats="min_max,sum", planes=True).planes] == \
        [p["Gray"].sum for p in folder.planes]
    # Among many inputs, a list is one of them.
    (many,) = list(client.analyze_many([files], stats="min_max,sum"))
    assert many["Gray"].sum == got["Gray"].sum
    # Only DICOM files make a list one input.
    other = tmp_path / "notes.txt"
    other.write_text("not a slice")
    with pytest.raises(imgstat.Error) as e:
        client.analyze(files + [str(other)])
    assert e.value.code == "INVALID_ARGUMENT" and "notes.txt" in str(e.value)
    with pytest.raises(imgstat.Error) as e:
        client.analyze(files + [str(tmp_path / "gone.dcm")])
    assert e.value.code == "NOT_FOUND"