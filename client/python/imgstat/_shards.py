"""Datasets in archives, as the CLI reads them (docs/shards.md): a path
naming a tar shard (uncompressed, gzip, bzip2, xz; zstd where the zstandard
module is installed) or a zip file stands, in analyze_many and aggregate,
for its image members, each an input named ARCHIVE:MEMBER; WebDataset's
brace ranges name many. Members are read in the archive's order, one at a
time, as the pass takes them: a shard is never held whole."""
from __future__ import annotations

import io
import os
import re
import tarfile
import warnings
import zipfile

from ._errors import Error
from ._objects import is_object_name, open_object

SHARD_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.zst", ".tzst", ".tar.xz", ".txz", ".tar.bz2", ".tbz2", ".tbz", ".zip")
# The extensions of images a folder's walk and an archive's members are read by (client/sources.cpp).
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".jpe", ".jfif", ".tif", ".tiff", ".bmp", ".dib", ".webp", ".gif",
                    ".exr", ".hdr", ".pic", ".pnm", ".pbm", ".pgm", ".ppm", ".pam", ".pfm", ".jp2", ".j2k",
                    ".ras", ".sr", ".fits", ".fit", ".fts", ".fz", ".nii", ".dcm", ".dicom")
# Past this a member is not read into memory (the CLI streams an uncompressed tar's).
MAX_MEMBER_BYTES = 512 << 20
MAX_BRACE_NAMES = 1 << 20
# A zip in a bucket is read whole here (its directory is at its end).
MAX_ZIP_OBJECT_BYTES = 512 << 20


class Member:
    """One member of an archive: its bytes and its name, ARCHIVE:MEMBER."""
    __slots__ = ("name", "data")

    def __init__(self, name, data):
        self.name, self.data = name, data


def is_shard(x):
    """An archive's path, or its URL (https://, http://, s3://: read here as a stream)."""
    if not isinstance(x, (str, os.PathLike)) or not os.fspath(x).lower().endswith(SHARD_SUFFIXES):
        return False
    return is_object_name(x) or os.path.isfile(os.fspath(x))


def expand_braces(pattern):
    """WebDataset's brace names: "shard-{000..099}.tar" (the first bound's
    width kept), "{a,b}"; nested and several per name."""
    depth, start = 0, None
    for i, ch in enumerate(pattern):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                inner = pattern[start + 1:i]
                values = _brace_values(inner)
                if values is None:
                    continue
                head, tail = pattern[:start], pattern[i + 1:]
                out = []
                for v in values:
                    for rest in expand_braces(v + tail):
                        out.append(head + rest)
                        if len(out) > MAX_BRACE_NAMES:
                            raise Error("INVALID_ARGUMENT", f"more than {MAX_BRACE_NAMES} names", pattern)
                return out
    return [pattern]


def _brace_values(inner):
    m = re.fullmatch(r"(\d{1,18})\.\.(\d{1,18})", inner)
    if m:
        lo, hi = m.group(1), m.group(2)
        a, b = int(lo), int(hi)
        if abs(b - a) + 1 > MAX_BRACE_NAMES:
            raise Error("INVALID_ARGUMENT", f"more than {MAX_BRACE_NAMES} names", "{" + inner + "}")
        step = 1 if b >= a else -1
        return [str(k).zfill(len(lo)) for k in range(a, b + step, step)]
    depth, parts, start = 0, [], 0
    for i, ch in enumerate(inner):
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    if not parts:
        return None
    return parts + [inner[start:]]


def _wanted(name, extensions):
    n = name.lower()
    return n.endswith(tuple(e.lower() for e in extensions))


def _too_large(name, size):
    return Error("RESOURCE_EXHAUSTED", f"a member of {size} bytes (at most {MAX_MEMBER_BYTES} are read "
                                       "into memory; the CLI streams an uncompressed tar's)", name)


def members(path, extensions=None):
    """An archive's members that are inputs, in its order: Member, or the
    Error of one that cannot be read (cut short, too large)."""
    path = os.fspath(path)
    extensions = extensions or IMAGE_EXTENSIONS
    kept = skipped = 0
    try:
        entries = _zip_entries(path) if path.lower().endswith(".zip") else _tar_entries(path)
        for member, size, read in entries:
            if not _wanted(member, extensions):
                skipped += 1
                continue
            kept += 1
            name = f"{path}:{member}"
            if size > MAX_MEMBER_BYTES:
                yield _too_large(name, size)
                continue
            try:
                data = read()
            except (OSError, tarfile.TarError, zipfile.BadZipFile, EOFError, ValueError) as e:
                yield Error("DATA_LOSS", f"cannot be read from its archive ({e})", name)
                continue
            if len(data) != size:
                yield Error("DATA_LOSS", f"the archive holds {len(data)} of the {size} bytes its header declares", name)
                continue
            yield Member(name, data)
    except Error as e:
        yield e
        return
    except (OSError, tarfile.TarError, zipfile.BadZipFile, EOFError, ValueError) as e:
        if kept + skipped == 0:
            yield Error("INVALID_ARGUMENT", f"not an archive read ({e})", path)
            return
        warnings.warn(f"{path}: damaged after its first {kept + skipped} members ({e})", stacklevel=3)
    if skipped:
        warnings.warn(f"{path}: {skipped} of its {kept + skipped} members left out, not images by their names "
                      "(extensions= to read them)", stacklevel=3)
    if kept + skipped == 0:
        yield Error("INVALID_ARGUMENT", "an empty archive", path)


def _zip_entries(path):
    """(name, size, read) of a zip's files, from its central directory (a
    zip in a bucket read whole first: its directory is at its end)."""
    source = path
    if is_object_name(path):
        with open_object(path) as f:
            data = f.read(MAX_ZIP_OBJECT_BYTES + 1)
        if len(data) > MAX_ZIP_OBJECT_BYTES:
            raise Error("RESOURCE_EXHAUSTED", f"a zip in a bucket is read whole here, and this one is larger than "
                                              f"{MAX_ZIP_OBJECT_BYTES >> 20} MiB (the CLI reads it by ranges)", path)
        source = io.BytesIO(data)
    with zipfile.ZipFile(source) as z:
        for info in z.infolist():
            if not info.is_dir():
                yield info.filename, info.file_size, lambda info=info: _read_at_most(z.open(info))


def _tar_entries(path):
    """(name, size, read) of a tar's files, in order (a stream: each read before the next)."""
    with _open_tar(path) as t:
        while (info := t.next()) is not None:
            if info.isfile():
                yield info.name.removeprefix("./"), info.size, lambda info=info: _read_at_most(t.extractfile(info))


def _read_at_most(f):
    """A member's bytes, one past the limit at most (a zip may lie about its size)."""
    with f:
        return f.read(MAX_MEMBER_BYTES + 1)


def _open_tar(path):
    lower = path.lower()
    raw = open_object(path) if is_object_name(path) else None  # a shard in a bucket: one stream, as it comes
    if lower.endswith((".tar.zst", ".tzst")):
        try:
            import zstandard
        except ImportError:
            raise Error("UNIMPLEMENTED", "zstd archives need the zstandard module", path) from None
        raw = raw or open(path, "rb")
        return tarfile.open(fileobj=zstandard.ZstdDecompressor().stream_reader(raw), mode="r|")
    if raw is not None:
        return tarfile.open(fileobj=raw, mode="r|*")
    return tarfile.open(path, mode="r|*")  # a stream: members in order, nothing held


def is_s3_listing(x):
    """An s3:// prefix ("s3://bucket/images/", "s3://bucket") or pattern
    ("s3://bucket/images/*.png", ** crossing folders): the objects listed."""
    if not isinstance(x, str) or x[:5].lower() != "s3://":
        return False
    return "/" not in x[5:] or x.endswith("/") or any(c in x for c in "*?[")


def _glob_regex(pattern):
    """A key pattern as the CLI matches it: * and ? stay in a folder, ** crosses them."""
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif c == "*":
            out, i = out + "[^/]*", i + 1
        elif c == "?":
            out, i = out + "[^/]", i + 1
        elif c == "[" and "]" in pattern[i + 1:]:
            end = pattern.index("]", i + 1)
            out, i = out + "[" + pattern[i + 1:end].replace("\\", "\\\\") + "]", end + 1
        else:
            out, i = out + re.escape(c), i + 1
    return re.compile(out + r"\Z", re.S)


def listed(name, lister, extensions=None):
    """The inputs an s3:// prefix or pattern names: images by extension (or
    extensions), and the members of shards a pattern names; what is left out
    said by a warning, as the CLI says it."""
    head = name if "/" in name[5:] else name + "/"
    bucket = head[:head.index("/", 5) + 1]
    pattern = head[len(bucket):]
    wild = next((i for i, c in enumerate(pattern) if c in "*?["), None)
    prefix = bucket + (pattern if wild is None else pattern[:wild])
    try:
        names = lister(prefix)
    except Error as e:
        yield e
        return
    matchers = []
    if wild is not None:
        matchers = [_glob_regex(pattern), _glob_regex(pattern.replace("**/", ""))]
    wanted_ext = tuple(e.lower() for e in (extensions or IMAGE_EXTENSIONS))
    kept = left_out = 0
    for full in names:
        key = full[len(bucket):]
        if matchers and not any(m.match(key) for m in matchers):
            continue
        if key.lower().endswith(wanted_ext):
            kept += 1
            yield full
        elif wild is not None and key.lower().endswith(SHARD_SUFFIXES):
            kept += 1
            yield from members(full, extensions)
        else:
            left_out += 1
    if left_out:
        warnings.warn(f"{name}: {left_out} objects left out, not images by their names (extensions= to read them)",
                      stacklevel=3)
    if kept == 0:
        yield Error("NOT_FOUND", "no images under this prefix" if left_out else "no objects under this prefix", name)


def expand(inputs, extensions=None, lister=None):
    """The inputs with each archive's path (or brace range of them) in place
    of its members, and each s3:// prefix or pattern in place of the objects
    lister(prefix) finds; anything else as it is."""
    for x in inputs:
        if lister is not None and is_s3_listing(x):
            yield from listed(x, lister, extensions)
            continue
        if isinstance(x, str) and "{" in x and not os.path.exists(x):
            try:
                names = expand_braces(x)
            except Error as e:
                yield e
                continue
            if names != [x]:
                for n in names:
                    yield from (members(n, extensions) if is_shard(n) else [n])
                continue
        if is_shard(x):
            yield from members(x, extensions)
        else:
            yield x
