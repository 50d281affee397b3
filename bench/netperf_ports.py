#!/usr/bin/env python3
"""The cloud guides' packet-rate script against one hakaru server and against one netserver per
port (issue 42, item 1).

N stock netperf 2.7.1 clients at once, `netperf -H 127.0.0.1 -p PORT -t UDP_STREAM -l T --
-m SIZE`, one per port of FIRST..FIRST+N-1, into one `hakaru server --netperf-port FIRST-LAST`
and into N `netserver -p PORT` processes. The figure: the messages per second the servers
received, summed over the N tests (REMOTE_RECV_CALLS over ELAPSED_TIME of each). Rounds
alternate which side goes first; the ratio is hakaru / netservers, the median of the per-round
ratios. Placements: `apart` (servers on CPU 1, the clients on CPU 0, as the guides' receiver
with a CPU of its own) and `unpinned`. TCP_STREAM rows (Mbit/s summed) with --tcp.

Usage: python3 bench/netperf_ports.py [--rounds 3] [--time 4] [--ports 64] [--size 1]
       [--placements apart,unpinned] [--tcp] [--write docs/BENCHMARKS.md]
Servers are stopped by their PIDs.
"""
import argparse, os, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import cpu_model, stop_process, wait_port, write_block  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
HAKARU = os.path.join(TARGET, "release", "hakaru")
PEER = "/opt/hakaru-peers/netperf/bin"
NETPERF, NETSERVER = os.path.join(PEER, "netperf"), os.path.join(PEER, "netserver")
FIRST = 16001
KEYS = "THROUGHPUT,ELAPSED_TIME,REMOTE_RECV_CALLS"


def pin(cpu):
    return ["taskset", "-c", str(cpu)] if cpu is not None else []


def servers(kind, n, cpu):
    """Started servers (a list of Popen) listening on FIRST..FIRST+n-1."""
    if kind == "hk":
        last = FIRST + n - 1
        ps = [subprocess.Popen(pin(cpu) + [HAKARU, "server", "-B", "127.0.0.1", "-p", "0",
                                           "--netperf-port", f"{FIRST}-{last}", "--max-netperf-per-client", str(n)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    else:
        ps = [subprocess.Popen(pin(cpu) + [NETSERVER, "-D", "-L", "127.0.0.1", "-p", str(FIRST + i)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
              for i in range(n)]
    for i in range(n):
        wait_port(FIRST + i)
    return ps


def clients(n, secs, test, size, cpu):
    """N netperf clients at once; the summed figure (msg/s received, or Mbit/s for TCP)."""
    procs = []
    for i in range(n):
        cmd = pin(cpu) + [NETPERF, "-H", "127.0.0.1", "-p", str(FIRST + i), "-P", "0", "-l", str(secs),
                          "-t", test, "--", "-k", KEYS, "-m", str(size)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    total = 0.0
    for p in procs:
        out, err = p.communicate(timeout=secs + 60)
        if p.returncode != 0:
            raise RuntimeError(f"netperf failed: {out}{err}")
        kv = dict(l.split("=", 1) for l in out.splitlines() if "=" in l)
        if test == "UDP_STREAM":
            total += float(kv["REMOTE_RECV_CALLS"]) / float(kv["ELAPSED_TIME"])
        else:
            total += float(kv["THROUGHPUT"])
    return total


def run(kind, n, secs, test, size, placement):
    srv_cpu, cli_cpu = (1, 0) if placement == "apart" else (None, None)
    ps = servers(kind, n, srv_cpu)
    try:
        time.sleep(0.3)
        return clients(n, secs, test, size, cli_cpu)
    finally:
        for p in ps:
            stop_process(p)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--time", type=int, default=4)
    ap.add_argument("--ports", type=int, default=64)
    ap.add_argument("--size", type=int, default=1)
    ap.add_argument("--placements", default="apart,unpinned")
    ap.add_argument("--tcp", action="store_true")
    ap.add_argument("--write")
    a = ap.parse_args()
    cases = [("UDP_STREAM", a.size, "msg/s received")]
    if a.tcp:
        cases.append(("TCP_STREAM", 16384, "Mbit/s"))
    rows = []
    for placement in a.placements.split(","):
        for test, size, unit in cases:
            hks, nss, ratios = [], [], []
            for rnd in range(a.rounds):
                order = ["hk", "ns"] if rnd % 2 == 0 else ["ns", "hk"]
                got = {}
                for kind in order:
                    got[kind] = run(kind, a.ports, a.time, test, size, placement)
                    time.sleep(0.5)
                hks.append(got["hk"])
                nss.append(got["ns"])
                ratios.append(got["hk"] / got["ns"])
                print(f"{placement} {test} -m {size} round {rnd + 1}: hakaru {got['hk']:,.0f}, "
                      f"netservers {got['ns']:,.0f} {unit} ({ratios[-1]:.3f}x)", file=sys.stderr)
            rows.append(f"| {placement} | {test} `-m {size}` | {unit} | {statistics.median(hks):,.0f} "
                        f"| {statistics.median(nss):,.0f} | **{statistics.median(ratios):.3f}x** "
                        f"| {', '.join(f'{r:.2f}' for r in ratios)} |")
    cmd = (f"python3 bench/netperf_ports.py --rounds {a.rounds} --time {a.time} --ports {a.ports} "
           f"--size {a.size} --placements {a.placements}" + (" --tcp" if a.tcp else ""))
    lines = [
        f"Command: `{cmd}` ({time.strftime('%Y-%m-%d')}; kernel {os.uname().release}, "
        f"{os.cpu_count()} CPUs ({cpu_model()}); loopback; {a.ports} stock netperf 2.7.1 clients at "
        f"once, one per port, into one `hakaru server --netperf-port {FIRST}-{FIRST + a.ports - 1}` "
        f"and into {a.ports} `netserver` processes; `apart`: servers on CPU 1, clients on CPU 0). "
        f"The figure is summed over the {a.ports} tests; the ratio is hakaru / netservers, the "
        f"median of the per-round ratios.",
        "",
        "| placement | test | figure | hakaru server | netservers | ratio | ratios by round |",
        "|---|---|---|---|---|---|---|",
    ] + rows
    block = "\n".join(lines) + "\n"
    print(block)
    if a.write:
        write_block(a.write, "netperf-ports", block,
                    "## netperf: the guides' 64-port packet-rate script against one hakaru server")


if __name__ == "__main__":
    main()
