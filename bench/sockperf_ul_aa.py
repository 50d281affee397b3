#!/usr/bin/env python3
"""sockperf `ul` into two stock `sockperf sr` servers, A against A: how far the row moves with
no hakaru in it (docs/BENCHMARKS.md, issue 46's section).

Usage: python3 bench/sockperf_ul_aa.py [--rounds 9] [--time 3] [--placement together|apart|unpinned]

Two identical `sockperf sr` processes listen on loopback; each round runs the stock client's
`ul` for --time seconds into each, the first server first in odd rounds and the second first in
even ones (as bench/stock_clients.py alternates its two servers), and prints both average
latencies and their ratio, second over first (bench/stock_clients.py reads a latency as the
stock server's over hakaru's; the first stands in hakaru's place). A row whose A/A ratios spread as wide
as its hakaru/stock ratios measures the scheduler's placement of the processes, not a server.
Placement: together = servers and client on CPU 0; apart = servers on CPU 1, client on CPU 0.
"""

import argparse
import re
import statistics
import subprocess
import sys
import time

from benchlib import free_port, stop_process

SOCKPERF = "/opt/hakaru-peers/sockperf/bin/sockperf"
PLACEMENTS = {"unpinned": (None, None), "apart": ("1", "0"), "together": ("0", "0")}


def pin(cpus):
    return ["taskset", "-c", cpus] if cpus else []


def ul(port, secs, cpus):
    out = subprocess.run(
        pin(cpus) + [SOCKPERF, "ul", "-i", "127.0.0.1", "-p", str(port), "-t", str(secs)],
        capture_output=True, text=True, timeout=secs + 60,
    ).stdout
    m = re.search(r"avg-latency=([0-9.]+)", out)
    if not m:
        raise RuntimeError(f"no avg-latency in sockperf's output:\n{out[-2000:]}")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--time", type=int, default=3)
    ap.add_argument("--placement", choices=list(PLACEMENTS), default="together")
    a = ap.parse_args()
    if not 1 <= a.rounds <= 100 or not 1 <= a.time <= 60:
        sys.exit("--rounds must be 1-100 and --time 1-60 seconds")
    srv, cli = PLACEMENTS[a.placement]
    ports = (free_port(), free_port())
    while ports[1] == ports[0]:
        ports = (ports[0], free_port())
    servers = [subprocess.Popen(pin(srv) + [SOCKPERF, "sr", "-i", "127.0.0.1", "-p", str(p)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for p in ports]
    try:
        time.sleep(0.5)
        ratios = []
        for r in range(1, a.rounds + 1):
            if r % 2:
                first, second = ul(ports[0], a.time, cli), ul(ports[1], a.time, cli)
            else:
                second, first = ul(ports[1], a.time, cli), ul(ports[0], a.time, cli)
            ratios.append(second / first)
            order = "first, then second" if r % 2 else "second, then first"
            print(f"round {r} ({order}): first {first:.3f} us, second {second:.3f} us, "
                  f"ratio {ratios[-1]:.2f}", flush=True)
    finally:
        for p in servers:
            stop_process(p)
    print(f"sockperf ul A/A, {a.placement}, {a.rounds} rounds of {a.time} s: median ratio "
          f"{statistics.median(ratios):.2f}x, rounds {min(ratios):.2f}-{max(ratios):.2f}")


if __name__ == "__main__":
    main()
