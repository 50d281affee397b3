#!/usr/bin/env python3
"""A stock iperf3 3.21 client with --skip-rx-copy against `hakaru server` and against
`iperf3 -s` (3.21) on loopback (issue 32 item 4): does hakaru's server receive as fast when the
client asks it not to copy?

Usage: python3 bench/iperf3_skip_rx_copy.py [--hakaru target/release/hakaru]
       [--iperf3 /opt/hakaru-peers/iperf3/bin/iperf3] [--rounds 3] [--time 3] [--write]

iperf3 3.21 comes from `../shared/peers/build.sh iperf3` (Debian's 3.12 has no --skip-rx-copy).
Each round runs the same client against each server once, in alternating order, each server a
process of its own on a free 127.0.0.1 port (stopped by PID), forward (the server receives),
unpinned. The figure is the client's `sum_received` (what the server counted). Prints the
medians and the median of the per-round hakaru/iperf3 ratios; --write puts the table into
docs/BENCHMARKS.md.
"""
import argparse, datetime, json, os, statistics, subprocess, time

from benchlib import free_port, stop_process, write_block

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IPERF3 = "/opt/hakaru-peers/iperf3/bin/iperf3"


def start(argv):
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.7)
    return p


def client(iperf3, port, secs, extra):
    o = subprocess.run([iperf3, "-c", "127.0.0.1", "-p", str(port), "-t", str(secs), "-J"] + extra,
                       capture_output=True, timeout=secs + 60, check=True)
    return json.loads(o.stdout)["end"]["sum_received"]["bits_per_second"] / 1e9


CASES = [
    ("--skip-rx-copy, 1 stream", ["--skip-rx-copy"]),
    ("--skip-rx-copy -P 4", ["--skip-rx-copy", "-P", "4"]),
    ("plain copy, 1 stream (reference)", []),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hakaru", default=os.path.join(ROOT, "target", "release", "hakaru"))
    ap.add_argument("--iperf3", default=IPERF3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--time", type=int, default=3)
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    servers = {
        "hakaru": lambda port: [a.hakaru, "server", "-B", "127.0.0.1", "-p", str(port)],
        "iperf3": lambda port: [a.iperf3, "-s", "-B", "127.0.0.1", "-p", str(port)],
    }
    res = {name: [] for name, _ in CASES}
    for r in range(a.rounds):
        for name, extra in CASES:
            order = ["hakaru", "iperf3"] if r % 2 == 0 else ["iperf3", "hakaru"]
            got = {}
            for tag in order:
                port = free_port()
                s = start(servers[tag](port))
                try:
                    got[tag] = client(a.iperf3, port, a.time, extra)
                finally:
                    stop_process(s)
            res[name].append((got["hakaru"], got["iperf3"]))
            print(f"round {r + 1} {name}: hakaru {got['hakaru']:.1f}, iperf3 {got['iperf3']:.1f} Gbit/s",
                  flush=True)
    day = datetime.date.today().isoformat()
    block = (f"Command: `python3 bench/iperf3_skip_rx_copy.py --rounds {a.rounds} --time {a.time}` "
             f"({a.rounds} interleaved rounds of {a.time} s per case; {day}; iperf3 3.21 both as "
             f"client and as `iperf3 -s`)\n\n"
             "| stock iperf3 3.21 client | → hakaru server | → iperf3 -s | hakaru/iperf3 (median of rounds) |\n"
             "|---|---|---|---|\n")
    for name, v in res.items():
        block += (f"| {name} | {statistics.median(h for h, _ in v):.1f} Gbit/s | "
                  f"{statistics.median(i for _, i in v):.1f} Gbit/s | "
                  f"**{statistics.median(h / i for h, i in v):.2f}x** |\n")
    print(block)
    if a.write:
        write_block(os.path.join(ROOT, "docs", "BENCHMARKS.md"), "iperf3-skip-rx-copy", block,
                    "## iperf3 clients that skip the receive copy: hakaru server against iperf3 -s")


if __name__ == "__main__":
    main()
