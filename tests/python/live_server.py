"""A live imgstat server for the Python checks (tests/aggregate, tests/parts)."""
import os
import re
import subprocess
import time


def start_server(server_bin, work, *args, log_name="server.log"):
    """An imgstat-server on the CPU engine at a free port (args: more of its
    flags; no region socket unless they name one): (process, address)."""
    log = open(os.path.join(work, log_name), "w")
    regions = [] if "--region-socket" in args else ["--region-socket", "off"]
    server = subprocess.Popen([server_bin, "--listen", "127.0.0.1:0", "--engine", "cpu", *regions, *args],
                              stdout=subprocess.DEVNULL, stderr=log)
    for _ in range(200):
        m = re.search(r"listening on \S+:(\d+)", open(log.name).read())
        if m:
            return server, "127.0.0.1:" + m.group(1)
        time.sleep(0.05)
    raise SystemExit("the server did not start: " + open(log.name).read())
