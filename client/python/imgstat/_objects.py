"""Inputs named by URL (https://, http://, s3://), as the CLI takes them
(client/sources.cpp): sent by name to a server whose --fetch-allow covers
them (ServerInfo.fetch_allow), which reads them itself; else read here,
http(s) with urllib and s3 through fsspec (s3fs) where it is installed."""
from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request

from ._errors import Error
from ._tuning import OBJECT_MAX_BYTES

SCHEMES = ("https://", "http://", "s3://")


def is_object_name(x):
    return isinstance(x, str) and x[:8].lower().startswith(SCHEMES)


def _canonical(name):
    """The scheme and host lower-cased, as the servers compare them."""
    scheme, sep, rest = name.partition("://")
    host, slash, path = rest.partition("/")
    return scheme.lower() + sep + host.lower() + slash + path


def covered(name, prefixes):
    """Whether one of a server's --fetch-allow prefixes covers name (the
    server checks again, by its own canonical rules)."""
    n = _canonical(name)
    return any(n.startswith(_canonical(p)) for p in prefixes)


_HTTP_CODES = {400: "INVALID_ARGUMENT", 401: "PERMISSION_DENIED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
               408: "UNAVAILABLE", 410: "NOT_FOUND", 429: "UNAVAILABLE"}


def read_object(name, timeout):
    """The object's bytes; an Error as the CLI names it (NOT_FOUND,
    PERMISSION_DENIED, UNAVAILABLE, RESOURCE_EXHAUSTED past OBJECT_MAX_BYTES)."""
    with open_object(name, timeout) as f:
        try:
            data = f.read(OBJECT_MAX_BYTES + 1)
        except OSError as e:
            raise Error("UNAVAILABLE", f"cannot read it: {e}", name) from None
    if len(data) > OBJECT_MAX_BYTES:
        raise Error("RESOURCE_EXHAUSTED", f"more than {OBJECT_MAX_BYTES >> 20} MiB", name)
    return data


def open_object(name, timeout=60):
    """A stream of the object's bytes (a shard read as it comes): http(s)
    with urllib, s3 through fsspec and s3fs; an Error as read_object's."""
    if name[:5].lower() == "s3://":
        try:
            import fsspec
        except ImportError:
            raise Error("FAILED_PRECONDITION", "s3:// is read here through fsspec and s3fs, which are not installed; "
                        "or start the server with --fetch-allow covering it, and it reads the object itself",
                        name) from None
        try:
            return fsspec.open(name, "rb").open()
        except FileNotFoundError:
            raise Error("NOT_FOUND", "no such object", name) from None
        except PermissionError as e:
            raise Error("PERMISSION_DENIED", str(e), name) from None
        except (ImportError, ValueError) as e:  # no s3fs behind fsspec
            raise Error("FAILED_PRECONDITION", f"fsspec cannot read s3:// here: {e}", name) from None
        except OSError as e:
            raise Error("UNAVAILABLE", str(e), name) from None
    try:
        return urllib.request.urlopen(urllib.request.Request(name, headers={"User-Agent": "imgstat-python"}),
                                      timeout=timeout)
    except urllib.error.HTTPError as e:
        code = _HTTP_CODES.get(e.code, "UNAVAILABLE" if e.code >= 500 else "INVALID_ARGUMENT")
        raise Error(code, f"HTTP {e.code} {e.reason}", name) from None
    except (urllib.error.URLError, OSError) as e:
        raise Error("UNAVAILABLE", f"cannot read it: {getattr(e, 'reason', e)}", name) from None


def list_objects_here(prefix):
    """The s3:// names under a prefix, listed through fsspec and s3fs."""
    try:
        import fsspec
        fs = fsspec.filesystem("s3")
    except ImportError:
        raise Error("FAILED_PRECONDITION", "s3:// prefixes are listed here through fsspec and s3fs, which are not "
                    "installed; or start the server with --fetch-allow covering it, and it lists them itself",
                    prefix) from None
    except ValueError as e:
        raise Error("FAILED_PRECONDITION", f"fsspec cannot list s3:// here: {e}", prefix) from None
    bare = prefix[5:]
    folder = bare[:bare.rindex("/") + 1] if "/" in bare else bare + "/"
    try:
        found = fs.find(folder)
    except FileNotFoundError:
        return []
    except PermissionError as e:
        raise Error("PERMISSION_DENIED", str(e), prefix) from None
    except OSError as e:
        raise Error("UNAVAILABLE", str(e), prefix) from None
    return sorted("s3://" + k for k in found if k.startswith(bare) and not k.endswith("/"))


def file_object_bytes(x):
    """The bytes of a file object (anything with read()) or an fsspec
    OpenFile, and the name it goes by."""
    if hasattr(x, "open") and hasattr(x, "fs") and not hasattr(x, "read"):  # fsspec.core.OpenFile
        with x as f:
            data = f.read()
        return data, getattr(x, "full_name", None) or getattr(x, "path", "<file>")
    data = x.read()
    if isinstance(data, str):
        raise Error("INVALID_ARGUMENT", "a file opened as text: open it with \"rb\"", getattr(x, "name", "<file>"))
    name = getattr(x, "name", None)
    return data, name if isinstance(name, str) else "<file>"
