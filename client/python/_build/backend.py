"""The package's PEP 517 build backend, small enough to need nothing but the
standard library: pip builds the wheel with no index and no build
environment to fill. It generates imgstat/v1/*_pb2*.py from the
repository's proto/ with protoc and grpc_python_plugin (Debian:
protobuf-compiler, protobuf-compiler-grpc) and takes the version from the
top CMakeLists.txt, so the package always speaks the contract and carries
the version of the tree it was built from.
"""
import base64
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
ROOT = os.path.dirname(os.path.dirname(HERE))
NAME = "imgstat"
TAG = "py3-none-any"


def _version():
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r"project\(imgstat\s+VERSION\s+([0-9.]+)", f.read())
    if not m:
        raise RuntimeError("no project(imgstat VERSION ...) in " + ROOT + "/CMakeLists.txt")
    return m.group(1)


def _tool(name, env):
    found = os.environ.get(env) or shutil.which(name)
    if not found:
        raise RuntimeError(f"{name} is needed to build the imgstat package (Debian: apt-get install "
                           "protobuf-compiler protobuf-compiler-grpc; or set {env})")
    return found


def _generated(into):
    """The gRPC code for proto/imgstat/v1/imgstat.proto, written under into."""
    protoc = _tool("protoc", "PROTOC")
    plugin = _tool("grpc_python_plugin", "GRPC_PYTHON_PLUGIN")
    proto_root = os.path.join(ROOT, "proto")
    subprocess.run([protoc, "-I", proto_root, "--python_out", into, "--grpc_python_out", into,
                    "--plugin=protoc-gen-grpc_python=" + plugin, "imgstat/v1/imgstat.proto"], check=True)
    open(os.path.join(into, "imgstat", "v1", "__init__.py"), "w").close()
    return [os.path.join("imgstat", "v1", n) for n in ("__init__.py", "imgstat_pb2.py", "imgstat_pb2_grpc.py")]


def _metadata(version):
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    lines = [
        "Metadata-Version: 2.1", f"Name: {NAME}", f"Version: {version}",
        "Summary: Exact per-channel image statistics from an imgstat server: paths, bytes, numpy and GPU arrays",
        "Requires-Python: >=3.9", "Requires-Dist: grpcio>=1.51", "Requires-Dist: protobuf>=3.20",
        "Requires-Dist: numpy>=1.21", "Provides-Extra: pil", "Requires-Dist: Pillow; extra == \"pil\"",
        "Description-Content-Type: text/markdown", "", readme]
    return "\n".join(lines)


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def _dist_info(version):
    return f"{NAME}-{version}.dist-info"


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    version = _version()
    info = os.path.join(metadata_directory, _dist_info(version))
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata(version))
    return _dist_info(version)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    files = {}  # path in the wheel -> bytes
    package = os.path.join(HERE, NAME)
    for dirpath, dirnames, names in os.walk(package):
        dirnames[:] = [d for d in dirnames if d != "__pycache__" and d != "v1"]
        for n in names:
            if n.endswith((".py", ".typed")):
                full = os.path.join(dirpath, n)
                with open(full, "rb") as f:
                    data = f.read()
                if n == "__init__.py" and dirpath == package:
                    data = data.replace(b'"@VERSION@"', repr(version).encode())
                files[os.path.relpath(full, HERE)] = data
    with tempfile.TemporaryDirectory() as gen:
        for rel in _generated(gen):
            with open(os.path.join(gen, rel), "rb") as f:
                files[rel] = f.read()
    info = _dist_info(version)
    files[f"{info}/METADATA"] = _metadata(version).encode()
    files[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: imgstat-backend\nRoot-Is-Purelib: true\n"
                              f"Tag: {TAG}\n").encode()
    files[f"{info}/top_level.txt"] = b"imgstat\n"
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    name = f"{NAME}-{version}-{TAG}.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(files, key=lambda p: (".dist-info/" in p, p)):
            entry = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))
            entry.external_attr = 0o644 << 16
            z.writestr(entry, files[path], compress_type=zipfile.ZIP_DEFLATED)
    return name
