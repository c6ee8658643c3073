"""What analyze takes, made ready to send: a Job holds an input's Input
message (no data yet) and where its bytes are (a path, a buffer, a numpy
array, a GPU array)."""
from __future__ import annotations

import io
import os
import stat
import tarfile
from typing import Any, Union

import numpy as np

from ._errors import Error
from ._options import SAMPLE_TYPES, is_path
from ._objects import file_object_bytes, is_object_name
from ._shards import Member, is_shard
from ._tuning import STREAM_CHUNK
from .v1 import imgstat_pb2 as pb

# What analyze takes: a path, encoded bytes, a numpy array (or anything
# numpy.asarray takes), a PIL image, or an object with __cuda_array_interface__.
ImageLike = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, np.ndarray, Any]

_SAMPLE = {np.dtype(np.uint8): 1, np.dtype(np.uint16): 2, np.dtype(np.int8): 3, np.dtype(np.int16): 4,
           np.dtype(np.float32): 5, np.dtype(np.float64): 6}
_LABEL_SAMPLE = {np.dtype(np.uint8): 1, np.dtype(np.uint16): 2, np.dtype(np.uint32): 7, np.dtype(np.int32): 8}


def bad(message, name=None):
    return Error("INVALID_ARGUMENT", message, name)


def file_error(path, e, name):
    """An OSError on an input's file as the Error the caller sees."""
    code = "NOT_FOUND" if isinstance(e, FileNotFoundError) else "INVALID_ARGUMENT"
    return Error(code, f"{path}: {e.strerror}", name)


class Job:
    """One input, ready to send: its Input (no data yet) and where its bytes are."""
    __slots__ = ("name", "input", "data", "path", "size", "array", "cuda", "url")

    def __init__(self, name, kind):
        self.name = name
        self.input = pb.Input(kind=kind, name=name if len(name) < 256 else name[:255])
        self.data = self.path = self.array = self.cuda = self.url = None
        self.size = 0

    def read_file(self):
        """The file's bytes; its OSError as an Error naming the input."""
        try:
            with open(self.path, "rb") as f:
                return f.read()
        except OSError as e:
            raise Error("INVALID_ARGUMENT", f"{self.path}: {e.strerror}", self.name) from None

    def chunks(self):
        """(bytes, a function giving them in pieces of STREAM_CHUNK) of the
        input on the host; an array goes packed, its layout set."""
        if self.array is not None:
            a, shape = self.array
            self.input.raw.CopyFrom(shape)
            return a.nbytes, lambda: buffer_chunks(np.ascontiguousarray(a).reshape(-1).view(np.uint8))
        if self.path is not None:
            def file_chunks():
                try:
                    with open(self.path, "rb") as f:
                        while True:
                            block = f.read(STREAM_CHUNK)
                            if not block:
                                return
                            yield block
                except OSError as e:
                    raise Error("INVALID_ARGUMENT", f"{self.path}: {e.strerror}", self.name) from None
            return self.size, file_chunks
        view = memoryview(self.data)
        return len(view), lambda: buffer_chunks(view)


def buffer_chunks(view):
    """A buffer (a memoryview or a flat uint8 array) in pieces of STREAM_CHUNK bytes."""
    return (bytes(view[i:i + STREAM_CHUNK]) for i in range(0, len(view), STREAM_CHUNK))


def planes_first(a, axes, name):
    """A volume or stack (Z or T, Y, X and C named in `axes`, in the array's
    order; a 4-D array without names is ZYXC) as (planes, H, W, C), and how
    many planes, None where the array is one image (H x W or H x W x C)."""
    if axes is None:
        if a.ndim != 4:
            return a, None
        axes = "ZYXC"
    axes = axes.upper()
    plane = "Z" if "Z" in axes else "T"
    if (len(axes) != a.ndim or len(set(axes)) != len(axes) or not set(axes) <= {"Z", "T", "Y", "X", "C"}
            or "Y" not in axes or "X" not in axes or ("Z" in axes and "T" in axes)):
        raise bad(f"axes {axes!r} do not name the {a.ndim} axes of an array of shape {a.shape}: one letter each, "
                  "Y and X, with C for channels and Z or T for planes", name)
    order = [axes.index(k) for k in (plane, "Y", "X", "C") if k in axes]
    a = a.transpose(order)
    if plane not in axes:
        return a, None
    if "C" not in axes:
        a = a[..., None]
    return a, a.shape[0]


def layout(a, name, labels=False, axes=None):
    """(array, RawLayout) for an H x W or H x W x C array of a type servers
    take; a stack (axes) as its planes one below the other, RawLayout.depth
    of them."""
    a, depth = planes_first(a, axes, name)
    if depth is not None:
        if depth == 0:
            raise bad(f"an array of shape {a.shape} has no plane", name)
        if depth >= 1 << 32:
            raise bad(f"an array of {depth} planes is past 2^32 of them", name)
        z, h, w, c = a.shape
        tall, one = a.reshape(z * h, w, c), layout(a[0], name, labels)  # reshape copies only where it must
        one[1].depth = depth
        return (tall if c > 1 else tall[..., 0]), one[1]
    if a.dtype == np.bool_:
        a = a.view(np.uint8)
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    types = _LABEL_SAMPLE if labels else _SAMPLE
    if a.dtype not in types:
        raise bad(f"arrays of {a.dtype} are not analyzed: {', '.join(str(t) for t in types)}", name)
    if a.ndim == 2:
        (h, w), c = a.shape, 1
    elif a.ndim == 3 and 1 <= a.shape[2] <= 4:
        h, w, c = a.shape
    else:
        raise bad(f"an array of shape {a.shape}: images are H x W or H x W x C with C 1 to 4", name)
    if h == 0 or w == 0:
        raise bad(f"an array of shape {a.shape} has no pixel", name)
    if h >= 1 << 32 or w >= 1 << 32:
        raise bad(f"an array of shape {a.shape} is past 2^32 rows or columns", name)
    return a, pb.RawLayout(width=w, height=h, channels=c, sample_type=types[a.dtype])


def rows(shape, strides, itemsize):
    """(row stride, bytes spanned) when rows are packed samples at a positive
    stride, as RawLayout takes them; None otherwise."""
    h, w = shape[0], shape[1]
    c = shape[2] if len(shape) == 3 else 1
    row = w * c * itemsize
    if strides is None:
        return 0, h * row
    if strides[1] != c * itemsize or (len(shape) == 3 and strides[2] != itemsize and c > 1):
        return None
    if h == 1:
        return 0, row
    if strides[0] < row:
        return None
    return (0 if strides[0] == row else strides[0]), (h - 1) * strides[0] + row


def map_of(options):
    """The mask or label image Input of a request's parts, or None."""
    if not options.HasField("parts"):
        return None
    parts = options.parts
    if parts.HasField("mask") and parts.mask.HasField("image"):
        return parts.mask.image
    if parts.HasField("labels"):
        return parts.labels.image
    return None


def is_zarr_store(path):
    """A folder that holds .zarray, .zgroup or .zattrs: one input, sent as a tar of its files."""
    return os.path.isdir(path) and any(os.path.isfile(os.path.join(path, m)) for m in (".zarray", ".zgroup", ".zattrs"))


def nifti_pair(path):
    """A NIfTI pair's .hdr (magic ni1 or ni2) and its .img: [(name, path)] of the two; None otherwise."""
    if not path.endswith(".hdr"):
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(348)
    except OSError:
        return None
    if head[344:348] != b"ni1\0" and head[4:8] != b"ni2\0":
        return None
    stem = path[:-4]
    for ext in (".img", ".img.gz"):
        if os.path.isfile(stem + ext):
            base = os.path.basename(stem)
            return [(base + ".hdr", path), (base + ext, stem + ext)]
    return None


def files_tar(files, path, name):
    """Several files that are one input as the tar servers read: [(name in the tar, path)], sorted by name."""
    out = io.BytesIO()
    try:
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as t:
            for arcname, full in sorted(files):
                t.add(full, arcname=arcname, recursive=False)
    except OSError as e:
        raise file_error(path, e, name) from None
    return out.getvalue()


def zarr_tar(path, name):
    """A Zarr store's files (members relative to the store)."""
    files = []
    for root, dirs, names in os.walk(path):
        for f in names:
            full = os.path.join(root, f)
            files.append((os.path.relpath(full, path), full))
    return files_tar(files, path, name)


def is_dicom_file(path):
    """Named .dcm or .dicom, or "DICM" at byte 128 (DICOMDIR left out)."""
    if os.path.basename(path) == "DICOMDIR":
        return False
    if path.lower().endswith((".dcm", ".dicom")):
        return True
    try:
        with open(path, "rb") as f:
            f.seek(128)
            return f.read(4) == b"DICM"
    except OSError:
        return False


def dicom_tar(path, name):
    """A folder's DICOM files (sub-folders too), its series as volumes (the CLI's --dicom-series)."""
    files = []
    for root, _, names in os.walk(path):
        for f in names:
            full = os.path.join(root, f)
            if is_dicom_file(full):
                files.append((os.path.relpath(full, path), full))
    if not files:
        raise bad(f"{path}: a folder is an input when it is a Zarr store or holds DICOM files; this one is neither",
                  name)
    return files_tar(files, path, name)


def is_path_list(x):
    """A list or tuple of paths (not of numbers, which is an array)."""
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(is_path(p) for p in x)


def dicom_list_tar(paths, name):
    """DICOM files named one by one: one input, their series as volumes (the
    CLI's --dicom-series with files named); members as the CLI names them."""
    files = [os.fspath(p) for p in paths]
    for f in files:
        if not os.path.isfile(f):
            raise file_error(f, FileNotFoundError(2, "No such file or directory"), name)
        if not is_dicom_file(f):
            raise bad(f"{f}: a list of paths is one input when every file is DICOM (a series' slices); "
                      "give other files one by one", name)
    members = sorted({(f.lstrip("/"), f) for f in files})  # a file named twice is one slice
    return files_tar(members, files[0], name)


def dicom_list_name(paths):
    """The CLI's name for DICOM files named one by one: FIRST .. LAST (N files)."""
    files = [os.fspath(p) for p in paths]
    return files[0] if len(files) == 1 else f"{files[0]} .. {files[-1]} ({len(files)} files)"


def prepare(x, name=None, raw=None, stride=0, as_bytes=False, labels=False, axes=None):
    """A Job for one input of any kind analyze takes."""
    kind = 3 if as_bytes else 2 if raw is not None else 1
    if isinstance(x, Error):  # an archive's member that could not be read
        raise x
    if isinstance(x, Member):
        job = Job(name or x.name, kind)
        job.data = x.data
        job.size = len(x.data)
    elif is_object_name(x):
        job = Job(name or x, kind)
        job.url = x  # read when it is sent: by the server where it may fetch it, else here
    elif hasattr(x, "read") or (hasattr(x, "open") and hasattr(x, "fs")):
        data, own = file_object_bytes(x)
        job = Job(name or own, kind)
        job.data = data
        job.size = len(data)
    elif is_shard(x):
        raise bad("an archive holds many inputs: analyze_many or aggregate reads its members", os.fspath(x))
    elif is_path_list(x):
        job = Job(name or dicom_list_name(x), kind)
        job.data = dicom_list_tar(x, job.name)
        job.size = len(job.data)
    elif is_path(x):
        path = os.fspath(x)
        job = Job(name or path, kind)
        try:
            st = os.stat(path)  # once: a dataset's pass prepares every file
        except OSError as e:
            raise file_error(path, e, job.name) from None
        if stat.S_ISDIR(st.st_mode):  # a Zarr store, else a DICOM series
            job.data = zarr_tar(path, job.name) if is_zarr_store(path) else dicom_tar(path, job.name)
            job.size = len(job.data)
        elif path.endswith(".hdr") and nifti_pair(path):
            job.data = files_tar(nifti_pair(path), path, job.name)
            job.size = len(job.data)
        else:
            job.path, job.size = path, st.st_size
    elif isinstance(x, (bytes, bytearray, memoryview)):
        job = Job(name or "<bytes>", kind)
        job.data = memoryview(x).cast("B") if not isinstance(x, bytes) else x
        job.size = len(job.data)
    elif hasattr(x, "__cuda_array_interface__"):
        job = Job(name or "<cuda array>", 2)
        job.cuda = x.__cuda_array_interface__
    else:
        if hasattr(x, "getbands") and hasattr(x, "mode"):  # a PIL image
            x = pil_array(x)
            name = name or "<PIL image>"
        try:
            a = np.asarray(x)
        except (ValueError, TypeError) as e:
            raise bad(f"not an image, a path or an array: {e}", name or "<array>") from None
        job = Job(name or "<array>", 2)
        job.array = layout(a, job.name, labels, axes)
        job.size = job.array[0].nbytes
        return job
    if raw is not None:
        w, h, c, *d, t = raw  # (width, height, channels[, depth], type)
        if t not in SAMPLE_TYPES:
            raise bad(f"raw: unknown sample type {t!r} ({', '.join(SAMPLE_TYPES)})", job.name)
        job.input.raw.CopyFrom(pb.RawLayout(width=w, height=h, channels=c, sample_type=SAMPLE_TYPES[t],
                                            row_stride=stride, depth=d[0] if d else 0))
    return job


def side_input(x, labels, axes=None):
    """A mask or label image as an Input carried in the request; axes: a
    volume's (the image's, without C)."""
    job = prepare(x, labels=labels, axes=axes)
    if job.array is not None:
        a, shape = job.array
        job.input.raw.CopyFrom(shape)
        job.input.data = np.ascontiguousarray(a).tobytes()
    elif job.path is not None:
        job.input.data = job.read_file()
    elif job.cuda is not None:
        raise bad("masks and label images are not taken from GPU memory", job.name)
    else:
        job.input.data = bytes(job.data)
    return job.input


def pil_array(image):
    """A PIL image's pixels as imgstat decodes files: palette images expanded
    to RGB(A), 1-bit ones as 0 and 255, CMYK as it is (4 channels)."""
    mode = image.mode
    if mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    elif mode == "PA":
        image = image.convert("RGBA")
    elif mode == "1":
        image = image.convert("L")
    elif mode == "I;16B":
        return np.asarray(image).astype(np.uint16)
    elif mode == "I":
        a = np.asarray(image)
        if a.min(initial=0) >= 0 and a.max(initial=0) < 65536:
            return a.astype(np.uint16)
        raise bad("PIL mode I images of values past 16 bits: pass a numpy array of a type servers take")
    return np.asarray(image)
