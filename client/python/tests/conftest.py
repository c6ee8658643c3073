"""Live servers for the package's tests: imgstat-server and imgstat-client
from the build ($IMGSTAT_SERVER_BIN, $IMGSTAT_CLIENT_BIN; tests/run.sh sets
them), on the engine $IMGSTAT_TEST_ENGINE (default cpu)."""
import json
import os
import re
import socket
import subprocess
import tempfile
import time
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
CORPUS = os.environ.get("IMGSTAT_CORPUS", os.path.join(ROOT, "..", "shared", "corpus"))
ENGINE = os.environ.get("IMGSTAT_TEST_ENGINE", "cpu")


def _bin(var):
    path = os.environ.get(var)
    if not path or not os.path.exists(path):
        pytest.skip(f"${var} names no built program")
    return path


class Server:
    def __init__(self, *args, listen="127.0.0.1:0", engine=None, regions=True):
        self.dir = tempfile.mkdtemp(prefix="imgstat-py-")
        self.log_path = os.path.join(self.dir, "server.log")
        self.region_socket = os.path.join(self.dir, "regions.sock") if regions else "off"
        log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [_bin("IMGSTAT_SERVER_BIN"), "--listen", listen, "--engine", engine or ENGINE, "--threads", "2",
             "--region-socket", self.region_socket, "--metrics-listen", "127.0.0.1:0", *args],
            stdout=subprocess.DEVNULL, stderr=log)
        for _ in range(400):
            text = open(self.log_path).read()
            port = re.search(r"listening on \S+:(\d+)", text)
            metrics = re.search(r"metrics on http://127.0.0.1:(\d+)", text)
            if port and metrics:
                self.port, self.metrics_port = int(port.group(1)), int(metrics.group(1))
                self.address = f"127.0.0.1:{self.port}"
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("the server did not start: " + open(self.log_path).read()[-2000:])

    def metric(self, name, **labels):
        """The sum of a series' samples whose labels include these."""
        body = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).read().decode()
        total = 0.0
        for line in body.splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def cli(server):
    """cli(*args) -> the CLI's --json objects for args, from the same server."""
    client_bin = _bin("IMGSTAT_CLIENT_BIN")

    def run(*args, server_address=None):
        out = subprocess.run([client_bin, "--server", server_address or server.address, "--json", *args],
                             capture_output=True, text=True, timeout=600)
        lines = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
        if out.returncode != 0 and not lines:
            raise RuntimeError(f"imgstat-client {' '.join(args)}: {out.stderr}")
        return lines
    return run


def non_loopback_address():
    """An address of this host that is not loopback, or None."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            address = s.getsockname()[0]
    except OSError:
        return None
    return None if address.startswith("127.") else address


def comparable(d):
    """A --json object without what differs from run to run (timings) or by
    how the input was named."""
    d = dict(d)
    for k in ("decode_ms", "compute_ms", "check_ms", "file"):
        d.pop(k, None)
    return d


def corpus_files(pattern=r"\.(png|jpe?g|bmp|tiff?|webp|gif)$"):
    if not os.path.isdir(CORPUS):
        return []
    out = []
    for dirpath, _, names in os.walk(CORPUS):
        for n in sorted(names):
            if re.search(pattern, n, re.I):
                out.append(os.path.join(dirpath, n))
    return sorted(out)
