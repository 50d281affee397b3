#!/usr/bin/env python3
"""sockperf `ul`, unpinned, into `hakaru server --sockperf-port` and into `sockperf sr`: each
round's average latency beside what the scheduler did with the server's receiving thread
(docs/BENCHMARKS.md, issue 46's section).

Usage: python3 bench/sockperf_ul_sched.py [--rounds 12] [--time 3] [--migrations 20]

Both servers listen on loopback, neither pinned; each round runs the stock client's `ul` for
--time seconds into each (the order alternates from round to round, as bench/stock_clients.py
does). Around each run the script reads the server's threads' scheduler counters
(/proc/PID/task/TID/sched, a kernel with CONFIG_SCHED_DEBUG): the receiving thread is the one
that gained the most CPU time; its migrations between CPUs, its context switches (one per
datagram while it keeps up: the client sends 10,000 a second) and its CPU time are printed
beside the latency. At the end, the median latency of each server over the rounds in which its
thread moved fewer than --migrations times and over the others: a row whose latency follows the
migrations, for either server, measures the scheduler's placement, not a server.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

from benchlib import free_port, stop_process

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
HAKARU = os.path.join(TARGET, "release", "hakaru")
SOCKPERF = "/opt/hakaru-peers/sockperf/bin/sockperf"
KEYS = ("se.sum_exec_runtime", "se.nr_migrations", "nr_switches")


def sched(pid):
    """Each thread of `pid`: its scheduler counters named in KEYS."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/sched") as f:
                lines = f.readlines()
        except OSError:
            continue  # a thread that ended between the listing and the read
        d = {}
        for line in lines:
            k, _, v = line.partition(":")
            if k.strip() in KEYS:
                d[k.strip()] = float(v)
        out[tid] = d
    return out


def run(port, pid, secs):
    """One `ul` run into the server `pid` listening on `port`: (latency in us, the receiving
    thread's counters gained over the run)."""
    before = sched(pid)
    out = subprocess.run([SOCKPERF, "ul", "-i", "127.0.0.1", "-p", str(port), "-t", str(secs)],
                         capture_output=True, text=True, timeout=secs + 60).stdout
    after = sched(pid)
    m = re.search(r"avg-latency=([0-9.]+)", out)
    if not m:
        raise RuntimeError(f"no avg-latency in sockperf's output:\n{out[-2000:]}")

    def gained(tid, k):
        return after[tid].get(k, 0.0) - before.get(tid, {}).get(k, 0.0)

    hot = max(after, key=lambda t: gained(t, "se.sum_exec_runtime"))
    return float(m.group(1)), {k: gained(hot, k) for k in KEYS}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--time", type=int, default=3)
    ap.add_argument("--migrations", type=int, default=20,
                    help="a round whose receiving thread moved this often or more is a 'moved' one")
    a = ap.parse_args()
    if not 1 <= a.rounds <= 100 or not 1 <= a.time <= 60:
        sys.exit("--rounds must be 1-100 and --time 1-60 seconds")
    for b in (HAKARU, SOCKPERF):
        if not os.access(b, os.X_OK):
            sys.exit(f"missing {b}: build it (cargo build --release; ../shared/peers/build.sh sockperf)")
    if not os.path.exists("/proc/self/sched"):
        sys.exit("no /proc/PID/sched here: the kernel lacks CONFIG_SCHED_DEBUG")
    ports = {"hakaru": free_port(), "stock": free_port()}
    while ports["stock"] == ports["hakaru"]:
        ports["stock"] = free_port()
    argv = {"hakaru": [HAKARU, "server", "-p", "0", "--sockperf-port", str(ports["hakaru"])],
            "stock": [SOCKPERF, "sr", "-i", "127.0.0.1", "-p", str(ports["stock"])]}
    procs = {}
    rounds = {"hakaru": [], "stock": []}
    try:
        for who in ("hakaru", "stock"):
            procs[who] = subprocess.Popen(argv[who], stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        for r in range(a.rounds):
            for who in (("hakaru", "stock") if r % 2 == 0 else ("stock", "hakaru")):
                lat, c = run(ports[who], procs[who].pid, a.time)
                rounds[who].append((lat, c["se.nr_migrations"]))
                print(f"round {r + 1} {who:6s}: {lat:7.2f} us, receiving thread: "
                      f"{c['se.nr_migrations']:4.0f} migrations, {c['nr_switches']:6.0f} switches, "
                      f"{c['se.sum_exec_runtime']:6.1f} ms CPU", flush=True)
                time.sleep(0.3)
    finally:
        for p in procs.values():
            stop_process(p)
    for who, rs in rounds.items():
        stayed = [lat for lat, mig in rs if mig < a.migrations]
        moved = [lat for lat, mig in rs if mig >= a.migrations]

        def med(xs):
            return f"{statistics.median(xs):.1f} us over {len(xs)}" if xs else "no round"

        print(f"{who}: median {statistics.median(lat for lat, _ in rs):.1f} us; thread moved "
              f"under {a.migrations} times: {med(stayed)}; {a.migrations} or more: {med(moved)}")


if __name__ == "__main__":
    main()
