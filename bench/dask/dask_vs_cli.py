#!/usr/bin/env python3
"""imgstat.dask against the CLI, same servers, same run (issue 52's Dask
target): a bag of N files (500x375 RGB JPEGs, bench/shards/make_jpegs.py)
merged on a distributed.LocalCluster of W worker processes, each calling one
of S CPU servers, against `imgstat-client --aggregate --server A,B` over the
same folder. The answers must be equal (every field: integer images); the
rate is images/s of the whole pass (the cluster started beforehand, as a
user's is). The table comes last.

    [APART=1] [NO_PROFILE=1] [CPU=1] dask_vs_cli.py SERVER_BIN CLIENT_BIN [--files 20000] [--workers 4] [--servers 2] [--rounds 2]
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
# CPU=1: each round also prints the CPU seconds of the servers, of the CLI,
# and of Dask's processes (its workers; this process: scheduler, nannies,
# client) over the pass, and Dask's over 10 s idle before it: on 2 cores
# every one of them the servers lose.
CPU = bool(os.environ.get("CPU"))
HZ = os.sysconf("SC_CLK_TCK")


def cpu_of(pid):
    """A process's user and system CPU seconds so far (0 once it is gone)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / HZ


def own_cpu(children=False):
    t = os.times()
    return t.children_user + t.children_system if children else t.user + t.system


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
        def servers_cpu():
            return sum(cpu_of(p.pid) for p, _ in servers)

        for r in range(a.rounds):
            s0, c0 = servers_cpu(), own_cpu(children=True)
            t = time.perf_counter()
            out = subprocess.run([a.client_bin, "--server", ",".join(addresses), "--aggregate", "--json", *paths],
                                 capture_output=True, text=True, check=True)
            cli = time.perf_counter() - t
            cli_cpu = (servers_cpu() - s0, own_cpu(children=True) - c0)
            cli_answer = [json.loads(x) for x in out.stdout.splitlines() if x.strip()]
            with distributed.LocalCluster(n_workers=a.workers, threads_per_worker=1, processes=True,
                                          dashboard_address=None, silence_logs=40) as cluster, \
                    distributed.Client(cluster) as client:
                imgstat.dask.aggregate(db.from_sequence(paths[:a.workers * 4], npartitions=a.workers), addresses)
                bag = db.from_sequence(paths, npartitions=a.partitions)
                workers = list(client.run(os.getpid).values())
                if CPU:  # Dask's own runtime, no task running
                    w0, o0 = sum(cpu_of(p) for p in workers), own_cpu()
                    time.sleep(10)
                    print(f"  CPU s of an idle 10 s: workers {sum(cpu_of(p) for p in workers) - w0:.2f}, "
                          f"scheduler, nannies and client {own_cpu() - o0:.2f}", flush=True)
                w0, s0, o0 = sum(cpu_of(p) for p in workers), servers_cpu(), own_cpu()
                t = time.perf_counter()
                results = imgstat.dask.aggregate(bag, addresses)
                s = time.perf_counter() - t
                dask_cpu = (servers_cpu() - s0, sum(cpu_of(p) for p in workers) - w0, own_cpu() - o0)
            print(f"round {r + 1}: cli {cli:.2f} s, dask {s:.2f} s ({cli / s:.2f}x)", flush=True)
            if CPU:
                print(f"  CPU s: CLI's pass: servers {cli_cpu[0]:.1f}, CLI {cli_cpu[1]:.1f}; Dask's pass: servers "
                      f"{dask_cpu[0]:.1f}, workers {dask_cpu[1]:.1f}, scheduler, nannies and client {dask_cpu[2]:.1f}",
                      flush=True)
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
