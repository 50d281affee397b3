#!/usr/bin/env python3
"""Two hakaru builds against each other on loopback: does a change cost speed?

Usage: python3 bench/old_vs_new.py --old PATH/hakaru [--new target/release/hakaru]
       [--rounds 3] [--only TEXT]

Build the old one in a worktree of the earlier commit, e.g.
  git worktree add ../old REV && (cd ../old && CARGO_TARGET_DIR=/tmp/old cargo build --release -p hakaru)
Each round runs every case once with each build, in alternating order, each build with its own
`hakaru server` process on 127.0.0.1 (stopped by PID), 3 s per run, unpinned. Cases: hakaru's
own client and server (TCP 1 flow and -P 4 in Gbit/s; `pps -P 2`, received datagrams per
second in millions; UDP and TCP `latency`, median round trip in microseconds), and a stock iperf3
client against each build's server (forward and -R). Prints the medians and the median of the
per-round ratios, new/old for rates and old/new for times, so above 1 is always the new build
faster.
"""
import argparse, json, os, signal, statistics, subprocess, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def server(binary, port):
    p = subprocess.Popen([binary, "server", "-p", str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.7)
    return p


def native(binary, port, extra):
    o = subprocess.run([binary, "tcp", "127.0.0.1", "-p", str(port), "-t", "3", "--json"] + extra,
                       capture_output=True, timeout=60, check=True)
    v = json.loads(o.stdout)
    return sum(t["receiver"]["bits_per_second"] for t in v["totals"]) / 1e9


def pps(binary, port, extra):
    o = subprocess.run([binary, "pps", "127.0.0.1", "-p", str(port), "-t", "3", "--json"] + extra,
                       capture_output=True, timeout=60, check=True)
    return json.loads(o.stdout)["totals"][0]["udp"]["received_pps"] / 1e6


def latency(binary, port, extra):
    o = subprocess.run([binary, "latency", "127.0.0.1", "-p", str(port), "-t", "3", "--json"] + extra,
                       capture_output=True, timeout=60, check=True)
    return json.loads(o.stdout)["latency"]["rtt"]["p50_us"]


def stock(port, extra):
    o = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "3", "-J"] + extra,
                       capture_output=True, timeout=60, check=True)
    return json.loads(o.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9


# (name, unit, lower is better, run)
CASES = [
    ("hakaru tcp, 1 flow", "Gbit/s", False, lambda b, p: native(b, p, [])),
    ("hakaru tcp -P 4", "Gbit/s", False, lambda b, p: native(b, p, ["-P", "4"])),
    ("hakaru pps -P 2", "Mpps", False, lambda b, p: pps(b, p, ["-P", "2"])),
    ("hakaru latency -u, p50", "us", True, lambda b, p: latency(b, p, ["-u"])),
    ("hakaru latency (TCP), p50", "us", True, lambda b, p: latency(b, p, [])),
    ("stock iperf3 -c -> hakaru server", "Gbit/s", False, lambda b, p: stock(p, [])),
    ("stock iperf3 -c -R -> hakaru server", "Gbit/s", False, lambda b, p: stock(p, ["-R"])),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", default=os.path.join(ROOT, "target", "release", "hakaru"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    cases = [c for c in CASES if a.only in c[0]]
    res = {c[0]: [] for c in cases}
    for r in range(a.rounds):
        for name, _, _, run in cases:
            order = [("new", a.new, 5401), ("old", a.old, 5402)]
            if r % 2:
                order.reverse()
            got = {}
            for tag, binary, port in order:
                s = server(binary, port)
                try:
                    got[tag] = run(binary, port)
                finally:
                    s.send_signal(signal.SIGINT)
                    s.wait(timeout=10)
            res[name].append((got["new"], got["old"]))
    print("| case | new | old | new faster by (median of rounds) |")
    print("|---|---|---|---|")
    for name, unit, lower, _ in cases:
        v = res[name]
        ratio = statistics.median((o / n) if lower else (n / o) for n, o in v)
        print(f"| {name} | {statistics.median(n for n, _ in v):.1f} {unit} | "
              f"{statistics.median(o for _, o in v):.1f} {unit} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
