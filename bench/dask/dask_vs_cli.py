#!/usr/bin/env python3
"""imgstat.dask against the CLI, same servers, same run (issue 52's Dask
target): a bag of N files (500x375 RGB JPEGs, bench/shards/make_jpegs.py)
merged on a distributed.LocalCluster of W worker processes, each calling one
of S CPU servers, against `imgstat-client --aggregate --server A,B` over the
same folder. The answers must be equal (every field: integer images); the
rate is images/s of the whole pass (the cluster started beforehand, as a
user's is). The table comes last.

    [APART=1] [NO_PROFILE=1] dask_vs_cli.py SERVER_BIN CLIENT_BIN [--files 20000] [--workers 4] [--servers 2] [--rounds 2]
                   [--partitions 160] [--folder DIR]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time


# APART=1: servers without their region socket, as on machines apart (every
# byte over the socket); by default the workers' servers are on their host.
APART = bool(os.environ.get("APART"))
# NO_PROFILE=1: the workers' statistical profiler off (Dask's
# distributed.worker.profile.enabled), which samples the stacks of a
# worker's threads every 10 ms.
NO_PROFILE = bool(os.environ.get("NO_PROFILE"))


def start(server_bin, work, k):
    log = os.path.join(work, f"server-{k}.log")
    p = subprocess.Popen([server_bin, "--listen", "127.0.0.1:0", "--engine", "cpu"] + (["--region-socket", "off"] if APART else []),
                         stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    for _ in range(400):
        m = re.search(r"listening on \S+:(\d+)", open(log).read())
        if m:
            return p, f"127.0.0.1:{m.group(1)}"
        time.sleep(0.05)
    raise SystemExit("a server did not start: " + open(log).read()[-1000:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server_bin")
    ap.add_argument("client_bin")
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=160)
    ap.add_argument("--folder")
    a = ap.parse_args()
    import dask
    import dask.bag as db
    import distributed

    import imgstat
    import imgstat.dask
    work = tempfile.mkdtemp(prefix="imgstat-dask-bench-")
    folder = a.folder or os.path.join(work, "jpegs")
    os.makedirs(folder, exist_ok=True)
    have = len([f for f in os.listdir(folder) if f.endswith(".jpg")])
    if have < a.files:
        here = os.path.dirname(os.path.abspath(__file__))
        subprocess.run([sys.executable, os.path.join(here, "..", "shards", "make_jpegs.py"), folder, str(a.files)],
                       check=True)
    paths = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".jpg"))[: a.files]
    servers = [start(a.server_bin, work, k) for k in range(a.servers)]
    addresses = [s[1] for s in servers]
    rows = []
    if NO_PROFILE:
        dask.config.set({"distributed.worker.profile.enabled": False})
    try:
        cli_best = dask_best = results = cli_answer = None
        ratios = []
        # Rounds in turn, the CLI's then Dask's, so that a machine whose pace
        # drifts weighs on both alike; the CLI's with no cluster beside it
        # (idle, a LocalCluster's processes still take CPU), Dask's on a
        # cluster started beforehand, as a user's is.
        for r in range(a.rounds):
            t = time.perf_counter()
            out = subprocess.run([a.client_bin, "--server", ",".join(addresses), "--aggregate", "--json", *paths],
                                 capture_output=True, text=True, check=True)
            cli = time.perf_counter() - t
            cli_answer = [json.loads(x) for x in out.stdout.splitlines() if x.strip()]
            with distributed.LocalCluster(n_workers=a.workers, threads_per_worker=1, processes=True,
                                          dashboard_address=None, silence_logs=40) as cluster, \
                    distributed.Client(cluster):
                imgstat.dask.aggregate(db.from_sequence(paths[:a.workers * 4], npartitions=a.workers), addresses)
                bag = db.from_sequence(paths, npartitions=a.partitions)
                t = time.perf_counter()
                results = imgstat.dask.aggregate(bag, addresses)
                s = time.perf_counter() - t
            print(f"round {r + 1}: cli {cli:.2f} s, dask {s:.2f} s ({cli / s:.2f}x)", flush=True)
            ratios.append(cli / s)
            cli_best = cli if cli_best is None else min(cli_best, cli)
            dask_best = s if dask_best is None else min(dask_best, s)
        with imgstat.Client(addresses[0]) as client:
            one_process = [r.to_dict() for r in client.aggregate(paths)]
        got = [r.to_dict() for r in results]
        # Every field as one process's Client.aggregate, and the CLI's counts, sums and histograms.
        equal = got == one_process and [
            [(c["count"], c["sum"], c["histogram"]["counts"]) for c in g["channels"]] for g in cli_answer] == [
            [(c["count"], c["sum"], c["histogram"]["counts"]) for c in g["channels"]] for g in got]
        n = len(paths)
        rows.append(("imgstat-client --aggregate (baseline)", cli_best, n / cli_best, 1.0, ""))
        rows.append((f"imgstat.dask.aggregate, {a.workers} workers{', profiler off' if NO_PROFILE else ''}", dask_best,
                     n / dask_best, cli_best / dask_best, "equal" if equal else "DIFFERENT"))
    finally:
        for p, _ in servers:
            p.terminate()
    print(f"\n{len(paths)} 500x375 JPEGs, {a.servers} CPU servers{' without regions' if APART else ''}, "
          f"{os.cpu_count()} cores, {a.partitions} partitions, best of {a.rounds} "
          f"(rounds in turn, each round's ratio {min(ratios):.2f}-{max(ratios):.2f}x)")
    print("| pass | s | images/s | of the CLI's rate | answer |")
    print("|---|---|---|---|---|")
    for name, s, rate, ratio, answer in rows:
        print(f"| {name} | {s:.2f} | {rate:.0f} | {ratio:.2f}x | {answer} |")
    return 0 if all(r[4] != "DIFFERENT" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
