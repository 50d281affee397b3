#!/usr/bin/env python3
"""`hakaru ... --netperf` against a stock netserver, against hakaru's native run (hakaru client
and `hakaru server`) and against stock netperf to the same netserver, on loopback: interleaved
rounds, medians, median of the per-round ratios.

Usage: python3 bench/netperf_client.py [--rounds 5] [--time 3] [--write docs/BENCHMARKS.md]

Cases: TCP throughput (`hakaru tcp --netperf`, i.e. TCP_STREAM; the receiver's bit rate, which
for --netperf is netserver's count over the window) and TCP round trips (`hakaru latency
--netperf`, i.e. TCP_RR with 64-byte requests and responses; transactions per second). Each
round runs the three runs of a case once, rotating which goes first. The ratios are
`--netperf` / native and `--netperf` / stock netperf, higher is better, as the median of the
per-round ratios. Placement: unpinned (the scheduler decides). Servers are separate processes,
stopped by PID.
"""
import argparse, json, os, signal, statistics, subprocess, sys, time

from benchlib import cpu_model, free_port, loadavg, stop_process, wait_port, write_block

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
HAKARU = os.path.join(TARGET, "release", "hakaru")
PEER = "/opt/hakaru-peers/netperf/bin"
NETPERF, NETSERVER = os.path.join(PEER, "netperf"), os.path.join(PEER, "netserver")
LEN = 64


def hakaru(args, secs):
    cmd = [HAKARU] + args + ["-t", str(secs), "-J"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=secs + 60)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd} failed: {p.stdout}{p.stderr}")
    return json.loads(p.stdout)


def tcp(kind, port, secs):
    if kind == "netperf":
        return netperf(port, ["-t", "TCP_STREAM"], secs)
    extra = ["--netperf"] if kind == "hk_np" else []
    d = hakaru(["tcp", "127.0.0.1", "-p", str(port)] + extra, secs)
    return d["totals"][0]["receiver"]["bits_per_second"] / 1e6


def rr(kind, port, secs):
    if kind == "netperf":
        return netperf(port, ["-t", "TCP_RR", "--", "-r", f"{LEN},{LEN}"], secs)
    extra = ["--netperf"] if kind == "hk_np" else []
    d = hakaru(["latency", "127.0.0.1", "-p", str(port), "-l", str(LEN)] + extra, secs)
    return d["latency"]["transactions_per_second"]


def netperf(port, args, secs):
    test, rest = (args[:args.index("--")], args[args.index("--") + 1:]) if "--" in args else (args, [])
    cmd = [NETPERF, "-H", "127.0.0.1", "-p", str(port), "-P", "0", "-l", str(secs)] + test + \
        ["--", "-k", "THROUGHPUT"] + rest
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=secs + 60)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd} failed: {p.stdout}{p.stderr}")
    kv = dict(l.split("=", 1) for l in p.stdout.splitlines() if "=" in l)
    return float(kv["THROUGHPUT"])


CASES = [
    ("TCP throughput (TCP_STREAM)", tcp, "Mbit/s received"),
    (f"TCP round trips (TCP_RR, {LEN} B)", rr, "transactions/s"),
]
RUNS = [("hk_np", "hakaru --netperf"), ("native", "hakaru native"), ("netperf", "stock netperf")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--time", type=int, default=3)
    ap.add_argument("--write")
    a = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "hakaru"], cwd=ROOT, check=True)
    hk_port, ns_port = free_port(), free_port()
    load_before = loadavg()
    hk = subprocess.Popen([HAKARU, "server", "-B", "127.0.0.1", "-p", str(hk_port)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ns = subprocess.Popen([NETSERVER, "-D", "-L", "127.0.0.1", "-p", str(ns_port)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    port = {"hk_np": ns_port, "native": hk_port, "netperf": ns_port}
    res = {name: {k: [] for k, _ in RUNS} for name, *_ in CASES}
    try:
        wait_port(hk_port)
        wait_port(ns_port)
        for rnd in range(a.rounds):
            for name, fn, unit in CASES:
                order = RUNS[rnd % 3:] + RUNS[:rnd % 3]
                for key, _ in order:
                    res[name][key].append(fn(key, port[key], a.time))
                    time.sleep(0.3)
                r = res[name]
                print(f"round {rnd + 1}: {name}: --netperf {r['hk_np'][-1]:.0f}, native "
                      f"{r['native'][-1]:.0f}, netperf {r['netperf'][-1]:.0f} {unit}", file=sys.stderr)
    finally:
        stop_process(hk, signal.SIGTERM)
        stop_process(ns)
    load_after = loadavg()
    cmd = f"python3 bench/netperf_client.py --rounds {a.rounds} --time {a.time}"
    model = cpu_model()
    lines = [
        f"Command: `{cmd}` ({a.rounds} interleaved rounds of {a.time} s per run, rotating which run "
        f"goes first; loopback, unpinned; {time.strftime('%Y-%m-%d')}; kernel {os.uname().release}, "
        f"{os.cpu_count()} CPUs ({model}); `hakaru ... --netperf` and stock netperf 2.7.1 against one "
        f"netserver 2.7.1, native hakaru against `hakaru server`). The machine is shared with other "
        f"builders (1-minute load {load_before} before the run, {load_after} after), so single rounds "
        f"vary: the medians are indicative. Higher is better; each ratio is the median of the "
        f"per-round ratios.",
        "",
        "| case | figure | `--netperf` (median) | native (median) | stock netperf (median) "
        "| `--netperf` / native | `--netperf` / netperf |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, _, unit in CASES:
        r = res[name]
        vs_native = [x / y for x, y in zip(r["hk_np"], r["native"])]
        vs_netperf = [x / y for x, y in zip(r["hk_np"], r["netperf"])]
        lines.append(
            f"| {name} | {unit} | {statistics.median(r['hk_np']):,.0f} | "
            f"{statistics.median(r['native']):,.0f} | {statistics.median(r['netperf']):,.0f} | "
            f"**{statistics.median(vs_native):.3f}x** ({', '.join(f'{x:.2f}' for x in vs_native)}) | "
            f"**{statistics.median(vs_netperf):.3f}x** ({', '.join(f'{x:.2f}' for x in vs_netperf)}) |"
        )
    block = "\n".join(lines) + "\n"
    print(block)
    if a.write:
        write_block(a.write, "netperf-client", block,
                    "## netperf: hakaru --netperf against netserver, native hakaru and stock netperf")


if __name__ == "__main__":
    main()
