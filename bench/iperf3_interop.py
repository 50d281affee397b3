#!/usr/bin/env python3
"""iperf3 interop speed on loopback: interleaved rounds, medians and ratios.

Usage: python3 bench/iperf3_interop.py [--rounds 3] [--time 3] [--write docs/BENCHMARKS.md]

Two comparisons, each with one side fixed:
- server: a stock `iperf3 -c` against `hakaru server` and against a stock `iperf3 -s`;
- client: `hakaru tcp|udp --iperf3` and a stock `iperf3 -c` against the same stock `iperf3 -s`.
Throughput is what the receiver counted (iperf3 -J end.sum_received; hakaru totals[].receiver,
which with --iperf3 is the stock server's own count from the results exchange). Each round runs
every case once per pairing, alternating, so a slow period of this shared VM hits both alike.
Servers run as separate processes on loopback, stopped by PID.
"""
import argparse, json, os, signal, statistics, subprocess, time

from benchlib import write_block

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAKARU = os.path.join(ROOT, "target", "release", "hakaru")
HK_PORT, IP_PORT = 5296, 5297

CASES = [
    # (name, iperf3 args; hakaru --iperf3 args are the same flags)
    ("TCP 1 stream", ["-t", "{t}"]),
    ("TCP 4 streams (-P 4)", ["-t", "{t}", "-P", "4"]),
    ("TCP reverse (-R)", ["-t", "{t}", "-R"]),
]


def run(cmd, limit):
    p = subprocess.run(cmd, capture_output=True, timeout=limit)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd} failed: {p.stderr.decode(errors='replace')}")
    return json.loads(p.stdout)


def stock_client(port, args):
    r = run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-J"] + args, 60)
    return r["end"]["sum_received"]["bits_per_second"]


def hakaru_client(port, args):
    # iperf3's -t/-P/-R are hakaru's flags too; hakaru's -l default (1 MiB) is kept.
    r = run([HAKARU, "tcp", "127.0.0.1", "-p", str(port), "--iperf3", "--json"] + args, 60)
    return sum(t["receiver"]["bits_per_second"] for t in r["totals"])


def start(cmd):
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--time", type=int, default=3)
    ap.add_argument("--write")
    a = ap.parse_args()
    hk = start([HAKARU, "server", "-B", "127.0.0.1", "-p", str(HK_PORT)])
    ip = start(["iperf3", "-s", "-B", "127.0.0.1", "-p", str(IP_PORT)])
    res = {}
    try:
        for _ in range(a.rounds):
            for name, args in CASES:
                args = [x.replace("{t}", str(a.time)) for x in args]
                row = res.setdefault(name, {"srv_hk": [], "srv_ip": [], "cli_hk": [], "cli_ip": []})
                row["srv_hk"].append(stock_client(HK_PORT, args))
                row["srv_ip"].append(stock_client(IP_PORT, args))
                row["cli_hk"].append(hakaru_client(IP_PORT, args))
                row["cli_ip"].append(stock_client(IP_PORT, args))
    finally:
        for p in (hk, ip):
            os.kill(p.pid, signal.SIGTERM)
            p.wait()
    ver = subprocess.run(["iperf3", "--version"], capture_output=True, text=True).stdout.split()[1]
    lines = [
        f"Command: `python3 bench/iperf3_interop.py --rounds {a.rounds} --time {a.time}` "
        f"({a.rounds} interleaved rounds of {a.time} s per case; {time.strftime('%Y-%m-%d')}; "
        f"iperf3 {ver})",
        "",
        "| case | stock client → hakaru server | → iperf3 -s | ratio | hakaru --iperf3 → iperf3 -s | stock client → iperf3 -s | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in res.items():
        med = {k: statistics.median(v) / 1e9 for k, v in row.items()}
        rs = statistics.median(x / y for x, y in zip(row["srv_hk"], row["srv_ip"]))
        rc = statistics.median(x / y for x, y in zip(row["cli_hk"], row["cli_ip"]))
        lines.append(
            f"| {name} | {med['srv_hk']:.1f} Gbit/s | {med['srv_ip']:.1f} Gbit/s | **{rs:.2f}x** "
            f"| {med['cli_hk']:.1f} Gbit/s | {med['cli_ip']:.1f} Gbit/s | **{rc:.2f}x** |"
        )
    block = "\n".join(lines) + "\n"
    print(block)
    if a.write:
        write_block(a.write, "iperf3-interop", block, "## iperf3 interop: hakaru's server and --iperf3 client against iperf3 3.12")


if __name__ == "__main__":
    main()
