#!/usr/bin/env python3
"""Where the TCP work of a loopback test runs: one stock iperf3 client into several servers,
interleaved rounds, with each CPU's idle and softirq time and the kernel's window counters
taken over the middle of each test (docs/performance-notes.md, section 15).

Usage: python3 bench/loopback_regime.py [--client /usr/bin/iperf3] [--args="-P 4"]
                                        [--rounds 3] [--time 4] [--server-cpu 1] [--client-cpu 0]

Servers: `hakaru server`, Debian's iperf3 3.12 `-s` (all streams on one thread behind
`select`) and iperf3 3.21 `-s` (/opt/hakaru-peers/iperf3; a thread per stream), each started
fresh per test on --server-cpu and stopped by its PID; the client runs on --client-cpu.
Per test: the rate the client reports (`end.sum_received`), and, from a third into the test to
five sixths, the idle and softirq share of the client's and the server's CPU (/proc/stat), the
zero-window adverts (TcpExt TCPToZeroWindowAdv) and the segments coalesced into a socket's
backlog (TCPBacklogCoalesce), per second. On loopback a receiver that falls behind takes the
sender's transmission over (its reads reopen the window and the ACK, processed on its CPU,
sends the queued data): zero-window adverts, and the server's CPU busy where the client's idles.
Over the same span, each process's own CPU time (user and system, all threads, /proc/PID/stat)
as a share of the span: with client and server on one CPU (--server-cpu 0 --client-cpu 0) the
CPU columns are the same CPU's and these tell the two apart.
"""
import argparse, json, os, statistics, subprocess, sys, time

from benchlib import loadavg, process_cpu, stop_process
from stock_clients import HAKARU, I3_NEW, I3_OLD, free_ports, wait_listen


def cpu_times(cpu):
    for line in open("/proc/stat"):
        if line.startswith(f"cpu{cpu} "):
            return [int(x) for x in line.split()[1:]]
    raise RuntimeError(f"no cpu{cpu} in /proc/stat")


def tcpext(*keys):
    lines = open("/proc/net/netstat").read().splitlines()
    for h, v in zip(lines, lines[1:]):
        if h.startswith("TcpExt:") and v.startswith("TcpExt:"):
            d = dict(zip(h.split()[1:], v.split()[1:]))
            return [int(d.get(k, 0)) for k in keys]
    return [0] * len(keys)


def shares(a, b):
    """(idle %, softirq %) of a CPU between two /proc/stat samples."""
    d = [y - x for x, y in zip(a, b)]
    total = sum(d) or 1
    return 100.0 * (d[3] + d[4]) / total, 100.0 * d[6] / total


KEYS = ("TCPToZeroWindowAdv", "TCPBacklogCoalesce")


def one_test(server_argv, port, a):
    log = open(f"/tmp/loopback_regime-{os.path.basename(server_argv[0])}-{port}.log", "w")
    srv = subprocess.Popen(["taskset", "-c", a.server_cpu] + server_argv, stdout=log,
                           stderr=subprocess.STDOUT)
    try:
        wait_listen(port)
        time.sleep(0.3)
        cli = subprocess.Popen(["taskset", "-c", a.client_cpu, a.client, "-c", "127.0.0.1", "-p",
                                str(port), "-t", str(a.time), "-J"] + a.args.split(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(a.time / 3)
        c0, s0, k0, t0 = cpu_times(a.client_cpu), cpu_times(a.server_cpu), tcpext(*KEYS), time.time()
        p0 = process_cpu(srv.pid), process_cpu(cli.pid)
        time.sleep(a.time / 2)
        c1, s1, k1, t1 = cpu_times(a.client_cpu), cpu_times(a.server_cpu), tcpext(*KEYS), time.time()
        p1 = process_cpu(srv.pid), process_cpu(cli.pid)
        out, err = cli.communicate(timeout=a.time + 60)
        if cli.returncode != 0:
            raise RuntimeError(f"client failed ({cli.returncode}): {out[-1000:]}{err[-1000:]}")
        gbps = json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e9
    finally:
        stop_process(srv, wait=5)
    ci, _ = shares(c0, c1)
    si, ss = shares(s0, s1)
    zw, bl = ((y - x) / (t1 - t0) for x, y in zip(k0, k1))
    sp, cp = (100.0 * (y - x) / (t1 - t0) for x, y in zip(p0, p1))
    return {"gbps": gbps, "client_idle": ci, "server_idle": si, "server_softirq": ss,
            "zero_windows": zw, "backlog": bl, "server_proc": sp, "client_proc": cp}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--client", default=I3_OLD)
    ap.add_argument("--args", default="-P 4",
                    help="the client's test arguments (--args=-Z: a value that starts with '-' "
                         "needs the '=')")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--time", type=int, default=4)
    ap.add_argument("--server-cpu", default="1")
    ap.add_argument("--client-cpu", default="0")
    a = ap.parse_args()
    for b in (HAKARU, I3_NEW, I3_OLD, a.client):
        if not os.access(b, os.X_OK):
            sys.exit(f"missing {b}: build it (cargo build --release; ../shared/peers/build.sh iperf3)")
    servers = {
        "hakaru server": lambda p: [HAKARU, "server", "-p", str(p)],
        "iperf3 3.12 -s": lambda p: [I3_OLD, "-s", "-p", str(p)],
        "iperf3 3.21 -s": lambda p: [I3_NEW, "-s", "-p", str(p)],
    }
    load = loadavg()
    res = {k: [] for k in servers}
    for r in range(a.rounds):
        names = list(servers)
        names = names[r % len(names):] + names[:r % len(names)]  # who goes first rotates
        for name in names:
            port = free_ports(1)
            res[name].append(one_test(servers[name](port), port, a))
            time.sleep(0.3)
        print(f"round {r + 1}: " + ", ".join(f"{n} {res[n][-1]['gbps']:.1f}" for n in servers),
              flush=True)

    def rng(xs, f):
        lo, hi = f(min(xs)), f(max(xs))
        return lo if lo == hi else f"{lo} to {hi}"

    pct = lambda x: f"{x:.0f} %"
    num = lambda x: f"{x:,.0f}"
    print(f"\n`python3 bench/loopback_regime.py --client {a.client} --args=\"{a.args}\" --rounds "
          f"{a.rounds} --time {a.time} --server-cpu {a.server_cpu} --client-cpu {a.client_cpu}`; "
          f"client on CPU {a.client_cpu}, servers on CPU "
          f"{a.server_cpu}; load {load} before; {time.strftime('%Y-%m-%d')}\n")
    print("| server | Gbit/s (median) | client's CPU idle | server's CPU idle | server's softirq "
          "| zero-window adverts/s | backlog coalesced/s | server process CPU | client process "
          "CPU |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, xs in res.items():
        col = lambda k, f: rng([x[k] for x in xs], f)
        print(f"| {n} | {statistics.median(x['gbps'] for x in xs):.1f} | {col('client_idle', pct)} | "
              f"{col('server_idle', pct)} | {col('server_softirq', pct)} | "
              f"{col('zero_windows', num)} | {col('backlog', num)} | {col('server_proc', pct)} | "
              f"{col('client_proc', pct)} |")


if __name__ == "__main__":
    main()
